"""NPU profiles as :class:`~mfulib.collect.from_prof.profile.Profile`: a msprof ``PROF_*`` / torch_npu
``*_ascend_pt`` directory (:func:`load_msprof`) or one op_summary / task_time / kernel_details CSV file
(:func:`load_msprof_csv`); each launch gets its configuration (Block Dim, Mix Block Dim) and the bytes of its
largest tensor (for the L2-flush rule)."""
from __future__ import annotations

import glob
import math
import os

from mfulib.profiles import kernels as _kernels
from mfulib.profiles import msprof as _msprof
from mfulib.profiles import msprof_csv as _csv
from mfulib.core.nominal_peaks import NPU_L2_BY_FREQ
from mfulib.collect.from_prof.profile import Profile

NPU_DTYPE_BYTES = {"FLOAT": 4, "FLOAT32": 4, "FLOAT16": 2, "DT_BF16": 2, "BF16": 2, "BFLOAT16": 2, "INT8": 1,
                   "UINT8": 1, "BOOL": 1, "INT16": 2, "UINT16": 2, "INT32": 4, "UINT32": 4, "INT64": 8, "UINT64": 8,
                   "DOUBLE": 8, "DT_HIFLOAT8": 1, "DT_FLOAT8_E5M2": 1, "DT_FLOAT8_E4M3FN": 1}




def npu_tensor_bytes(row):
    """Bytes of the largest tensor of an msprof row (Input/Output Shapes x Data Types), or None when unknown."""
    best = None
    for shapes_key, dtypes_key in (("input_shapes", "input_dtypes"), ("output_shapes", "output_dtypes")):
        shapes = _csv.parse_shapes(row.get(shapes_key))
        dtypes = [d.strip().upper() for d in (row.get(dtypes_key) or "").split(";")]
        for i, dims in enumerate(shapes or []):
            size = NPU_DTYPE_BYTES.get(dtypes[i] if i < len(dtypes) else "")
            if dims is None or size is None:
                continue
            b = math.prod(int(d) for d in dims) * size
            best = b if best is None else max(best, b)
    return best



def load_msprof(root, n_iters=None) -> Profile:
    """A PROF_* / *_ascend_pt directory (or a kept attempt's ``msprof/``) as a :class:`Profile`."""
    rows, meta = _msprof.load_kernel_rows(root)
    timing = {"op_summary": "msprof.op_summary.Task_Duration", "old_op_summary": "msprof.op_summary.Task_Duration",
              "task_time": "msprof.quick.Task_Duration",
              "kernel_details": "torch_npu.kernel_details.Duration"}[meta["kind"]]
    for r in rows:
        r["config"] = (r.get("block_dim"), r.get("mix_block_dim"))
        r["device"], r["stream"] = r.get("device_id"), r.get("stream_id")
        r["bytes"] = npu_tensor_bytes(r)
        r["bytes_source"] = "Input/Output Shapes x Data Types" if r["bytes"] is not None else None
    prof = Profile(path=os.path.abspath(root), fmt="torch_npu" if meta["kind"] == "kernel_details" else "msprof",
                   backend="npu", rows=rows, timing_method=timing, runtime=_msprof.read_info_json(root))
    prof.extra["kernel_table"] = meta["files"]
    if meta["ignored"]:
        prof.flags.append(f"passed over {len(meta['ignored'])} stale/partial export(s): {meta['ignored'][0]}")
    prof.host_launches = _npu_kernel_launches(meta)
    prof.launches_counted_apart = True
    if any(r.get("name") == _kernels.MARKER_KERNEL for r in rows):
        n = n_iters if n_iters else sum(r.get("name") == _kernels.MARKER_KERNEL for r in rows) - 1
        tagged, info = _kernels.assign_by_markers(rows, n)
        prof.rows, prof.tagged, prof.delimiter = tagged, True, "this tool's marker kernels"
        prof.iterations_from = "marker_kernels"
        prof.problems += info["problems"]
        prof.flags += info["flags"]
    if prof.runtime:
        prof.device = {"backend": "npu", "runtime": prof.runtime}
        prof.l2_bytes = NPU_L2_BY_FREQ.get(prof.runtime.get("aic_frequency_mhz"))
        if prof.l2_bytes:
            prof.l2_source = (f"910B L2 for {prof.runtime.get('aic_frequency_mhz'):g} MHz AI cores "
                              f"({prof.runtime.get('info_json_path')}; docs/sources.md#l2-sizes)")
    return prof


def _npu_kernel_launches(meta):
    """``KernelLaunch`` calls counted by the api_statistic export beside the kernel table (None if absent)."""
    d = os.path.dirname(meta["files"][0]) if meta.get("files") else None
    if not d:
        return None
    cands = sorted(glob.glob(os.path.join(d, "api_statistic*.csv")), reverse=True)
    for path in cands:
        header, table = _csv.read_csv_table(path)
        if "API Name" not in header or "Count" not in header:
            continue
        i_name, i_count = header.index("API Name"), header.index("Count")
        total = 0
        for cells in table:
            if i_name < len(cells) and _csv.clean(cells[i_name]) == "KernelLaunch":
                total += int(_csv.to_number(cells[i_count]) or 0)
        return total
    return None


def load_msprof_csv(path) -> Profile:
    """One op_summary / task_time / kernel_details CSV file as a :class:`Profile`."""
    rows = [r for r in _csv.parse_kernel_csv(path) if not _msprof.is_marker_row(r)]
    rows.sort(key=lambda r: r.get("start_ns") or 0)
    for r in rows:
        r["config"] = (r.get("block_dim"), r.get("mix_block_dim"))
        r["device"], r["stream"] = r.get("device_id"), r.get("stream_id")
        r["bytes"] = npu_tensor_bytes(r)
        r["bytes_source"] = "Input/Output Shapes x Data Types" if r["bytes"] is not None else None
    timing = "torch_npu.kernel_details.Duration" if "kernel_details" in os.path.basename(path) else \
        ("msprof.quick.Task_Duration" if "task_time" in os.path.basename(path) else "msprof.op_summary.Task_Duration")
    return Profile(path=os.path.abspath(path), fmt="msprof_csv", backend="npu", rows=rows, timing_method=timing)

