"""The layout-C runtime: the helpers a layout-C model.py carries, so that it builds each case line's inputs itself.

Layout C (:mod:`mfulib.sources.layoutc`) writes the case file from the reference's own ``get_inputs()`` /
``get_inputs_dyn_list()`` and appends a ``get_input_groups()`` to model.py that calls them again at run time. Both
sides must describe a forward argument list the same way, so these helpers are one definition used twice:
prepare imports this module (:mod:`mfulib.sources.layoutc_workdir`) to write the case lines, and the text below
the ``# ---- inlined into model.py ...`` line (``layoutc_workdir.INLINE_MARK``) is copied verbatim into every
generated model.py (``layoutc_workdir.runtime_source()``), so a work directory stays self-contained: it needs
neither this repository nor ``mfulib`` on ``sys.path``.

What is inlined must run as plain module code in the user's file: only the standard library and torch, every
name prefixed ``_mfu_`` (nothing of the reference is shadowed), no ``from __future__`` import. Case lines follow
the benchmark case format (:mod:`mfulib.core.cases`): a tensor entry has shape and dtype (integer tensors also
``"range": [min, max]`` of the draw), a list of tensors is a ``tensor_list``, anything else an ``attr``.
Importing this module imports torch.
"""

# ---- inlined into model.py from here to the end of the file (layout C reference wrapper) ----

import contextlib as _mfu_contextlib
import json as _mfu_json
import math as _mfu_math
import os as _mfu_os
import sys as _mfu_sys

import torch as _mfu_torch


@_mfu_contextlib.contextmanager
def _mfu_on_host():
    """While the original get_inputs() runs: Tensor.cuda()/.npu() return the tensor itself (built on the host)."""
    saved = {n: getattr(_mfu_torch.Tensor, n) for n in ("cuda", "npu") if hasattr(_mfu_torch.Tensor, n)}
    for n in ("cuda", "npu"):
        setattr(_mfu_torch.Tensor, n, lambda self, *a, **k: self)
    try:
        yield
    finally:
        for n in ("cuda", "npu"):
            if n in saved:
                setattr(_mfu_torch.Tensor, n, saved[n])
            else:
                delattr(_mfu_torch.Tensor, n)


def _mfu_dtype(t):
    return str(t.dtype).replace("torch.", "")


def _mfu_entry(value, name, with_range=True):
    """One case-file input entry for a forward argument (benchmark case format)."""
    T = _mfu_torch.Tensor
    if isinstance(value, T):
        ent = {"name": name, "type": "tensor", "required": True, "dtype": _mfu_dtype(value),
               "shape": [int(d) for d in value.shape]}
        if with_range and value.numel() and value.device.type != "meta" and not value.is_floating_point() \
                and not value.is_complex() and value.dtype != _mfu_torch.bool:
            ent["range"] = [int(value.min().item()), int(value.max().item())]
        return ent
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, T) for v in value):
        return {"name": name, "type": "tensor_list", "required": True, "dtype": _mfu_dtype(value[0]),
                "shapes": [[int(d) for d in v.shape] for v in value]}
    if value is None:
        return {"name": name, "type": "attr", "required": False, "dtype": "none", "value": None}
    for kind, types in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if isinstance(value, types):
            return {"name": name, "type": "attr", "required": True, "dtype": kind, "value": value}
    if isinstance(value, (list, tuple)):
        try:
            plain = _mfu_json.loads(_mfu_json.dumps(list(value)))
            return {"name": name, "type": "attr", "required": True, "dtype": "list", "value": plain}
        except (TypeError, ValueError):
            pass
    return {"name": name, "type": "attr", "required": True, "dtype": "object", "value": repr(value)}


def _mfu_case(group, names, with_range=True):
    """A case line ({"inputs": [...]}) for one forward argument list; names beyond ``names`` are input<i>."""
    return {"inputs": [_mfu_entry(v, names[i] if i < len(names) else "input%d" % i, with_range)
                       for i, v in enumerate(group)]}


def _mfu_signature(case):
    """What identifies a case: per input its type, shape(s), dtype and (attrs) value - names and ranges ignored."""
    sig = []
    for ent in case["inputs"]:
        kind = ent.get("type", "tensor")
        if kind == "tensor":
            sig.append((kind, tuple(ent.get("shape") or ()), ent.get("dtype")))
        elif kind == "tensor_list":
            sig.append((kind, tuple(tuple(s) for s in ent["shapes"]), ent.get("dtype")))
        else:
            sig.append((kind, _mfu_json.dumps(ent.get("value"), sort_keys=True)))
    return tuple(sig)


def _mfu_draw_tensor(shape, dtype_name, rng):
    dtype = getattr(_mfu_torch, dtype_name)
    if dtype == _mfu_torch.bool:
        return _mfu_torch.rand(shape) < 0.5
    if dtype.is_floating_point:
        return _mfu_torch.randn(shape, dtype=dtype)
    lo, hi = rng if rng else (0, 1)
    return _mfu_torch.randint(int(lo), int(hi) + 1, tuple(shape), dtype=dtype)


def _mfu_draw_case(case, where):
    """Forward arguments drawn from a case line itself (a line no get_inputs() draw matches)."""
    out = []
    for ent in case["inputs"]:
        kind = ent.get("type", "tensor")
        if kind == "tensor":
            out.append(_mfu_draw_tensor(ent["shape"], ent["dtype"], ent.get("range")))
        elif kind == "tensor_list":
            out.append([_mfu_draw_tensor(s, ent["dtype"], None) for s in ent["shapes"]])
        elif ent.get("dtype") == "object":
            raise ValueError("case rejected: input %r of this case is a Python object (%s) that only the "
                             "original get_inputs() can build, and the case's shapes match none of its draws (%s)"
                             % (ent.get("name"), ent.get("value"), where))
        else:
            out.append(ent.get("value"))
    return out


def _mfu_as_group(value):
    """One forward argument list from what get_inputs() (or one get_inputs_dyn_list() entry) returns: a list or
    tuple is the argument list, anything else (a lone tensor) is the only argument."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _mfu_pick_groups(case_path, draws):
    """One forward argument list per line of ``case_path``: the matching draw, else one drawn from the line."""
    with open(case_path, encoding="utf-8-sig") as f:
        cases = [_mfu_json.loads(line) for line in f if line.strip()]
    sigs = [_mfu_signature(_mfu_case(g, [], with_range=False)) for g in draws]
    groups = []
    for n, case in enumerate(cases):
        sig = _mfu_signature(case)
        idx = case.get("dyn_index")
        if isinstance(idx, int) and 0 <= idx < len(draws) and sigs[idx] == sig:
            groups.append(draws[idx])
        elif sig in sigs:
            groups.append(draws[sigs.index(sig)])
        else:
            print("warning: %s line %d matches no draw of the reference's own inputs function; its inputs are "
                  "drawn from the line (floats randn, ints in its range, bools 50/50)" % (case_path, n + 1),
                  file=_mfu_sys.stderr)
            groups.append(_mfu_draw_case(case, "%s line %d" % (case_path, n + 1)))
    return groups
