"""Loading one profile found by :func:`mfulib.collect.from_prof.discovery.discover`: :func:`load` dispatches by
kind; :func:`load_kept` reads a profile this tool kept (``--keep-prof``), whose case, implementation, warmup,
repeats and device come from its own ``spec.json`` / ``report.json``."""
from __future__ import annotations

import os

from mfulib.collect.from_prof.ncu_loader import load_ncu
from mfulib.collect.from_prof.npu_loaders import load_msprof, load_msprof_csv
from mfulib.collect.from_prof.profile import Profile
from mfulib.collect.from_prof.trace_loader import load_chrome
from mfulib.core.errors import UserError


def load_kept(d) -> Profile:
    """A profile this tool kept (``--keep-prof``): case, impl, warmup, repeats and device from its own records."""
    from mfulib.core.jsonio import read_json
    spec = read_json(os.path.join(d, "spec.json"))
    report = read_json(os.path.join(d, "report.json")) if os.path.exists(os.path.join(d, "report.json")) else {}
    n = int(spec.get("warmup", 0)) + int(spec.get("repeats", 0))
    if os.path.isdir(os.path.join(d, "msprof")):
        prof = load_msprof(os.path.join(d, "msprof"), n_iters=n)
    else:
        prof = load_chrome(os.path.join(d, "trace.json"), n_iters=n)
    prof.fmt = f"kept {prof.fmt}"
    prof.path = os.path.abspath(d)
    prof.case_id, prof.impl = spec.get("case_id"), spec.get("impl")
    prof.warmup, prof.repeats = spec.get("warmup"), spec.get("repeats")
    prof.extra["output_bytes"] = report.get("output_bytes")  # the MBU's output bytes, as the live run measured them
    dev = report.get("device") or {}
    if dev:
        prof.device = dict(dev, **({"runtime": prof.runtime} if prof.runtime else {}))
        if dev.get("l2_cache_bytes"):
            prof.l2_bytes, prof.l2_source = float(dev["l2_cache_bytes"]), "kept report.json device.l2_cache_bytes"
    return prof


def load(kind, path) -> Profile:
    """Load one profile found by :func:`discover`."""
    if kind == "kept":
        return load_kept(path)
    if kind == "msprof":
        return load_msprof(path)
    if kind == "msprof_csv":
        return load_msprof_csv(path)
    if kind == "chrome":
        return load_chrome(path)
    if kind == "ncu":
        return load_ncu(path)
    raise UserError(f"{path}: unknown profile kind {kind!r}")
