"""Profiles not recorded by this run: re-parse a kept or a foreign profile into ``performance.json`` without running
anything (``msprof_perf_summary.py --from-prof``).

Accepted inputs (one ``--from-prof`` path may hold several profiles; each is one (case, implementation)):

* this tool's kept profiles (``--keep-prof``): ``<dir>/prof/case<N>_<impl>/`` with ``spec.json`` (case, impl,
  warmup, repeats, backend), ``report.json`` (device) and ``trace.json`` (cuda/cpu) or ``msprof/PROF_*`` (npu);
* msprof ``PROF_*`` directories and torch_npu ``*_ascend_pt`` directories (:mod:`mfulib.collect.msprof` reads them), or
  one ``op_summary_*.csv`` / ``task_time_*.csv`` / ``kernel_details.csv`` file;
* torch.profiler chrome traces (``.json`` / ``.json.gz``, ``export_chrome_trace``), with or without this tool's
  ``mfu::iter::<i>`` ranges (:func:`mfulib.backends.cuda.trace_launches` reads them);
* ``ncu --csv`` output, ``--page raw`` or ``--page details`` (:func:`mfulib.collect.ncu.parse_ncu_csv`).

What a foreign profile lacks is found in the data, and every finding is written to the case's ``flags``:

* **Iterations.** This tool's ranges (chrome traces) or marker kernels (msprof) delimit iterations where present.
  Otherwise the launch sequence is searched for its period (:func:`delimit_by_sequence`): a launch is identified
  by its kernel name and launch configuration (CUDA grid/block/registers/shared memory, ncu grid/block, msprof
  Block Dim), and the period that covers the most launches at the end of the window (at least two repetitions)
  wins; where one iteration repeats a kernel (period ambiguous) it is split at the device-idle gaps (a boundary gap
  at least :data:`GAP_RATIO` times every gap inside). Iterations are aligned to the end of the window.
* **Harness work inside the window.** An L2-flush launch is a fill / zero / memset, cast or sum kernel
  (:data:`FLUSH_OP_TYPES`, :data:`FLUSH_NAME_PATTERNS`) over a buffer at least the L2 size. Buffer bytes: the
  largest tensor of its shapes (msprof Input/Output Shapes x dtype size; the host op's ``Input Dims`` in a
  chrome trace recorded with ``record_shapes``), ncu ``dram__bytes_write.sum``; else *estimated* as duration x
  the device's nominal DRAM bandwidth (:mod:`mfulib.peaks.nominal` datasheet table; a fill is bandwidth-bound, and the
  estimate is an upper bound of its bytes, so a fill just under the L2 size can be misjudged - it is labelled
  estimated). L2 size: ``--l2-mib``, the profile (ncu ``device__attribute_l2_cache_size``; kept profiles' device
  record ``l2_cache_bytes``; msprof info.json.N AI-core frequency -> 910B variant, facts §8.1), else
  :data:`L2_FACTS` by device name.
  ``--l2-flush exclude`` (default) drops them, counted in ``harness_launches_dropped``; ``keep`` leaves them in
  the operator's time, flagged. A flush-like kernel whose size or the L2 size is unknown is kept and flagged.
* **The head of the window.** A first iteration with fewer launches than the others (the window started late)
  is reported as found/expected launches and left out, the case measured from the iterations present; a first
  iteration (or the launches before the first complete one) holding extra launches of the operator's kernels
  in other launch configurations is the autotuner benchmarking its configs: recognised and left out.
* **Nothing recorded.** An export with a header and no kernel row (and no launch on the host) is ``no_kernels``
  ("no device kernel"); launches recorded on the host without a kernel record (CUPTI runtime launch calls
  without a kernel event; msprof api_statistic ``KernelLaunch`` calls with an empty kernel table) are
  ``incomplete``: "profiler buffer not drained", re-record (retry) - never 0 ns.

``--warmup/--repeats`` say how many iterations the profile holds (kept profiles carry them in ``spec.json``);
without them every complete iteration found is measured (warmup 0). ncu records no timestamps: its launches are
ordered by ncu's ID and ``span_ns`` / ``launch_overhead_ns`` are None.
"""
from __future__ import annotations

import glob
import math
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field

from mfulib.collect import kernels as _kernels
from mfulib.collect import msprof as _msprof
from mfulib.collect import ncu as _ncu
from mfulib.core.errors import UserError

MIB = 1 << 20
GAP_RATIO = 4.0
L2_FLUSH_MODES = ("exclude", "keep")

# L2 sizes by device name (regex, bytes, source); used when neither --l2-mib nor the profile gives one
L2_FACTS = [
    (r"H200", 60 * MIB, "reference/environment_notes.md (GPU machine: one NVIDIA H200, 60 MB L2)"),
    (r"^Ascend910B4$", 100663296, "ascend_msprof_facts.md §8.1 (Ascend910B4.ini l2_size 96 MiB)"),
    (r"^Ascend910B[123]C?$", 201326592, "ascend_msprof_facts.md §8.1 (Ascend910B1/B2/B2C/B3.ini l2_size 192 MiB)"),
]
# runtime (ai_core_num, aic_frequency MHz) of info.json.N -> L2 of the 910B variant with that pair (facts §8.1:
# only 910B4, 20 cores at 1500 MHz, has 96 MiB; 910B1/B2/B2C/B3 run 20-25 cores at 1800/1850 MHz with 192 MiB) [I]
_NPU_L2_BY_FREQ = {1500.0: 100663296, 1800.0: 201326592, 1850.0: 201326592}

# msprof OP Type -> flush kind (facts §3.3 / §5 vocabulary; torch_npu's zero_ runs ZerosLike, fill_ Fill/Fills)
FLUSH_OP_TYPES = {"cast": "cast", "reducesum": "reduce_sum", "zeroslike": "fill", "fill": "fill", "fills": "fill",
                  "memset": "memset"}
# kernel / host-op names -> flush kind (CUDA: at::native FillFunctor = fill_/zero_, sum_functor = sum,
# direct_copy_kernel = cast/copy; msprof Op Names such as aclnnInplaceZero_ZerosLikeAiCore_ZerosLike)
FLUSH_NAME_PATTERNS = [
    ("fill", re.compile(r"FillFunctor|fill_kernel|aten::fill_|aten::zero_|ZerosLike|InplaceZero|InplaceFill")),
    ("memset", re.compile(r"memset", re.I)),
    ("reduce_sum", re.compile(r"ReduceSum|reduce_sum|sum_functor|aten::sum\b")),
    ("cast", re.compile(r"(?:^|[^A-Za-z])Cast(?:$|[^a-z])|direct_copy_kernel|aten::_to_copy")),
]
NPU_DTYPE_BYTES = {"FLOAT": 4, "FLOAT32": 4, "FLOAT16": 2, "DT_BF16": 2, "BF16": 2, "BFLOAT16": 2, "INT8": 1,
                   "UINT8": 1, "BOOL": 1, "INT16": 2, "UINT16": 2, "INT32": 4, "UINT32": 4, "INT64": 8, "UINT64": 8,
                   "DOUBLE": 8, "DT_HIFLOAT8": 1, "DT_FLOAT8_E5M2": 1, "DT_FLOAT8_E4M3FN": 1}
TORCH_TYPE_BYTES = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8, "int": 4, "long int": 8, "long": 8,
                    "short int": 2, "short": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
                    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}


@dataclass
class Profile:
    """One loaded profile: launch rows (start order) and what the file says about itself."""
    path: str
    fmt: str
    backend: str
    rows: list
    timing_method: str
    tagged: bool = False  # rows carry iterations from this tool's ranges / markers
    delimiter: str | None = None
    host_launches: int | None = None  # launches the host side recorded (None: not known)
    lost_launches: int = 0  # host launches without a kernel record
    lost_by_iter: dict = field(default_factory=dict)
    timestamps: bool = True
    device: dict = field(default_factory=dict)
    runtime: dict | None = None
    l2_bytes: float | None = None
    l2_source: str | None = None
    bandwidth_gbps: float | None = None
    case_id: int | None = None
    impl: str | None = None
    warmup: int | None = None
    repeats: int | None = None
    flags: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ discovery


def _is_kept(d) -> bool:
    return os.path.isfile(os.path.join(d, "spec.json")) and (
        os.path.exists(os.path.join(d, "trace.json")) or os.path.isdir(os.path.join(d, "msprof")))


def _head_text(path, n=1 << 20):
    import gzip
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            return f.read(n).decode("utf-8", errors="replace")
    except (OSError, EOFError):
        return ""


def _sniff_file(path):
    """The format of one file, or None: ``chrome`` (a JSON document with ``traceEvents``, or an event list) |
    ``ncu`` (an ``"ID",`` table header or ``==PROF==`` lines) | ``msprof_csv`` (a CSV with a duration column)."""
    low = path.lower()
    head = _head_text(path)
    if low.endswith((".json", ".json.gz")):
        return "chrome" if ('"traceEvents"' in head or head.lstrip().startswith("[")) else None
    lines = head.splitlines()
    if any(ln.startswith('"ID",') for ln in lines) or any(ln.startswith("==PROF==") for ln in lines):
        return "ncu"
    first = head.splitlines()[0] if head.strip() else ""
    if low.endswith(".csv") and _msprof.has_duration_column([h.strip() for h in first.split(",")]):
        return "msprof_csv"
    return None


def discover(path):
    """``[(kind, path)]`` of the profiles at ``path`` (kind: kept | msprof | chrome | ncu | msprof_csv), in
    recording order (kept: case then impl; others by name). Raises UserError when none is recognised."""
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise UserError(f"--from-prof {path}: not found - give a PROF_* / *_ascend_pt directory, a chrome trace "
                        "(.json/.json.gz), an ncu --csv file, or a --keep-prof directory")
    if os.path.isfile(path):
        kind = _sniff_file(path)
        if kind is None and path.lower().endswith((".json", ".json.gz")):
            kind = "chrome"  # given explicitly: load_chrome says what is wrong with it
        if kind is None:
            raise UserError(f"--from-prof {path}: not a chrome trace, an ncu --csv output or an msprof CSV (no "
                            "traceEvents, no \"ID\", header, no duration column)")
        return [(kind, path)]
    if _is_kept(path):
        return [("kept", path)]
    for base in (path, os.path.join(path, "prof")):
        kept = sorted((d for d in glob.glob(os.path.join(base, "case*_*")) if _is_kept(d)), key=_kept_key)
        if kept:
            return [("kept", d) for d in kept]
    base = os.path.basename(path)
    if base.startswith("PROF_") or base.endswith("_ascend_pt") or base == "ASCEND_PROFILER_OUTPUT":
        return [("msprof", path)]
    found = []
    pts = sorted(glob.glob(os.path.join(path, "**", "*_ascend_pt"), recursive=True))
    found += [("msprof", p) for p in pts if os.path.isdir(p)]
    for p in sorted(glob.glob(os.path.join(path, "**", "PROF_*"), recursive=True)):
        if os.path.isdir(p) and not any(p.startswith(q + os.sep) for _, q in found) and \
                not any(os.path.basename(a).startswith("PROF_") for a in _parents(p, path)):
            found.append(("msprof", p))
    taken = [q for _, q in found]
    for p in sorted(glob.glob(os.path.join(path, "**", "*"), recursive=True)):
        if os.path.isfile(p) and not any(p.startswith(q + os.sep) for q in taken):
            kind = _sniff_file(p)
            if kind in ("chrome", "ncu"):
                found.append((kind, p))
    if not found:
        raise UserError(f"--from-prof {path}: no profile found (no PROF_* or *_ascend_pt directory, chrome trace "
                        ".json/.json.gz, ncu --csv file, or kept case<N>_<impl>/spec.json)")
    return found


def _parents(p, stop):
    out = []
    d = os.path.dirname(p)
    while d.startswith(stop) and d != stop:
        out.append(d)
        d = os.path.dirname(d)
    return out


def _kept_key(d):
    m = re.match(r"case(\d+)_(\w+)$", os.path.basename(d))
    return (int(m.group(1)), m.group(2)) if m else (1 << 30, os.path.basename(d))


# ------------------------------------------------------------------------------------------------ loading


def _prod(dims):
    n = 1
    for d in dims:
        n *= int(d)
    return n


def npu_tensor_bytes(row):
    """Bytes of the largest tensor of an msprof row (Input/Output Shapes x Data Types), or None when unknown."""
    best = None
    for shapes_key, dtypes_key in (("input_shapes", "input_dtypes"), ("output_shapes", "output_dtypes")):
        shapes = _msprof.parse_shapes(row.get(shapes_key))
        dtypes = [d.strip().upper() for d in (row.get(dtypes_key) or "").split(";")]
        for i, dims in enumerate(shapes or []):
            size = NPU_DTYPE_BYTES.get(dtypes[i] if i < len(dtypes) else "")
            if dims is None or size is None:
                continue
            b = _prod(dims) * size
            best = b if best is None else max(best, b)
    return best


def _l2_from_facts(name):
    for pat, size, src in L2_FACTS:
        if name and re.search(pat, str(name)):
            return float(size), src
    return None, None


def load_msprof(root, n_iters=None) -> Profile:
    """A PROF_* / *_ascend_pt directory (or a kept attempt's ``msprof/``) as a :class:`Profile`."""
    rows, meta = _msprof.load_kernel_rows(root)
    timing = {"op_summary": "msprof.op_summary.Task_Duration", "old_op_summary": "msprof.op_summary.Task_Duration",
              "task_time": "msprof.quick.Task_Duration",
              "kernel_details": "torch_npu.kernel_details.Duration"}[meta["kind"]]
    for r in rows:
        r["config"] = (r.get("block_dim"), r.get("mix_block_dim"))
        r["bytes"] = npu_tensor_bytes(r)
        r["bytes_source"] = "Input/Output Shapes x Data Types" if r["bytes"] is not None else None
    prof = Profile(path=os.path.abspath(root), fmt="torch_npu" if meta["kind"] == "kernel_details" else "msprof",
                   backend="npu", rows=rows, timing_method=timing, runtime=_msprof.read_info_json(root))
    prof.extra["kernel_table"] = meta["files"]
    if meta["ignored"]:
        prof.flags.append(f"passed over {len(meta['ignored'])} stale/partial export(s): {meta['ignored'][0]}")
    prof.host_launches = _npu_kernel_launches(meta)
    if any(r.get("name") == _kernels.MARKER_KERNEL for r in rows):
        n = n_iters if n_iters else sum(r.get("name") == _kernels.MARKER_KERNEL for r in rows) - 1
        tagged, info = _kernels.assign_by_markers(rows, n)
        prof.rows, prof.tagged, prof.delimiter = tagged, True, "this tool's marker kernels"
        prof.problems += info["problems"]
        prof.flags += info["flags"]
    if prof.runtime:
        prof.device = {"backend": "npu", "runtime": prof.runtime}
        prof.l2_bytes = _NPU_L2_BY_FREQ.get(prof.runtime.get("aic_frequency_mhz"))
        if prof.l2_bytes:
            prof.l2_source = (f"910B L2 for {prof.runtime.get('aic_frequency_mhz'):g} MHz AI cores "
                              f"({prof.runtime.get('info_json_path')}; ascend_msprof_facts.md §8.1)")
    return prof


def _npu_kernel_launches(meta):
    """``KernelLaunch`` calls counted by the api_statistic export beside the kernel table (None if absent)."""
    d = os.path.dirname(meta["files"][0]) if meta.get("files") else None
    if not d:
        return None
    cands = sorted(glob.glob(os.path.join(d, "api_statistic*.csv")), reverse=True)
    for path in cands:
        header, table = _msprof.read_csv_table(path)
        if "API Name" not in header or "Count" not in header:
            continue
        i_name, i_count = header.index("API Name"), header.index("Count")
        total = 0
        for cells in table:
            if i_name < len(cells) and _msprof.clean(cells[i_name]) == "KernelLaunch":
                total += int(_msprof.to_number(cells[i_count]) or 0)
        return total
    return None


def load_msprof_csv(path) -> Profile:
    """One op_summary / task_time / kernel_details CSV file as a :class:`Profile`."""
    rows = [r for r in _msprof.parse_kernel_csv(path) if not _msprof.is_marker_row(r)]
    rows.sort(key=lambda r: r.get("start_ns") or 0)
    for r in rows:
        r["config"] = (r.get("block_dim"), r.get("mix_block_dim"))
        r["bytes"] = npu_tensor_bytes(r)
        r["bytes_source"] = "Input/Output Shapes x Data Types" if r["bytes"] is not None else None
    timing = "torch_npu.kernel_details.Duration" if "kernel_details" in os.path.basename(path) else \
        ("msprof.quick.Task_Duration" if "task_time" in os.path.basename(path) else "msprof.op_summary.Task_Duration")
    return Profile(path=os.path.abspath(path), fmt="msprof_csv", backend="npu", rows=rows, timing_method=timing)


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
        b = _prod(d) * size
        best = b if best is None else max(best, b)
    return best


def load_chrome(path, n_iters=None) -> Profile:
    """A torch.profiler chrome trace (CUDA, or this tool's CPU-backend trace) as a :class:`Profile`."""
    from mfulib.peaks import nominal as _peaks
    from mfulib.backends import base as _base
    from mfulib.backends import cpu as _cpu
    from mfulib.backends import cuda as _cuda
    head = _head_text(path, 1 << 16)
    if '"traceEvents"' not in head and not head.lstrip().startswith("["):
        raise UserError(f"{path}: no \"traceEvents\" - not a chrome trace; give the file torch.profiler's "
                        "export_chrome_trace wrote (.json or .json.gz)")
    try:
        events, top = _base.load_trace(path)
    except (ValueError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise UserError(f"{path}: not a readable chrome trace ({type(exc).__name__}: {exc}) - give the file "
                        "export_chrome_trace wrote (.json or .json.gz)") from None
    cats = Counter(e.get("cat") for e in events)
    has_cuda = cats.get("kernel") or cats.get("cuda_runtime") or cats.get("cuda_driver") or cats.get("gpu_memset")
    props = (top.get("deviceProperties") or [{}])[0] if isinstance(top.get("deviceProperties"), list) else {}
    if has_cuda or not any(str(e.get("name", "")).startswith(_base.TRITON_RANGE_PREFIX) for e in events):
        rows, info = _cuda.trace_launches(path, events)
        ops = _host_ops(events)
        for r in rows:
            r["config"] = tuple(str(r.get(k)) for k in ("grid", "block", "registers", "shared_memory"))
            op = ops.get(r.get("external_id")) if r.get("external_id") else None
            r["host_op"] = op.get("name") if op else None
            r["bytes"] = _host_op_bytes(op) if op else None
            r["bytes_source"] = f"host op {op.get('name')} Input Dims" if r["bytes"] is not None else None
        prof = Profile(path=os.path.abspath(path), fmt="chrome_trace", backend="cuda", rows=rows,
                       timing_method="torch.profiler.cupti.kernel_duration")
        prof.tagged = info["iteration_ranges"] > 0
        prof.delimiter = "this tool's mfu::iter ranges" if prof.tagged else None
        prof.lost_by_iter = info.get("lost_by_iter") or {}
        prof.lost_launches = len(info.get("lost_launches") or [])
        launches = sum(1 for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                       and _cuda.LAUNCH_API_RE.search(str(e.get("name", ""))))
        prof.host_launches = launches
        prof.flags += info.get("flags", [])
        if props.get("name"):
            prof.device = {"backend": "cuda", "name": str(props["name"]), "multiprocessor_count": props.get("numSms"),
                           "capability": f"{props.get('computeMajor')}.{props.get('computeMinor')}",
                           "identity_source": "chrome trace deviceProperties"}
            prof.bandwidth_gbps = _peaks.nominal_for_identity(dict(prof.device)).get("bandwidth_gbps")
            prof.l2_bytes, prof.l2_source = _l2_from_facts(props["name"])
    else:
        rows, info = _cpu.trace_launches(path)
        prof = Profile(path=os.path.abspath(path), fmt="chrome_trace_cpu", backend="cpu", rows=rows,
                       timing_method="triton_interpreter.launch_hook+torch.profiler.cpu",
                       tagged=info["iteration_ranges"] > 0, device={"backend": "cpu"})
        prof.delimiter = "this tool's mfu::iter ranges" if prof.tagged else None
        for r in rows:
            r["config"] = None
            r["bytes"] = None
    return prof


def load_ncu(path) -> Profile:
    """An ``ncu --csv`` output (raw or details page) as a :class:`Profile` (launches in ncu ID order)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    recs = _ncu.parse_ncu_csv(text)
    details = '"Metric Name"' in next((ln for ln in text.splitlines() if ln.startswith('"ID",')), "")
    rows, t = [], 1
    l2, dev_name = None, None
    for rec in recs:
        d = _ncu.duration_ns(rec)
        pmu = {k: v for k, v in rec["metrics"].items() if isinstance(v, float) and k != "gpu__time_duration.sum"
               and not k.startswith("device__attribute")}
        b = None
        for key in ("dram__bytes_write.sum", "dram__bytes.sum"):
            b = _ncu.to_bytes(rec["metrics"].get(key), rec["units"].get(key))
            if b is not None:
                break
        l2 = l2 or _ncu.to_bytes(rec["metrics"].get("device__attribute_l2_cache_size"),
                                 rec["units"].get("device__attribute_l2_cache_size") or "byte")
        name_attr = rec["metrics"].get("device__attribute_display_name")
        dev_name = dev_name or (name_attr if isinstance(name_attr, str) else None)
        rows.append({"name": rec["kernel_name"], "start_ns": t, "duration_ns": d, "iteration": None,
                     "config": (rec.get("grid"), rec.get("block")), "pmu": pmu, "ncu_id": rec["id"],
                     "bytes": b, "bytes_source": "ncu dram__bytes" if b is not None else None,
                     "rules": rec.get("rules") or []})
        t += int(d or 0) + 1
    prof = Profile(path=os.path.abspath(path), fmt="ncu_details" if details else "ncu_raw", backend="cuda",
                   rows=rows, timing_method="ncu.gpu__time_duration.sum", timestamps=False)
    if l2:
        prof.l2_bytes, prof.l2_source = l2, "ncu device__attribute_l2_cache_size"
    if dev_name:
        from mfulib.peaks import nominal as _peaks
        prof.device = {"backend": "cuda", "name": dev_name, "identity_source": "ncu device__attribute_display_name"}
        prof.bandwidth_gbps = _peaks.nominal_for_identity(dict(prof.device)).get("bandwidth_gbps")
        if not prof.l2_bytes:
            prof.l2_bytes, prof.l2_source = _l2_from_facts(dev_name)
    if any(rec.get("rules") for rec in recs):
        prof.extra["rules"] = sum(len(rec["rules"]) for rec in recs)
    if not recs and "No kernels were profiled" in text:
        prof.extra["ncu_note"] = "ncu: No kernels were profiled"
    return prof


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


# ------------------------------------------------------------------------------------------------ harness work


def flush_kind(row):
    """The L2-flush kind a launch's name suggests (fill | memset | reduce_sum | cast), or None."""
    op_type = str(row.get("op_type") or "").replace("_", "").lower()
    if op_type in FLUSH_OP_TYPES:
        return FLUSH_OP_TYPES[op_type]
    for text in (row.get("name"), row.get("host_op")):
        for kind, pat in FLUSH_NAME_PATTERNS:
            if text and pat.search(str(text)):
                return kind
    return None


def find_flushes(rows, l2_bytes, bandwidth_gbps):
    """``(flush indices, undecided)`` of the L2-flush launches among ``rows`` (module docstring rule).

    ``undecided``: [(index, why)] for flush-like launches whose buffer size or the L2 size is unknown."""
    hits, undecided = {}, []
    for i, r in enumerate(rows):
        kind = flush_kind(r)
        if kind is None or _kernels.is_harness(r.get("name")):
            continue
        nbytes, src = r.get("bytes"), r.get("bytes_source")
        if nbytes is None and bandwidth_gbps and r.get("duration_ns"):
            nbytes, src = r["duration_ns"] * bandwidth_gbps, f"estimated: duration x nominal {bandwidth_gbps:g} GB/s"
        if nbytes is None or not l2_bytes:
            undecided.append((i, "buffer size unknown" if nbytes is None else "L2 size unknown"))
            continue
        if nbytes >= l2_bytes:
            hits[i] = {"kind": kind, "bytes": nbytes, "bytes_source": src}
    return hits, undecided


# ------------------------------------------------------------------------------------------------ iterations


def _sig(r):
    return (r.get("name"), r.get("config"))


def _periodic_suffix(sigs, k):
    n = len(sigs)
    j = n - k - 1
    while j >= 0 and sigs[j] == sigs[j + k]:
        j -= 1
    return n - 1 - j  # length of the longest k-periodic suffix


def delimit_by_sequence(rows, expected=None, timestamps=True):
    """Tag ``rows`` (start order, harness rows removed) with iterations from the repeating launch sequence.

    Returns ``(tagged rows, info)``; ``info``: ``period`` (launches per iteration), ``found`` (complete
    iterations), ``expected``, ``head`` (launches before the first complete iteration), ``partial`` (launches of a
    cut-off first iteration), ``autotune`` {launches, configs, kernels}, ``flags``, ``problems``. Iterations are
    numbered so that the last one found is ``expected - 1`` (or ``found - 1``): missing ones are at the head.
    """
    sigs = [_sig(r) for r in rows]
    n = len(sigs)
    info = {"method": "repeating launch sequence (no iteration marker or range of this tool)", "flags": [],
            "problems": [], "expected": expected}
    tagged = [dict(r, iteration=None) for r in rows]
    best = None
    if expected == 1 or n == 1:
        best = (n, 1)
    for k in range(1, min(n // 2, 4096) + 1):
        if best is not None and best[0] < k and k % best[0] == 0:
            continue  # a multiple of the best period covers no more; one iteration repeating it is split below
        reps = _periodic_suffix(sigs, k) // k
        if reps >= 2 and (best is None or reps * k > best[0] * best[1]):
            best = (k, reps)
            if reps * k == n:
                break
    if best is None or n == 0:
        info["problems"].append(f"the launch sequence of {n} launch(es) does not repeat: iterations cannot be "
                                "delimited - record the profile with this tool, or with one range per iteration")
        return tagged, info
    k, reps = best
    if timestamps and reps >= 4 and all(_kernels.is_valid_record(r) for r in rows[n - reps * k:]):
        # one iteration repeating a kernel (pattern): split at the device-idle gaps
        start = n - reps * k
        gaps = [rows[start + (j + 1) * k]["start_ns"] - (rows[start + (j + 1) * k - 1]["start_ns"] +
                                                         rows[start + (j + 1) * k - 1]["duration_ns"])
                for j in range(reps - 1)]
        for m in range(2, reps // 2 + 1):
            bnd = [g for j, g in enumerate(gaps) if (reps - 1 - j) % m == 0]
            inner = [g for j, g in enumerate(gaps) if (reps - 1 - j) % m != 0]
            if bnd and inner and min(bnd) > GAP_RATIO * max(max(inner), 1):
                info["flags"].append(f"one iteration repeats a {k}-launch pattern {m} times: iterations split at the "
                                     f"device-idle gaps (>= {GAP_RATIO:g}x the gaps inside)")
                k, reps = k * m, reps // m
                break
    start = n - reps * k
    ref = sigs[start:start + k]
    partial = 0
    for h in range(k - 1, 0, -1):
        if start - h >= 0 and sigs[start - h:start] == ref[k - h:]:
            partial = h
            break
    first_idx = (expected - reps) if expected else 0
    for j in range(reps):
        for i in range(start + j * k, start + (j + 1) * k):
            tagged[i]["iteration"] = first_idx + j
    info.update(period=k, found=reps, head=start, partial=partial)
    info["flags"].append(f"iterations delimited by the repeating launch sequence (no iteration marker or range of "
                         f"this tool): {reps} complete iteration(s) of {k} launch(es)")
    head_rows = rows[:start - partial]
    ref_names = {s[0] for s in ref}
    ref_configs = set(ref)
    tune = [r for r in head_rows if r.get("name") in ref_names]
    if tune:
        other = {(_sig(r)) for r in tune} - ref_configs
        kernels_ = sorted({r["name"] for r in tune})
        info["autotune"] = {"launches": len(tune), "configs": len(other), "kernels": kernels_}
        if other:
            info["flags"].append(f"autotuning recognised before the first complete iteration: {len(tune)} launch(es) "
                                 f"of {kernels_[:3]} in {len(other)} launch configuration(s) other than the steady "
                                 "one (the autotuner benchmarking its configs): excluded")
        else:
            info["flags"].append(f"{len(tune)} extra launch(es) of {kernels_[:3]} before the first complete "
                                 "iteration (warm-up or autotuning in the chosen configuration): excluded")
    rest = [r for r in head_rows if r.get("name") not in ref_names]
    if rest:
        top = Counter(r.get("name") for r in rest).most_common(3)
        info["flags"].append(f"{len(rest)} other launch(es) before the first complete iteration not counted (input "
                             f"set-up?): {[t[0][:60] for t in top]}")
    if partial:
        info["flags"].append(f"launches missing at the head of the window: the first iteration has {partial} of {k} "
                             "launches (found/expected; the profile started late) - left out, measured from the "
                             f"{reps} complete iteration(s)")
    if expected and reps < expected:
        info["flags"].append(f"found {reps} of {expected} expected iterations ({reps * k + partial} of {expected * k} "
                             f"launches): the first {expected - reps} are missing from the window; measured from the "
                             "ones present")
    elif expected and reps > expected:
        info["flags"].append(f"{reps} complete iterations where {expected} were expected (--warmup + --repeats): the "
                             f"first {reps - expected} are left out")
    return tagged, info


def screen_head(tagged):
    """Leave out head iterations (in range/marker-tagged rows) that are cut off (a strict part of the steady
    launch sequence) or hold autotuning (the steady sequence plus extra launches of its kernels). Returns
    ``(rows, flags)``."""
    by = {}
    for r in tagged:
        if r.get("iteration") is not None and not _kernels.is_harness(r.get("name")):
            by.setdefault(r["iteration"], []).append(r)
    if len(by) < 2:
        return tagged, []
    seqs = {i: tuple(_sig(r) for r in sorted(v, key=lambda r: r.get("start_ns") or 0)) for i, v in by.items()}
    freq = Counter(seqs.values())
    ref = max(freq, key=lambda s: (freq[s], len(s)))
    names = {s[0] for s in ref}
    drop, flags = set(), []
    for i in sorted(seqs):
        s = seqs[i]
        if s == ref:
            break
        if _kernels.is_strict_subsequence(s, ref):
            drop.add(i)
            flags.append(f"iteration {i} has {len(s)} of {len(ref)} launches (found/expected; launches missing at the "
                         "head of the window): left out, measured from the complete iterations")
        elif _kernels.is_strict_subsequence(ref, s) and all(x[0] in names for x in s):
            other = len(set(s) - set(ref))
            drop.add(i)
            flags.append(f"iteration {i} holds {len(s) - len(ref)} extra launch(es) of the operator's kernels "
                         f"({other} other launch configuration(s)): autotuning recognised - left out")
        else:
            break
    if not drop:
        return tagged, flags
    return [dict(r, iteration=None) if r.get("iteration") in drop else r for r in tagged], flags


def renumber(rows, warmup, repeats):
    """(rows with iterations 0.., warmup', repeats', dropped measured count) keeping only iterations that hold
    launches, numbered in order; iterations below ``warmup`` stay warmup."""
    present = sorted({r["iteration"] for r in rows if r.get("iteration") is not None and r["iteration"] >= 0
                      and r["iteration"] < warmup + repeats and not _kernels.is_harness(r.get("name"))})
    mapping = {old: new for new, old in enumerate(present)}
    w2 = sum(1 for i in present if i < warmup)
    r2 = len(present) - w2
    out = [dict(r, iteration=mapping.get(r.get("iteration"))) for r in rows]
    return out, w2, r2


# ------------------------------------------------------------------------------------------------ one profile


def analyse(prof: Profile, warmup=None, repeats=None, l2_flush: str = "exclude", l2_bytes=None) -> dict:
    """A collector-style result ({status, error, summary, flags, attempts, prof_dir, device, runtime,
    timing_method, from_profile}) for one profile; never raises for the profile's own faults."""
    t0 = time.perf_counter()
    flags = list(prof.flags)
    problems = list(prof.problems)
    res = {"status": "ok", "error": None, "attempts": 1, "prof_dir": prof.path, "output_bytes": None,
           "device": prof.device or {"backend": prof.backend}, "compat": None, "runtime": prof.runtime,
           "timing_method": prof.timing_method, "summary": None, "flags": flags, "wall_s": {}}
    w = warmup if warmup is not None else prof.warmup
    r = repeats if repeats is not None else prof.repeats
    l2, l2_src = (l2_bytes, "--l2-mib") if l2_bytes else (prof.l2_bytes, prof.l2_source)
    src = {"path": prof.path, "format": prof.fmt, "delimiter": prof.delimiter, "l2_bytes": l2, "l2_source": l2_src,
           "l2_flush": l2_flush, "timestamps": prof.timestamps}
    res["from_profile"] = src
    ops = [x for x in prof.rows if not _kernels.is_harness(x.get("name"))]
    if not ops:
        if prof.lost_launches or (prof.host_launches or 0) > 0:
            n = prof.lost_launches or prof.host_launches
            res.update(status="incomplete", error=f"{prof.path}: {n} kernel launch(es) recorded on the host but no "
                       "kernel record: profiler buffer not drained (the profile was stopped or exported before the "
                       "device records were flushed) - re-record it (retry), synchronizing the device before the "
                       "profiler stops; not reported as 0 ns")
        else:
            what = prof.extra.get("ncu_note") or "the export has a header and no kernel row"
            res.update(status="no_kernels", error=f"{prof.path}: no device kernel ({what}): the profiled call did no "
                       "device work, or the profiler recorded no kernel activity (CUDA: ProfilerActivity.CUDA; msprof: "
                       "--task-time=on)")
        return res
    n_records = len(prof.rows)
    if prof.backend == "npu" and prof.host_launches and prof.host_launches > n_records:
        flags.append(f"api_statistic counts {prof.host_launches} KernelLaunch calls but the kernel table has "
                     f"{n_records} rows: {prof.host_launches - n_records} launch(es) without a kernel record (profiler "
                     "buffer not drained?) - re-record if the iterations below are incomplete")
    # harness work inside the window
    hits, undecided = find_flushes(prof.rows, l2, prof.bandwidth_gbps)
    rows = list(prof.rows)
    dropped_flush = 0
    if hits:
        total = sum(prof.rows[i]["duration_ns"] or 0 for i in hits)
        kinds = sorted({h["kind"] for h in hits.values()})
        big = min(h["bytes"] for h in hits.values())
        how = sorted({h["bytes_source"] for h in hits.values()})
        text = (f"{len(hits)} L2-flush launch(es) ({'/'.join(kinds)} over buffers >= the L2 size "
                f"{l2 / MIB:.0f} MiB [{l2_src}], smallest {big / MIB:.0f} MiB from {how[0]}), {total / 1e3:.1f} us in "
                "total")
        if l2_flush == "exclude":
            rows = [x for i, x in enumerate(prof.rows) if i not in hits]
            dropped_flush = len(hits)
            flags.append(text + ": harness work, excluded from the operator's time (--l2-flush keep keeps them)")
        else:
            flags.append(text + ": kept in the operator's time (--l2-flush keep)")
        src["l2_flush_launches"] = len(hits)
        src["l2_flush_ns"] = total
    if undecided:
        flags.append(f"{len(undecided)} flush-like launch(es) (fill/zero/memset/cast/sum) kept in the operator's time: "
                     f"{undecided[0][1]} ({prof.rows[undecided[0][0]].get('name', '')[:60]}) - pass --l2-mib or "
                     "record shapes to decide")
    # iterations
    if prof.tagged:
        rows, head_flags = screen_head(rows)
        flags += head_flags
        n_tagged = max((x["iteration"] for x in rows if x.get("iteration") is not None), default=-1) + 1
        if w is None and r is None:
            w, r = 0, max(n_tagged, 1)
            flags.append(f"no --warmup/--repeats: all {n_tagged} iterations of the profile are measured")
        elif w is None or r is None:
            w = w if w is not None else max(n_tagged - r, 0)
            r = r if r is not None else max(n_tagged - w, 1)
        problems += _lost_problems(prof.lost_by_iter, w, w + r)
        src.update(expected=w + r)
    else:
        harness_n = sum(1 for x in rows if _kernels.is_harness(x.get("name")))
        dropped_flush += harness_n
        expected = (w or 0) + r if r is not None else None
        tagged, info = delimit_by_sequence([x for x in rows if not _kernels.is_harness(x.get("name"))], expected,
                                           prof.timestamps)
        rows = tagged
        flags += info["flags"]
        problems += info["problems"]
        src.update(period=info.get("period"), found=info.get("found"), expected=expected, head=info.get("head"),
                   partial=info.get("partial"), autotune=info.get("autotune"))
        if r is None:
            w, r = (w or 0), max(info.get("found") or 1, 1) - (w or 0)
            if r < 1:
                problems.append(f"--warmup {w} leaves no measured iteration of the {info.get('found')} found")
            flags.append(f"no --repeats: all {info.get('found')} iterations found are used (warmup {w})")
        if prof.lost_launches:
            problems.append(f"{prof.lost_launches} kernel launch(es) recorded on the host have no kernel record: "
                            "profiler buffer not drained - re-record the profile (retry), synchronizing the device "
                            "before the profiler stops")
    rows, w2, r2 = renumber(rows, w, r)
    src.update(warmup=w, repeats=r, warmup_used=w2, repeats_used=r2)
    if r2 < r and r2 > 0 and not problems:
        flags.append(f"measured from {r2} of {r} iterations (the others are missing or left out, see above)")
    if r2 == 0 and not problems:
        problems.append(f"no complete measured iteration in the profile ({w2} warmup iteration(s) only) - record more "
                        "iterations or lower --warmup")
    summary = _kernels.summarize(rows, w2, max(r2, 1), extra_problems=problems)
    summary["harness_launches_dropped"] = summary.get("harness_launches_dropped", 0) + dropped_flush
    if not prof.timestamps and summary.get("status") == "ok":
        summary.update(span_ns=None, launch_overhead_ns=None, iter_span_ns=None)
        flags.append("ncu records no timestamps (it serializes and replays launches): span and launch overhead are "
                     "not available")
    res["summary"] = summary
    res["flags"] = flags + list(summary.get("flags", []))
    if summary["status"] == "no_kernels":
        res.update(status="no_kernels", error=f"{prof.path}: " + "; ".join(summary["problems"]))
    elif summary["status"] != "ok":
        res.update(status="incomplete", error=f"{prof.path}: profile incomplete, not reported as a time: "
                   + "; ".join(summary["problems"][:3]))
    res["wall_s"] = {"parse": time.perf_counter() - t0}
    return res


def _lost_problems(lost_by_iter, warmup, n):
    lost = {int(k): v for k, v in (lost_by_iter or {}).items() if warmup <= int(k) < n and v}
    if not lost:
        return []
    return [f"{sum(lost.values())} kernel launch(es) in measured iterations {sorted(lost)} have no kernel record: "
            "profiler buffer not drained - re-record the profile (retry)"]


# ------------------------------------------------------------------------------------------------ the run


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


def from_prof(opts: FromProfOptions, log=None) -> dict:
    """Re-parse the profiles of ``opts.paths`` and write ``<output_dir>/performance.json`` (returned).

    Raises UserError for bad options, unreadable or unrecognised paths, profiles of different backends, a case
    claimed twice, or (inside a work directory) a foreign profile without ``--cases`` / a case id not in the case
    file."""
    from mfulib.schemas import performance_json as _perf
    from mfulib.collect.driver import case_flops, load_flops, resolve_peak, tracer_flops
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
    found = [entry for p in opts.paths for entry in discover(p)]
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
    ff = load_flops(opdir) if opdir is not None else None
    tracer = tracer_flops(opdir) if opdir is not None else {}
    results, infos = {}, {}
    for p in profs:
        res = analyse(p, opts.warmup, opts.repeats, opts.l2_flush, opts.l2_mib * MIB if opts.l2_mib else None)
        results.setdefault(p.case_id, {})[p.impl] = res
        if p.case_id not in infos:
            infos[p.case_id] = opdir.describe(p.case_id) if opdir is not None else CaseInfo(case_id=p.case_id)
        log(f"case {p.case_id} {p.impl}: {res['status']} ({p.fmt}: {p.path})")
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
            fl = case_flops(ff, opdir, infos[cid], opts.seed)
            fl["flops_tracer"] = tracer.get(cid)
        tf32 = (backends[0] == "cuda" and (fl.get("compute_dtype") or infos[cid].compute_dtype) == "float32"
                and os.environ.get("TRITON_F32_DEFAULT", "tf32") != "ieee")
        entry = _perf.case_entry(infos[cid], results[cid], fl, nominal, tf32,
                                 nominal_by_mode=peak["nominal_tflops"] if opts.mfu else None)
        entry["from_profile"] = {impl: res.get("from_profile") for impl, res in results[cid].items()}
        per_case.append(entry)
    flags = []
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
                      "l2_mib": opts.l2_mib, "profiles": [{"case": p.case_id, "impl": p.impl, "format": p.fmt,
                                                           "path": p.path} for p in profs]},
        "wall_s": time.perf_counter() - t_start,
    }
    header = provenance(_perf.TOOL, _perf.SCHEMA, device=device)
    report = _perf.build_report(header, run, per_case, impls)
    _perf.write_performance_json(output_dir, report)
    return report
