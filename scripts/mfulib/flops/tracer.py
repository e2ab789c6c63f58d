"""Independent FLOP tracer: run the reference ``Model.forward`` and count its matrix work, without an accelerator.

Base: torch's ``FlopCounterMode`` (torch/utils/flop_counter.py), which counts every aten mm/addmm/bmm/baddbmm/
convolution exactly (2 FLOPs per multiply-accumulate, docs/ARCHITECTURE.md#flops). What it lacks, this module adds
(docs/sources.md#flopcountermode):

* **Formulas it has none for**, in :data:`mfulib.flops.formulas.REGISTRY` (a registry that refuses duplicates; the
  formulas are pure functions of the op's arguments there, and the torch_npu stand-ins live in
  :mod:`mfulib.flops.npu_standins`; this module is the dispatch tracer and the per-case orchestration):
  CPU SDPA ``aten::_scaled_dot_product_flash_attention_for_cpu`` (FlopCounterMode counts it 0), the CUDA SDPA
  kernels again with ``is_causal`` honoured (torch: "NB: We aren't accounting for causal attention here"),
  ``mv/addmv/dot/vdot/addbmm/_grouped_mm``, and the torch_npu fused ops ``npu_fusion_attention`` (layouts
  BSH/SBH/BSND/BNSD/TND, ``sparse_mode`` 0-8, ``prefix``, varlen ``actual_seq_qlen/kvlen``),
  ``npu_fused_infer_attention_score`` (GQA, paged KV through ``block_table``, ``actual_seq_lengths[_kv]``),
  ``npu_ffn``, and (:mod:`mfulib.flops.npu_formulas`) ``npu_sparse_flash_attention``, ``npu_lightning_indexer``,
  ``npu_lstm``, ``npu_rms_norm``, ``npu_rotary_mul``, ``npu_swiglu``, ``npu_group_norm_swish``. They apply at the dispatcher (a real torch_npu registers ``npu::*`` ops) and, where no torch_npu
  is importable, through stand-in functions installed as ``torch_npu.<op>`` while tracing: they return zero
  tensors of the documented output shapes and count the formula, so NPU-only references trace on a CPU.
* **Masked attention written with matmuls** (``scores.masked_fill(mask, -inf)``, ``torch.where(mask, s, -inf)``,
  an additive ``-inf`` bias): the tracer follows each matmul output through pointwise/view/softmax ops; when a
  mask with known values is applied to it, that matmul and the matmul that consumes the masked probabilities are
  counted over the unmasked (q, k) pairs only - exactly, for any mask (causal top-left or bottom-right, window,
  padding, block-sparse). ``F.scaled_dot_product_attention`` is intercepted in Python the same way (``is_causal``
  is top-left causal, ``torch.ones(L, S).tril()``, as torch documents it; a boolean/additive ``attn_mask`` is
  counted from its values).
* **Nothing is silently zero**: every op seen is classified - counted (by torch or by a formula here), vector work
  (pointwise/reduction/softmax/norm/copy: not matrix FLOPs; costed per element by the table of
  :mod:`mfulib.flops.vector_costs` into ``vector_flops``, which flops.py's optional ``vector_flops(case)`` is checked
  against) or **unseen**: a matrix-like aten op
  without a formula, an op from another namespace (custom or vendor op), a Triton kernel launched directly.
  Unseen ops are reported by name with their call counts.

Where it runs: on **meta** tensors by default (no big allocation while counting). The case's inputs are drawn
as the timed child draws them (``get_input_groups()`` on the CPU after seeding: the same random stream, so random
sequence lengths, masks and routing are the timed ones; recorded as ``inputs_drawn`` = "timed" with the
data-dependent values in ``data_values``), then moved to meta; from :data:`META_FIRST_MIN_BYTES` of inputs the case
is built in a meta build mode instead (below :data:`REAL_DRAW_MAX_BYTES` drawn for real after all when that build
lost a value): big floating tensors are created on meta and their random draws replayed on
the CPU in chunks (values dropped), so integer/bool inputs drawn later still get the timed values
(``inputs_drawn`` = "timed-ints"; "meta" where that cannot hold, noted).
Small tensors (index math, masks, lengths) keep real values in a side table ("shadows") so masks built on the fly
and ``.item()`` still work; big masks are described by their construction (:mod:`mfulib.flops.lazy_masks`: triu/tril/
ones/arange comparisons, at any size). A reference that needs the values of big tensors fails on meta;
:func:`trace_case` then runs it on the CPU when it fits the caps, or reports the case as skipped with the reason.

Approximations (each is also written into the result's notes where it happens): a mask whose values are unknown
(meta, neither shadow nor description) is counted dense and flagged ``needs_values`` (check_flops: unverified); masks applied to a sliced score tensor are
not followed; two masks on reshaped tensors combine as independent fractions.
"""
from __future__ import annotations

import contextlib
import functools
import sys
from dataclasses import dataclass, field

from mfulib.core.errors import rejection_reason
from mfulib.flops.dispatch import SHADOW_MAX_NUMEL, TraceState, trace_mode_class, tree_map
from mfulib.flops.formulas import NEG_MASK_THRESHOLD, REGISTRY, FormulaRegistry
from mfulib.flops.meta_build import build_mode_class as _build_mode_class
from mfulib.flops.npu_standins import npu_standins

_STATE_STACK: list = []  # the active tracer state, for the Python-level wrappers (formulas get values explicitly)


# ----------------------------------------------------------------------------------------------------------------
# Python-level interception (SDPA, torch_npu stand-ins, Triton launches)
# ----------------------------------------------------------------------------------------------------------------

def _counting(path, impl, registry: FormulaRegistry = REGISTRY):
    """Wrap a Python entry point: count its formula (from ``registry``), run ``impl`` with the tracer's modes off."""
    formula = next(f for f in registry.python_entries() if f.python == path)

    @functools.wraps(impl)
    def wrapper(*args, **kwargs):
        from torch.utils._python_dispatch import _disable_current_modes
        if not _STATE_STACK:
            return impl(*args, **kwargs)
        st = _STATE_STACK[-1]
        st.seen[path] = st.seen.get(path, 0) + 1
        st.add_formula(path, formula.fn(st.values_of, *args, **kwargs))
        with _disable_current_modes():
            return impl(*args, **kwargs)
    wrapper.__mfu_counting__ = True
    return wrapper


@contextlib.contextmanager
def _python_patches(module=None):
    """Patch F.scaled_dot_product_attention (and aliases of it in ``module``) and Triton launches."""
    import torch.nn.functional as F
    patched = []
    orig = F.scaled_dot_product_attention
    wrapped = _counting("torch.nn.functional.scaled_dot_product_attention", orig)
    patched.append((F, "scaled_dot_product_attention", orig))
    F.scaled_dot_product_attention = wrapped
    if module is not None:
        for k, v in list(vars(module).items()):
            if v is orig:
                patched.append((module, k, v))
                setattr(module, k, wrapped)
    jit = sys.modules.get("triton.runtime.jit")
    if jit is not None and hasattr(jit, "JITFunction"):
        orig_run = jit.JITFunction.run

        def run(self, *a, **k):
            if _STATE_STACK:
                name = f"triton::{getattr(self, '__name__', None) or getattr(self.fn, '__name__', '?')}"
                _STATE_STACK[-1].add_unseen(name, "a Triton kernel launched by the reference: the tracer cannot "
                                                  "count it (not run while tracing)")
                return None
            return orig_run(self, *a, **k)
        patched.append((jit.JITFunction, "run", orig_run))
        jit.JITFunction.run = run
    try:
        yield
    finally:
        for obj, attr, val in reversed(patched):
            setattr(obj, attr, val)


# ----------------------------------------------------------------------------------------------------------------
# Trace one call
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class TraceResult:
    """What the tracer counted for one call of the reference.

    ``total_flops`` = FlopCounterMode's count + formulas here - the masked pairs removed from matmuls.
    ``unseen_ops``: {op: calls} of ops with matrix-like semantics or from another namespace that have no formula
    (their work is NOT in the total). ``vector_ops``: ops seen and not counted by the convention.
    """
    status: str = "ok"                      # ok | rejected | skipped | error
    device: str | None = None               # meta | cpu
    total_flops: float | None = None
    torch_counted_flops: float = 0.0        # FlopCounterMode's own total (dense)
    formula_flops: dict = field(default_factory=dict)
    mask_corrections: list = field(default_factory=list)
    by_op: dict = field(default_factory=dict)
    unseen_ops: dict = field(default_factory=dict)
    unseen_reasons: dict = field(default_factory=dict)
    vector_ops: dict = field(default_factory=dict)
    vector_flops: float = 0.0               # vector arithmetic by mfulib.flops.vector_costs' element-cost table
    vector_uncosted: dict = field(default_factory=dict)  # vector ops without a cost there: {op: calls}
    user_formulas: dict = field(default_factory=dict)    # {op: FLOPs} counted by formulas flops.py registered
    notes: list = field(default_factory=list)
    needs_values: bool = False
    reason: str | None = None
    seed: int | None = None
    attempts: list = field(default_factory=list)
    inputs_drawn: str | None = None         # timed | timed-ints (big floats meta, ints/bools as timed) | meta
    data_values: dict = field(default_factory=dict)  # data-dependent inputs that entered the count (data_values())

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def trace_callable(fn, args, device_kind="cpu", module=None, registry: FormulaRegistry = REGISTRY,
                   shadows=None, kwargs=None, values_dropped: bool = False) -> TraceResult:
    """Run ``fn(*args, **kwargs)`` under the tracer and return a :class:`TraceResult` (exceptions propagate).

    ``device_kind`` says where the tensors live ("meta" enables shadows); ``shadows`` maps meta tensors to their
    real CPU values (small inputs); ``module`` is searched for module-level aliases of SDPA to intercept;
    ``values_dropped``: big floating inputs were built as shapes (the meta build), so an addend of the scores
    without a shadow may mask - it is counted dense and flagged ``needs_values`` (in a case drawn for real every
    floating input that masks keeps its values: :func:`_to_meta_with_shadows`).
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    state = TraceState(device_kind)
    state.values_dropped = values_dropped
    for t, v in (shadows or {}).items():
        state.shadows[t] = v
    zero = {}
    for f in registry._by_name.values():
        ns, _, base = f.name.partition("::")
        packet = getattr(getattr(torch.ops, ns, None), base, None) if ns != "python" else None
        if packet is not None:
            zero[packet] = _zero_flops  # FlopCounterMode must not count (or decompose) what the formulas count
    mode = trace_mode_class()(state, registry)
    counter = FlopCounterMode(display=False, custom_mapping=zero)
    _STATE_STACK.append(state)
    try:
        with _python_patches(module), torch.no_grad(), mode, counter:
            fn(*args, **(kwargs or {}))
    finally:
        _STATE_STACK.pop()
    res = _result(state, counter)
    user = {f.name: f.python for f in registry._by_name.values() if f.user}
    res.user_formulas = {n: float(v) for n, v in res.formula_flops.items() if n in user or n in user.values()}
    return res


def _zero_flops(*args, **kwargs):
    return 0


def _result(state: TraceState, counter) -> TraceResult:
    res = TraceResult(device=state.device_kind)
    by_op: dict = {}
    for packet, n in counter.get_flop_counts().get("Global", {}).items():
        by_op[f"aten::{getattr(packet, '__name__', str(packet))}"] = float(n)
    res.torch_counted_flops = float(sum(by_op.values()))
    removed = 0.0
    for i, ev in enumerate(state.events):
        frac = None
        if ev.out_fraction is not None and ev.in_fraction is not None:
            frac = ev.out_fraction * ev.in_fraction
            state.note("a matmul both consumed and produced masked scores: fractions multiplied")
        elif ev.out_fraction is not None:
            frac = ev.out_fraction
        elif ev.in_fraction is not None:
            frac = ev.in_fraction
        if frac is None or ev.unknown and frac == 1.0:
            continue
        counted = float(ev.dense_flops * frac)
        removed += ev.dense_flops - counted
        res.mask_corrections.append({"event": i, "op": ev.op, "role": "scores" if ev.out_fraction is not None
                                     else "probabilities", "dense_flops": ev.dense_flops,
                                     "counted_flops": counted, "unmasked_fraction": float(frac)})
        by_op[ev.op] = by_op.get(ev.op, 0.0) - (ev.dense_flops - counted)
    for name, n in state.formula_counts.items():
        by_op[name] = by_op.get(name, 0.0) + float(n)
    res.formula_flops = {k: float(v) for k, v in state.formula_counts.items()}
    res.by_op = by_op
    res.total_flops = res.torch_counted_flops + sum(res.formula_flops.values()) - removed
    res.unseen_ops = dict(state.unseen)
    res.unseen_reasons = dict(state.unseen_reasons)
    res.vector_ops = dict(state.vector)
    res.vector_flops = float(state.vector_flops)
    res.vector_uncosted = dict(state.vector_uncosted)
    res.notes = list(state.notes)
    res.needs_values = state.needs_values
    return res


# ----------------------------------------------------------------------------------------------------------------
# Trace one case of a work directory
# ----------------------------------------------------------------------------------------------------------------

def _masks(x) -> bool:
    """Whether the floating tensor ``x`` holds a masking value (<= NEG_MASK_THRESHOLD: an additive -inf mask): its
    values decide which attention pairs count, so it keeps them as a shadow whatever its size up to
    SHADOW_MAX_NUMEL (a finite bias masks nothing: a dense count is right without its values)."""
    return x.dim() >= 2 and x.numel() > 0 and bool((x.min() <= NEG_MASK_THRESHOLD).item())


def _to_meta_with_shadows(args, model):
    """Move args and the model to meta; small real tensors (and module buffers), and floating ones up to
    SHADOW_MAX_NUMEL that hold a masking value (:func:`_masks`), keep their values as shadows."""
    import torch
    shadows = {}

    def conv(x):
        if isinstance(x, torch.Tensor) and x.device.type != "meta":
            m = x.to("meta")
            if x.numel() <= SHADOW_MAX_NUMEL and (not x.is_floating_point() or x.numel() <= (1 << 16)
                                                  or _masks(x)):
                shadows[m] = x
            return m
        return x
    new_args = tree_map(conv, args)
    if isinstance(model, torch.nn.Module):
        old_bufs = {n: b for n, b in model.named_buffers()}
        model.to("meta")
        for n, b in model.named_buffers():
            old = old_bufs.get(n)
            if old is not None and old.device.type != "meta" and old.numel() <= SHADOW_MAX_NUMEL:
                shadows[b] = old
    return new_args, shadows


def trace_case(opdir, case_id: int, seed: int = 0, prefer: str = "meta", max_cpu_input_bytes: int = 1 << 30,
               max_cpu_flops: float = 5e10, registry: FormulaRegistry = REGISTRY, standins=None) -> TraceResult:
    """Trace the reference of ``opdir`` (an :class:`mfulib.core.opdir.OpDir`) on case ``case_id``.

    Tries meta first (``prefer="meta"``); falls back to a real CPU run when meta fails, or when a mask's values
    were missing, provided the case's inputs are at most ``max_cpu_input_bytes`` and (when known) its FLOPs at
    most ``max_cpu_flops``. A case the reference rejects (``ValueError("case rejected: ...")``) comes back with
    status "rejected"; one beyond the caps with status "skipped"; other failures "error". Never raises for a
    failing case. ``registry``: the formulas to count with (the built-in :data:`REGISTRY`, or one extended by a
    flops.py, :func:`mfulib.flops.user_formulas.registry_with`); ``standins``: {"torch_npu.<op>": impl} installed
    beside the built-in stand-ins while tracing.
    """
    info = opdir.describe(case_id)
    once = functools.partial(_trace_once, registry=registry, standins=standins)
    res = None
    attempts = []
    meta_res = None
    if prefer == "meta":
        meta_res = once(opdir, case_id, seed, "meta")
        attempts.append({"device": "meta", "status": meta_res.status, "reason": meta_res.reason})
        if meta_res.status == "rejected" or (meta_res.status == "ok" and not meta_res.needs_values):
            meta_res.attempts = attempts
            return meta_res
    fits = info.input_bytes <= max_cpu_input_bytes
    flops_known = meta_res is not None and meta_res.status == "ok"
    if flops_known and meta_res.total_flops > max_cpu_flops:
        fits = False
    if fits:
        res = once(opdir, case_id, seed, "cpu")
        attempts.append({"device": "cpu", "status": res.status, "reason": res.reason})
    elif meta_res is not None and meta_res.status == "ok":
        res = meta_res
        res.notes.append(f"CPU re-run for mask values skipped: case beyond the CPU caps "
                         f"({info.input_bytes} input bytes, {meta_res.total_flops:.3g} FLOPs)")
    else:
        why = meta_res.reason if meta_res is not None else "meta tracing not tried"
        res = TraceResult(status="skipped", seed=seed,
                          reason=f"meta trace failed ({why}) and the case is beyond the CPU caps "
                                 f"({info.input_bytes} input bytes > {max_cpu_input_bytes} or FLOPs above "
                                 f"{max_cpu_flops:.3g}); raise --max-cpu-bytes to trace it on the CPU")
    res.attempts = attempts
    return res


REAL_DRAW_MAX_BYTES = 1 << 28  # cases up to 256 MiB of inputs are drawn for real, exactly as the timed child draws
META_FIRST_MIN_BYTES = 1 << 24  # a meta trace of a case this big builds it on meta first (see _build_as_timed)


def _build_as_timed(opdir, case_id, seed, real_draw_max_bytes=None, meta_first_min_bytes=None):
    """(BuiltCase, how): the case's inputs drawn the way the timed child draws them (get_input_groups() on the CPU
    after seeding with ``seed``: the same random stream, so data-dependent values - random sequence lengths, masks,
    top-k routing - are the ones timed): ``how`` "timed". Above ``real_draw_max_bytes`` of inputs the case is
    built in the meta build mode: big floating tensors on meta (shapes only) while their random draws are replayed
    so the integer/bool inputs still get the timed values - ``how`` "timed-ints"; "meta" when that could not be
    kept (an integer/bool input on meta, a random op not replayable: the random stream differs from the timed one).

    ``meta_first_min_bytes`` (None: off; the meta trace passes :data:`META_FIRST_MIN_BYTES`): a case of at least
    that many input bytes is built in the meta build mode first even below the real-draw cap, and drawn for real
    only when that build lost a value (a mask computed from a big floating draw, say). A meta trace keeps no
    values of floating tensors above 2^16 elements (:func:`_to_meta_with_shadows`), and the meta build keeps every
    other value real and as timed, so the trace counts the same; what it saves is the host draw of the big
    floats - seconds per 256 MiB case, which the probe's gate 2 paid once per candidate."""
    limit = REAL_DRAW_MAX_BYTES if real_draw_max_bytes is None else real_draw_max_bytes
    nbytes = opdir.describe(case_id).input_bytes
    meta_first = meta_first_min_bytes is not None and nbytes >= meta_first_min_bytes
    if nbytes <= limit and not meta_first:
        return opdir.build_case(case_id, impl="ref", seed=seed, device="cpu"), "timed"
    mode = _build_mode_class()()
    with mode:
        built = opdir.build_case(case_id, impl="ref", seed=seed, device="cpu")
    if mode.lost and nbytes <= limit:  # the meta build lost a value the real draw keeps: draw for real
        built.close()
        return opdir.build_case(case_id, impl="ref", seed=seed, device="cpu"), "timed"
    return built, ("meta" if mode.lost else "timed-ints")


DATA_VALUES_MAX = 4096  # integer inputs up to this many elements are recorded with their values


def data_values(args) -> dict:
    """The data-dependent values among forward arguments, for the record (performance.json / flops_check.json):
    {position: [ints]} for integer tensors (or lists) of at most :data:`DATA_VALUES_MAX` elements (sequence lengths,
    indices), {position: {"density": fraction True}} for bool tensors (masks). Meta tensors have no values: left
    out."""
    import torch
    out = {}
    for i, a in enumerate(args or []):
        if isinstance(a, torch.Tensor) and a.device.type != "meta":
            if a.dtype == torch.bool and a.numel():
                out[str(i)] = {"density": float(torch.count_nonzero(a).item()) / a.numel(), "shape": list(a.shape)}
            elif not a.is_floating_point() and not a.is_complex() and 0 < a.numel() <= DATA_VALUES_MAX:
                out[str(i)] = a.reshape(-1).tolist()
        elif isinstance(a, (list, tuple)) and a and len(a) <= DATA_VALUES_MAX and \
                all(isinstance(v, int) and not isinstance(v, bool) for v in a):
            out[str(i)] = list(a)
    return out


def bind_forward(model, args, names) -> tuple:
    """(positional args, keyword args, note) for calling ``model`` with a case's arguments ``args``: a forward()
    whose keyword-only parameters the case builder passes positionally (``forward(self, q, k, *, scale)`` fed
    ``[q, k, 0.5]``) gets each extra argument by the case file's input name at that position (``names``) when a
    keyword-only parameter has that name. Anything else is left positional (note None), so the call fails or
    succeeds as it would without the tracer."""
    import inspect
    try:
        params = list(inspect.signature(getattr(model, "forward", model)).parameters.values())
    except (TypeError, ValueError):
        return list(args), {}, None
    kinds = inspect.Parameter
    if any(p.kind == kinds.VAR_POSITIONAL for p in params):
        return list(args), {}, None
    n_pos = sum(p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD) for p in params)
    kw_only = {p.name for p in params if p.kind == kinds.KEYWORD_ONLY}
    extra = list(enumerate(args))[n_pos:]
    if not extra or not kw_only:
        return list(args), {}, None
    names = list(names) + [None] * len(args)
    if not all(names[i] in kw_only for i, _ in extra):
        return list(args), {}, None
    kwargs = {names[i]: a for i, a in extra}
    return list(args[:n_pos]), kwargs, f"keyword-only forward() arguments bound by case-file name: {sorted(kwargs)}"


def _trace_once(opdir, case_id, seed, device_kind, registry=REGISTRY, standins=None) -> TraceResult:
    from mfulib.core.opdir import in_directory
    built = None
    names = [i.get("name") for i in opdir.read_cases()[case_id].get("inputs", []) if isinstance(i, dict)]
    try:
        with npu_standins(functools.partial(_counting, registry=registry), extra=standins):
            try:
                if device_kind == "meta":
                    built, how = _build_as_timed(opdir, case_id, seed, meta_first_min_bytes=META_FIRST_MIN_BYTES)
                    values = data_values(built.args)
                    args, shadows = _to_meta_with_shadows(built.args, built.model)
                else:
                    built, how = opdir.build_case(case_id, impl="ref", seed=seed, device="cpu"), "timed"
                    values = data_values(built.args)
                    args, shadows = built.args, {}
                args, kwargs, bound = bind_forward(built.model, args, names)
                with in_directory(built.staging):
                    res = trace_callable(built.model, args, device_kind, module=built.module, shadows=shadows,
                                         registry=registry, kwargs=kwargs, values_dropped=how != "timed")
                res.inputs_drawn, res.data_values = how, values
                if bound:
                    res.notes.append(bound)
                if how != "timed":
                    res.notes.append("big floating inputs built as shapes (meta); " + (
                        "integer/bool inputs as timed (random stream replayed)" if how == "timed-ints" else
                        "random values other than the timed draw"))
            except Exception as exc:
                reason = rejection_reason(exc)
                if reason is not None:
                    return TraceResult(status="rejected", device=device_kind, reason=reason, seed=seed)
                return TraceResult(status="error", device=device_kind, seed=seed,
                                   reason=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    finally:
        if built is not None:
            built.close()
    res.seed = seed
    return res


def build_reference_args(opdir, case_id: int, seed: int = 0, with_draw: bool = False):
    """Forward arguments of the reference for ``case_id`` as ``get_input_groups()`` builds them after seeding
    with ``seed`` - the timed child's draw (:func:`_build_as_timed`); above the real-draw cap large floating
    tensors come back as meta tensors (shapes only) and small ones with their values. ``with_draw``: return
    (args, how: "timed" | "timed-ints" | "meta"). Exceptions from the operator files propagate."""
    with npu_standins(_counting):
        built, how = _build_as_timed(opdir, case_id, seed)
    built.close()
    return (built.args, how) if with_draw else built.args
