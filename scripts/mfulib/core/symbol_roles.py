"""Operator roles of a case file, read with the symbol analysis (:mod:`mfulib.core.symbols`; its companion, kept
apart only because that module is at the size limit): which tensors are an attention's query / key / value and
what its dense size is, which are a grouped matmul's operands. The FLOPs checker bounds a count with them
(:mod:`mfulib.flops.bounds`).

Attention (:func:`attention_roles`): query / key / value by name (``q``/``query``, ``k``/``key``, ``v``/``value``);
axes from the layout letters of ``input_layout`` / ``layout`` / ``layout_query`` and ``layout_kv`` / ``layout_key``
(:data:`mfulib.core.symbols.LAYOUT_KIND`: BSND, BNSD, BSH, SBH, TND; a ``PA_`` prefix is a paged KV cache
[blocks, block_size, N, D] / [blocks, block_size, H]); without a layout, rank-3 tensors follow torch's SDPA
convention [batch, S, E] (E = heads x head dim when the heads are not split off) and rank-4 ones the heads / sequence
kinds the symbol analysis names over the whole case file (grouped-query divisibility, sequence-length lists).
Dense size: every query attends every key of its sequence - for packed TND tokens every key of the whole buffer,
for a paged cache every slot the block table can address (``block_table`` columns x ``block_size``) - so it is an
upper bound of any causal, windowed, sparse or variable-length count of the same shapes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from mfulib.core import symbols
from mfulib.core.symbol_rules import KEY_NAME as _K, QUERY_NAME as _Q, VALUE_NAME as _V

_KV_HEADS = re.compile(r"^(num_key_value_heads|kv_head_num|num_kv_heads|n_kv_heads)$", re.I)
_OFFSETS = re.compile(r"^(offs|offsets|group_list|group_sizes|batch_sizes|tokens_per_expert|m_splits?|"
                      r"split_sizes|expert_tokens|expert_offsets)$", re.I)


@dataclass
class AttentionRoles:
    """Attention roles of one case: tensor names, layout, and ``dims`` {b, n_q, s_q, s_k, d, d_v} with ``b`` the
    product of the leading batch axes and ``d`` including a rope part; ``dims`` None and ``missing`` saying why
    when the shapes do not say."""
    query: str
    key: str
    value: str | None
    layout: str | None = None
    paged: bool = False
    dims: dict | None = None
    missing: list = field(default_factory=list)

    def dense_flops(self) -> int | None:
        """2 * b * n_q * s_q * s_k * (d + d_v): QK^T and PV over every (query, key) pair, None without dims."""
        if self.dims is None:
            return None
        g = self.dims
        return 2 * g["b"] * g["n_q"] * g["s_q"] * g["s_k"] * (g["d"] + g["d_v"])


def _find(info, rx, floating=True):
    return next((t for t in info.tensors if rx.match(t.name) and t.shapes is None), None)


def _lay(info, names):
    for n in names:
        v = info.attrs.get(n)
        if isinstance(v, str) and v:
            u = v.upper()
            paged = u.startswith("PA_")
            return (u[3:] if paged else u).split("_")[0], paged
    return None, False


def _axes(letters, shape):
    """{letter: size} of a tensor in a layout; None when the rank does not fit the letters."""
    return dict(zip(letters, shape)) if letters and len(letters) == len(shape) else None


def _int_attr(info, rx):
    for n, v in info.attrs.items():
        if rx.match(n) and isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def attention_roles(infos: list) -> dict:
    """{case id: AttentionRoles} for the cases of ``infos`` (:func:`mfulib.core.cases.describe_case` rows) that
    have a query and a key tensor by name; cases without them are left out (not attention-shaped)."""
    kinds = _axis_kinds(infos)
    out = {}
    for info in infos:
        q, k = _find(info, _Q), _find(info, _K)
        if q is None or k is None:
            continue
        v = _find(info, _V)
        roles = AttentionRoles(query=q.name, key=k.name, value=v.name if v else None)
        lay_q, _ = _lay(info, ("input_layout", "layout", "layout_query"))
        lay_k, roles.paged = _lay(info, ("layout_kv", "layout_key", "input_layout", "layout"))
        roles.layout = lay_q
        if v is None:
            roles.missing.append("a value tensor (v / value)")
            out[info.case_id] = roles
            continue
        try:
            roles.dims = _dims(info, q, k, v, lay_q, lay_k or lay_q, roles.paged, kinds, roles.missing)
        except (KeyError, ZeroDivisionError, IndexError) as exc:
            roles.missing.append(f"shapes that fit the layout ({type(exc).__name__}: {exc})")
        if roles.dims is not None:
            rope = next((t for t in info.tensors if t.name.lower() in ("query_rope", "q_rope")), None)
            roles.dims["d"] += rope.shape[-1] if rope is not None else 0
        out[info.case_id] = roles
    return out


def _dims(info, q, k, v, lay_q, lay_k, paged, kinds, missing):
    qs, ks, vs = list(q.shape), list(k.shape), list(v.shape)
    if lay_q is None:
        return _dims_unlaid(qs, ks, vs, q.name, k.name, kinds, missing)
    qa = _axes(lay_q, qs)
    if qa is None:
        missing.append(f"{q.name} {qs} does not fit input_layout {lay_q}")
        return None
    s_q = qa.get("S", qa.get("T"))
    b = qa.get("B", 1)
    if "H" in qa:
        n_q = _int_attr(info, symbols.HEADS_ATTR)
        if n_q is None or qa["H"] % n_q:
            missing.append(f"the query heads (a head_num attribute dividing hidden {qa['H']})")
            return None
        d = qa["H"] // n_q
    else:
        n_q, d = qa["N"], qa["D"]
    s_k, h_v = _key_len(info, ks, lay_k, paged, missing), vs[-1]
    if s_k is None:
        return None
    d_v = h_v
    if len(vs) == 3 and lay_k != "TND":  # [B, S, H_v] / [blocks, block_size, H_v]: per KV head
        n_kv = _int_attr(info, _KV_HEADS) or (ks[-1] // d if d and ks[-1] % d == 0 else n_q)
        d_v = h_v // n_kv
    return {"b": b, "n_q": n_q, "s_q": s_q, "s_k": s_k, "d": d, "d_v": d_v}


def _key_len(info, ks, lay_k, paged, missing):
    """Keys a query can reach: the key's S (all T tokens when packed), or every slot of a paged cache (a PA_
    layout or a block_table input): block_table columns x block_size (the attribute, else the cache's block axis),
    every cache slot without a table."""
    table = _block_table(info)
    if paged or table is not None:
        block = info.attrs.get("block_size")
        if not isinstance(block, int) or block <= 0:
            block = ks[2] if len(ks) == 4 and lay_k == "BNSD" else ks[1]
        return table[1] * block if table is not None else ks[0] * block
    ka = _axes(lay_k, ks)
    if ka is None:
        missing.append(f"key {ks} does not fit layout {lay_k}")
        return None
    return ka.get("S", ka.get("T"))


def _block_table(info):
    """[B, max blocks per sequence] of a block_table tensor input or nested-list attribute, else None."""
    t = next((t for t in info.tensors if t.name.lower() in ("block_table", "block_tables")), None)
    if t is not None:
        return list(t.shape) if len(t.shape) == 2 else None
    v = info.attrs.get("block_table", info.attrs.get("block_tables"))
    if isinstance(v, list) and v and all(isinstance(r, list) for r in v):
        return [len(v), max(len(r) for r in v)]
    return None


def _dims_unlaid(qs, ks, vs, qn, kn, kinds, missing):
    """Rank 3: torch SDPA's [batch, S, E] (heads folded into E or batch); rank 4: the symbol analysis' kinds."""
    if len(qs) == 3 and len(ks) == 3 and len(vs) == 3:
        if ks[2] == 0 or qs[2] % ks[2]:
            missing.append(f"query/key hidden sizes {qs[2]}/{ks[2]} that pair (no layout attribute)")
            return None
        return {"b": qs[0], "n_q": 1, "s_q": qs[1], "s_k": ks[1], "d": qs[2], "d_v": vs[2] * (qs[2] // ks[2])}
    if len(qs) == 4 and len(ks) == 4 and len(vs) == 4:
        heads = [a for a in (1, 2) if kinds.get((qn, a)) == "heads"]
        seqs = [a for a in (1, 2) if kinds.get((qn, a)) in ("seq", "seq_q")]
        kseq = [a for a in (1, 2) if kinds.get((kn, a)) in ("seq", "seq_k", "seq_q")]
        if len(heads) == 1 and len(seqs) == 1 and heads != seqs and kseq == seqs:
            return {"b": qs[0], "n_q": qs[heads[0]], "s_q": qs[seqs[0]], "s_k": ks[seqs[0]], "d": qs[3],
                    "d_v": vs[3]}
        missing.append(f"which middle axis of {qn} {qs} is heads and which the sequence (no input_layout; "
                       "the case file does not tell them apart)")
        return None
    missing.append(f"a layout attribute for {qn} {qs} / {kn} {ks}")
    return None


def _axis_kinds(infos):
    """{(tensor, axis): kind} the symbol analysis names (first group that has the position)."""
    out = {}
    try:
        groups = symbols.analyse(infos)
    except Exception:  # a case file the analysis cannot read: no kinds, the roles say what is missing
        return out
    for g in groups:
        for s in g.symbols:
            for pos in s.positions:
                out.setdefault(tuple(pos), s.kind)
    return out


def grouped_matmul_operands(info) -> dict | None:
    """{"a", "b", "offsets", "ungrouped_flops"} of a grouped matmul case, None when the case has no such pair.

    The operands are the first two floating tensors whose contraction axes meet (A [M, K] x B [G, K, N], [G, M, K]
    x [G, K, N], [G, M, K] x [K, N]; [M, K] x [K, N] only beside a group-offsets input); ``offsets`` the input named
    like offs / group_list / group_sizes (None without one). ``ungrouped_flops``: the product with every row,
    contraction entry and column used once, 2 * M * K * N (times G for [G, M, K] x [G, K, N]) - what no grouping
    of the same operands exceeds."""
    floats = [t for t in info.tensors if t.shapes is None and t.dtype in ("float16", "bfloat16", "float32",
                                                                            "float64", "float8_e4m3fn")]
    offsets = next((n for n in info.order if _OFFSETS.match(str(n))), None)
    if len(floats) < 2:
        return None
    a, b = floats[0], floats[1]
    sa, sb = list(a.shape), list(b.shape)
    ranks = (len(sa), len(sb))
    if ranks == (2, 3) and sa[1] == sb[1]:
        flops = 2 * sa[0] * sa[1] * sb[2]
    elif ranks == (3, 3) and sa[2] == sb[1] and sa[0] == sb[0]:
        flops = 2 * sa[0] * sa[1] * sa[2] * sb[2]
    elif ranks == (3, 2) and sa[2] == sb[0]:
        flops = 2 * sa[1] * sa[2] * sb[1]
    elif ranks == (2, 2) and sa[1] == sb[0] and offsets is not None:
        flops = 2 * sa[0] * sa[1] * sb[1]
    else:
        return None
    return {"a": a.name, "b": b.name, "offsets": offsets, "ungrouped_flops": flops}
