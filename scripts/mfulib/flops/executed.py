"""Executed matrix FLOPs from hardware counters: the one definition, with the one per-instruction table.

Executed FLOPs are the **matrix work only** the hardware says it ran (cube / tensor-core instructions, each at its
instruction shape and math mode; vector work is never added), so they compare with the traced FLOPs of the
numerator rule min(traced, executed) (``docs/ARCHITECTURE.md``; :func:`mfulib.search.numerator.numerator` records
the choice in ``num_src``). Counter names are those of :mod:`mfulib.profiles.pmu`. Two callers: the shape search's
numerator (:func:`executed_flops`, per iteration of a performance.json ``per_case`` entry) and the decompose PMU
view (:func:`kernel_flops`, per launch of one kernel).

CUDA (Nsight Compute ``tensor_inst_executed`` = ``sm__inst_executed_pipe_tensor_op_hmma.sum``, warp-level
instructions, Nsight Compute Kernel Profiling Guide "Metrics Decoder": ``inst_executed`` counts per warp):

* compute capability 8.x: each counted instruction is one warp-level ``mma.sync`` of the shape Triton's MMAv2
  lowering issues for the math mode, 2*m*n*k FLOPs each (:data:`MMA_SYNC_FLOPS_PER_INST`; PTX ISA, "Warp-level
  Matrix Multiply-Accumulate Instructions", "Matrix shape": ``mma.sync.aligned.m16n8k16`` for .f16/.bf16,
  ``m16n8k8`` for .tf32, ``m16n8k32`` for .s8/.e4m3);
* capability >= 9 (Hopper): a kernel that ran no warpgroup MMA (``tensor_inst_executed_gmma`` 0) counts as on 8.x.
  One that did needs the shape: a ``wgmma.mma_async`` is m64nNkK (PTX ISA, "Asynchronous Warpgroup Level Matrix
  Multiply-Accumulate", "Matrix shape": K 16 for .f16/.bf16, 8 .tf32, 32 8-bit; N = 8..256 in steps of 8) and is
  issued by a warpgroup of 4 warps (PTX ISA "Warpgroup"; NVIDIA Hopper Tuning Guide), so ncu counts it 4 times,
  2*64*N*K/4 FLOPs per counted instruction (:func:`wgmma_flops_per_counted_inst`: 512*N for 16-bit, 256*N tf32,
  1024*N 8-bit). No counter reports N: it is read from the compiled kernel the launch ran - the PTX of the Triton
  cache variant with the launch's name, threads and dynamic shared memory (performance.json ``mma_shapes``,
  :mod:`mfulib.profiles.triton_ptx`). Several matching variants with different instructions are told apart by
  the case's math mode: a variant whose MMA instructions all take another input type (``bf16`` for a float16 case:
  a bf16 and an fp16 compile of one kernel share warps and shared memory) cannot be the one that ran
  (:func:`variants_for_mode`). The count is refused (None, with why) when no variant matches or several with
  different instructions remain, when the PTX names several wgmma shapes (the counter does not split by shape,
  and the PTX's static instruction counts are not executed counts: the K loop's trip count, predication and
  software pipelining decide those, so they are not apportioned), when the PTX's K disagrees with this table for
  its input type, for sparse wgmma (``.sp``), and when ``tensor_inst_executed`` exceeds the gmma count (mma.sync
  instructions ran too: on sm_90 the hmma count includes the gmma ones - equal on every real H200 kernel of
  tests/fixtures/h200/pmu_mha_128x128.json - and the remainder's shape is not split out). A missing gmma count
  is a refusal too, and so is a gmma count of 0 where the launched variant names wgmma (the count and the compiled
  kernel disagree). So where the identified variant names several shapes (or a sparse or off-table one) every
  counter value is refused: :func:`settled_without_counts` knows it before any count.

Ascend NPU: msprof's ``aic_cube_fops`` (``--aic-metrics ArithmeticUtilization``) is documented only as the cube
unit's floating-point operations; no public source found says whether it counts FLOPs or MACs, per task or per
core, or how it treats padded fractal tiles, so it cannot be compared with traced FLOPs. NPU executed FLOPs are
therefore not used (None, with :data:`NPU_WHY`), and the numerator is the tracer's.
"""
from __future__ import annotations

import json

from mfulib.core.definitions import canonical_mode, finite_or_none
from mfulib.core.errors import UserError

CUDA_COUNTER = "tensor_inst_executed"
GMMA_COUNTER = "tensor_inst_executed_gmma"
# 2*m*n*k of the mma.sync shape per math mode (PTX ISA "Matrix shape" of mma.sync; module docstring)
MMA_SYNC_FLOPS_PER_INST = {"float16": 2 * 16 * 8 * 16, "bfloat16": 2 * 16 * 8 * 16, "tf32": 2 * 16 * 8 * 8,
                           "int8": 2 * 16 * 8 * 32, "float8_e4m3fn": 2 * 16 * 8 * 32}
# k of the warpgroup MMA shape m64nNk per math mode (PTX ISA wgmma "Matrix shape"); M is 64, 4 warps issue it
WGMMA_K = {"float16": 16, "bfloat16": 16, "tf32": 8, "int8": 32, "float8_e4m3fn": 32}
WGMMA_M, WARPS_PER_WARPGROUP = 64, 4
PTX_INT8_TYPES = ("s8", "u8")  # wgmma integer input types (PTX ISA); the others are dtype spellings of core.definitions
SHAPES_FIELD = "mma_shapes"  # performance.json per_case[] field: {kernel: compiled-variant record}
NPU_WHY = ("npu: msprof aic_cube_fops is not used - no public source found defines what it counts (FLOPs or MACs, "
           "per task or per core, padded fractal tiles or not), so it cannot be compared with traced FLOPs")


def wgmma_flops_per_counted_inst(n: int, mode: str):
    """FLOPs of one instruction counted by ``sm__inst_executed_pipe_tensor_op_gmma`` for a wgmma of N ``n`` in math
    mode ``mode``: 2 * 64 * n * k / 4 (module docstring; 512 * n for fp16/bf16); None for a mode without a wgmma
    shape here."""
    k = WGMMA_K.get(mode)
    return None if k is None else 2 * WGMMA_M * int(n) * k // WARPS_PER_WARPGROUP


def _no_counter(backend: str):
    """Why ``backend`` gives no usable executed-FLOPs count (None: it does - its matrix counter is documented)."""
    from mfulib.backends import backend_class
    try:
        cls = backend_class(backend)
    except UserError:  # never raises: an unknown (or unloadable plug-in) backend simply has no counter
        return f"backend {backend}: no hardware FLOP counter"
    if cls.matrix_counter is None:
        return f"backend {backend}: no hardware FLOP counter"
    if not cls.matrix_counter_documented:
        return NPU_WHY
    return None


def _major(capability):
    try:
        return int(str(capability).split(".")[0])
    except (TypeError, ValueError):
        return None


def ptx_input_mode(types: str):
    """The math mode (:func:`mfulib.core.definitions.canonical_mode` key) of an MMA instruction's types
    ``dtype.atype.btype[...]`` (:func:`mfulib.profiles.triton_ptx.ptx_mma_shapes`): its input type ``atype``,
    ``f16`` -> float16, ``bf16`` -> bfloat16, ``tf32`` -> tf32, ``s8`` / ``u8`` -> int8; None without one."""
    parts = str(types or "").split(".")
    atype = parts[1] if len(parts) > 1 else ""
    return "int8" if atype in PTX_INT8_TYPES else canonical_mode(atype) if atype else None


def variants_for_mode(variants, mode) -> tuple:
    """``(kept, ruled out)`` of compiled variants (:func:`mfulib.profiles.triton_ptx.compiled_variants` entries) for
    a case of math mode ``mode``: a variant whose wgmma / mma.sync instructions all take another input type than
    ``mode`` (:func:`ptx_input_mode`) cannot be the one that ran; a variant without MMA instructions, or any variant
    when ``mode`` is None, is kept."""
    want = canonical_mode(mode) if mode else None
    kept, out = [], []
    for v in variants or []:
        modes = {ptx_input_mode(w.get("types")) for w in (v.get("wgmma") or []) + (v.get("mma_sync") or [])}
        (out if want and modes and want not in modes else kept).append(v)
    return kept, out


def _forms(variants):
    return sorted({(w["m"], w["n"], w["k"], w["types"], bool(w.get("sparse"))) for v in variants
                   for w in v.get("wgmma") or []})


def _all_forms(v):
    return sorted(f"{w['shape']}.{w['types']}" for w in (v.get("wgmma") or []) + (v.get("mma_sync") or []))


def _launched_variants(record, mode=None) -> tuple:
    """(variants, narrowed note, None) of the compiled variant(s) a kernel's record identifies as the one that ran, or
    (None, "", why not): a ``found`` record's variants, an ``ambiguous`` one's narrowed by the math mode ``mode``
    (:func:`variants_for_mode`) to variants of one instruction set."""
    if not isinstance(record, dict):
        return None, "", "no compiled-kernel record (performance.json mma_shapes) to read the wgmma N from"
    variants, narrowed = record.get("variants") or [], ""
    if record.get("status") == "ambiguous" and mode and variants:
        kept, out = variants_for_mode(variants, mode)
        if kept and out and len({json.dumps(_all_forms(v)) for v in kept}) == 1:
            narrowed = (f"; {len(out)} of the {len(variants)} matching variants ruled out by the case's math mode "
                        f"{mode} ({', '.join(sorted({f for v in out for f in _all_forms(v)}))})")
            variants = kept
        elif not kept:
            return None, "", (f"compiled kernel not identified: {record.get('why')}; none of them takes the case's "
                              f"math mode {mode}")
    if record.get("status") != "found" and not narrowed:
        return None, "", f"compiled kernel not identified: {record.get('why') or record.get('status')}"
    return variants, narrowed, None


def _shape_refusal(variants) -> str | None:
    """Why the wgmma instructions of identified ``variants`` give no FLOPs per counted instruction whatever the
    counters say (several shapes, sparse, a shape outside the table); None when one usable shape (or none) is named."""
    forms = _forms(variants)
    sha = ", ".join(sorted({str(v.get("ptx_sha256", "?"))[:12] for v in variants}))
    if len(forms) > 1:
        shown = ", ".join(f"m{m}n{n}k{k}.{t}" for m, n, k, t, _ in forms)
        counts = {f"m{w['m']}n{w['n']}k{w['k']}": w.get("static_count") for v in variants for w in v["wgmma"]}
        return (f"the PTX (sha256 {sha}) names several wgmma shapes ({shown}; static counts {counts}) and the "
                "gmma counter does not split by shape; static counts are not executed counts (loop trip "
                "counts, predication, pipelining), so the count is not apportioned")
    if not forms:
        return None
    m, n, k, types, sparse = forms[0]
    if sparse:
        return f"sparse wgmma (.sp) m{m}n{n}k{k}.{types}: no FLOP convention for it here"
    ptx_mode = ptx_input_mode(types)  # f16 -> float16, ...
    if ptx_mode is None or m != WGMMA_M or WGMMA_K.get(ptx_mode) != k:
        return f"wgmma m{m}n{n}k{k}.{types} does not fit the shape table (m {WGMMA_M}, k by input type {WGMMA_K})"
    return None


def wgmma_from_compiled(record, mode=None) -> tuple:
    """(FLOPs per counted gmma instruction or None, how or why not) from one kernel's compiled-variant record
    (performance.json ``mma_shapes[kernel]``, :func:`mfulib.profiles.triton_ptx.launched_variant`): the variant's
    single wgmma shape and input type give N, K and the math mode (module docstring for every refusal). An
    ``ambiguous`` record is narrowed by the case's math mode ``mode`` (:func:`variants_for_mode`) first."""
    variants, narrowed, why = _launched_variants(record, mode)
    if variants is None:
        return None, why
    forms = _forms(variants)
    sha = ", ".join(sorted({str(v.get("ptx_sha256", "?"))[:12] for v in variants}))
    if not forms:
        return None, f"gmma instructions ran but the matched PTX (sha256 {sha}) names no wgmma.mma_async"
    refused = _shape_refusal(variants)
    if refused:
        return None, refused
    m, n, k, types, _sparse = forms[0]
    per = wgmma_flops_per_counted_inst(n, ptx_input_mode(types))
    return per, (f"wgmma m{m}n{n}k{k}.{types} (PTX sha256 {sha}): 2*{m}*{n}*{k}/{WARPS_PER_WARPGROUP} = {per} "
                 f"FLOPs{narrowed}")


def settled_without_counts(entry: dict, backend: str, capability=None, mode=None) -> str | None:
    """Why no hardware count can give ``entry``'s executed FLOPs, known from its compiled kernels alone (None: only a
    count can tell). ``entry``: a performance.json ``per_case`` entry of a run without counters whose ``mma_shapes``
    came from CUPTI's launch records (:func:`mfulib.profiles.triton_ptx.cupti_kernel_records`).

    On compute capability >= 9 a kernel whose identified compiled variant names several wgmma shapes, a sparse
    wgmma or a shape outside the table is refused by :func:`kernel_flops` for every counter value (a non-zero gmma
    count by its shape, a zero one as disagreeing with the PTX, a missing one as missing), and one refused kernel
    refuses the case (:func:`executed_flops`). So counting the case can only return "no executed count": the
    search's counting pass (:mod:`mfulib.search.counting`) then settles the case without an Nsight Compute run.
    The variant is the one stage 2 timed; an autotuned kernel could pick another config in a separate counting
    run, whose count would then describe another kernel than the timed one. Never raises."""
    if _no_counter(backend) or (_major(capability) or 0) < 9:
        return None
    compiled = entry.get(SHAPES_FIELD) or {}
    for k in entry.get("kernels") or []:
        variants, _narrowed, _why = _launched_variants(compiled.get(k.get("name")), mode)
        if not variants or not _forms(variants):
            continue
        refused = _shape_refusal(variants)
        if refused:
            return (f"kernel {k.get('name')!r}: compute capability {capability}: {refused} (read from the compiled "
                    f"kernel CUPTI's launch record identifies, before any count)")
    return None


def kernel_flops(counters: dict, backend: str, capability=None, mode=None, compiled=None) -> tuple:
    """(executed matrix FLOPs of one launch or None, how or why not) from one kernel's canonical counters.

    ``backend``: npu | cuda | cpu (or the counter source ncu | msprof); ``capability``: the CUDA compute capability
    ``"9.0"``; ``mode``: the case's math mode (:func:`mfulib.core.definitions.peak_key`: float16, tf32, ...), used
    for mma.sync kernels; ``compiled``: the kernel's compiled-variant record (performance.json ``mma_shapes``), the
    source of a wgmma kernel's shape and math mode. Never raises: every refusal is a None with its reason (module
    docstring)."""
    backend = {"ncu": "cuda", "msprof": "npu"}.get(backend, backend)
    why = _no_counter(backend)
    if why:
        return None, why
    c = counters or {}
    inst = finite_or_none(c.get(CUDA_COUNTER))
    if inst is None:
        return None, f"{CUDA_COUNTER} was not measured"
    major = _major(capability)
    if major is None:
        return None, f"unknown compute capability {capability!r}: FLOPs per tensor instruction unknown"
    if major >= 9:
        gmma = finite_or_none(c.get(GMMA_COUNTER))
        per_n = wgmma_flops_per_counted_inst(1, mode)
        factor = f"{per_n}*N" if per_n else "2*64*N*k/4"
        if gmma is None:
            return None, (f"compute capability {capability}: no {GMMA_COUNTER} count, so warpgroup MMA (wgmma) "
                          f"instructions (FLOPs {factor} each) cannot be told from mma.sync ones")
        variants = _launched_variants(compiled, mode)[0] if gmma == 0 else None
        if variants and _forms(variants):
            shown = ", ".join(f"m{m}n{n}k{k}.{t}" for m, n, k, t, _ in _forms(variants))
            return None, (f"compute capability {capability}: the launched variant names wgmma ({shown}) but ncu "
                          f"counted no {GMMA_COUNTER} instruction: the launch ran none of them, or the variant was "
                          "told wrongly - the count and the compiled kernel disagree")
        if gmma > 0:
            pre = (f"compute capability {capability}: {gmma:.6g} warpgroup MMA (wgmma) instructions ran (ncu counts a "
                   f"wgmma m64nNk once per warp of its warpgroup: {factor} FLOPs per counted instruction)")
            if inst > gmma:
                return None, (f"{pre} beside {inst - gmma:.6g} other tensor instructions ({CUDA_COUNTER} {inst:.6g}): "
                              "the remainder's shape is not split out")
            per, how = wgmma_from_compiled(compiled, mode)
            if per is None:
                return None, f"{pre}; {how}"
            return gmma * per, f"ncu {GMMA_COUNTER} x {how}"
    per = MMA_SYNC_FLOPS_PER_INST.get(mode)
    if per is None:
        return None, f"no mma.sync shape known for math mode {mode!r}"
    return inst * per, f"ncu {CUDA_COUNTER} x {per} FLOPs (mma.sync, {mode})"


def executed_flops(entry: dict, backend: str, capability=None, mode=None) -> tuple:
    """(executed matrix FLOPs per iteration, source, why not) of one performance.json ``per_case`` entry: the sum
    over its ``kernels`` of :func:`kernel_flops` x ``launches_per_iter`` (each kernel's compiled-variant record
    from the entry's ``mma_shapes``, narrowed by ``mode`` where ambiguous). ``source`` is
    ``"hardware:tensor_inst_executed"`` when counted; the value and source are None (``why`` says why) where any
    kernel gives no usable count, the counters were unavailable (``pmu_unavailable``) or the backend has none.
    Never raises."""
    if entry.get("pmu_unavailable"):
        return None, None, f"counters unavailable: {entry['pmu_unavailable']}"
    why = _no_counter(backend)
    if why:
        return None, None, why
    pmu, kernels = entry.get("pmu") or {}, entry.get("kernels") or []
    if not pmu:
        return None, None, f"no PMU counters in the collection ({CUDA_COUNTER} not measured)"
    if not kernels:
        return None, None, "the collection lists no kernels for this case"
    total, compiled = 0.0, entry.get(SHAPES_FIELD) or {}
    for k in kernels:
        v, why = kernel_flops(pmu.get(k.get("name")), backend, capability, mode, compiled.get(k.get("name")))
        if v is None:
            return None, None, f"kernel {k.get('name')!r}: {why}"
        total += v * float(k.get("launches_per_iter") or 1)
    return total, f"hardware:{CUDA_COUNTER}", None
