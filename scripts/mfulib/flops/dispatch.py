"""The tracer's dispatch machinery: a TorchDispatchMode that sees every aten op, counts it and follows matmul lineage.

Per op: a registered formula (:mod:`mfulib.flops.formulas`) counts it, or torch's ``FlopCounterMode`` formulas
do (mm/addmm/bmm/baddbmm, convolutions), or it is classified (:func:`classify_uncounted`) as vector work (not
counted by the convention) or **unseen** (a matrix-like op without a formula, another namespace, a Triton kernel); vector work is costed
per element by :mod:`mfulib.flops.vector_costs` (the ``vector_flops`` cross-check).
Matmul outputs are followed through pointwise/view/softmax ops: when a mask with known values is applied to them,
the matmul and its consumer are recounted over the unmasked pairs. Small tensors keep real values beside their meta
twins ("shadows", :class:`TraceState`), so masks built on the fly have values. :mod:`mfulib.flops.tracer` drives it.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from fractions import Fraction

from mfulib.flops.formulas import NEG_MASK_THRESHOLD, Count, FormulaRegistry, broadcast_count
from mfulib.flops.lazy_masks import BandMask, propagate
from mfulib.flops.vector_costs import vector_cost

SHADOW_MAX_NUMEL = 1 << 24          # small tensors keep real values beside their meta twin
SHADOW_MATMUL_MAX_NUMEL = 1 << 16   # ... but matmuls are evaluated on the CPU only when tiny
# masks from this size on are described by their construction (mfulib.flops.lazy_masks) instead of computed: a
# reference that masks its scores per chunk of query rows builds one [rows, s] mask per chunk, and computing,
# inverting and counting them all cost seconds per case; one up to SHADOW_MAX_NUMEL gets its values from the
# description when an op needs them (TraceState.real_value_of)
DESCRIBE_MIN_NUMEL = 1 << 16


# ----------------------------------------------------------------------------------------------------------------
# Op classification
# ----------------------------------------------------------------------------------------------------------------

_MATMUL_PACKETS = ("mm", "bmm", "addmm", "baddbmm")  # FlopCounterMode formulas whose outputs the tracer follows
_MATRIX_LIKE = re.compile(r"(^|_)(mm|bmm|matmul|mv|dot|vdot|addmv|addr|ger|linear|einsum|tensordot|kron)($|_)"
                          r"|conv(olution|_|\d|$)|attention|attn|rnn|lstm|gru|linalg|cholesky|triangular_solve")
_VECTOR_NAMESPACES = ("aten", "prims", "prim", "profiler", "_c10d_functional")
_SOFTMAX_LIKE = {"_softmax", "_safe_softmax", "_log_softmax", "softmax", "log_softmax", "native_dropout",
                 "nan_to_num", "nan_to_num_"}
_VIEW_LIKE = {"view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "transpose", "permute", "t",
              "clone", "contiguous", "_to_copy", "to", "detach", "alias", "unsqueeze", "squeeze", "lift_fresh",
              "lift_fresh_copy", "as_strided", "flatten", "unflatten", "_unsafe_view_copy", "view_copy"}
_RANDOM_TAG = "nondeterministic_seeded"


def op_name(func) -> str:
    """'aten::mm' style name of an OpOverload."""
    return f"{func.namespace}::{func._overloadpacket.__name__}"


def classify_uncounted(name: str) -> str:
    """'unseen' for a matrix-like or foreign op with no formula, else 'vector' (not counted by convention)."""
    ns, _, base = name.partition("::")
    if ns not in _VECTOR_NAMESPACES:
        return "unseen"
    return "unseen" if _MATRIX_LIKE.search(base) else "vector"


# ----------------------------------------------------------------------------------------------------------------
# Tracer state and dispatch mode
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class _Lineage:
    """A tensor derived from matmul event ``event`` (its scores), with the mask applied so far."""
    event: int
    allowed: object = None       # bool CPU tensor broadcastable to the scores at masking time
    fraction: Fraction = Fraction(1)  # unmasked fraction of the scores (exact)
    unknown: bool = False        # a mask without values was applied


@dataclass
class _MatmulEvent:
    op: str
    dense_flops: int
    out_fraction: Fraction | None = None   # its output was masked afterwards (QK^T)
    in_fraction: Fraction | None = None    # an operand was a masked tensor (P V)
    unknown: bool = False


class TraceState:
    def __init__(self, device_kind: str):
        from torch.utils.weak import WeakTensorKeyDictionary
        self.device_kind = device_kind
        self.shadows = WeakTensorKeyDictionary()
        self.structured = WeakTensorKeyDictionary()  # big masks known from their construction (lazy_masks)
        self.lineage = WeakTensorKeyDictionary()
        self.events: list = []
        self.formula_counts: dict = {}     # formula name -> flops
        self.formula_calls: dict = {}
        self.seen: dict = {}               # op name -> calls
        self.unseen: dict = {}             # op name -> calls
        self.unseen_reasons: dict = {}
        self.vector: dict = {}
        self.vector_flops = 0              # vector arithmetic by the element-cost table (mfulib.flops.vector_costs)
        self.vector_uncosted: dict = {}    # vector ops the table has no cost for: op name -> calls
        self.notes: list = []
        self.needs_values = False
        self.values_dropped = False  # big floating inputs built as shapes: an unshadowed addend may mask

    # -- values -----------------------------------------------------------------------------------------------
    def values_of(self, t):
        """Real values of tensor ``t`` (itself off meta; its shadow on meta), or None when unknown: what the
        formulas of :mod:`mfulib.flops.formulas` receive as ``values``."""
        import torch
        if not isinstance(t, torch.Tensor):
            return None
        if t.device.type != "meta":
            return t
        return self.value_of(t)

    def shadow_of(self, t):
        return self.shadows.get(t)

    def value_of(self, t):
        """Real values (off meta, or the shadow) or a :class:`mfulib.flops.lazy_masks.BandMask`, else None."""
        if t.device.type != "meta":
            return t
        v = self.shadows.get(t)
        return v if v is not None else self.structured.get(t)

    def real_value_of(self, t):
        """Real values only (a CPU tensor), never a description: what ops are re-run on. A described mask of at
        most :data:`SHADOW_MAX_NUMEL` entries is materialised from its description the first time (and kept)."""
        if t.device.type != "meta":
            return t
        v = self.shadows.get(t)
        if v is None:
            desc = self.structured.get(t)
            if desc is not None and desc.numel() <= SHADOW_MAX_NUMEL:
                v = self.shadows[t] = desc.materialize()
        return v

    def note(self, text):
        if text not in self.notes:
            self.notes.append(text)

    # -- formulas ---------------------------------------------------------------------------------------------
    def add_formula(self, name, count: Count):
        self.formula_counts[name] = self.formula_counts.get(name, 0) + int(count.flops)
        self.formula_calls[name] = self.formula_calls.get(name, 0) + 1
        for n in count.notes:
            self.note(n)
        if count.needs_values:
            self.needs_values = True

    def add_unseen(self, name, reason):
        self.unseen[name] = self.unseen.get(name, 0) + 1
        self.unseen_reasons.setdefault(name, reason)


def _flatten(obj):
    import torch
    from torch.utils._pytree import tree_flatten
    return [x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]


def tree_map(fn, obj):
    from torch.utils._pytree import tree_map
    return tree_map(fn, obj)


def _is_neg_fill(value, state) -> bool:
    """True when ``value`` (number or tensor) is a masking fill: every element <= NEG_MASK_THRESHOLD."""
    import torch
    if isinstance(value, torch.Tensor):
        vals = state.value_of(value)
        if vals is None or vals.numel() == 0 or not vals.is_floating_point():
            return False
        return bool((vals <= NEG_MASK_THRESHOLD).all())
    try:
        return float(value) <= NEG_MASK_THRESHOLD
    except (TypeError, ValueError):
        return False


def _make_mode_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
    from torch.utils.flop_counter import flop_registry as torch_flop_registry

    class _TraceMode(TorchDispatchMode):
        """Sees every op that actually executes (it sits under FlopCounterMode), keeps shadows and lineage."""

        def __init__(self, state: TraceState, registry: FormulaRegistry):
            super().__init__()
            self.state = state
            self.registry = registry

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            st = self.state
            if st.device_kind == "meta" and func._overloadpacket.__name__ == "_to_copy" and args and \
                    isinstance(args[0], torch.Tensor) and args[0].device.type == "meta" and \
                    kwargs.get("device") is not None and torch.device(kwargs["device"]).type != "meta":
                kwargs = dict(kwargs, device=torch.device("meta"))  # .cpu()/.npu() of a meta tensor stays meta
            try:
                out = func(*args, **kwargs)
            except Exception as exc:  # data-dependent ops on meta: evaluate on the shadows when all are known
                out = self._from_shadows(func, args, kwargs, exc)
                return out
            self._observe(func, args, kwargs, out)
            if st.device_kind == "meta":
                self._shadow(func, args, kwargs, out)
            return out

        # -- shadows -----------------------------------------------------------------------------------------
        def _cpu_args(self, args, kwargs):
            st = self.state
            missing = []

            def conv(x):
                if isinstance(x, torch.Tensor):
                    v = st.real_value_of(x)
                    if v is None:
                        missing.append(x)
                    return v
                if isinstance(x, torch.device) and x.type == "meta":
                    return torch.device("cpu")
                return x
            a = tree_map(conv, args)
            k = tree_map(conv, kwargs)
            if k.get("device") is not None and str(k["device"]) == "meta":
                k["device"] = torch.device("cpu")
            return (None, None) if missing else (a, k)

        def _from_shadows(self, func, args, kwargs, exc):
            a, k = self._cpu_args(args, kwargs)
            if a is None:
                raise exc
            with _disable_current_modes():
                cpu_out = func(*a, **k)
            st = self.state

            def to_meta(x):
                if isinstance(x, torch.Tensor) and x.device.type != "meta":
                    with _disable_current_modes():
                        m = torch.empty_like(x, device="meta")
                    st.shadows[m] = x
                    return m
                return x
            out = tree_map(to_meta, cpu_out)
            # counted like any op: a formula op whose meta kernel refuses the inputs (torch's _grouped_mm meta
            # accepts bf16 only) ran on the shadows here and was counted 0 before
            self._observe(func, args, kwargs, out)
            return out

        def _shadow(self, func, args, kwargs, out):
            st = self.state
            outs = [t for t in _flatten(out) if t.device.type == "meta"]
            if not outs or torch.Tag.nondeterministic_seeded in func.tags:
                return
            if self._structured(func, args, kwargs, outs):
                return
            limit = SHADOW_MATMUL_MAX_NUMEL if func._overloadpacket.__name__ in _MATMUL_PACKETS else SHADOW_MAX_NUMEL
            if any(t.numel() > limit for t in outs):
                self._drop_mutated(func, args)
                return
            ins = _flatten((args, kwargs))
            name = func._overloadpacket.__name__
            if name in ("_to_copy", "copy_", "copy") and any(t.device.type != "meta" for t in ins):
                src = [t for t in ins if t.device.type != "meta"][0]
                if src.is_floating_point() and src.numel() > (1 << 16):
                    return  # a big real float tensor moved to meta: its values are not needed
            a, k = self._cpu_args(args, kwargs)
            if a is None:
                self._drop_mutated(func, args)
                return
            try:
                with _disable_current_modes():
                    cpu_out = func(*a, **k)
            except Exception:
                self._drop_mutated(func, args)
                return
            flat_meta = [x for x in _flatten_all(out)]
            flat_cpu = [x for x in _flatten_all(cpu_out)]
            if len(flat_meta) != len(flat_cpu):
                return
            for m, c in zip(flat_meta, flat_cpu):
                if isinstance(m, torch.Tensor) and m.device.type == "meta" and isinstance(c, torch.Tensor):
                    st.shadows[m] = c

        def _drop_mutated(self, func, args):
            if func._schema.is_mutable and args and isinstance(args[0], torch.Tensor):
                self.state.shadows.pop(args[0], None)
                self.state.structured.pop(args[0], None)

        def _structured(self, func, args, kwargs, outs) -> bool:
            """A big mask (or one derived from a described mask) gets a BandMask description instead of values."""
            st = self.state
            if len(outs) != 1:
                return False
            ins = [t for t in _flatten((args, kwargs)) if t.device.type == "meta"]
            described_input = any(t in st.structured for t in ins)
            if outs[0].numel() <= DESCRIBE_MIN_NUMEL and not described_input:
                return False
            try:
                desc = propagate(func, args, kwargs, outs[0], st.structured.get, st.value_of)
            except Exception:  # an argument form the descriptions do not cover: no description
                desc = None
            if desc is None:
                if func._schema.is_mutable and args and isinstance(args[0], torch.Tensor):
                    st.real_value_of(args[0])  # its values before this op, from its description: the re-run's input
                    st.structured.pop(args[0], None)
                return False
            st.shadows.pop(outs[0], None)
            st.structured[outs[0]] = desc
            return True

        # -- counting and lineage ------------------------------------------------------------------------------
        def _observe(self, func, args, kwargs, out):
            st = self.state
            name = op_name(func)
            base = func._overloadpacket.__name__
            st.seen[name] = st.seen.get(name, 0) + 1
            formula = self.registry.get(name)
            if formula is not None:
                try:
                    st.add_formula(name, formula.fn(st.values_of, *args, **kwargs))
                except Exception as exc:  # the op ran, but its arguments defeat the formula: say so
                    st.add_unseen(name, f"formula failed: {type(exc).__name__}: {exc}")
                return
            packet = func._overloadpacket
            if packet in torch_flop_registry:
                if base in _MATMUL_PACKETS and isinstance(out, torch.Tensor):
                    self._matmul(base, packet, args, kwargs, out)
                return
            kind = classify_uncounted(name)
            if kind == "unseen":
                st.add_unseen(name, "no FLOP formula for this op")
                return
            st.vector[name] = st.vector.get(name, 0) + 1
            try:
                cost = vector_cost(base, args, kwargs, out)
            except Exception:  # an argument layout the table does not expect: uncosted, never a crash
                cost = None
            if cost is None:
                st.vector_uncosted[name] = st.vector_uncosted.get(name, 0) + 1
            else:
                st.vector_flops += int(cost)
            self._lineage(base, func, args, kwargs, out)

        def _matmul(self, base, packet, args, kwargs, out):
            st = self.state
            dense = int(torch_flop_registry[packet](*args, **kwargs, out_val=out))
            ev = _MatmulEvent(op=f"aten::{base}", dense_flops=dense)
            operands = [a for a in args if isinstance(a, torch.Tensor)]
            if base in ("addmm", "baddbmm"):
                operands = operands[1:]
            for t in operands:
                lin = st.lineage.get(t)
                if lin is not None and (lin.allowed is not None or lin.unknown):
                    ev.in_fraction = lin.fraction if ev.in_fraction is None else ev.in_fraction * lin.fraction
                    ev.unknown = ev.unknown or lin.unknown
            st.events.append(ev)
            st.lineage[out] = _Lineage(event=len(st.events) - 1)

        def _lineage(self, base, func, args, kwargs, out):
            st = self.state
            if not isinstance(out, torch.Tensor):
                if base == "native_dropout" and isinstance(out, tuple):
                    out = out[0]
                else:
                    return
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if base in ("masked_fill", "masked_fill_"):
                self._masked_fill(args, out)
                return
            if base == "where" and len(args) >= 3:
                self._where(args, out)
                return
            if base in ("add", "add_") and len(tensors) == 2:
                if self._additive_mask(tensors, out):
                    return
            src = next((t for t in tensors if t in st.lineage), None)
            if src is None:
                return
            lin = st.lineage[src]
            pointwise = torch.Tag.pointwise in func.tags
            if not (pointwise or base in _SOFTMAX_LIKE or base in _VIEW_LIKE):
                if lin.allowed is not None:
                    st.note(f"a masked score tensor went through aten::{base}; its consumers are counted dense")
                return
            if out.numel() < src.numel() or (src.numel() and out.numel() % src.numel()):
                return
            st.lineage[out] = lin

        def _apply_mask(self, src, out, allowed, unknown=False):
            st = self.state
            lin = st.lineage[src]
            new = _Lineage(event=lin.event, unknown=lin.unknown or unknown)
            if unknown:
                new.allowed, new.fraction = lin.allowed, lin.fraction
                st.needs_values = True
                st.note("a mask without values (meta) was applied to attention scores: counted dense")
            else:
                combined = allowed
                if lin.allowed is not None:
                    try:
                        if isinstance(lin.allowed, BandMask) or isinstance(allowed, BandMask):
                            combined = lin.allowed.logical_and(allowed) if isinstance(lin.allowed, BandMask) \
                                else None
                            if combined is None:
                                raise RuntimeError("band mask with another mask")
                        else:
                            combined = torch.logical_and(lin.allowed, allowed)
                    except RuntimeError:
                        combined = None
                        st.note("two masks on differently shaped score tensors: fractions multiplied")
                total = math.prod(out.shape) or 1
                if combined is not None:  # exact rational fractions: the corrected counts stay integers
                    new.allowed = combined
                    new.fraction = Fraction(broadcast_count(combined, out.shape), total)
                else:
                    new.allowed = allowed
                    new.fraction = lin.fraction * Fraction(broadcast_count(allowed, out.shape), total)
            st.lineage[out] = new
            ev = st.events[lin.event]
            ev.out_fraction = new.fraction
            ev.unknown = ev.unknown or new.unknown

        def _fill(self, src, out, fill, mask, keep_where_true):
            """``out`` = ``src`` with ``fill`` where the mask says; a masking fill (-inf) removes those pairs."""
            st = self.state
            if not _is_neg_fill(fill, st):
                st.lineage[out] = st.lineage[src]
                return
            vals = st.value_of(mask)
            if vals is None:
                self._apply_mask(src, out, None, unknown=True)
            else:
                self._apply_mask(src, out, vals.bool() if keep_where_true else ~vals.bool())

        def _masked_fill(self, args, out):
            if args[0] in self.state.lineage:  # masked_fill(scores, mask, value): mask True = filled
                self._fill(args[0], out, args[2], args[1], keep_where_true=False)

        def _where(self, args, out):
            cond, a, b = args[0], args[1], args[2]  # where(cond, a, b): a where cond is True
            if isinstance(a, torch.Tensor) and a in self.state.lineage:
                self._fill(a, out, b, cond, keep_where_true=True)
            elif isinstance(b, torch.Tensor) and b in self.state.lineage:
                self._fill(b, out, a, cond, keep_where_true=False)

        def _additive_mask(self, tensors, out) -> bool:
            st = self.state
            src = next((t for t in tensors if t in st.lineage), None)
            if src is None:
                return False
            bias = tensors[1] if src is tensors[0] else tensors[0]
            if bias in st.lineage:
                return False
            vals = st.value_of(bias)
            if vals is None and st.values_dropped and bias.is_floating_point() and bias.dim() >= 2 \
                    and src.dim() >= 2 and tuple(bias.shape[-2:]) in ((src.shape[-2], src.shape[-1]),
                                                                      (1, src.shape[-1])):
                # a score-shaped addend whose values are unknown (built on meta): it may mask - counted dense, and
                # the count says it needs the values (never a silent dense count beside exact ones of small cases)
                self._apply_mask(src, out, None, unknown=True)
                return True
            if vals is None or not vals.is_floating_point():
                return False
            allowed = vals > NEG_MASK_THRESHOLD
            if bool(allowed.all()):
                return False
            self._apply_mask(src, out, allowed)
            return True

    return _TraceMode


def _flatten_all(obj):
    from torch.utils._pytree import tree_flatten
    return tree_flatten(obj)[0]


@functools.lru_cache(maxsize=1)
def trace_mode_class():
    return _make_mode_class()
