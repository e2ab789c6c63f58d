"""The shape search's numerator and figure of merit: min(traced, executed) FLOPs, and the MFU / MBU of one point.

DESIGN.md "FLOPs" (and the spec, step 2): the search runs before flops.py exists and takes the numerator from the
reference's tracer; where the hardware counts the matrix work it executed, the numerator is **min(traced,
executed)** - a dense reference over-counts sparse semantics, tile padding / masked work over-counts on the
hardware side, so the smaller is closer to the model FLOPs - and both values are recorded with ``num_src``.

Executed FLOPs per iteration, from performance.json ``per_case`` ``pmu`` {kernel: {counter: mean per launch}} and
``kernels`` [{name, launches_per_iter}] (counter names of COMMON.md's PMU contract, owned by mfulib/collect/pmu.py):

* NPU: sum over kernels of ``aic_cube_fops`` x launches per iteration (msprof ``--aic-metrics
  ArithmeticUtilization`` column ``aic_cube_fops``: floating-point operations the cube unit executed in the task;
  reference/ascend_msprof_facts.md §3.2);
* CUDA, compute capability 8.x: ``tensor_inst_executed`` (warp-level tensor-pipe instructions, Nsight Compute) x
  FLOPs of one ``mma.sync`` instruction of the shape Triton issues there (:data:`MMA_SYNC_FLOPS_PER_INST`:
  2*m*n*k of PTX ``mma.sync.aligned.m16n8k16`` for fp16/bf16, ``m16n8k8`` tf32, ``m16n8k32`` int8/fp8);
* CUDA, capability >= 9 (Hopper): a kernel that ran no warpgroup MMA (``tensor_inst_executed_gmma`` 0) counts as
  on 8.x. One that did is refused (executed None, ``num_src_why`` says why), because the FLOPs of one counted
  instruction depend on the MMA's N, which no counter gives. The rule, from the sources and checked against real
  H200 counters (tests/test_grid_search_pmu.py, tests/fixtures/h200/pmu_mha_128x128.json): a ``wgmma.mma_async`` instruction
  is issued by a warpgroup of 4 warps (PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"; CUTLASS
  "Warpgroup MMA Programming Guide") and has the shape m64nNk16 for 16-bit inputs (k8 tf32, k32 8-bit; N = 8..256 in
  steps of 8); ``sm__inst_executed_pipe_tensor_op_gmma`` counts warp-level instructions (Nsight Compute's
  ``inst_executed`` metrics count per warp), i.e. 4 per wgmma, so one counted instruction is 2*64*N*k/4 FLOPs
  (:func:`wgmma_flops_per_counted_inst`: 512*N for 16-bit). The MHA block's matmul_kernel (128x128x64 tile, 8
  warps: m64n128k16) gives exactly 65536 = 512*128 traced FLOPs per counted instruction; its flash kernel issues
  m64n64k16 (q k^T) and m64n128k16 (p v) in one kernel, so no single factor exists. On sm_90 the hmma instruction
  count includes the gmma ones (equal in every H200 kernel measured), so the collector's ``tensor_inst_executed``
  (hmma + gmma) counts each wgmma twice there and is not used for them. Nsight Compute's own tensor roofline uses a
  fixed 512 per instruction (reference/peers_and_anchors.md), right only for N = 1;
* otherwise (cpu, counters not collected or refused: ``pmu_unavailable``) there is no executed count: ``num_src``
  is ``tracer`` and ``num_src_why`` says why.

Operators without matrix work have MBU as their figure: bytes moved = input bytes + output bytes (each input read
once, each output written once: the compulsory traffic), over the kernel time and the measured (else nominal)
memory bandwidth; :func:`mfulib.core.definitions.mbu`.
"""
from __future__ import annotations

from mfulib.core.definitions import actual_tflops, is_positive, mbu as mbu_of, mfu as mfu_of

# 2*m*n*k of the mma.sync shape per math mode (PTX ISA, "Matrix Shape" of mma.sync; Triton's MMAv2 lowering on
# sm_80-sm_89 issues m16n8k16 for fp16/bf16, m16n8k8 for tf32, m16n8k32 for 8-bit types)
MMA_SYNC_FLOPS_PER_INST = {"float16": 2 * 16 * 8 * 16, "bfloat16": 2 * 16 * 8 * 16, "tf32": 2 * 16 * 8 * 8,
                           "int8": 2 * 16 * 8 * 32, "float8_e4m3fn": 2 * 16 * 8 * 32}
# k of the warpgroup MMA shape m64nNk per math mode (PTX ISA, wgmma "Matrix Shape": .f16/.bf16 k16, .tf32 k8,
# .e4m3/.e5m2/.s8 k32); the M of one wgmma is 64, issued by 4 warps, each counted once by ncu
WGMMA_K = {"float16": 16, "bfloat16": 16, "tf32": 8, "int8": 32, "float8_e4m3fn": 32}
WGMMA_M, WARPS_PER_WARPGROUP = 64, 4
NPU_COUNTER = "aic_cube_fops"
CUDA_COUNTER = "tensor_inst_executed"
GMMA_COUNTER = "tensor_inst_executed_gmma"


def _counter_sum(entry: dict, counter: str, factor: float = 1.0, absent_is_zero: bool = False):
    """(sum over the iteration's kernels of counter x launches x factor, None) or (None, why).

    A kernel without any counter, or with the counter None, was not measured: no sum. ``absent_is_zero``: a kernel
    whose counters were read but lack this column counts 0 (msprof writes N/A in the cube columns of a vector-only
    task, which the parser drops)."""
    pmu = entry.get("pmu") or {}
    kernels = entry.get("kernels") or []
    if not pmu:
        return None, f"no PMU counters in the collection ({counter} not measured)"
    if not kernels:
        return None, "the collection lists no kernels for this case"
    total = 0.0
    for k in kernels:
        counters = pmu.get(k.get("name"))
        v = (counters or {}).get(counter)
        if v is None and absent_is_zero and counters and counter not in counters:
            v = 0.0
        if v is None:
            return None, f"{counter} was not measured for kernel {k.get('name')!r}"
        total += float(v) * float(k.get("launches_per_iter") or 1) * factor
    return total, None


def wgmma_flops_per_counted_inst(n: int, mode: str):
    """FLOPs of one instruction counted by ``sm__inst_executed_pipe_tensor_op_gmma`` for a wgmma of N ``n`` in math
    mode ``mode``: 2 * 64 * n * k / 4 (module docstring; 512 * n for fp16/bf16); None for a mode without a wgmma
    shape here."""
    k = WGMMA_K.get(mode)
    return None if k is None else 2 * WGMMA_M * int(n) * k // WARPS_PER_WARPGROUP


def _gmma_refusal(entry: dict, capability, mode):
    """None when no kernel of ``entry`` ran warpgroup MMA instructions (sm_90+), else why executed FLOPs are
    unknown (the missing gmma count is a refusal too: hmma alone cannot be split from it)."""
    pmu = entry.get("pmu") or {}
    for k in entry.get("kernels") or []:
        c = pmu.get(k.get("name")) or {}
        if c.get(CUDA_COUNTER) is None:
            continue  # unmeasured: _counter_sum says so
        gmma = c.get(GMMA_COUNTER)
        per_n = wgmma_flops_per_counted_inst(1, mode)
        factor = f"{per_n}*N" if per_n else "2*64*N*k/4"
        if gmma is None:
            return (f"compute capability {capability}: kernel {k.get('name')!r} has no {GMMA_COUNTER} count, so its "
                    f"warpgroup MMA (wgmma) instructions (FLOPs {factor} each) cannot be told from mma.sync ones")
        if gmma > 0:
            return (f"compute capability {capability}: kernel {k.get('name')!r} ran {gmma:.6g} warpgroup MMA "
                    f"(wgmma) instructions (ncu counts a wgmma m64nNk once per warp of its warpgroup: {factor} "
                    f"FLOPs per counted instruction) and the N the compiler chose (8..256, possibly several per "
                    f"kernel) is in no counter, so executed FLOPs are unknown")
    return None


def executed_flops(entry: dict, backend: str, capability=None, mode=None):
    """(executed matrix FLOPs per iteration, source, why not) of one performance.json ``per_case`` entry.

    ``backend``: npu | cuda | cpu; ``capability``: the CUDA compute capability ``"9.0"``; ``mode``: the case's
    peak key (:func:`mfulib.core.definitions.peak_key`). The value is None (and ``why`` says why) where the hardware gave
    no usable count; never raises."""
    if entry.get("pmu_unavailable"):
        return None, None, f"counters unavailable: {entry['pmu_unavailable']}"
    if backend == "npu":
        v, why = _counter_sum(entry, NPU_COUNTER, absent_is_zero=True)
        if v is None:
            why += " - collect with --aic-metrics ArithmeticUtilization"
        return v, f"hardware:{NPU_COUNTER}" if v is not None else None, why
    if backend == "cuda":
        try:
            major = int(str(capability).split(".")[0])
        except (TypeError, ValueError):
            return None, None, f"unknown compute capability {capability!r}: FLOPs per tensor instruction unknown"
        refused = _gmma_refusal(entry, capability, mode) if major >= 9 else None
        if refused:
            return None, None, refused
        per = MMA_SYNC_FLOPS_PER_INST.get(mode)
        if per is None:
            return None, None, f"no mma.sync shape known for math mode {mode!r}"
        v, why = _counter_sum(entry, CUDA_COUNTER, per)
        return v, f"hardware:{CUDA_COUNTER}" if v is not None else None, why
    return None, None, f"backend {backend}: no hardware FLOP counter"


def numerator(traced, executed, executed_src, why_no_executed) -> dict:
    """{numerator, num_src, num_src_why, numerator_traced, numerator_executed} by the rule min(traced, executed)
    (module docstring); the tracer's value alone where there is no executed count, and the executed count alone
    where the tracer gave none. ``numerator`` None when neither exists."""
    out = {"numerator_traced": traced, "numerator_executed": executed}
    t_ok, e_ok = traced is not None and traced >= 0, executed is not None and executed >= 0
    if t_ok and e_ok:
        take_traced = traced <= executed
        out.update(numerator=min(traced, executed), num_src="tracer" if take_traced else executed_src,
                   num_src_why=f"min(traced {traced:.6g}, executed {executed:.6g}): the "
                               f"{'tracer' if take_traced else 'hardware'} count is the smaller")
        if executed == 0 and traced > 0:
            out["num_src_why"] += " (the hardware counted no matrix work at all: check the counter and the kernel)"
    elif t_ok:
        out.update(numerator=traced, num_src="tracer", num_src_why=f"no executed count: {why_no_executed}")
    elif e_ok:
        out.update(numerator=executed, num_src=executed_src, num_src_why="the tracer gave no count for this case")
    else:
        out.update(numerator=None, num_src=None, num_src_why=f"no count: tracer none; {why_no_executed}")
    return out


def point_figures(numerator_flops, bytes_moved, kernel_time_ns, peak_nom, peak_ach, bandwidth_gbps) -> dict:
    """{actual_tflops, mfu_nom, mfu_ach, achieved_gbps, mbu} of one measured point (None where an input is missing);
    definitions from :mod:`mfulib.core.definitions` (actual_tflops = FLOPs / ns / 1e3; GB/s = bytes per ns)."""
    ok_t = is_positive(kernel_time_ns)
    tflops = actual_tflops(numerator_flops, kernel_time_ns) if ok_t and numerator_flops else None
    gbps = bytes_moved / kernel_time_ns if ok_t and bytes_moved else None
    return {"actual_tflops": tflops, "mfu_nom": mfu_of(tflops, peak_nom), "mfu_ach": mfu_of(tflops, peak_ach),
            "achieved_gbps": gbps, "mbu": mbu_of(bytes_moved, kernel_time_ns, bandwidth_gbps) if ok_t else None}


def common_figure(rows: list, metric: str) -> tuple:
    """(field, kind) every row with a value can be ranked by: for ``mfu`` ``mfu_ach`` when every row has it, else
    ``mfu_nom``, else ``actual_tflops`` (kind ach | nom | None); for ``mbu`` ``mbu``, else ``achieved_gbps``."""
    ok = [r for r in rows if r.get("status") == "ok"]
    choices = ((("mfu_ach", "ach"), ("mfu_nom", "nom"), ("actual_tflops", None)) if metric == "mfu"
               else (("mbu", "measured"), ("achieved_gbps", None)))
    for fld, kind in choices:
        if ok and all(r.get(fld) is not None for r in ok):
            return fld, kind
    return choices[-1]
