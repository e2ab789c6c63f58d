"""Verification on slices, for a case whose whole reference does not fit in memory while ModelNew runs it.

A reference that materialises more than its kernel (dense [b, h, s, s] attention scores beside a flash kernel)
runs out of memory (:func:`mfulib.core.failures.is_out_of_memory`) at shapes where ModelNew still runs. Then
:func:`verify_on_slices` runs ModelNew on the whole case and the reference on slices of the same inputs, and compares
each with the same slice of ModelNew's output (docs/ARCHITECTURE.md#verify-slices).

Slice rules (:data:`RULES`, tried in this order), each from the symbol analysis of the case file
(:func:`mfulib.core.symbols.analyse`: which input axes are one dimension, and what it means):

* ``batch_slice``: the ``batch`` symbol - batch items are independent in every batched operator;
* ``head_slice``: a ``heads`` symbol on tensor axes (attention-class operators: each head has its own softmax);
  with grouped-query attention (a second ``heads`` symbol, the key/value heads Hkv >= 2, dividing the query heads
  Hq) the unit is one key/value head with its group of g = Hq / Hkv query heads: k/v are cut by units, q by g x
  units, so every slice keeps the reference's Hq / Hkv ratio; where that cannot run (Hkv = 2 is the whole case
  on two units) a unit is one query head with the key/value head it reads (one key/value head, MQA: the query
  heads alone);
* ``row_slice``: a ``seq_q`` symbol that is the query's length only (a ``seq_k`` symbol apart: cross attention,
  or q and k/v given separately): query-row blocks with the full K/V.

A rule applies when its symbol is on a tensor axis of the case with a value >= 2, its followers are tensor axes or
integer attributes (an attribute such as ``head_num`` equal to the sliced axis is set to the slice's length), and
the case has no sequence-length list (a per-batch list would have to be cut with it). An attribute-only symbol (the
heads of ``x [b, s, hidden]`` with ``head_num``) names no axis to cut: no rule.

A rule is trusted for the case only after two checks at run time, both on the reference itself, before any slice is
compared with ModelNew:

1. **the output has the axis**: the reference's output on one unit ``[0, 1)`` differs from ModelNew's whole output
   at exactly one axis per output tensor, where it is w and ModelNew's is L x w (L the units; w = 1, or g for a
   grouped head slice): that is the output axis the slice maps to, w elements per unit;
2. **a sliced reference is the slice of a fuller one**: the reference on units ``[0, 2)`` equals the concatenation
   of its outputs on ``[0, 1)`` and ``[1, 2)`` along that axis, within the case's tolerance. A top-left causal mask
   rebuilt for a row block, a batch statistic (batch norm) or query heads cut apart from their key/value group
   fails here.

Then the blocks: ``n`` = the largest of L/2, L/4, ..., 2 (integer division) units the reference runs; the first
``[0, n)`` and the last ``[max(n, L - n), L)`` block are compared with ModelNew's output; every element of
ModelNew's output between them must be finite. A reference that raises anything but out-of-memory on a slice
(it refuses the sliced shape) makes that rule unusable for the case; the next rule is tried. The row records ``verified_by`` (the rule), ``slices`` {rule, symbol, inputs [[input, axis]],
attributes {name: value on a slice}, units L, block n, compared [[start, stop]], output_axes, rule_check} and
``reference_oom`` (the reference's message on the whole case). No rule that applies and passes its checks: the
status is ``unverified`` (reason ``reference does not fit``, with each rule's reason).
"""
from __future__ import annotations

import gc

from mfulib.core import symbols as _sym
from mfulib.core.failures import is_out_of_memory
from mfulib.core.opdir import clone_tensors, in_directory, tensors_in

RULES = (("batch_slice", ("batch",)), ("head_slice", ("heads",)), ("row_slice", ("seq_q",)))
UNVERIFIED = "unverified"
UNVERIFIED_REASON = "reference does not fit"


class _NoFit(Exception):
    """The reference ran out of memory on a slice."""


def plan_rules(case: dict, info, groups: list) -> list:
    """[(rule name, plan dict or None, why)] for one case line ``case`` (its CaseInfo ``info``; ``groups`` the
    :func:`mfulib.core.symbols.analyse` of its case file; a rule may come twice, grouped heads in two ways). A plan:
    {symbol, units L, cut [(arg index, axis, elements per unit, units per element)], inputs [[name, axis]], attrs
    {arg index: (name, per, div)}, group (g for a grouped head slice, else absent)}."""
    group = next((g for g in groups if info.case_id in g.cases), None)
    if group is None:
        return [(name, None, "the case is in no symbol group") for name, _k in RULES]
    names = [e.get("name", f"input{i}") for i, e in enumerate(case["inputs"])]
    index = {n: i for i, n in enumerate(names)}
    seqlens = [e.get("name") for e in case["inputs"] if e.get("type") == "attr" and
               _sym.SEQLEN_ATTR.search(e.get("name", "")) and isinstance(e.get("value"), list)]
    has_seq_k = any(s.kind == "seq_k" for s in group.symbols)
    at = group.cases.index(info.case_id)
    out = []
    for rule, kinds in RULES:
        cands = [s for s in group.symbols if s.kind in kinds and s.positions and s.positions[0][1] is not None]
        if not cands:
            out.append((rule, None, f"no {'/'.join(kinds)} symbol on a tensor axis"))
            continue
        if seqlens:
            out.append((rule, None, f"sequence-length list {seqlens[0]} would have to be cut with the slice"))
            continue
        if rule == "row_slice" and not has_seq_k:
            out.append((rule, None, "the query length is also the key/value length (one symbol): a row block "
                                    "would cut the keys too"))
            continue
        variants = [([(cands[0], 1, 1)], None)]
        if rule == "head_slice" and len(cands) > 1:
            variants = _head_groups(cands, at)
        for parts, g in variants:
            units = parts[0][0].values[at]
            if units < 2:
                out.append((rule, None, f"{parts[0][0].name} is {units} in this case: nothing to slice"))
                continue
            cut, attrs, why = [], {}, None
            for sym, per, div in parts:
                for name, ax in list(sym.positions) + list(sym.followers):
                    ent = case["inputs"][index[name]]
                    if ent.get("type", "tensor") != "attr":
                        cut.append((index[name], ax, per, div))
                    elif ax is None and isinstance(ent.get("value"), int):
                        attrs[index[name]] = (name, per, div)
                    else:
                        why = f"{name}[{ax}] follows {sym.name}: a list element is not cut"
            plan = {"symbol": parts[0][0].name, "units": units, "cut": cut, "attrs": attrs,
                    "inputs": [[names[c[0]], c[1]] for c in cut]}
            if g and parts[-1][1] > 1:
                plan.update(group=g, symbol=f"{parts[0][0].name} (with {g} {parts[-1][0].name} per unit)")
            elif g:
                plan.update(group=g, symbol=f"{parts[0][0].name} (each with its {parts[-1][0].name}, 1 per {g})")
            out.append((rule, None if why else plan, why))
    return out


def _head_groups(cands: list, at: int) -> list:
    """The head slices from several ``heads`` symbols in case position ``at``, as [(parts, g)] with parts [(symbol,
    elements per unit, units per element)]. Grouped-query attention (the largest, Hq, a multiple g of every other,
    Hkv >= 2): first a unit of one key/value head with its g query heads, then a unit of one query head with the
    key/value heads its block needs (units [a, b) -> key/value heads [a // g, ceil(b / g))): that one runs where two
    key/value heads are the whole case (Hkv = 2), though the reference then sees another heads ratio on a block of
    fewer than g query heads - a reference that fixes the ratio refuses such a slice, and the rule is not used.
    Else (MQA, Hkv = 1, or heads that do not divide): the largest alone, as with one heads symbol."""
    by = sorted(cands, key=lambda s: -s.values[at])
    hq, rest = by[0], by[1:]
    kv = rest[0].values[at]
    if kv >= 2 and hq.values[at] > kv and all(s.values[at] == kv for s in rest) and hq.values[at] % kv == 0:
        g = hq.values[at] // kv
        return [([(s, 1, 1) for s in rest] + [(hq, g, 1)], g), ([(hq, 1, 1)] + [(s, 1, g) for s in rest], g)]
    return [([(hq, 1, 1)], None)]


def _span(start: int, stop: int, per: int, div: int) -> tuple:
    """Units [start, stop) on an axis with ``per`` elements per unit and one element per ``div`` units: the elements
    [start x per // div, ceil(stop x per / div))."""
    return start * per // div, -(-stop * per // div)


def slice_args(args: list, plan: dict, start: int, stop: int) -> list:
    """``args`` with every cut axis narrowed to units [start, stop) (contiguous copies; an axis with p elements per
    unit to [p x start, p x stop); one element per d units to [start // d, ceil(stop / d))) and each following
    integer attribute set to the same count."""
    out = list(args)
    for i, ax, per, div in plan["cut"]:
        lo, hi = _span(start, stop, per, div)
        out[i] = args[i].narrow(ax, lo, hi - lo).contiguous()
    for i, (_name, per, div) in plan["attrs"].items():
        lo, hi = _span(start, stop, per, div)
        out[i] = hi - lo
    return out


def _free(be):
    gc.collect()
    be.empty_cache()


class _Refused(Exception):
    """The reference raised (not out of memory) on a slice: it refuses the sliced shape."""


def _run_ref(ref, args, be):
    import torch
    try:
        with torch.no_grad(), in_directory(ref.staging):
            out = ref.model(*args)
        be.sync()
        return out
    except (Exception, SystemExit) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if is_out_of_memory(exc):
            raise _NoFit(first) from None
        raise _Refused(f"{type(exc).__name__}: {first}"[:300]) from None


def output_axes(one_unit, full, units: int):
    """(axes, widths, None): per output tensor, the one axis where the reference's one-unit output has w elements
    and ModelNew's whole output ``units`` x w, all other axes equal; (None, None, why) when an output has no such
    single axis."""
    ones, fulls = tensors_in(one_unit), tensors_in(full)
    if len(ones) != len(fulls):
        return None, None, f"{len(fulls)} output tensors, the reference on a slice gives {len(ones)}"
    axes, widths = [], []
    for k, (a, b) in enumerate(zip(ones, fulls)):
        diff = [d for d in range(a.dim()) if a.dim() == b.dim() and a.shape[d] != b.shape[d]]
        if a.dim() != b.dim() or len(diff) != 1 or a.shape[diff[0]] * units != b.shape[diff[0]]:
            return None, None, (f"output {k}: shape {tuple(a.shape)} on one unit vs {tuple(b.shape)} whole - the "
                                "output has no axis of the sliced dimension")
        axes.append(diff[0])
        widths.append(a.shape[diff[0]])
    return axes, widths, None


def _narrow(out, axes, start, stop, widths):
    return [t.narrow(ax, start * w, (stop - start) * w) for t, ax, w in zip(tensors_in(out), axes, widths)]


def _cat(parts, axes):
    import torch
    return [torch.cat([tensors_in(p)[k] for p in parts], dim=ax) for k, ax in enumerate(axes)]


def try_rule(ref, pristine, impl_out, plan, tol, be, compare):
    """(row fields, None) when ``plan`` verified the case (status pass or fail), or (None, why the rule is not
    usable). ``ref``: the reference's BuiltCase; ``pristine``: the untouched inputs; ``compare``:
    :func:`mfulib.verify.correctness.compare_outputs`."""
    import torch
    units = plan["units"]
    try:
        one = _run_ref(ref, slice_args(pristine, plan, 0, 1), be)
        axes, widths, why = output_axes(one, impl_out, units)
        if axes is None:
            return None, why
        second = _run_ref(ref, slice_args(pristine, plan, 1, 2), be)
        two = _run_ref(ref, slice_args(pristine, plan, 0, 2), be)
    except _NoFit as exc:
        return None, f"the reference does not fit on 2 units either ({exc})"
    except _Refused as exc:
        return None, f"the reference refuses a slice ({exc})"
    check = compare(two, _cat([one, second], axes), tol)
    if not check["ok"]:
        return None, (f"the reference on units [0, 2) differs from its units [0, 1) and [1, 2) joined "
                      f"({check.get('reason')}): the slices are not independent")
    del one, second
    block, first = 2, two
    n = units // 2
    while n > 2:  # the largest block the reference runs: L/2, L/4, ... (2 is known to run)
        _free(be)
        try:
            first = _run_ref(ref, slice_args(pristine, plan, 0, n), be)
            block = n
            break
        except _NoFit:
            n //= 2
        except _Refused as exc:
            return None, f"the reference refuses a block of {n} units ({exc})"
    del two
    res = compare(first, _narrow(impl_out, axes, 0, block, widths), tol)
    del first
    compared, worst = [[0, block]], res.get("max_norm_err") or 0.0
    tail = max(block, units - block)  # the last block [tail, units), shorter when L < 2n
    if res["ok"] and tail < units:
        _free(be)
        try:
            last = _run_ref(ref, slice_args(pristine, plan, tail, units), be)
        except _NoFit as exc:
            return None, f"the reference ran out of memory on block [{tail}, {units}) ({exc})"
        except _Refused as exc:
            return None, f"the reference refuses block [{tail}, {units}) ({exc})"
        res = compare(last, _narrow(impl_out, axes, tail, units, widths), tol)
        del last
        compared.append([tail, units])
        worst = max(worst, res.get("max_norm_err") or 0.0)
    bad = None if res["ok"] else f"units {compared[-1]} of {units}: {res.get('reason')}"
    if bad is None and tail > block and not all(bool(torch.isfinite(t).all())
                                                for t in _narrow(impl_out, axes, block, tail, widths)):
        bad = f"ModelNew's output holds non-finite values outside the compared slices (units [{block}, {tail}))"
    covered = sum(b - a for a, b in compared)
    reason = bad if bad else (f"the whole reference does not fit: verified on {covered} of {units} "
                              f"{plan['symbol']} units ({', '.join(f'[{a}, {b})' for a, b in compared)}), "
                              "the rest of ModelNew's output finite")
    return {"status": "fail" if bad else "pass", "reason": reason, "max_norm_err": worst,
            "slices": {"symbol": plan["symbol"], "inputs": plan["inputs"], "units": units, "block": block,
                       "compared": compared, "output_axes": axes, "output_widths": widths,
                       **({"group": plan["group"]} if plan.get("group") else {}),
                       "attributes": {n: "slice length" if per == div == 1 else f"{per} x slice length"
                                      if div == 1 else f"slice length / {div}, rounded up"
                                      for n, per, div in plan["attrs"].values()},
                       "rule_check": "reference on units [0, 2) == its [0, 1) and [1, 2) joined; its one-unit "
                                     "output has the axis"}}, None


def verify_on_slices(opdir, case_id: int, ref, pristine: list, device: str, seed: int, be, tol: float, row: dict,
                     oom_msg: str, share_weights, compare) -> dict:
    """Finish ``row`` (:func:`mfulib.verify.correctness.verify_case`'s) for a case whose reference ``ref`` (its
    BuiltCase) ran out of memory (``oom_msg``) on the whole inputs ``pristine``: ModelNew on the whole case, the
    reference on slices (module docstring). ``share_weights(ref_model, impl_model)`` and ``compare(ref_out,
    impl_out, tol)`` are verify_case's (:func:`mfulib.verify.correctness.compare_outputs`; passed in, so this
    module imports nothing of the module that calls it).
    Returns the row: status pass | fail (``verified_by`` the rule), ``unverified`` (no rule fits), or oom/error
    when ModelNew itself fails (classified by :func:`mfulib.core.failures.classify`)."""
    import torch

    from mfulib.core.failures import classify
    row["reference_oom"] = oom_msg
    ref.args = None  # the draw the reference may have written into; the slices come from ``pristine``
    _free(be)
    impl = None
    try:
        impl = opdir.build_case(case_id, impl="asc", seed=seed, device=device, args=clone_tensors(pristine))
        if hasattr(impl.model, "load_state_dict"):
            share_weights(ref.model, impl.model)
        with torch.no_grad():
            impl_out = impl.run()
        be.sync()
    except (Exception, SystemExit) as exc:
        status, msg = classify(exc)
        row.update(status=status, reason=f"implementation: {msg} (the reference did not fit either: {oom_msg})")
        return row
    finally:
        if impl is not None:
            impl.args = None
            impl.close()
    groups = _sym.analyse(opdir.describe_all())
    info = opdir.describe(case_id)
    tried = []
    for rule, plan, why in plan_rules(opdir.read_cases()[case_id], info, groups):
        if plan is not None:
            fields, why = try_rule(ref, pristine, impl_out, plan, tol, be, compare)
            if fields is not None:
                fields["slices"]["rule"] = rule
                row.update(fields, verified_by=rule)
                return row
        tried.append(f"{rule}: {why}")
    row.update(status=UNVERIFIED, verified_by=None,
               reason=f"{UNVERIFIED_REASON} (reference: {oom_msg}); no slice verifies it - " + "; ".join(tried))
    return row
