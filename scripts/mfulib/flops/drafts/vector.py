"""Exact vector_flops for elementwise / reduction drafts: forward() read op by op, costs from the tracer's table.

A reference without matrix work whose ``forward`` is straight-line code - assignments and a return of Python
operators (``a + b``, ``a * b + c``, ``-x``, ``x ** 2``, comparisons), torch / ``F`` / tensor-method calls of
pointwise ops (``torch.logaddexp``, ``torch.hypot``, ``F.gelu``, ``x.exp()``) and value reductions over given
axes (``x.sum(dim)``, ``torch.mean(x, -1, keepdim=True)``, ``amax``, ``var``, ``softmax``) - is turned into a
``vector_flops(case)`` body that re-plays the shapes of that code on each case's input shapes (numpy broadcasting
rules; a reduction drops or keeps its axes) and adds, per op, its per-element cost times the elements of its
output ("out" ops) or of its first input ("in" ops). The costs are read from :func:`mfulib.flops.vector_costs
.call_cost` with the call's own literal arguments (``F.gelu(x, approximate="tanh")`` 9, ``x.clamp(min=0)`` 1; an
argument-dependent op whose argument is not a literal is not followed) - the same table the tracer applies to
the aten ops it sees - so the draft is exact by construction and needs no REVIEW marker; check_flops still holds
it against the tracer.

Anything else (a branch, a loop, ``self.`` state, a view / reshape, an op the table does not cost, an input that
is optional per case) makes :func:`vector_program` return None with the reason, and the generator falls back to
its REVIEW-marked guess. Python operators map to aten ops as torch dispatches them: ``+`` add, ``-`` sub (rsub
with a scalar on the left), ``*`` mul, ``/`` div, ``**`` pow, ``%`` remainder, unary ``-`` neg, comparisons
eq/ne/lt/le/gt/ge (cost 0).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from mfulib.flops.vector_costs import call_cost, depends_on_args, element_cost

_MODULES = {"torch", "F", "nn", "functional", "special", "math"}
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow", ast.Mod: "remainder"}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_ALIASES = {"true_divide": "div", "multiply": "mul", "subtract": "sub", "divide": "div", "negative": "neg",
            "square": "pow", "relu6": "hardtanh", "softmax": "_softmax", "log_softmax": "_log_softmax",
            "clip": "clamp", "absolute": "abs", "greater": "gt", "less": "lt"}
_SHAPE_KEEPING_FREE = {"contiguous", "clone", "detach", "float", "half", "bfloat16", "double", "to", "type_as"}
_REDUCTIONS = {"sum", "mean", "amax", "amin", "prod", "nansum", "logsumexp", "var", "std", "max", "min"}
_ROW_OPS = {"_softmax", "_log_softmax"}   # keep the shape, cost per input element
_POINTWISE_FREE = {"where", "masked_fill", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and",
                   "logical_or", "bitwise_not", "bitwise_and", "bitwise_or", "isnan", "isinf", "isfinite"}


class _Bail(Exception):
    """forward() holds something this reader does not follow exactly; the message says what."""


@dataclass
class _T:
    """A tensor value: the draft's variable holding its shape."""
    var: str


@dataclass
class _S:
    """A non-tensor value (Python scalar, attribute, constant): the draft expression giving it (or None)."""
    code: str | None


@dataclass
class _Prog:
    lines: list = field(default_factory=list)
    n_tmp: int = 0
    helpers: set = field(default_factory=set)


def _dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return _dotted(node.value) + "." + node.attr
    return ""


def _is_module(node) -> bool:
    name = _dotted(node)
    return bool(name) and name.split(".")[0] in _MODULES


class _Reader:
    def __init__(self, params: dict, prog: _Prog):
        self.env = dict(params)
        self.p = prog

    def tmp(self, expr: str) -> _T:
        self.p.n_tmp += 1
        var = f"t{self.p.n_tmp}"
        self.p.lines.append(f"    {var} = {expr}")
        return _T(var)

    def cost(self, aten: str, basis_shape: str, line: int, what: str, got=None):
        got = got or element_cost(aten)
        if got is None:
            raise _Bail(f"line {line}: {aten} is not in the cost table (mfulib/flops/vector_costs.py)")
        c, basis = got
        if c:
            per = "output" if basis == "out" else "input"
            self.p.lines.append(f"    n += {c} * math.prod({basis_shape})   # line {line}: {what} -> {aten}, "
                                f"{c} per {per} element")

    def bcast(self, vals: list) -> _T:
        shapes = [v.var for v in vals if isinstance(v, _T)]
        if len(shapes) == 1:
            return _T(shapes[0])
        self.p.helpers.add("broadcast")
        return self.tmp(f"_broadcast({', '.join(shapes)})")

    def ev(self, node):
        if isinstance(node, ast.Constant):
            return _S(repr(node.value))
        if isinstance(node, ast.Name):
            if node.id not in self.env:
                raise _Bail(f"line {node.lineno}: {node.id} is not an input or a value of forward()")
            return self.env[node.id]
        if isinstance(node, (ast.Tuple, ast.List)):
            vals = [self.ev(e) for e in node.elts]
            if any(isinstance(v, _T) for v in vals):
                raise _Bail(f"line {node.lineno}: a tuple of tensors inside an expression")
            codes = [v.code for v in vals]
            return _S(None if None in codes else "[" + ", ".join(codes) + "]")
        if isinstance(node, ast.UnaryOp):
            v = self.ev(node.operand)
            if not isinstance(v, _T):
                sign = {ast.USub: "-", ast.UAdd: "+"}.get(type(node.op))
                return _S(f"{sign}{v.code}" if sign and v.code else None)
            if isinstance(node.op, ast.UAdd):
                return v
            if isinstance(node.op, ast.USub):
                self.cost("neg", v.var, node.lineno, ast.unparse(node))
                return v
            raise _Bail(f"line {node.lineno}: unary {type(node.op).__name__} on a tensor")
        if isinstance(node, ast.BinOp):
            left, right = self.ev(node.left), self.ev(node.right)
            if not (isinstance(left, _T) or isinstance(right, _T)):
                return _S(None if None in (left.code, right.code) else f"({ast.unparse(node)})"
                          if isinstance(node.left, ast.Constant) and isinstance(node.right, ast.Constant) else None)
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise _Bail(f"line {node.lineno}: Python operator {type(node.op).__name__} on tensors")
            if op == "sub" and not isinstance(left, _T):
                op = "rsub"
            out = self.bcast([left, right])
            self.cost(op, out.var, node.lineno, ast.unparse(node))
            return out
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1 or type(node.ops[0]) not in _CMPOPS:
                raise _Bail(f"line {node.lineno}: chained or identity comparison")
            vals = [self.ev(node.left), self.ev(node.comparators[0])]
            return self.bcast(vals) if any(isinstance(v, _T) for v in vals) else _S(None)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise _Bail(f"line {node.lineno}: {type(node).__name__} expression")

    def call(self, node: ast.Call):
        fn = node.func
        if not isinstance(fn, ast.Attribute) and not (isinstance(fn, ast.Name) and fn.id in ("float", "int")):
            raise _Bail(f"line {node.lineno}: call of {ast.unparse(fn)}")
        if isinstance(fn, ast.Name):
            return _S(None)
        name = fn.attr
        args = list(node.args)
        if not _is_module(fn.value):      # a method: the receiver is the first operand
            args = [fn.value] + args
        elif _dotted(fn.value).split(".")[0] == "math":
            return _S(None)
        kw = {k.arg: k.value for k in node.keywords}
        if None in kw:
            raise _Bail(f"line {node.lineno}: **kwargs in a call")
        if kw.get("out") is not None:
            raise _Bail(f"line {node.lineno}: out= argument")
        if "input" in kw:
            args = [kw.pop("input")] + args
        vals = [self.ev(a) for a in args]
        kw_vals = {k: self.ev(v) for k, v in kw.items()}
        if not vals or not isinstance(vals[0], _T):
            if any(isinstance(v, _T) for v in vals):
                raise _Bail(f"line {node.lineno}: {name} with a tensor not first")
            return _S(None)
        base = name[:-1] if name.endswith("_") and not name.startswith("_") else name
        aten = _ALIASES.get(base, base)
        what = ast.unparse(node)
        if aten in _SHAPE_KEEPING_FREE:
            return vals[0]
        if aten in _REDUCTIONS or aten in _ROW_OPS:
            return self.reduction(aten, vals, kw_vals, node, what)
        got = self.call_cost(aten, args, node)
        if got is not None and got[1] == "free" and aten not in _POINTWISE_FREE:
            raise _Bail(f"line {node.lineno}: {aten} changes shapes or selects (not followed)")
        if got is not None and got[1] == "in":
            raise _Bail(f"line {node.lineno}: {aten} costed per input element outside a reduction")
        tensors = [v for v in vals + list(kw_vals.values()) if isinstance(v, _T)]
        out = self.bcast(tensors)
        self.cost(aten, out.var, node.lineno, what, got)
        return out

    @staticmethod
    def call_cost(aten: str, args: list, node: ast.Call):
        """The table's (cost, basis) for this call, read with its literal arguments (receiver first)."""
        if not depends_on_args(aten):
            return element_cost(aten)
        for a in args[1:] + [k.value for k in node.keywords if k.arg != "input"]:
            try:
                ast.literal_eval(a)
            except ValueError:
                raise _Bail(f"line {node.lineno}: {aten}'s cost depends on its arguments and "
                            f"{ast.unparse(a)} is not a literal") from None
        pos = [None] + [ast.literal_eval(a) for a in args[1:]]
        kw = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg != "input"}
        return call_cost(aten, pos, kw)

    def reduction(self, aten, vals, kw, node, what):
        x = vals[0]
        if any(isinstance(v, _T) for v in vals[1:] + list(kw.values())):
            raise _Bail(f"line {node.lineno}: {aten} with a second tensor")
        dim_v = vals[1] if len(vals) > 1 else kw["dim"] if "dim" in kw else _S("None")
        if aten in _ROW_OPS:
            if dim_v.code in (None, "None"):
                raise _Bail(f"line {node.lineno}: softmax without a dim")
            self.cost(aten, x.var, node.lineno, what)
            return x
        if aten in ("max", "min") and dim_v.code != "None":
            raise _Bail(f"line {node.lineno}: {aten} over a dim returns (values, indices)")
        if len(vals) > 3 or (len(vals) == 3 and aten in ("var", "std")):
            raise _Bail(f"line {node.lineno}: {aten} with more positional arguments than (x, dim, keepdim)")
        keep_v = vals[2] if len(vals) > 2 else kw["keepdim"] if "keepdim" in kw else _S("False")
        if dim_v.code is None or keep_v.code is None:
            raise _Bail(f"line {node.lineno}: {aten}'s dim / keepdim is not a constant or an input")
        self.cost(aten, x.var, node.lineno, what)
        self.p.helpers.add("reduce")
        return self.tmp(f"_reduce({x.var}, {dim_v.code}, {keep_v.code})")


def _forward(tree):
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"):
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "forward":
                return fn
    return None


HELPERS = {
    "broadcast": '''

def _broadcast(*shapes):
    """numpy / torch broadcasting of input shapes; ValueError (case rejected) when they do not broadcast."""
    n = max(len(s) for s in shapes)
    padded = [[1] * (n - len(s)) + list(s) for s in shapes]
    out = []
    for dims in zip(*padded):
        big = {d for d in dims if d != 1}
        if len(big) > 1:
            raise ValueError(f"case rejected: shapes {shapes} do not broadcast")
        out.append(big.pop() if big else 1)
    return out
''',
    "reduce": '''

def _reduce(s, dim, keepdim):
    """Shape of a reduction of shape s over dim (int, list, or None = every axis), keeping axes when keepdim."""
    dims = range(len(s)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    if not dims and dim is not None and not isinstance(dim, int):
        dims = range(len(s))
    drop = {d % max(len(s), 1) for d in dims}
    return [1 if i in drop else d for i, d in enumerate(s) if keepdim or i not in drop]
''',
}


def vector_program(source: str, cv) -> tuple:
    """(vector_flops body lines, helper source) for the reference ``source`` and its case view ``cv``
    (:class:`mfulib.flops.drafts.CaseView`), or (None, reason) when forward() is not straight-line code of
    costed ops on inputs every case gives in the same position."""
    tree = ast.parse(source)
    fn = _forward(tree)
    if fn is None:
        return None, "no class Model with forward()"
    names = [a.arg for a in fn.args.args[1:]]
    if fn.args.vararg or fn.args.kwonlyargs or fn.args.kwarg:
        return None, "forward() takes *args / keyword-only arguments"
    prog = _Prog()
    params = {}
    tensors = {t.name for info in cv.all_infos for t in info.tensors}
    for i, name in enumerate(names):
        keys = {info.order[i] if i < len(info.order) else None for info in cv.all_infos}
        if len(keys) != 1 or None in keys:
            params[name] = _S(None)            # optional per case: usable only if never read
            continue
        key = keys.pop()
        is_t = {key in {t.name for t in info.tensors} for info in cv.all_infos}
        if is_t == {True}:
            var = f"s_{name}"
            prog.lines.append(f"    {var} = shape(case, {key!r})")
            params[name] = _T(var)
        elif key in tensors:
            params[name] = _S(None)            # a tensor in some cases, not in others
        else:
            params[name] = _S(f"attr(case, {key!r})")
    prog.lines.append("    n = 0")
    reader = _Reader(params, prog)
    try:
        for st in fn.body:
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
                continue                        # docstring
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                reader.env[st.targets[0].id] = reader.ev(st.value)
            elif isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name):
                reader.env[st.target.id] = reader.ev(ast.copy_location(
                    ast.BinOp(left=ast.Name(st.target.id, ast.Load()), op=st.op, right=st.value), st))
            elif isinstance(st, ast.Return) and st.value is not None:
                outs = st.value.elts if isinstance(st.value, ast.Tuple) else [st.value]
                for o in outs:
                    reader.ev(o)
                break
            else:
                raise _Bail(f"line {st.lineno}: {type(st).__name__} statement in forward()")
        else:
            raise _Bail("forward() has no return")
    except _Bail as exc:
        return None, str(exc)
    prog.lines.append("    return float(n)")
    return prog.lines, "".join(HELPERS[h] for h in sorted(prog.helpers))


_SHAPE_ATTRS = {"shape", "dtype", "device", "ndim", "size", "dim", "numel", "element_size", "is_contiguous"}


def tensor_ops(source: str, tensor_params) -> list:
    """[(aten op, FLOPs per element, line, text)] of every costed element-wise op forward() applies to a tensor, in
    source order and once per distinct expression (two branches doing ``torch.logaddexp(x, y)``, one with
    ``out=``, count once): the ops a guessed
    ``vector_flops`` must not drop. A value is a tensor when it is a parameter named in ``tensor_params`` or is
    computed from one (``.shape`` / ``.dtype`` / ``.size()`` reads and Python loops over shapes are not), so
    scalar arithmetic (``hw *= size``) is left out. Reductions, norms, softmax and free ops are not listed (the
    caller costs the main op by its convention)."""
    fn = _forward(ast.parse(source))
    if fn is None:
        return []
    tensors = set(tensor_params)

    def is_tensor(node) -> bool:
        if isinstance(node, ast.Name):
            return node.id in tensors
        if isinstance(node, ast.Attribute):
            return node.attr not in _SHAPE_ATTRS and is_tensor(node.value)
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in _SHAPE_ATTRS:
                return False
            return any(is_tensor(a) for a in list(node.args) + [k.value for k in node.keywords]) or \
                (isinstance(f, ast.Attribute) and is_tensor(f.value))
        if isinstance(node, ast.Subscript):
            return is_tensor(node.value)
        return any(is_tensor(c) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr))

    for _ in range(3):                       # propagate through assignments (a few passes reach a fixpoint)
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None and \
                    is_tensor(node.value):
                for tgt in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    for name in ast.walk(tgt):
                        if isinstance(name, ast.Name):
                            tensors.add(name.id)
    found, seen = [], set()
    for node in ast.walk(fn):
        aten = None
        if isinstance(node, ast.BinOp) and (is_tensor(node.left) or is_tensor(node.right)):
            aten = _BINOPS.get(type(node.op))
        elif isinstance(node, ast.AugAssign) and (is_tensor(node.target) or is_tensor(node.value)):
            aten = _BINOPS.get(type(node.op))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and is_tensor(node.operand):
            aten = "neg"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_tensor(node):
            base = node.func.attr[:-1] if node.func.attr.endswith("_") else node.func.attr
            aten = _ALIASES.get(base, base)
        got = element_cost(aten) if aten else None
        if isinstance(node, ast.Call) and got is not None and depends_on_args(aten):
            try:                                 # the call's own literal arguments (gelu's approximate ...)
                lit = [None] + [ast.literal_eval(a) for a in node.args[0 if is_tensor(node.func) else 1:]]
                got = call_cost(aten, lit, {k.arg: ast.literal_eval(k.value) for k in node.keywords
                                            if k.arg not in ("input", "out")})
            except ValueError:
                pass                             # not literal: the default-argument cost (a REVIEW-marked guess)
        if got is None or got[1] != "out" or got[0] == 0:
            continue
        text = ast.unparse(node)
        if isinstance(node, ast.Call):   # the same op on the same operands, whatever out= it writes to
            key = ast.unparse(ast.Call(func=node.func, args=node.args,
                                       keywords=[k for k in node.keywords if k.arg != "out"]))
            text = key
        if text in seen:
            continue
        seen.add(text)
        found.append((aten, got[0], node.lineno, text))
    return sorted(found, key=lambda r: r[2])
