"""FLOP formulas a work directory registers for ops the tracer cannot see (a ``torch.library`` custom op, a torch_npu
fused op without a built-in formula): the user-side hook of :mod:`mfulib.flops.formulas`' registry.

In ``flops.py``, or in ``flops_ops.py`` beside it (:data:`OPS_FILE`), decorate a function with :func:`op_formula`::

    from mfulib.flops.contract import op_formula

    @op_formula("mylib::fused_gemm", source="y = x @ w: 2 * M * K * N")
    def fused_gemm_flops(values, x, w):          # the op's own arguments, after ``values``
        return 2 * x.shape[0] * x.shape[1] * w.shape[1]

    @op_formula("npu::npu_my_op", python="torch_npu.npu_my_op", standin=lambda x, w: x.new_zeros(...))
    def my_op_flops(values, x, w): ...

The name is the op's dispatcher name ``namespace::op`` (what the tracer reports among the ops it cannot see);
``values(tensor)`` gives a tensor's real values (or None on meta) for counts that depend on them. ``python`` and
``standin`` are for torch_npu ops on a host without torch_npu: the tracer installs ``standin`` (which returns
outputs of the documented shapes) as ``torch_npu.<op>`` and counts the formula there. A formula returns FLOPs
(2 per multiply-accumulate of matrix work, docs/ARCHITECTURE.md#flops) as a number or a
:class:`mfulib.flops.formulas.Count`.

The tracer then counts the op like a built-in one, and check_flops.py holds flops.py against that count as against
the rest; flops_check.json lists the counts under ``tracer.user_formulas`` and the row's ``user_formula`` check says
that part of the tracer's count is flops.py's own claim (not independent).
"""
from __future__ import annotations

import math
import numbers
import os

from mfulib.core.errors import UserError
from mfulib.flops.formulas import REGISTRY, Count, FormulaRegistry

OPS_FILE = "flops_ops.py"
_MARK = "__mfu_op_formula__"


def op_formula(name: str, source: str = "registered by flops.py", python: str | None = None, standin=None):
    """Decorator: mark ``fn(values, *op_args, **op_kwargs) -> FLOPs`` as the formula of op ``name``
    ("namespace::op"). ``python`` ("torch_npu.<op>") and ``standin`` go together (see the module docstring).
    Raises ValueError for a name without "::", a ``python`` path outside torch_npu, or one of the two without the
    other. Marks only: nothing is registered until check_flops.py loads the file (:func:`collect`)."""
    if "::" not in str(name):
        raise ValueError(f"op_formula({name!r}): give the dispatcher name 'namespace::op' (e.g. 'mylib::fused')")
    if (python is None) != (standin is None):
        raise ValueError(f"op_formula({name!r}): python= and standin= go together (a torch_npu op needs both)")
    if python is not None and not str(python).startswith("torch_npu."):
        raise ValueError(f"op_formula({name!r}): python={python!r} - only torch_npu.<op> entry points are "
                         "intercepted; a torch.library op needs neither (the dispatcher name is enough)")

    def deco(fn):
        setattr(fn, _MARK, {"name": str(name), "source": str(source), "python": python, "standin": standin})
        return fn
    return deco


def _counted(name, fn):
    """``fn`` returning a number or Count, as a registry formula returning a Count (ValueError for a bad value)."""
    def formula(values, *args, **kwargs):
        v = fn(values, *args, **kwargs)
        if isinstance(v, Count):
            return v
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
            raise ValueError(f"user formula {name} returned {v!r}: return FLOPs as a finite number >= 0")
        return Count(int(v), (f"{name}: user-registered formula",))
    return formula


def collect(flops_module, flops_path: str) -> list:
    """The :func:`op_formula` functions of a loaded flops.py module and of ``flops_ops.py`` beside ``flops_path``
    (imported when present): [(marks dict, fn, defining file)]. Raises UserError naming the file when flops_ops.py
    does not import or two functions claim one op."""
    from mfulib.core.opdir import import_file
    found = [(flops_module, flops_path)]
    ops_path = os.path.join(os.path.dirname(os.path.abspath(flops_path)), OPS_FILE)
    if os.path.exists(ops_path):
        try:
            found.append((import_file(ops_path, "flops_ops"), ops_path))
        except (Exception, SystemExit) as exc:
            raise UserError(f"{ops_path}: does not import ({type(exc).__name__}: {exc}) - fix the file") from None
    out, seen = [], {}
    for mod, path in found:
        for fn in vars(mod).values():
            marks = getattr(fn, _MARK, None)
            if not callable(fn) or not isinstance(marks, dict):
                continue
            if marks["name"] in seen and seen[marks["name"]][1] is not fn:
                raise UserError(f"{path}: two formulas for {marks['name']} ({seen[marks['name']][0]} and {path}) - "
                                "keep one")
            if marks["name"] not in seen:
                seen[marks["name"]] = (path, fn)
                out.append((marks, fn, path))
    return out


def registry_with(user: list, base: FormulaRegistry = REGISTRY) -> tuple:
    """(registry, standins): a copy of ``base`` with the formulas of :func:`collect`'s list added (flagged
    ``user``), and the {"torch_npu.<op>": standin} they bring. Raises UserError naming the file when a formula
    claims an op that has a built-in one (the built-in counts it already)."""
    reg = FormulaRegistry()
    reg._by_name = dict(base._by_name)
    standins = {}
    for marks, fn, path in user:
        name = marks["name"]
        if name in reg or any(f.python == marks["python"] for f in reg.python_entries() if marks["python"]):
            raise UserError(f"{path}: op_formula({name!r}) - the tracer has a built-in formula for this op; drop "
                            "the user formula (check_flops.py counts the op already)")
        reg.register(name, marks["source"], python=marks["python"])(_counted(name, fn))
        reg._by_name[name].user = True
        if marks["python"]:
            standins[marks["python"]] = marks["standin"]
    return reg, standins
