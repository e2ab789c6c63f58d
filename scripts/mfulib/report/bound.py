"""Which wall a kernel (or a part of the operator) runs into: tensor/cube, memory, vector, latency - from PMU counters.

Input: the canonical counters of :mod:`mfulib.profiles.pmu` for one kernel; a part or a case takes the class of the
kernels holding more than half its time, else ``mixed`` with the time shares (:func:`majority_bound`). Output (the ``bound`` object of mfu_decompose.json rows and parts): ``{"label",
"source", "evidence": {counter: value}, "note"}`` with ``label`` one of :data:`LABELS` and ``source``
``"pmu:ncu"`` | ``"pmu:msprof"`` | ``"fallback:fp32-vs-fp16"`` | None; a part's or case's bound adds
``"shares"`` {label: fraction of its kernel time}.

Thresholds are fixed from their sources (never tuned to a measurement):

* CUDA - Nsight Compute's own bottleneck rule (``sections/SOLBottleneck.py`` shipped with ncu, section
  SpeedOfLight): with SM throughput ``sm__throughput`` and memory throughput ``gpu__compute_memory_throughput`` in %
  of peak, either >= :data:`NCU_HIGH_PCT` (80) is "High Throughput" (the higher unit bounds the kernel); both <
  :data:`NCU_LATENCY_PCT` (60) is a "Latency Issue" ("Small Grid" when ``launch__waves_per_multiprocessor`` <
  :data:`NCU_WAVES_MIN` (1)); in between, a gap >= :data:`NCU_BALANCED_GAP_PCT` (10) points to the higher unit,
  else "Balanced Throughput". A compute-side bound is tensor-bound when the tensor pipe is itself high
  (``tensor_pipe_pct`` >= :data:`NCU_LATENCY_PCT`), else vector-bound (the FMA/ALU/LSU pipes, issue). Memory
  throughput must be ncu's ``gpu__compute_memory_throughput`` (busiest of L1, L2, DRAM): DRAM throughput alone is
  enough only to call a kernel memory-bound (>= 80%), never latency-bound (the kernel may be L1-bound).
* NPU - msprof-analyze advisor (``OperatorBoundChecker``: "none of mte, cube, vector, scalar ratio is more than
  80%" = no bound; ``Mte2BoundChecker``: "mte2 ratio is more than 80%"): a PipeUtilization ratio >=
  :data:`MSPROF_BOUND_RATIO` (0.8) bounds the kernel: ``aic_mac_ratio`` -> cube-bound; ``aic_mte2_ratio``,
  ``aiv_mte2_ratio``, ``aiv_mte3_ratio`` (GM <-> on-chip) -> memory-bound; ``aic_mte1_ratio`` / ``aic_fixpipe_ratio``
  (on-chip L1 -> L0, L0C -> out) -> memory-bound (on-chip); ``aiv_vec_ratio`` -> vector-bound; a scalar ratio ->
  latency-bound (control/address code, no data pipe is the wall). Every ratio < 0.8 -> latency-bound.
* Without counters SKILL.md's fp32-vs-fp16 comparison ("输出怎么读", item 3) is the fallback (:func:`fallback_bound`),
  labelled ``fallback:fp32-vs-fp16``; it never concludes tensor/cube-bound for MFU@ach below :data:`COMPUTE_ROOF_MIN`
  (0.60: the same 60% of peak under which Nsight Compute calls a kernel latency-limited, applied to the compute roof - a
  4%-MFU kernel is not compute-bound whatever its fp32/fp16 ratio).
"""
from __future__ import annotations

from mfulib.core.definitions import finite_or_none
from mfulib.core.fmt import pct

LABELS = ("tensor-bound", "cube-bound", "memory-bound", "vector-bound", "latency-bound", "mixed", "unknown")
MAJORITY_SHARE = 0.5  # a part/case takes a kernel class's label when that class holds more than half its time
NCU_HIGH_PCT = 80.0  # SOLBottleneck.py no_bound_threshold
NCU_LATENCY_PCT = 60.0  # SOLBottleneck.py latency_bound_threshold
NCU_BALANCED_GAP_PCT = 10.0  # SOLBottleneck.py balanced_threshold
NCU_WAVES_MIN = 1.0  # SOLBottleneck.py waves_threshold
MSPROF_BOUND_RATIO = 0.80  # msprof-analyze advisor OperatorBoundChecker / Mte2BoundChecker
COMPUTE_ROOF_MIN = 0.60  # MFU@ach below this is "far below the compute roof" (NCU_LATENCY_PCT as a fraction)

_NPU_PIPES = (("aic_mac_ratio", "cube-bound", ""), ("aic_mte2_ratio", "memory-bound", "GM -> L1 (mte2)"),
              ("aiv_mte2_ratio", "memory-bound", "GM -> UB (mte2)"), ("aiv_mte3_ratio", "memory-bound", "UB -> GM (mte3)"),
              ("aic_mte1_ratio", "memory-bound", "on-chip L1 -> L0 (mte1)"),
              ("aic_fixpipe_ratio", "memory-bound", "on-chip L0C -> out (fixpipe)"),
              ("aiv_vec_ratio", "vector-bound", ""), ("aic_scalar_ratio", "latency-bound", "scalar pipe (cube core)"),
              ("aiv_scalar_ratio", "latency-bound", "scalar pipe (vector core)"))
_NCU_EVIDENCE = ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "tensor_pipe_pct",
                 "achieved_occupancy_pct", "waves_per_sm", "grid_size", "block_size")


def _bound(label, source, evidence, note):
    return {"label": label, "source": source, "evidence": evidence, "note": note}


def classify(counters: dict, source: str | None) -> dict:
    """Bound of one kernel (or part) from canonical counters; ``source`` ``"ncu"`` or ``"msprof"`` (anything
    else: by the counter names present). No recognised counter -> label ``unknown``, source None."""
    c = counters or {}
    kind = (source or "").split(":")[0]
    if kind not in ("ncu", "msprof"):
        kind = "ncu" if c.get("sm_throughput_pct") is not None else (
            "msprof" if any(c.get(n) is not None for n, _, _ in _NPU_PIPES) else "")
    if kind == "ncu":
        return classify_ncu(c)
    if kind == "msprof":
        return classify_msprof(c)
    return _bound("unknown", None, {}, "no PMU counters for this kernel")


def classify_ncu(c: dict) -> dict:
    """Nsight Compute's SOLBottleneck rule on ``sm_throughput_pct`` / ``memory_throughput_pct`` (or
    ``dram_throughput_pct`` when the former is absent), refined by ``tensor_pipe_pct`` (module docstring)."""
    ev = {k: c.get(k) for k in _NCU_EVIDENCE if c.get(k) is not None}
    sm = finite_or_none(c.get("sm_throughput_pct"))
    mem = finite_or_none(c.get("memory_throughput_pct"))
    dram = finite_or_none(c.get("dram_throughput_pct"))
    if mem is None and dram is not None and dram >= NCU_HIGH_PCT:
        mem = dram  # DRAM alone is high: memory-bound whatever L1/L2 do
    if sm is None or mem is None:
        # DRAM alone cannot rule out an on-chip bound: the recorded H200 bmm_tile_kernel runs at DRAM 8%, SM 16%
        # and memory (L1) 85% - latency-bound by DRAM, memory-bound by ncu's own rule
        return _bound("unknown", "pmu:ncu", ev, "ncu gave no " + ("SM throughput" if sm is None else
                      "gpu__compute_memory_throughput (L1/L2/DRAM): DRAM throughput alone cannot rule out an "
                      "on-chip memory bound") + " for this kernel")
    tensor = finite_or_none(c.get("tensor_pipe_pct"))
    if mem > sm and dram is not None and dram < NCU_LATENCY_PCT <= mem:
        where = f"; on-chip memory (L1/L2), DRAM only {dram:.0f}%"
    else:
        where = ""

    def compute_side(why):
        if tensor is not None and tensor >= NCU_LATENCY_PCT:
            return _bound("tensor-bound", "pmu:ncu", ev, f"{why}; tensor pipe {tensor:.0f}% >= {NCU_LATENCY_PCT:.0f}%")
        t = "no tensor-pipe counter" if tensor is None else f"tensor pipe only {tensor:.0f}%"
        return _bound("vector-bound", "pmu:ncu", ev, f"{why}; {t}: the non-tensor SM pipes (FMA/ALU/LSU, issue) "
                                                      "are the wall")

    if max(sm, mem) >= NCU_HIGH_PCT:
        why = f"high throughput: SM {sm:.0f}%, memory {mem:.0f}% (>= {NCU_HIGH_PCT:.0f}%)"
        return _bound("memory-bound", "pmu:ncu", ev, why + where) if mem > sm else compute_side(why)
    if max(sm, mem) < NCU_LATENCY_PCT:
        waves = finite_or_none(c.get("waves_per_sm"))
        small = waves is not None and waves < NCU_WAVES_MIN
        why = (f"SM {sm:.0f}% and memory {mem:.0f}% both < {NCU_LATENCY_PCT:.0f}% of peak"
               + (f"; small grid: {waves:.2f} waves per SM < {NCU_WAVES_MIN:g}" if small else "")
               + (f"; achieved occupancy {c['achieved_occupancy_pct']:.0f}%"
                  if c.get("achieved_occupancy_pct") is not None else ""))
        return _bound("latency-bound", "pmu:ncu", ev, why)
    gap = abs(sm - mem)
    why = (f"SM {sm:.0f}% vs memory {mem:.0f}%: " + (f"gap >= {NCU_BALANCED_GAP_PCT:.0f} points" if
                                                     gap >= NCU_BALANCED_GAP_PCT else "balanced (gap < 10 points), "
                                                     "the higher one named"))
    return _bound("memory-bound", "pmu:ncu", ev, why + where) if mem > sm else compute_side(why)


def classify_msprof(c: dict) -> dict:
    """msprof-analyze advisor's 80% rule on the PipeUtilization ratios (module docstring)."""
    present = [(n, finite_or_none(c.get(n)), lab, what) for n, lab, what in _NPU_PIPES
               if finite_or_none(c.get(n)) is not None]
    ev = {n: v for n, v, _, _ in present}
    for k in ("block_dim", "main_mem_bw_gbps"):
        if c.get(k) is not None:
            ev[k] = c[k]
    if not present:
        return _bound("unknown", "pmu:msprof", ev, "no PipeUtilization ratio (collect with --aic-metrics "
                                                   "PipeUtilization)")
    name, v, label, what = max(present, key=lambda p: p[1])
    if v >= MSPROF_BOUND_RATIO:
        return _bound(label, "pmu:msprof", ev, f"{name} = {v:.0%} >= {MSPROF_BOUND_RATIO:.0%}" +
                      (f" ({what})" if what else ""))
    bd = f"; block_dim {int(c['block_dim'])}" if c.get("block_dim") is not None else ""
    return _bound("latency-bound", "pmu:msprof", ev, f"no pipe >= {MSPROF_BOUND_RATIO:.0%} (busiest {name} = "
                                                     f"{v:.0%}): latency, synchronisation or too few blocks{bd}")


def majority_bound(kernel_bounds: list, empty_note: str = "no PMU counters for these kernels") -> dict:
    """Bound of a part or a case from its kernels' own bounds (ncu's rule is per kernel; averaged counters of a
    tensor-bound GEMM and a latency-bound attention kernel describe neither): ``kernel_bounds`` [(time_ns per
    iteration, bound of :func:`classify`)]. The label of the class whose kernels hold more than
    :data:`MAJORITY_SHARE` (50%) of the time, with the evidence of the longest kernel of that class; else
    ``mixed``. Either way ``shares`` {label: fraction of the time} (labels by falling share) and a note that quotes
    them. Kernels without time count for nothing; none with time gives ``unknown`` (``empty_note``)."""
    timed = [(float(t), b) for t, b in kernel_bounds if t and t > 0 and isinstance(b, dict)]
    total = sum(t for t, _ in timed)
    if not total:
        return dict(_bound("unknown", None, {}, empty_note), shares={})
    shares = {}
    for t, b in timed:
        shares[b["label"]] = shares.get(b["label"], 0.0) + t / total
    shares = dict(sorted(shares.items(), key=lambda kv: (-kv[1], kv[0])))
    quoted = ", ".join(f"{lab} {share:.0%}" for lab, share in shares.items())
    top, top_share = next(iter(shares.items()))
    sources = sorted({b.get("source") for _, b in timed if b.get("source")})
    source = sources[0] if len(sources) == 1 else ("+".join(sources) or None)
    if top_share > MAJORITY_SHARE:
        t, lead = max(((t, b) for t, b in timed if b["label"] == top), key=lambda tb: tb[0])
        return dict(_bound(top, source, dict(lead.get("evidence") or {}),
                           f"{lead.get('note')} - {top} kernels hold {top_share:.0%} of the time (time shares: "
                           f"{quoted})"), shares=shares)
    return dict(_bound("mixed", source, {}, f"no class holds more than {MAJORITY_SHARE:.0%} of the time: {quoted}"),
                shares=shares)


def fallback_bound(ratio, expect, mfu_ach, cube_word: str = "tensor") -> dict:
    """SKILL.md's fp32-vs-fp16 comparison as a bound (no counters; docs/sources.md#npu-fp32-ratio). ``ratio`` =
    fp32 / fp16 TFLOP/s of the part, ``expect`` = the peak ratio, ``mfu_ach`` = the part's (fp16/bf16) MFU@ach. fp32
    falling about as far as the peak (within 2x) AND MFU@ach >= :data:`COMPUTE_ROOF_MIN` -> ``<cube_word>-bound``;
    falling as far but MFU@ach far below the roof -> ``unknown`` (noted); fp32 not falling (> 2x expected) -> the unit
    waits: ``unknown`` (memory, vector or scalar work bounds it, which this comparison cannot tell apart)."""
    src = "fallback:fp32-vs-fp16"
    ev = {"fp32_over_fp16": ratio, "peak_ratio": expect, "mfu_ach": mfu_ach}
    if ratio is None or expect is None:
        return _bound("unknown", src, ev, "no fp32/fp16 pair of this part")
    if ratio > 2 * expect:
        return _bound("unknown", src, ev, "fp32 did not drop with the peak: the cube/tensor unit is waiting (memory, "
                                          "vector or scalar work bounds it)")
    if ratio < expect / 2:
        return _bound("unknown", src, ev, "fp32 dropped much further than the peak: its fp32 path is less "
                                          "efficient (tiling, TF32/HF32 off, or different shapes)")
    if mfu_ach is None or mfu_ach < COMPUTE_ROOF_MIN:
        m = pct(mfu_ach, 1, dash="unknown")
        return _bound("unknown", src, ev, f"fp32 dropped about as far as the peak, but MFU@ach {m} is far below the "
                                          f"compute roof (< {COMPUTE_ROOF_MIN:.0%}): not compute-bound - latency, "
                                          "memory or launch overhead; collect PMU counters to tell")
    return _bound(f"{cube_word}-bound", src, ev, f"fp32 dropped about as far as the peak and MFU@ach {mfu_ach:.1%} "
                                                 f">= {COMPUTE_ROOF_MIN:.0%}")
