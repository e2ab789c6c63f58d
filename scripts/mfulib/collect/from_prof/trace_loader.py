"""torch.profiler chrome traces as :class:`~mfulib.collect.from_prof.profile.Profile` (:func:`load_chrome`):
CUDA traces (CUPTI kernel events; launch configuration grid/block/registers/shared memory; the bytes of the
launching host op's largest input and its input types when recorded with ``record_shapes``; each kernel's host launch time and device,
the kernel event's ``pid``; the trace's own ProfilerStep / record_function ranges) and this tool's CPU-backend
traces."""
from __future__ import annotations

import math
import os
from collections import Counter

from mfulib.collect.from_prof.discovery import head_text
from mfulib.core.nominal_peaks import l2_from_facts
from mfulib.collect.from_prof.profile import Profile
from mfulib.collect.from_prof.ranges import range_sets
from mfulib.core.errors import UserError
from mfulib.run.interpreter import TRITON_RANGE_PREFIX

TORCH_TYPE_BYTES = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8, "int": 4, "long int": 8, "long": 8,
                    "short int": 2, "short": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
                    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}


def _host_ops(events):
    """{External id: cpu_op event} of a chrome trace (the op that launched a kernel, with its shapes)."""
    out = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            ext = (e.get("args") or {}).get("External id")
            if ext is not None:
                out.setdefault(int(ext), e)
    return out


def _host_op_bytes(op):
    """Bytes of the largest tensor input of a host op recorded with ``record_shapes`` (None if unknown)."""
    args = op.get("args") or {}
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    best = None
    for i, d in enumerate(dims):
        size = TORCH_TYPE_BYTES.get(str(types[i]) if i < len(types) else "")
        if not isinstance(d, list) or not d or size is None or not all(isinstance(x, int) for x in d):
            continue
        b = math.prod(int(x) for x in d) * size
        best = b if best is None else max(best, b)
    return best


def _gzip_fault(path):
    """A description of a gzip file that cannot be read to its end (truncated or corrupt), else None."""
    import gzip
    import zlib
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return None
    try:
        with gzip.open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    except EOFError:
        return "truncated gzip file (its compressed stream ends before the end-of-stream marker)"
    except (OSError, zlib.error) as exc:
        return f"corrupt gzip file ({type(exc).__name__}: {exc})"
    return None


def load_chrome(path, n_iters=None) -> Profile:
    """A torch.profiler chrome trace (CUDA, or this tool's CPU-backend trace) as a :class:`Profile`."""
    from mfulib.core import nominal_peaks as _peaks
    from mfulib.backends import base as _base
    from mfulib.backends import cpu as _cpu
    from mfulib.backends import cuda as _cuda
    head = head_text(path, 1 << 16)
    if '"traceEvents"' not in head and not head.lstrip().startswith("["):
        fault = _gzip_fault(path)
        if fault:
            raise UserError(f"{path}: {fault} - the file was cut short or damaged (an interrupted copy or export?); "
                            "copy or export it again (torch.profiler's export_chrome_trace, .json or .json.gz)")
        raise UserError(f"{path}: no \"traceEvents\" - not a chrome trace; give the file torch.profiler's "
                        "export_chrome_trace wrote (.json or .json.gz)")
    try:
        events, top = _base.load_trace(path)
    except (ValueError, UnicodeDecodeError, OSError, EOFError) as exc:
        fault = _gzip_fault(path)
        if fault:
            raise UserError(f"{path}: {fault} - the file was cut short or damaged; copy or export it again") from None
        raise UserError(f"{path}: not a readable chrome trace ({type(exc).__name__}: {exc}) - give the file "
                        "export_chrome_trace wrote (.json or .json.gz)") from None
    cats = Counter(e.get("cat") for e in events)
    has_cuda = cats.get("kernel") or cats.get("cuda_runtime") or cats.get("cuda_driver") or cats.get("gpu_memset")
    props = (top.get("deviceProperties") or [{}])[0] if isinstance(top.get("deviceProperties"), list) else {}
    own_cpu = any(str(e.get("name", "")).startswith(TRITON_RANGE_PREFIX) for e in events)
    if not has_cuda and not own_cpu and not props.get("name"):
        raise UserError(f"{path}: a chrome trace without any CUDA activity (no kernel / cuda_runtime events, no "
                        "deviceProperties) and without this tool's Triton-interpreter ranges: a CPU-only "
                        "torch.profiler trace has no device kernel time to read - record it with "
                        "ProfilerActivity.CUDA on the GPU, or with this tool's CPU backend (make collect)")
    if has_cuda or not own_cpu:
        rows, info = _cuda.trace_launches(path, events)
        ops = _host_ops(events)
        host_ns = {(e.get("args") or {}).get("correlation"): e["ts_ns"] for e in events
                   if e.get("cat") in _cuda.RUNTIME_CATS}
        device_of = {(e.get("args") or {}).get("correlation"): e.get("pid") for e in events
                     if e.get("cat") in _cuda.KERNEL_CATS}
        for r in rows:
            r["host_ns"] = host_ns.get(r.get("correlation"))
            r["device"] = device_of.get(r.get("correlation")) if r.get("correlation") is not None else None
            r["config"] = tuple(str(r.get(k)) for k in ("grid", "block", "registers", "shared_memory"))
            op = ops.get(r.get("external_id")) if r.get("external_id") else None
            r["host_op"] = op.get("name") if op else None
            r["host_types"] = [str(t) for t in (op.get("args") or {}).get("Input type") or []] if op else []
            r["bytes"] = _host_op_bytes(op) if op else None
            r["bytes_source"] = f"host op {op.get('name')} Input Dims" if r["bytes"] is not None else None
        prof = Profile(path=os.path.abspath(path), fmt="chrome_trace", backend="cuda", rows=rows,
                       timing_method="torch.profiler.cupti.kernel_duration")
        prof.tagged = info["iteration_ranges"] > 0
        prof.delimiter = "this tool's mfu::iter ranges" if prof.tagged else None
        prof.iterations_from = "mfu_iter" if prof.tagged else None
        prof.range_sets = {} if prof.tagged else range_sets(events)
        prof.lost_by_iter = info.get("lost_by_iter") or {}
        prof.lost_launches = len(info.get("lost_launches") or [])
        prof.extra["lost_launch_ns"] = list(info.get("lost_launches") or [])
        launches = sum(1 for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                       and _cuda.LAUNCH_API_RE.search(str(e.get("name", ""))))
        prof.host_launches = launches
        prof.flags += info.get("flags", [])
        if props.get("name"):
            prof.device = {"backend": "cuda", "name": str(props["name"]), "multiprocessor_count": props.get("numSms"),
                           "capability": f"{props.get('computeMajor')}.{props.get('computeMinor')}",
                           "identity_source": "chrome trace deviceProperties"}
            prof.bandwidth_gbps = _peaks.nominal_for_identity(dict(prof.device)).get("bandwidth_gbps")
            prof.l2_bytes, prof.l2_source = l2_from_facts(props["name"])
    else:
        rows, info = _cpu.trace_launches(path)
        prof = Profile(path=os.path.abspath(path), fmt="chrome_trace_cpu", backend="cpu", rows=rows,
                       timing_method="triton_interpreter.launch_hook+torch.profiler.cpu",
                       tagged=info["iteration_ranges"] > 0, device={"backend": "cpu"})
        prof.delimiter = "this tool's mfu::iter ranges" if prof.tagged else None
        prof.iterations_from = "mfu_iter" if prof.tagged else None
        for r in rows:
            r["config"] = None
            r["bytes"] = None
    return prof
