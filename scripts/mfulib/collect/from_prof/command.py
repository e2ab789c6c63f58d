"""The ``msprof_perf_summary.py --from-prof`` run (:func:`from_prof`): discover and load every profile of the
given paths, give each its case (``--cases``, its own record, or the next free id), analyse each, attach FLOPs
from the work directory when there is one, and write ``performance.json``."""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

from mfulib.backends import fp32_dot_is_tf32
from mfulib.collect.from_prof.analyse import analyse
from mfulib.collect.from_prof.discovery import discover
from mfulib.collect.from_prof.flush import L2_FLUSH_MODES
from mfulib.collect.from_prof.loaders import load
from mfulib.core.definitions import MIB
from mfulib.core.errors import UserError


def parse_case_sequence(text):
    """``"3,7,9"`` / ``"0-2,5"`` -> [3, 7, 9] / [0, 1, 2, 5] in the order given (one id per profile)."""
    from mfulib.core.cli import parse_case_list
    out = []
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        out += parse_case_list(part)
    return out


@dataclass
class FromProfOptions:
    """Options of ``msprof_perf_summary.py --from-prof``."""
    paths: list
    output_dir: str = "."
    op_dir: str | None = None
    cases: list | None = None
    impl: str = "asc"
    warmup: int | None = None
    repeats: int | None = None
    l2_flush: str = "exclude"
    l2_mib: float | None = None
    mfu: bool = False
    mfu_peak: float | None = None
    seed: int = 0
    range_name: str | None = None  # --range: the record_function / ProfilerStep range that delimits iterations
    device: int | None = None  # --device: the device read from a multi-device profile
    all_runs: bool = False  # --all-runs: a keep dir's every current profile folder, not only its latest run's


def _work_dir(opts: FromProfOptions):
    from mfulib.core.opdir import OpDir
    path = opts.op_dir
    if path is None:
        cand = os.path.abspath(opts.output_dir)
        if os.path.exists(os.path.join(cand, "model.py")):
            path = cand
    if path is None:
        return None
    od = OpDir(path)
    try:
        od.cases_path
    except UserError:
        if opts.op_dir:
            raise
        return None
    return od


def _own_kernels(opdir):
    """The ``@triton.jit`` kernels of the work directory's ``model_new.py`` (never harness flushes); () without."""
    if opdir is None or not os.path.exists(opdir.model_new_py):
        return ()
    from mfulib.sources.discover import inspect_py
    return tuple(sorted(inspect_py(opdir.model_new_py).kernels))


def _check_kept(profs, kept_runs, opdir) -> list:
    """The run's flags about kept profiles (a keep dir without an index, ``--all-runs``, a case file changed since
    the run was kept). With a work directory (``--op-dir``, or an ``--output-dir`` that is one): raises UserError
    naming every kept profile whose case id is no longer in its case file (an earlier collection's, e.g. a case
    the shape probe added and ``--restore`` removed)."""
    flags = [i["warning"] for i in kept_runs if i["warning"]]
    flags += [i["note"] for i in kept_runs if i["mode"] == "all-runs"]
    if opdir is None:
        return flags
    from mfulib.core.jsonio import sha256
    n_cases = len(opdir.read_cases())
    stale = [p for p in profs if p.fmt.startswith("kept") and not (isinstance(p.case_id, int) and
                                                                   0 <= p.case_id < n_cases)]
    if stale:
        raise UserError(f"--from-prof: kept profile(s) of case ids not in {opdir.cases_path} ({n_cases} cases, ids "
                        f"0..{n_cases - 1}): {', '.join(f'{p.path} (case {p.case_id})' for p in stale)} - kept by "
                        "an earlier collection whose cases are gone; remove them, re-collect, or leave out --op-dir")
    now = sha256(opdir.cases_path)
    for i in kept_runs:
        if i["case_file_sha256"] and i["case_file_sha256"] != now:
            flags.append(f"{opdir.cases_path} changed since run {i['run_id']} kept its profiles ({i['created_at']}): "
                         "a case id may now name another shape - re-collect to be sure")
    return flags


def from_prof(opts: FromProfOptions, log=None) -> dict:
    """Re-parse the profiles of ``opts.paths`` and write ``<output_dir>/performance.json`` (returned).

    Raises UserError for bad options, unreadable or unrecognised paths, profiles of different backends, a case
    claimed twice, or (inside a work directory) a foreign profile without ``--cases`` / a case id not in the case
    file (kept profiles: refused by name with ``--op-dir``). A keep directory gives its latest run's profiles unless
    ``opts.all_runs`` (:func:`mfulib.collect.keep_index.select_kept`); what was read and ignored is logged and
    recorded under ``run.from_prof.kept_runs``."""
    from mfulib.schemas import performance_json as _perf
    from mfulib.collect.assemble import resolve_peak
    from mfulib.collect.case_flops import flops_entry, load_flops, numerator_verdicts, tracer_flops
    from mfulib.core.cases import CaseInfo
    from mfulib.core.jsonio import ensure_writable_dir, provenance
    t_start = time.perf_counter()
    log = log or (lambda msg: None)
    if opts.l2_flush not in L2_FLUSH_MODES:
        raise UserError(f"--l2-flush {opts.l2_flush!r}: choose exclude or keep")
    if opts.l2_mib is not None and not (isinstance(opts.l2_mib, (int, float)) and math.isfinite(opts.l2_mib)
                                        and opts.l2_mib > 0):
        raise UserError(f"--l2-mib {opts.l2_mib}: must be a size in MiB > 0")
    if (opts.warmup is not None and opts.warmup < 0) or (opts.repeats is not None and opts.repeats < 1):
        raise UserError(f"--warmup {opts.warmup} / --repeats {opts.repeats}: warmup must be >= 0 and repeats >= 1")
    if opts.impl not in ("asc", "ref", "both"):
        raise UserError(f"--impl {opts.impl!r}: choose asc, ref or both")
    output_dir = ensure_writable_dir(opts.output_dir, f"--output-dir {opts.output_dir}")
    kept_runs = []
    found = [entry for p in opts.paths for entry in discover(p, opts.all_runs, kept_runs)]
    for info in kept_runs:
        for line in (info["note"], info["warning"]):
            if line:
                log(("warning: " if line is info["warning"] else "") + line)
    profs = []
    for kind, path in found:
        try:
            profs.append(load(kind, path))
        except UserError as exc:
            raise UserError(f"--from-prof {path}: {exc}") from None
    backends = sorted({p.backend for p in profs})
    if len(backends) > 1:
        raise UserError(f"--from-prof: profiles of different devices ({', '.join(backends)}): "
                        f"{[(p.backend, p.path) for p in profs][:4]} - parse each device's profiles in its own run")
    opdir = _work_dir(opts)
    foreign = [p for p in profs if p.case_id is None]
    if opts.cases is not None:
        if len(opts.cases) != len(profs):
            raise UserError(f"--cases {','.join(map(str, opts.cases))}: {len(opts.cases)} case id(s) for "
                            f"{len(profs)} profile(s) found ({[os.path.basename(p.path) for p in profs][:6]}) - give "
                            "one case id per profile, in this order")
        for p, c in zip(profs, opts.cases):
            p.case_id = c
    elif foreign:
        if opdir is not None:
            raise UserError(f"--from-prof: {len(foreign)} profile(s) do not say which case they belong to "
                            f"({os.path.basename(foreign[0].path)}) - give --cases (one case id of {opdir.cases_path} "
                            "per profile) so that FLOPs of the right case are used")
        used = {p.case_id for p in profs if p.case_id is not None}
        nxt = 0
        for p in foreign:
            while nxt in used:
                nxt += 1
            p.case_id = nxt
            used.add(nxt)
    label = "asc" if opts.impl == "both" else opts.impl
    for p in profs:
        if p.impl is None:
            p.impl = label
    seen = {}
    for p in profs:
        key = (p.case_id, p.impl)
        if key in seen:
            raise UserError(f"--from-prof: two profiles for case {p.case_id} ({p.impl}): {seen[key]} and {p.path} - "
                            "give each its own case id with --cases")
        seen[key] = p.path
    kept_flags = _check_kept(profs, kept_runs, opdir)
    ff = load_flops(opdir) if opdir is not None else None
    tracer = tracer_flops(opdir) if opdir is not None else {}
    verdicts = numerator_verdicts(opdir) if opdir is not None else {}
    results, infos = {}, {}
    own = _own_kernels(opdir)
    for p in profs:
        res = analyse(p, opts.warmup, opts.repeats, opts.l2_flush, opts.l2_mib * MIB if opts.l2_mib else None,
                      range_name=opts.range_name, device=opts.device, own_kernels=own)
        res["ncu_replay"] = p.extra.get("ncu_replay")  # ncu-timed: replay times, marked in performance.json
        res["output_bytes"] = res.get("output_bytes") or p.extra.get("output_bytes")  # kept: the live run's
        results.setdefault(p.case_id, {})[p.impl] = res
        if p.case_id not in infos:
            infos[p.case_id] = opdir.describe(p.case_id) if opdir is not None else CaseInfo(case_id=p.case_id)
        log(f"case {p.case_id} {p.impl}: {res['status']} ({p.fmt}: {p.path}; iterations from "
            f"{res['from_profile'].get('iterations_from')})")
    device = next((r["device"] for per in results.values() for r in per.values() if r.get("device")),
                  {"backend": backends[0]})
    runtime = next((r["runtime"] for per in results.values() for r in per.values() if r.get("runtime")), None)
    peak = resolve_peak(backends[0], device, runtime, opts.mfu_peak)
    nominal = peak["value_tflops"] if opts.mfu else None
    impls = sorted({p.impl for p in profs}, key=lambda i: ("ref", "asc").index(i) if i in ("ref", "asc") else 2)
    per_case = []
    for cid in sorted(results, key=lambda c: [p.case_id for p in profs].index(c)):
        fl = {}
        if opdir is not None:
            fl = flops_entry(ff, opdir, infos[cid], opts.seed, tracer, verdicts)  # check_flops' verdict too
        tf32 = fp32_dot_is_tf32(backends[0], fl.get("compute_dtype") or infos[cid].compute_dtype)
        entry = _perf.case_entry(infos[cid], results[cid], fl, nominal, tf32,
                                 nominal_by_mode=peak["nominal_tflops"] if opts.mfu else None)
        entry["from_profile"] = {impl: res.get("from_profile") for impl, res in results[cid].items()}
        per_case.append(entry)
    flags = list(kept_flags)
    if opdir is None:
        flags.append("no work directory (--op-dir): kernel times only, FLOPs and MFU are null")
    elif ff is None:
        flags.append(f"no flops.py in {opdir.path}: FLOPs and MFU are null")
    if opts.mfu and peak["value_tflops"] is None:
        flags.append(f"MFU@nom not reported: {peak['source']}")
    run = {
        "task": opdir.op_name if opdir is not None else os.path.basename(os.path.abspath(opts.paths[0])),
        "task_dir": opdir.path if opdir is not None else None,
        "warmup": opts.warmup, "repeats": opts.repeats, "seed": opts.seed, "device_id": None,
        "device_select_source": "profile",
        "timing_method": next((r["timing_method"] for per in results.values() for r in per.values()
                               if r.get("status") == "ok"), profs[0].timing_method),
        "profiling_mode": "from-prof", "backend": backends[0],
        "backend_reason": f"--from-prof: {', '.join(sorted({p.fmt for p in profs}))}", "environment": None,
        "device": device, "compat": None, "impl": opts.impl if len(impls) > 1 else impls[0], "mfu": opts.mfu,
        "peak": peak, "flops_file": opdir.flops_py if ff else None, "kernel_parts": ff.kernel_parts if ff else None,
        "selection": {"rule": "--from-prof" + (" --cases" if opts.cases is not None else ""),
                      "order": [c["case"] for c in per_case], "skipped": [], "reserve": []},
        "retry": 0, "flush_cache_mib": None, "aic_metrics": None, "flags": flags,
        "from_prof": {"paths": [os.path.abspath(p) for p in opts.paths], "l2_flush": opts.l2_flush,
                      "l2_mib": opts.l2_mib, "range": opts.range_name, "device": opts.device,
                      "implementation_kernels": sorted(own), "all_runs": opts.all_runs, "kept_runs": kept_runs,
                      "profiles": [{"case": p.case_id, "impl": p.impl, "format": p.fmt, "path": p.path}
                                   for p in profs]},
        "wall_s": time.perf_counter() - t_start,
    }
    header = provenance(_perf.TOOL, _perf.SCHEMA, device=device)
    report = _perf.build_report(header, run, per_case, impls)
    _perf.write_performance_json(output_dir, report)
    return report
