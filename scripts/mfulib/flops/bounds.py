"""Class bounds of the FLOPs checker (:mod:`mfulib.flops.check`): counts no operator of a class can exceed.

* **Attention**: no causal, windowed, sparse (top-k, index lists), variable-length or paged count exceeds the
  dense count of the same shapes, ``2 * b * n_q * s_q * s_k * (d + d_v)`` (every query with every key it could
  reach: :func:`mfulib.core.symbol_roles.attention_roles`); where the tracer ran, the linear layers it counted
  (``aten::mm`` / ``aten::addmm``: projections beside the attention) are added to the bound.
* **Grouped matmul**: no grouping of A and B exceeds their ungrouped product (every row, contraction entry and
  column used once: :func:`mfulib.core.symbol_roles.grouped_matmul_operands`).

A count above its bound fails ("exceeds dense attention", "exceeds the ungrouped product"). An attention or grouped
case whose roles the shapes do not give is ``unverified`` naming what is missing - unless the tracer's own count
verified flops.py, which the bound then does not add to (``skip``, with the reason).
"""
from __future__ import annotations

import re

from mfulib.core.symbol_roles import attention_roles, grouped_matmul_operands

_ATTENTION_OP = re.compile(r"attention|scaled_dot_product|attn", re.I)
_GROUPED_OP = re.compile(r"grouped_mm|grouped_matmul|(^|[:._])gmm", re.I)
_PROJECTIONS = ("aten::mm", "aten::addmm")


def _check(name, status, detail):
    return {"name": name, "status": status, "detail": detail}


_MEMO: dict = {}  # id(infos) -> (infos, roles): one case file's roles, read once for all its cases


def _roles(infos):
    hit = _MEMO.get(id(infos))
    if hit is None or hit[0] is not infos:
        _MEMO.clear()
        hit = _MEMO[id(infos)] = (infos, attention_roles(infos))
    return hit[1]


def _ops(tr, rx):
    names = set(getattr(tr, "by_op", {}) or {}) | set(getattr(tr, "formula_flops", {}) or {}) | \
        set(getattr(tr, "unseen_ops", {}) or {})
    return sorted(n for n in names if rx.search(n))


def class_bound_checks(ev: dict, tr, tracer_status: str, infos: list, case_id: int,
                       tolerance: float = 0.01) -> list:
    """The class-bound checks of one case: [] when it is neither attention nor a grouped matmul.

    ``ev``: :func:`mfulib.flops.contract.evaluate_case`'s row; ``tr``: the case's
    :class:`mfulib.flops.tracer.TraceResult`; ``tracer_status``: the tracer check's status ("pass" = the tracer
    verified flops.py); ``infos``: every case of the file described (:func:`mfulib.core.cases.describe_case`; the
    roles of 4-D tensors are read across cases). A count within ``tolerance`` above its bound still passes."""
    f = ev.get("flops") if ev.get("status") == "ok" else None
    if not f:
        return []
    info = next(i for i in infos if i.case_id == case_id)
    att = _roles(infos).get(case_id)
    att_ops = _ops(tr, _ATTENTION_OP)
    gmm = grouped_matmul_operands(info)
    gmm_ops = _ops(tr, _GROUPED_OP)
    out = []
    if att is not None or att_ops:
        out.append(_attention_bound(f, att, att_ops, tr, tracer_status, tolerance))
    if gmm_ops or (gmm is not None and gmm["offsets"]):
        out.append(_grouped_bound(f, gmm, gmm_ops, info, tracer_status, tolerance))
    return out


def _unknown(name, what, missing, tracer_status):
    detail = f"{what} roles unknown: needs {'; '.join(missing)}"
    if tracer_status == "pass":
        return _check(name, "skip", detail + " - the tracer's count verified flops.py")
    return _check(name, "unverified", f"unverified: {detail} - no bound holds this count; give the case file "
                  "those inputs (names, input_layout) or check flops.py by hand")


def _attention_bound(f, att, att_ops, tr, tracer_status, tolerance):
    name = "attention_bound"
    if att is None or att.dims is None:
        missing = att.missing if att is not None else \
            [f"query / key / value tensors by name (q/query, k/key, v/value) for {', '.join(att_ops)}"]
        return _unknown(name, "attention", missing, tracer_status)
    dense = att.dense_flops()
    proj = sum(tr.by_op.get(op, 0.0) for op in _PROJECTIONS) if getattr(tr, "status", None) == "ok" else 0.0
    g = att.dims
    bound = dense + proj
    what = (f"dense attention of the same shapes 2 * b {g['b']} * n_q {g['n_q']} * s_q {g['s_q']} * s_k {g['s_k']} "
            f"* (d {g['d']} + d_v {g['d_v']}) = {dense}" + (f" + projections {proj:.4g}" if proj else "")
            + f" ({att.query}/{att.key}/{att.value}, layout {att.layout or 'none'}{', paged KV' if att.paged else ''})")
    if f > bound * (1 + tolerance):
        return _check(name, "fail", f"flops.py {f:.4g} exceeds {what} by {f / bound:.3g}x: a causal, sparse or "
                      "variable-length count is at most the dense one - count the keys each query reads (index "
                      "tensors, lengths), not a default or the padded maximum")
    return _check(name, "pass", f"flops.py {f:.4g} is {f / bound:.3g} of {what}")


def _grouped_bound(f, gmm, gmm_ops, info, tracer_status, tolerance):
    name = "grouped_matmul_bound"
    if gmm is None:
        floats = ", ".join(f"{t.name} {list(t.shape)}" for t in info.tensors[:4])
        return _unknown(name, "grouped matmul", [f"two operands whose contraction axes meet (A [M, K] x B [G, K, N], "
                        f"[G, M, K] x [G, K, N]); the case has {floats or 'no tensors'}"
                        + (f" for {', '.join(gmm_ops)}" if gmm_ops else "")], tracer_status)
    bound = gmm["ungrouped_flops"]
    what = (f"the ungrouped product of {gmm['a']} {info.tensor(gmm['a']).shape} and {gmm['b']} "
            f"{info.tensor(gmm['b']).shape} = {bound}")
    if f > bound * (1 + tolerance):
        return _check(name, "fail", f"flops.py {f:.4g} exceeds {what} by {f / bound:.3g}x: groups split the "
                      "rows (or columns) of one product - offsets are END offsets (torch: offs[i] ends group i), "
                      "rows past the last one are not computed")
    return _check(name, "pass", f"flops.py {f:.4g} is {f / bound:.3g} of {what}")
