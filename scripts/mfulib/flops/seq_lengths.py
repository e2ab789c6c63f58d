"""Sequence-length attributes of a case (``actual_seq_lengths`` & co.) against its tensor shapes, for the FLOPs
checker (:mod:`mfulib.flops.check`): lengths beyond the sequence axis, per-batch lists of the wrong size, cumulative
lists that decrease, page-attention lengths beyond the block table; and the padded total a flops.py may have counted.
"""
from __future__ import annotations

import re

from mfulib.core import cases as _cases
from mfulib.core.definitions import FLOAT_DTYPES

_LENGTH_ATTR = re.compile(r"actual_seq|seq_?lens?$|seqlens|cu_seq|kv_?lens?$|context_lens", re.I)


def sequence_length_problems(case: dict, case_id: int = 0) -> list:
    """Problems with length attributes (actual_seq_lengths & co.) against the tensor shapes; [] when consistent.

    Per-batch lists need one non-negative length per batch entry, each at most the sequence axis; cumulative
    lists (``cu_seqlens*``, ``actual_seq_qlen/kvlen``, layout TND) must be non-decreasing and end at most at T.
    Axes follow ``input_layout`` when the case has one (BSH/BSND: [B, S, ...], SBH: [S, B, ...], BNSD:
    [B, N, S, D], TND: [T, N, D]); else [B, S, ...]. With page attention (a ``block_table`` input) the KV lengths
    are checked against the table instead: one per row, each at most its columns x ``block_size``.
    """
    info = _cases.describe_case(case, case_id)
    tensors = [t for t in info.tensors if t.dtype in FLOAT_DTYPES]
    if not tensors:
        return []
    layout = str(info.attrs.get("input_layout") or info.attrs.get("layout") or "BSH").upper().split("_")[0]
    problems = []
    for name, value in info.attrs.items():
        if not _LENGTH_ATTR.search(name) or value is None:
            continue
        vals = value if isinstance(value, list) else [value]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            problems.append(f"{name} = {value!r}: lengths must be integers")
            continue
        ref = tensors[1] if ("kv" in name.lower() and len(tensors) > 1) else tensors[0]
        shp = ref.shape
        table = _block_table_shape(info)
        if table and "kv" in name.lower() and isinstance(value, list):   # page attention: the table bounds KV
            cap = table[-1] * int(info.attrs.get("block_size") or 0)
            if len(vals) != table[0] or max(vals, default=0) > cap:
                problems.append(f"{name} = {vals}: page attention needs one length per block_table row "
                                f"({table[0]}), each at most block_table columns x block_size = {cap}")
            continue
        cumulative = "cu_" in name.lower() or name.lower().endswith(("qlen", "kvlen")) or layout == "TND"
        if any(v < 0 for v in vals):
            problems.append(f"{name} = {vals}: negative length")
            continue
        if cumulative:
            if any(b < a for a, b in zip(vals, vals[1:])):
                problems.append(f"{name} = {vals}: cumulative lengths must not decrease")
            if shp and vals and vals[-1] > shp[0]:
                problems.append(f"{name} ends at {vals[-1]} > {shp[0]} tokens of {ref.name} {shp}")
            continue
        if len(shp) < 2:
            continue
        b_axis, s_axis = {"SBH": (1, 0), "BNSD": (0, 2)}.get(layout, (0, 1))
        if s_axis >= len(shp):
            continue
        if isinstance(value, list) and len(vals) != shp[b_axis]:
            problems.append(f"{name} has {len(vals)} lengths but {ref.name} {shp} has batch {shp[b_axis]} "
                            f"(layout {layout})")
        if max(vals, default=0) > shp[s_axis]:
            problems.append(f"{name} = {vals}: a length exceeds the sequence axis {shp[s_axis]} of {ref.name} {shp} "
                            f"(layout {layout})")
    return problems


def _block_table_shape(info):
    """Shape [B, maxBlockNumPerSeq] of a case's block_table (a tensor input or a nested-list attribute), or None:
    with page attention the KV cache is [blocknum, blocksize, H] and the lengths are bounded by the table."""
    for t in info.tensors:
        if t.name.lower() in ("block_table", "block_tables"):
            return list(t.shape)
    v = info.attrs.get("block_table", info.attrs.get("block_tables"))
    if isinstance(v, list) and v and all(isinstance(r, list) for r in v):
        return [len(v), max(len(r) for r in v)]
    return None


def padded_lengths(case: dict, case_id: int = 0):
    """(sum of actual lengths, padded total b*s) when the case has a per-batch length list, else None."""
    info = _cases.describe_case(case, case_id)
    for name, value in info.attrs.items():
        if _LENGTH_ATTR.search(name) and isinstance(value, list) and value and "cu_" not in name.lower():
            t = next((t for t in info.tensors if t.dtype in FLOAT_DTYPES), None)
            if t is not None and len(t.shape) >= 2 and all(isinstance(v, int) for v in value):
                return sum(value), len(value) * t.shape[1]
    return None
