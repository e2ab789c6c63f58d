"""The one element-wise cost table: the vector arithmetic of an aten op, for ``vector_flops`` (tracer, drafts, docs).

docs/ARCHITECTURE.md#flops: ``flops(case)`` counts matrix work only; ``vector_flops(case)`` (optional in flops.py)
counts the vector arithmetic and is held against this table. The tracer (:mod:`mfulib.flops.dispatch`) applies
:func:`vector_cost` to every aten op it classifies as vector work; the flops.py generator
(:mod:`mfulib.flops.drafts`) writes :func:`element_cost` figures into drafts; the Chinese FLOPs guide
(kb/ops/triton/guides/tooling/mfu_flops_guide.md) shows :func:`markdown_table`, rendered by
``scripts/render_cost_table.py`` and checked equal by tests/test_vector_costs.py. One table, three readers.

**The rule, applied to every row.** One FLOP per output element for each arithmetic operation (+, -, *, /,
negation, abs, min / max against a bound) and for each elementary function (exp, exp2, expm1, log, log2, log10,
log1p, sqrt, rsqrt, reciprocal, pow, tanh, sigmoid, erf, erfc, sin, cos, floor, ceil, round, trunc, sign): one
vector instruction each. An op defined by a formula costs the operations of that formula, constant factors
included (GELU's 0.5, tanh-GELU's 0.044715 and sqrt(2/pi)); comparisons, selections (where, masked_fill, the
branch of elu / leaky_relu) and data movement cost 0. Element-wise ops count at the **output** shape, so
broadcast inputs count the elements produced (logaddexp of [64, 1] and [1, 2880] costs 4 x 64 x 2880).
Reductions count per input element. Sources of the formulas: the PyTorch documentation of each op
(torch.nn.GELU, SiLU, Softplus, Mish, Hardsigmoid, Hardswish, ELU, torch.logaddexp, torch.lerp, torch.addcmul).
Norm costs follow the kb convention (RMSNorm 4 per element + 2 per row, LayerNorm / GroupNorm 5 + 1 per affine
tensor, softmax 5).

An op the tracer sees as vector work but that is not in this table is *uncosted*: it is listed by name in the
result (``vector_uncosted``), and a ``vector_flops`` check that disagrees with the costed sum while uncosted ops
were seen is ``unverified`` instead of failed. Reductions with ``dim`` over an empty set cost 0.
"""
from __future__ import annotations

import math

# (aten ops, FLOPs per element, basis, the formula the cost is read from). Basis "out": per output element,
# "in": per element of the first tensor input, "free": 0. A cost of None is computed from the arguments by
# vector_cost (the row's formula says how). This list is the table: element_cost, vector_cost and markdown_table
# read it, nothing else.
ROWS = (
    (("add", "sub", "rsub", "mul", "div", "true_divide", "neg", "abs", "square", "maximum", "minimum", "relu",
      "clamp_min", "clamp_max", "leaky_relu"), 1, "out",
     "one arithmetic operation (leaky_relu: slope * x on one branch; relu = max(x, 0))"),
    (("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "pow", "tanh",
      "sigmoid", "erf", "erfc", "sin", "cos", "floor", "ceil", "round", "trunc", "sign"), 1, "out",
     "one elementary function"),
    (("clamp",), None, "out", "1 per bound given (max(x, lo), min(., hi))"),
    (("hardtanh",), 2, "out", "min(max(x, lo), hi)"),
    (("silu",), 2, "out", "x * sigmoid(x)"),
    (("sigmoid_backward",), 3, "out", "grad * y * (1 - y)"),
    (("softplus",), None, "out", "log(1 + exp(beta x)) / beta: 3, + 2 when beta != 1"),
    (("elu",), 3, "out", "alpha * (exp(x) - 1) on the x <= 0 branch"),
    (("hardsigmoid",), 4, "out", "min(max(x + 3, 0), 6) / 6"),
    (("hardswish",), 5, "out", "x * hardsigmoid(x)"),
    (("mish",), 5, "out", "x * tanh(softplus(x))"),
    (("gelu",), None, "out", "erf form 0.5 x (1 + erf(x / sqrt 2)): 5; approximate='tanh' "
                             "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): 9"),
    (("logaddexp", "logaddexp2"), 4, "out", "log(exp(a) + exp(b)) (base 2 for logaddexp2)"),
    (("hypot",), 4, "out", "sqrt(a * a + b * b)"),
    (("fmod", "remainder"), 4, "out", "a - b * trunc(a / b) (floor for remainder)"),
    (("lerp",), 3, "out", "start + weight * (end - start)"),
    (("addcmul", "addcdiv"), None, "out", "input + value * t1 * t2 (/ for addcdiv): 2, + 1 when value != 1"),
    (("sum", "mean", "prod", "amax", "amin", "nansum", "max", "min"), 1, "in",
     "value reductions, any dim: 1 per input element"),
    (("logsumexp",), 3, "in", "max, exp(x - max), sum"),
    (("var", "std", "var_mean", "std_mean"), 4, "in", "mean, centre, square, sum"),
    (("_softmax", "_log_softmax", "_safe_softmax"), 5, "in", "max, subtract, exp, sum, divide"),
    (("native_layer_norm", "native_group_norm", "native_batch_norm"), None, "in",
     "5 per input element + 1 per affine tensor given (weight, bias)"),
    (("_fused_rms_norm",), None, "in", "3 per input element + 2 per row + 1 per element with a weight"),
    (("eq", "ne", "lt", "le", "gt", "ge", "where", "masked_fill", "threshold", "topk", "sort", "argsort", "argmax",
      "argmin", "logical_not", "logical_and", "logical_or", "bitwise_not", "bitwise_and", "bitwise_or", "isnan",
      "isinf", "isfinite", "max_pool2d_with_indices", "max_pool3d_with_indices"), 0, "free",
     "comparison / selection: no arithmetic"),
    (("copy", "copy_", "_to_copy", "clone", "contiguous", "cat", "stack", "index", "index_select", "gather",
      "scatter", "scatter_", "index_put", "index_put_", "fill", "fill_", "zero_", "zeros", "zeros_like", "ones",
      "ones_like", "empty", "empty_like", "empty_strided", "full", "full_like", "new_zeros", "new_empty",
      "new_full", "new_ones", "arange", "embedding", "slice", "select", "split", "split_with_sizes", "chunk",
      "unbind", "narrow", "flip", "roll", "repeat", "repeat_interleave", "tril", "triu", "constant_pad_nd",
      "masked_select", "nonzero", "detach", "lift_fresh", "lift_fresh_copy", "alias", "_local_scalar_dense",
      "native_dropout", "bernoulli_", "rand", "randn", "randint", "normal_", "uniform_", "random_", "item",
      "set_", "resize_", "as_strided_", "t", "view", "_unsafe_view", "reshape", "expand", "transpose", "permute",
      "unsqueeze", "squeeze", "flatten", "unflatten", "as_strided", "view_as_real", "view_as_complex",
      "_reshape_alias"), 0, "free", "data movement, casts, views, random draws"),
)

_BY_NAME = {name: (cost, basis) for ops, cost, basis, _ in ROWS for name in ops}
_NORMS = {"native_layer_norm": (2, 3), "native_group_norm": (1, 2), "native_batch_norm": (1, 2)}  # weight/bias arg


def element_cost(name: str):
    """(FLOPs per element, basis) of aten op ``name`` per :data:`ROWS`, basis "out" (output elements), "in"
    (elements of the first tensor input) or "free" (cost 0); None for an op the table does not cost. Ops whose
    cost depends on their arguments (gelu's ``approximate``, clamp's bounds, softplus' beta, addcmul's value)
    give their default-argument cost here; :func:`vector_cost` reads the arguments. Norms give None (their cost
    depends on the affine tensors; :func:`vector_cost` computes it)."""
    got = _BY_NAME.get(name)
    if got is None or name in _NORMS or name == "_fused_rms_norm":
        return None
    cost, basis = got
    if cost is None:
        cost = {"gelu": 5, "clamp": 2, "softplus": 3, "addcmul": 2, "addcdiv": 2}[name]
    return cost, basis


def call_cost(name: str, args=(), kwargs=None):
    """(FLOPs per element, basis) of aten op ``name`` called with ``args`` / ``kwargs`` in the aten (= torch
    functional / method) argument order, receiver first: ``F.gelu(x, approximate="tanh")`` is
    ``call_cost("gelu", [x], {"approximate": "tanh"})`` = (9, "out"). Only the non-tensor arguments an
    argument-dependent row reads (gelu's ``approximate``, clamp's bounds, softplus' beta, addcmul's value) are
    looked at, so a tensor may be any placeholder. None for an op the table does not cost (norms included:
    :func:`vector_cost` computes them). The drafts (:mod:`mfulib.flops.drafts.vector`) cost each call with it, the
    tracer's :func:`vector_cost` uses the same rows: one table."""
    got = element_cost(name)
    if got is None or not depends_on_args(name):
        return got
    return _per_element_from_args(name, list(args), dict(kwargs or {})), got[1]


def depends_on_args(name: str) -> bool:
    """True when the per-element cost of aten op ``name`` depends on its non-tensor arguments (a row whose cost
    in :data:`ROWS` is computed from them: gelu, clamp, softplus, addcmul / addcdiv, the norms)."""
    got = _BY_NAME.get(name)
    return got is not None and got[0] is None


def gelu_cost(approximate="none") -> int:
    """FLOPs per element of GELU: 5 (erf form), 9 (``approximate="tanh"``); the formulas are in :data:`ROWS`."""
    return 9 if str(approximate) == "tanh" else 5


def _arg(args, kwargs, pos, name, default):
    if name in kwargs:
        return kwargs[name]
    return args[pos] if len(args) > pos else default


def _per_element_from_args(name, args, kwargs) -> int:
    """The per-output-element cost of an argument-dependent row (gelu, clamp, softplus, addcmul / addcdiv)."""
    if name == "gelu":
        return gelu_cost(_arg(args, kwargs, 1, "approximate", "none"))
    if name == "clamp":
        return sum(1 for b in (_arg(args, kwargs, 1, "min", None), _arg(args, kwargs, 2, "max", None))
                   if b is not None)
    if name == "softplus":
        return 3 if float(_arg(args, kwargs, 1, "beta", 1)) == 1 else 5
    return 2 if float(_arg(args, kwargs, 3, "value", 1)) == 1 else 3        # addcmul / addcdiv


def markdown_table() -> str:
    """:data:`ROWS` as a Markdown table (ops, cost, per, formula): the text the FLOPs guide carries."""
    per = {"out": "输出元素 / output element", "in": "输入元素 / input element", "free": "-"}
    lines = ["| ops | FLOPs | per | formula |", "|---|---|---|---|"]
    for ops, cost, basis, formula in ROWS:
        shown = ", ".join(f"`{o}`" for o in ops)
        lines.append(f"| {shown} | {'by args' if cost is None else cost} | {per[basis]} | {formula} |")
    return "\n".join(lines) + "\n"


def _numel(t) -> int:
    return int(math.prod(int(d) for d in t.shape))


def vector_cost(base: str, args, kwargs, out):
    """FLOPs of one vector op (``base`` = the aten op's packet name, in-place ``_`` variants included) per
    :data:`ROWS`, or None when the op is not in it (uncosted). ``args``/``kwargs``: the op's arguments (tensors may
    be meta: only shapes are read); ``out``: its result - element-wise ops count its elements (the broadcast
    output shape)."""
    import torch
    name = base[:-1] if base.endswith("_") and base not in _BY_NAME and base[:-1] in _BY_NAME else base
    got = _BY_NAME.get(name)
    if got is None:
        return None
    cost, basis = got
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    first = tensors[0] if tensors else None
    outs = [out] if isinstance(out, torch.Tensor) else [t for t in (out or ()) if isinstance(t, torch.Tensor)]
    if basis == "free":
        return 0
    if basis == "out":
        per = cost if cost is not None else _per_element_from_args(name, args, kwargs)
        return per * (_numel(outs[0]) if outs else 0)
    n = _numel(first) if first is not None else 0
    if name in _NORMS:
        w_at, b_at = _NORMS[name]
        extra = sum(1 for i in (w_at, b_at) if i < len(args) and isinstance(args[i], torch.Tensor))
        return (5 + extra) * n
    if name == "_fused_rms_norm":
        dims = len(args[1]) if len(args) > 1 and isinstance(args[1], (list, tuple)) else 1
        rows = n // max(1, math.prod(int(d) for d in first.shape[len(first.shape) - dims:])) if n else 0
        weighted = len(args) > 2 and isinstance(args[2], torch.Tensor)
        return 3 * n + 2 * rows + (n if weighted else 0)
    return cost * n
