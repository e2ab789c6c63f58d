"""The tracer's per-aten-op element-cost table: the vector arithmetic of an operator, for the ``vector_flops`` check.

docs/ARCHITECTURE.md#flops: ``flops(case)`` counts matrix work only; ``vector_flops(case)`` (optional in flops.py)
counts the vector arithmetic and is held against this table, applied by the tracer (:mod:`mfulib.flops.dispatch`) to
every aten op it classifies as vector work. Costs are FLOPs per element; "out" = elements of the op's output, "in" =
elements of its first tensor input, "rows" = output elements of a reduction. The per-element figures follow the kb
convention (kb/ops/triton/guides/tooling/mfu_flops_guide.md: RMSNorm 4, LayerNorm 5 + 1 per affine tensor, softmax 5 per
element); one elementary function (exp, tanh, erf, ...) is one FLOP per element, as one vector instruction computes it.

=====================================================================  =============================================
ops                                                                    cost
=====================================================================  =============================================
add sub rsub mul div neg reciprocal sqrt rsqrt exp exp2 expm1 log       1 per out
log2 log10 log1p tanh sigmoid erf erfc sin cos abs sign pow square
relu gelu silu hardtanh clamp clamp_min clamp_max maximum minimum
fmod remainder floor ceil round trunc elu leaky_relu mish softplus
logaddexp logaddexp2 (2 exp + add + log: 4 per out) hypot (3)           as noted
addcmul addcdiv lerp                                                   2 per out
sum mean prod amax amin max min nansum (value reductions, any dim)     1 per in
logsumexp                                                              3 per in (max, exp(x - max), sum)
var std var_mean std_mean                                              4 per in (mean, centre, square, sum)
_softmax _log_softmax _safe_softmax                                    5 per in (max, subtract, exp, sum, divide)
native_layer_norm native_group_norm native_batch_norm                  5 per in + 1 per weight + 1 per bias given
_fused_rms_norm                                                        3 per in + 2 per row + 1 per in with weight
eq ne lt le gt ge where masked_fill topk sort argsort argmax argmin     0 (comparison / selection, no arithmetic)
max_pool*_with_indices, logical/bitwise ops, isnan/isinf
copies, casts, views, cat, stack, index, gather, scatter, fill,        0 (data movement)
zeros, empty, embedding, dropout, random draws
=====================================================================  =============================================

An op the tracer sees as vector work but that is not in this table is *uncosted*: it is listed by name in the
result (``vector_uncosted``), and a ``vector_flops`` check that disagrees with the costed sum while uncosted ops
were seen is ``unverified`` instead of failed. Reductions with ``dim`` over an empty set cost 0.
"""
from __future__ import annotations

import math

_PER_OUT = {n: 1 for n in (
    "add", "sub", "rsub", "mul", "div", "neg", "reciprocal", "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2",
    "log10", "log1p", "tanh", "sigmoid", "erf", "erfc", "sin", "cos", "abs", "sign", "pow", "square", "relu", "gelu",
    "silu", "hardtanh", "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "fmod", "remainder", "floor",
    "ceil", "round", "trunc", "elu", "leaky_relu", "mish", "softplus", "hardsigmoid", "hardswish", "threshold",
    "true_divide", "sigmoid_backward")}
_PER_OUT.update({"logaddexp": 4, "logaddexp2": 4, "hypot": 3, "addcmul": 2, "addcdiv": 2, "lerp": 2})
_PER_IN = {"sum": 1, "mean": 1, "prod": 1, "amax": 1, "amin": 1, "nansum": 1, "logsumexp": 3, "var": 4, "std": 4,
           "var_mean": 4, "std_mean": 4, "_softmax": 5, "_log_softmax": 5, "_safe_softmax": 5, "max": 1, "min": 1}
_NORMS = {"native_layer_norm": (2, 3), "native_group_norm": (1, 2), "native_batch_norm": (1, 2)}  # weight/bias arg
_FREE = {"eq", "ne", "lt", "le", "gt", "ge", "where", "masked_fill", "topk", "sort", "argsort", "argmax", "argmin",
         "logical_not", "logical_and", "logical_or", "bitwise_not", "bitwise_and", "bitwise_or", "isnan", "isinf",
         "isfinite", "copy", "copy_", "_to_copy", "clone", "contiguous", "cat", "stack", "index", "index_select",
         "gather", "scatter", "scatter_", "index_put", "index_put_", "fill", "fill_", "zero_", "zeros", "zeros_like",
         "ones", "ones_like", "empty", "empty_like", "empty_strided", "full", "full_like", "new_zeros", "new_empty",
         "new_full", "new_ones", "arange", "embedding", "slice", "select", "split", "split_with_sizes", "chunk",
         "unbind", "narrow", "flip", "roll", "repeat", "repeat_interleave", "tril", "triu", "constant_pad_nd",
         "masked_select", "nonzero", "detach", "lift_fresh", "lift_fresh_copy", "alias", "_local_scalar_dense",
         "native_dropout", "bernoulli_", "rand", "randn", "randint", "normal_", "uniform_", "random_", "item",
         "set_", "resize_", "as_strided_", "t", "view", "_unsafe_view", "reshape", "expand", "transpose",
         "permute", "unsqueeze", "squeeze", "flatten", "unflatten", "as_strided", "view_as_real",
         "view_as_complex", "_reshape_alias", "max_pool2d_with_indices", "max_pool3d_with_indices"}


def element_cost(name: str):
    """(FLOPs per element, basis) of aten op ``name`` per the table above, basis "out" (output elements), "in"
    (elements of the first tensor input) or "free" (cost 0); None for an op the table does not cost (norms are
    costed by :func:`vector_cost` from their arguments, so they are None here too). The flops.py generator
    (:mod:`mfulib.flops.drafts.vector`) writes these figures into drafts, so draft and tracer share one table."""
    if name in _FREE:
        return 0, "free"
    if name in _PER_OUT:
        return _PER_OUT[name], "out"
    if name in _PER_IN:
        return _PER_IN[name], "in"
    return None


def _numel(t) -> int:
    return int(math.prod(int(d) for d in t.shape))


def vector_cost(base: str, args, kwargs, out):
    """FLOPs of one vector op (``base`` = the aten op's packet name, in-place ``_`` variants included) per the
    table above, or None when the op is not in it (uncosted). ``args``/``kwargs``: the op's arguments (tensors may
    be meta: only shapes are read); ``out``: its result."""
    import torch
    name = base[:-1] if base.endswith("_") and base[:-1] in _PER_OUT else base
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    first = tensors[0] if tensors else None
    outs = [out] if isinstance(out, torch.Tensor) else [t for t in (out or ()) if isinstance(t, torch.Tensor)]
    if name in _FREE:
        return 0
    if name in _PER_OUT:
        return _PER_OUT[name] * (_numel(outs[0]) if outs else 0)
    if name in _PER_IN:
        return _PER_IN[name] * (_numel(first) if first is not None else 0)
    if name in _NORMS:
        w_at, b_at = _NORMS[name]
        n = _numel(first) if first is not None else 0
        extra = sum(1 for i in (w_at, b_at) if i < len(args) and isinstance(args[i], torch.Tensor))
        return (5 + extra) * n
    if name == "_fused_rms_norm":
        n = _numel(first) if first is not None else 0
        dims = len(args[1]) if len(args) > 1 and isinstance(args[1], (list, tuple)) else 1
        rows = n // max(1, math.prod(int(d) for d in first.shape[len(first.shape) - dims:])) if n else 0
        weighted = len(args) > 2 and isinstance(args[2], torch.Tensor)
        return 3 * n + 2 * rows + (n if weighted else 0)
    return None
