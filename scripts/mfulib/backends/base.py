"""The backend interface (DESIGN.md "Device backends") and what the CUDA and CPU backends share.

A backend runs ``ModelNew`` (or ``Model``) on one case for warmup + repeats iterations **in a child process** (see
:mod:`mfulib.backends.runner`) and turns what its profiler recorded into a kernel table: one row per kernel launch
with ``name``, ``start_ns``, ``duration_ns``, ``iteration`` (None outside the timed iterations) and any PMU columns.

Two sides, two processes:

* parent (collector) side: :meth:`Backend.check` (environment, with the fix in the message), :meth:`command`
  (how the child is started: plain, or under ``msprof``), :meth:`child_env`, :meth:`launches` (parse the profile
  the child left into tagged rows + problems);
* child side: :meth:`setup` (device, compatibility layer, launch hooks), :meth:`identity`, :meth:`sync`,
  :meth:`session` (the profiler around the timed window), :meth:`iteration` (the marker around one iteration),
  :meth:`finish` (write the profile).

Iterations are delimited from the data: each is wrapped in ``record_function("mfu::iter::<i>")`` (CUDA/CPU; the
profiler records the range) or bracketed by marker-kernel launches (NPU, where msprof has no such range in the
CSVs); the kernel-name sequence must then repeat once per iteration (:func:`mfulib.collect.kernels.summarize`).
"""
from __future__ import annotations

import bisect
import contextlib
import decimal
import gzip
import json
import os
import re

ITER_RANGE_PREFIX = "mfu::iter::"
PRIME_RANGE = "mfu::prime"
TRITON_RANGE_PREFIX = "triton::"
_ITER_RE = re.compile(r"^mfu::iter::(\d+)$")


class Backend:
    """Base class; subclasses set ``name``, ``timing_method`` and override what differs."""

    name = "base"
    timing_method = None
    profile_prime = False  # is the priming call inside the profiled window (it never counts either way)
    markers = False  # launch marker kernels around iterations (backends whose profiler has no ranges)
    persistent_worker = False  # cases run one after another in a kept worker process (runner.py), not one child each

    # ---------------------------------------------------------------- parent side
    def check(self, args=None) -> dict:
        """Environment checks before any case runs; returns facts to record, raises UserError with the fix."""
        return {}

    def device_string(self, device_id: int) -> str:
        return f"{self.name}:{device_id}"

    def child_env(self, env: dict) -> dict:
        return dict(env)

    def command(self, child_cmd: list, attempt_dir: str, opts: dict) -> list:
        """The argv that starts the child (``child_cmd`` runs the case)."""
        return list(child_cmd)

    def launches(self, attempt_dir: str, report: dict, n_iters: int):
        """(rows, info) from the profile the child left; ``info["lost_by_iter"]`` counts launches without a
        kernel record per iteration, ``info["problems"]``/``info["flags"]`` say what else was seen.

        Every backend (cpu, cuda, npu) overrides this: the base class has no profile format of its own."""
        raise TypeError(f"{type(self).__name__} does not parse profiles: a backend must override launches()")

    # ---------------------------------------------------------------- child side
    def setup(self, spec: dict) -> None:
        """Prepare the child process for ``spec["device"]`` (before the operator files are imported)."""

    def identity(self, spec: dict) -> dict:
        return {"backend": self.name}

    def sync(self) -> None:
        """Wait for the device."""

    def session(self, spec: dict):
        """Context manager around the profiled window; yields an object passed to :meth:`finish`."""
        return contextlib.nullcontext()

    def iteration(self, index: int):
        """Context manager around iteration ``index`` (the marker the profiler records)."""
        from torch.profiler import record_function
        return record_function(f"{ITER_RANGE_PREFIX}{index}")

    def finish(self, spec: dict, session) -> dict:
        """After the session: write the profile (trace file) and return what to add to the child report."""
        return {}


# ------------------------------------------------------------------------------------------- chrome traces


def load_trace(path):
    """``(events, top)`` of a torch.profiler chrome trace (``.json`` or gzip-compressed ``.json.gz``, detected by
    its magic bytes): complete events (``"ph": "X"``) with exact integer ``ts_ns``/``dur_ns``, and the top-level
    object without ``traceEvents`` (``deviceProperties``, ``schemaVersion``, ...; {} for a bare event list).

    Timestamps are read as decimals (``5117234754077.308`` us needs 16 digits), so no float rounding enters.
    Raises ValueError for a file that is not JSON.
    """
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")) as f:
        data = json.load(f, parse_float=decimal.Decimal)
    events = data.get("traceEvents", data) if isinstance(data, dict) else data
    top = {k: v for k, v in data.items() if k != "traceEvents"} if isinstance(data, dict) else {}
    out = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        ts, dur = e.get("ts"), e.get("dur")
        if ts is None:
            continue
        e = dict(e)
        e["ts_ns"] = int(decimal.Decimal(ts) * 1000)
        e["dur_ns"] = int(decimal.Decimal(dur) * 1000) if dur is not None else 0
        out.append(e)
    return out, top


def load_trace_events(path):
    """The complete events of :func:`load_trace` (a chrome trace, ``.json`` or ``.json.gz``)."""
    return load_trace(path)[0]


def iteration_ranges(events, cats=("user_annotation",)):
    """Sorted ``[(start_ns, end_ns, index)]`` of the ``mfu::iter::<i>`` ranges among events of ``cats``."""
    out = []
    for e in events:
        if e.get("cat") in cats:
            m = _ITER_RE.match(str(e.get("name", "")))
            if m:
                out.append((e["ts_ns"], e["ts_ns"] + e["dur_ns"], int(m.group(1))))
    return sorted(out)


def range_of(t_ns, ranges):
    """Index of the range containing ``t_ns`` (ranges sorted, non-overlapping), else None."""
    if t_ns is None or not ranges:
        return None
    j = bisect.bisect_right([r[0] for r in ranges], t_ns) - 1
    if j >= 0 and ranges[j][0] <= t_ns <= ranges[j][1]:
        return ranges[j][2]
    return None


def launches_from_trace(report: dict, parse):
    """``parse(trace_path)`` for the trace the child reported, or a problem when it wrote none."""
    path = report.get("trace_path")
    if not path or not os.path.exists(path):
        return [], {"problems": [f"the child wrote no trace ({path})"], "flags": [], "lost_by_iter": {}}
    return parse(path)


def lost_problems(info: dict, warmup: int, n_iters: int) -> list:
    """Problems for the measured iterations from ``info["lost_by_iter"]`` (launches with no kernel record)."""
    lost = {int(k): v for k, v in (info.get("lost_by_iter") or {}).items() if warmup <= int(k) < n_iters and v}
    if not lost:
        return []
    return [f"{sum(lost.values())} kernel launch(es) in measured iterations {sorted(lost)} have no kernel record "
            "(profiler buffer not drained or records dropped)"]
