"""PMU counters per kernel: the one set of canonical counter names, and the converters from msprof and ncu.

performance.json ``per_case[].pmu`` is ``{kernel_name: {counter: value}}`` with the names below (value None where
not measured, never 0), ``pmu_source`` says where they came from (``"ncu"`` | ``"msprof:<Group>[+<Group>]"``).
This module owns the names; the collector's backends (npu: :func:`from_msprof`; cuda: :func:`from_ncu_record`),
the classification (:mod:`mfulib.report.bound`), the roofline (:mod:`mfulib.report.roofline`) and the executed
matrix FLOPs (:mod:`mfulib.flops.executed`) read them from here.

CUDA (Nsight Compute; metric names as ncu spells them for Hopper/sm_90, :data:`NCU_METRIC_OF`):

* ``duration_ns`` (``gpu__time_duration.sum``), ``sm_throughput_pct`` (``sm__throughput.avg.pct_of_peak_sustained_
  elapsed``, ncu's "Compute (SM) Throughput"), ``memory_throughput_pct`` (``gpu__compute_memory_throughput...``,
  ncu's "Memory Throughput": the busiest of DRAM, L2, L1), ``dram_throughput_pct`` (``dram__throughput...``),
  ``tensor_pipe_pct`` (max of ``sm__pipe_tensor_op_hmma_cycles_active`` (mma.sync) and
  ``sm__pipe_tensor_op_gmma_cycles_active`` (Hopper warpgroup MMA), ``.avg.pct_of_peak_sustained_active``),
  ``tensor_inst_executed`` (max of ``sm__inst_executed_pipe_tensor_op_hmma.sum`` and ``..._gmma.sum``: warp-level
  instructions - on sm_90 the hmma count includes the warpgroup MMAs: the H200 gave hmma = gmma on all six
  pure-wgmma kernels of tests/fixtures/h200/pmu_mha_128x128.json, so a sum counted each wgmma twice),
  ``tensor_inst_executed_gmma``, ``achieved_occupancy_pct`` (``sm__warps_active.avg.pct_of_peak_
  sustained_active``), ``dram_bytes`` (``dram__bytes.sum``, converted from its unit to bytes), ``l2_hit_rate_pct``
  (``lts__t_sector_hit_rate.pct``), ``grid_size`` / ``block_size`` (``launch__grid_size`` / ``launch__block_size``:
  blocks and threads), ``shared_mem_dynamic_bytes`` (``launch__shared_mem_per_block_dynamic``, unit ``byte/block``:
  the dynamic shared memory a launch asked for - a Triton kernel's metadata ``shared``; the real H200 output in
  tests/fixtures/profiles/cuda gives 98304 for bmm_tile_kernel, static 0), ``waves_per_sm``
  (``launch__waves_per_multiprocessor``), ``sm_count`` (``launch__sm_count``), ``launches`` (profiled launches
  averaged). The real H200 output in tests/fixtures/profiles/cuda (ncu 2025.3.1)
  spells DRAM throughput ``dram__throughput...``; ``gpu__dram_throughput...`` and the SpeedOfLight section's display
  names ("Memory Throughput", "Compute (SM) Throughput", ...) are read as aliases.

NPU (msprof op_summary PMU columns, docs/sources.md#msprof-pmu; read by column name, ``N/A`` stays
None): ``aic_mac_ratio, aic_mte1_ratio, aic_mte2_ratio, aic_fixpipe_ratio, aic_scalar_ratio, aiv_vec_ratio,
aiv_mte2_ratio, aiv_mte3_ratio, aiv_scalar_ratio`` (PipeUtilization: fraction of the core's cycles the pipe was
busy), ``aic_cube_fops``, ``aiv_vector_fops`` (ArithmeticUtilization: executed floating-point operations),
``block_dim``, and every other PMU header by the rule of :func:`msprof_counter_name` (``(GB/s)`` -> ``_gbps``,
``(us)`` -> ``_us``, ``(%)`` -> ``_pct``), e.g. ``aic_main_mem_read_bw_gbps``; ``main_mem_bw_gbps`` is the sum of
the four main-memory (HBM) read/write bandwidths of the Memory group.
"""
from __future__ import annotations

import re

from mfulib.core.definitions import finite_or_none

# --------------------------------------------------------------------------------------------------- canonical names

NCU_COUNTERS = ("duration_ns", "sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "tensor_pipe_pct",
                "tensor_inst_executed", "tensor_inst_executed_gmma", "achieved_occupancy_pct", "dram_bytes",
                "l2_hit_rate_pct", "grid_size", "block_size", "shared_mem_dynamic_bytes", "waves_per_sm", "sm_count",
                "launches")
MSPROF_RATIOS = ("aic_mac_ratio", "aic_mte1_ratio", "aic_mte2_ratio", "aic_fixpipe_ratio", "aic_scalar_ratio",
                 "aiv_vec_ratio", "aiv_mte2_ratio", "aiv_mte3_ratio", "aiv_scalar_ratio")
MSPROF_COUNTERS = MSPROF_RATIOS + ("aic_cube_fops", "aiv_vector_fops", "block_dim", "main_mem_bw_gbps")
MAIN_MEM_BW = ("aic_main_mem_read_bw_gbps", "aic_main_mem_write_bw_gbps", "aiv_main_mem_read_bw_gbps",
               "aiv_main_mem_write_bw_gbps")  # Memory group, docs/sources.md#msprof-pmu

# ncu metric per canonical counter (Hopper names; verified against public ncu command lines and ncu's own
# SpeedOfLight section / SOLBottleneck rule, which reads sm__throughput and gpu__compute_memory_throughput)
NCU_METRIC_OF = {  # first name: the metric passed to --metrics; later names: aliases read when present (the
    # spelling of another ncu version, or the SpeedOfLight section's display name on the details page)
    "duration_ns": ("gpu__time_duration.sum", "Duration"),
    "sm_throughput_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "Compute (SM) Throughput"),
    "memory_throughput_pct": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "Memory Throughput"),
    "dram_throughput_pct": ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "DRAM Throughput"),
    "tensor_pipe_pct": ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"),
    "tensor_inst_executed": ("sm__inst_executed_pipe_tensor_op_hmma.sum", "sm__inst_executed_pipe_tensor_op_gmma.sum"),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active", "Achieved Occupancy"),
    "dram_bytes": ("dram__bytes.sum",),
    "l2_hit_rate_pct": ("lts__t_sector_hit_rate.pct", "L2 Hit Rate"),
    "grid_size": ("launch__grid_size", "Grid Size"),
    "block_size": ("launch__block_size", "Block Size"),
    "shared_mem_dynamic_bytes": ("launch__shared_mem_per_block_dynamic",),
    "waves_per_sm": ("launch__waves_per_multiprocessor", "Waves Per SM"),
    "sm_count": ("launch__sm_count", "# SMs"),
}
SUMMED = ("tensor_pipe_pct", "tensor_inst_executed")  # every name is a metric of its own (max / sum), no aliases
GMMA_METRICS = ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                "sm__inst_executed_pipe_tensor_op_gmma.sum")  # warpgroup MMA exists from sm_90 (Hopper) on
# what the collector passes to ``ncu --metrics`` (comma-joined); first spelling of each counter
NCU_METRICS = tuple(dict.fromkeys(m for key, names in NCU_METRIC_OF.items()
                                  for m in (names if key in SUMMED else names[:1])))

def ncu_metrics(cc_major: int | None = None) -> list:
    """The ``--metrics`` list for a GPU of compute capability ``cc_major`` (None = Hopper's list); the warpgroup
    MMA metrics (:data:`GMMA_METRICS`) are left out below sm_90, where ncu would refuse them as unknown."""
    if cc_major is not None and cc_major < 9:
        return [m for m in NCU_METRICS if m not in GMMA_METRICS]
    return list(NCU_METRICS)


# --------------------------------------------------------------------------------------------------- msprof


def msprof_counter_name(header: str) -> str:
    """Canonical name of an msprof PMU header: units to suffixes, e.g. ``aic_main_mem_read_bw(GB/s)`` ->
    ``aic_main_mem_read_bw_gbps``, ``aicore_time(us)`` -> ``aicore_time_us``, ``cube_utilization(%)`` ->
    ``cube_utilization_pct``; ratio/fops/cycle headers unchanged (lower-cased, spaces to ``_``)."""
    h = str(header).strip()
    for unit, suffix in (("(GB/s)", "_gbps"), ("(us)", "_us"), ("(%)", "_pct")):
        if h.endswith(unit):
            h = h[: -len(unit)] + suffix
    return re.sub(r"\s+", "_", h).lower()


def from_msprof(pmu_columns: dict, block_dim=None) -> dict:
    """Canonical counters of one msprof row: ``pmu_columns`` {header: number or None} (mfulib.profiles.msprof's row["pmu"],
    any metric group) and the row's ``block_dim`` (``Block Dim``/``Block Num``). Values that are not finite numbers
    (``N/A``) stay None; ``main_mem_bw_gbps`` is the sum of the main-memory bandwidths present (None if none)."""
    out = {}
    for header, v in (pmu_columns or {}).items():
        out[msprof_counter_name(header)] = finite_or_none(v)
    if block_dim is not None:
        out["block_dim"] = finite_or_none(block_dim)
    bws = [out[k] for k in MAIN_MEM_BW if out.get(k) is not None]
    if bws:
        out["main_mem_bw_gbps"] = float(sum(bws))
    return out


def normalise(counters: dict) -> dict:
    """Canonical counters from a per-kernel dict in any of the spellings performance.json files hold: canonical
    names pass through, raw ncu metric names (``--from-prof`` of an ncu CSV) go through :func:`from_ncu_record`
    (no unit column there: ``duration_ns`` and ``dram_bytes`` stay None unless given canonically), raw msprof
    headers through :func:`msprof_counter_name`."""
    c = dict(counters or {})
    ncu_names = {m for names in NCU_METRIC_OF.values() for m in names}
    raw_ncu = {k: v for k, v in c.items() if k in ncu_names}
    out = {}
    if raw_ncu:
        conv = from_ncu_record({"metrics": raw_ncu, "units": {}})
        out.update({k: v for k, v in conv.items()
                    if v is not None and k not in ("launches", "duration_ns", "dram_bytes")})  # units unknown here
    for k, v in c.items():
        if k in ncu_names:
            continue
        name = k if k in NCU_COUNTERS or k in MSPROF_COUNTERS else msprof_counter_name(k)
        out[name] = finite_or_none(v) if isinstance(v, (int, float)) else None
    if out.get("main_mem_bw_gbps") is None:
        bws = [out[k] for k in MAIN_MEM_BW if out.get(k) is not None]
        if bws:
            out["main_mem_bw_gbps"] = float(sum(bws))
    return out


def merge_counters(base: dict, extra: dict) -> dict:
    """``base`` with the counters of ``extra`` (another metric group's run) added where ``base`` has no value."""
    out = dict(base or {})
    for k, v in (extra or {}).items():
        if out.get(k) is None:
            out[k] = v
    return out


# --------------------------------------------------------------------------------------------------- ncu


def _metric(rec: dict, name: str):
    v = (rec.get("metrics") or {}).get(name)
    return finite_or_none(v) if isinstance(v, (int, float)) else None


def from_ncu_record(rec: dict) -> dict:
    """Canonical counters of one launch parsed by :func:`mfulib.profiles.ncu.parse_ncu_csv` (``{"metrics", "units", ...}``).

    ``duration_ns`` through :func:`mfulib.profiles.ncu.to_ns` and ``dram_bytes`` through :func:`mfulib.profiles.ncu.to_bytes` (from
    their unit column; without one, as ``--print-units base`` writes them: ns, bytes); ``tensor_pipe_pct`` = max of the hmma and gmma pipe metrics present; ``tensor_inst_executed``
    = max of the hmma and gmma instruction counts present (the hmma count includes gmma on sm_90); ``grid_size`` / ``block_size`` from the launch metrics,
    else from the row's ``Grid Size`` / ``Block Size`` columns (``(64, 8, 1)`` -> 512). A metric absent from the
    record gives None.
    """
    from mfulib.profiles.ncu import to_bytes, to_ns
    units = rec.get("units") or {}
    out = {k: None for k in NCU_COUNTERS if k != "launches"}
    for key, names in NCU_METRIC_OF.items():
        vals = [(n, _metric(rec, n)) for n in names]
        vals = [(n, v) for n, v in vals if v is not None]
        if not vals:
            continue
        unit = units.get(vals[0][0])
        if key == "duration_ns":  # no unit column: ncu --print-units base (ns, bytes)
            out[key] = to_ns(vals[0][1], unit) if unit else vals[0][1]
        elif key in ("dram_bytes", "shared_mem_dynamic_bytes"):  # "byte/block": a size per block
            out[key] = to_bytes(vals[0][1], unit.split("/")[0]) if unit else vals[0][1]
        elif key == "tensor_pipe_pct":
            out[key] = max(v for _, v in vals)
        elif key == "tensor_inst_executed":
            out[key] = float(max(v for _, v in vals))
            gm = [v for n, v in vals if "gmma" in n]
            out["tensor_inst_executed_gmma"] = gm[0] if gm else None
        else:
            out[key] = vals[0][1]
    for key, col in (("grid_size", "grid"), ("block_size", "block")):  # "(64, 8, 1)" columns of every ncu row
        dims = re.findall(r"\d+", str(rec.get(col) or ""))
        if out[key] is None and len(dims) == 3:
            out[key] = float(int(dims[0]) * int(dims[1]) * int(dims[2]))
    out["launches"] = 1
    return out


def average_launches(records: list) -> dict:
    """Mean of each counter over several launches of one kernel (canonical dicts); ``launches`` = their number."""
    out = {}
    for k in {k for r in records for k in r} - {"launches"}:
        vals = [r[k] for r in records if r.get(k) is not None]
        out[k] = float(sum(vals) / len(vals)) if vals else None
    out["launches"] = len(records)
    return out


def source_of(counters_by_kernel: dict) -> str | None:
    """``"ncu"`` or ``"msprof"`` from the counter names present (for performance.json files without
    ``pmu_source``); None when no canonical counter is present."""
    names = {k for c in (counters_by_kernel or {}).values() if isinstance(c, dict) for k in c}
    if names & set(NCU_COUNTERS) - {"launches"}:
        return "ncu"
    if names & set(MSPROF_COUNTERS):
        return "msprof"
    return None
