"""Attention templates of the flops.py generator (:mod:`mfulib.flops.drafts`): the text of each draft.

Dense/GQA/window/varlen/paged attention and the MHA block (``T_MHA``, ``T_ATTENTION`` + ``BODY_*``), the torch_npu
fused attention ops: ``npu_fusion_attention`` (``T_NPU_FA``), ``npu_fused_infer_attention_score`` (``T_NPU_FIA``:
BSH/BSND/BNSD/TND, num_key_value_heads, actual_seq_lengths[_kv], sparse_mode, query_rope), and the DeepSeek
sparse-attention pair ``npu_sparse_flash_attention`` (``T_SPARSE_FA``) / ``npu_lightning_indexer``
(``T_LIGHTNING``), whose counts depend on index values or a FLOP convention and so carry REVIEW markers.
Sources of the formulas: the Ascend torch_npu operator docs (hiascend.com PyTorch API list; op-plugin and
ops-transformer docs), the same as the tracer's (:mod:`mfulib.flops.formulas`, :mod:`mfulib.flops.npu_formulas`).
:func:`render_npu_attention` fills the three torch_npu inference/sparse templates from a case view.
"""
from __future__ import annotations

import string

from mfulib.flops.drafts.evidence import forward_params

T_MHA = '''
NUM_PROJECTIONS = $n_proj   # q, k, v and the output projection, each [hidden, hidden] (a fused qkv counts the same)


def flops_parts(case):
    b, s, hidden = shape(case, "$x")                  # x [b, s, hidden]
$heads_check    causal = $causal_expr
    pairs = attention_pairs(s, s, causal=causal)      # self-attention: s_q == s_k, top-left causal
    return {
        "proj": NUM_PROJECTIONS * matmul_flops(b * s, hidden, hidden),
        "attn": attention_flops(pairs, 1, hidden, hidden, batch=b),   # heads x head_dim = hidden
    }


def flops(case):
    return float(sum(flops_parts(case).values()))
'''

T_ATTENTION = '''
LAYOUT = "$layout"$layout_note
ALIGN = "$align"$align_note


def _pairs(case, s_q, s_k):
    causal = $causal_expr
$window_line    return attention_pairs(s_q, s_k, causal=causal, align=ALIGN, window_left=window_left)


def flops_parts(case):
    dims = attention_dims(case, "$q", "$k", "$v", $layout_expr$head_arg)
    hq, d, d_v = dims["hq"], dims["d"], dims["d_v"]
$body    return {"attn": total}


def flops(case):
    return float(sum(flops_parts(case).values()))
'''

T_DECODE = '''
KEY_LENGTH_AXIS = $l_axis   # REVIEW: axis of $k that is the key length (the other middle axis is the kv heads)


def flops_parts(case):
    # decode attention: one query token per sequence, $q [B, Hq, D] against $k / $v [B, ?, ?, D]
    b, hq, d = shape(case, "$q")
    s_k, d_v = shape(case, "$k")[KEY_LENGTH_AXIS], shape(case, "$v")[-1]
    # REVIEW: every key counts; a kv-length list or mask that pads the keys counts only the valid ones
    return {"attn": attention_flops(s_k, hq, d, d_v, batch=b)}   # 1 query x s_k keys per (batch, head)


def flops(case):
    return float(sum(flops_parts(case).values()))
'''


BODY_DENSE = '''    total = attention_flops(_pairs(case, dims["s_q"], dims["s_k"]), hq, d, d_v, batch=dims["b"])
'''

BODY_VARLEN = '''    lengths = attr(case, "$lengths")                  # REVIEW: per-sequence lengths (not cumulative), keys = queries?
    total = 0
    for n in lengths:                                # count each sequence at its real length, never the padded one
        total += attention_flops(_pairs(case, n, n), hq, d, d_v)
'''

BODY_SPARSE = '''    # REVIEW: sparse attention - count only the keys each query really reads (e.g. s_q * topk), not s_q * s_k
    total = attention_flops(_pairs(case, dims["s_q"], dims["s_k"]), hq, d, d_v, batch=dims["b"])
'''

BODY_TOPK_BLOCKS = '''    # REVIEW: top-k block selection - each query reads topk * block keys (fewer when s_k is shorter): check model.py
    block = $block
    keys = min(int(attr(case, "$topk")) * block, dims["s_k"])
    total = attention_flops(dims["s_q"] * keys, hq, d, d_v, batch=dims["b"])
    # REVIEW: the selection scores: query x one summary key per block (2 * d per pair) - check how model.py scores
    # REVIEW: the blocks (a mean-pooled key, a separate indexer, or none) and drop or change this line to match
    total += attention_flops(dims["s_q"] * (dims["s_k"] // block), hq, d, 0, batch=dims["b"])
'''

BODY_PAGED = '''    # REVIEW: paged KV - s_k must be each sequence's cached length (actual_seq_lengths_kv), not the block-table capacity
    total = attention_flops(_pairs(case, dims["s_q"], dims["s_k"]), hq, d, d_v, batch=dims["b"])
'''

T_NPU_FA = '''
UNSUPPORTED = {1: "allMask needs the atten_mask values", 5: "prefix needs the prefix list",
               6: "prefix (compressed) needs prefix and the compressed mask", 7: "varlen needs TND + actual_seq_qlen",
               8: "varlen needs TND + actual_seq_qlen"}   # REVIEW: modes the reference rejects in this case file


def flops_parts(case):
    mode = int(attr(case, "$mode", 0))
    if mode in UNSUPPORTED:
        raise ValueError(f"case rejected: sparse_mode {mode}: {UNSUPPORTED[mode]}")
    dims = attention_dims(case, "$q", "$k", "$v", attr(case, "$layout"), int(attr(case, "$heads")))
    pairs = npu_sparse_pairs(mode, dims["s_q"], dims["s_k"], attr(case, "$pre", 2147483647),
                             attr(case, "$next", 2147483647), atten_mask=$has_mask)   # dropout: no FLOPs
    return {"attn": attention_flops(pairs, dims["hq"], dims["d"], dims["d_v"], batch=dims["b"])}


def flops(case):
    return float(sum(flops_parts(case).values()))
'''


T_NPU_FIA = '''
HAS_MASK = $has_mask   # sparse_mode 0 with an atten_mask keeps the pre/next-token band; without one every pair
$paged_note

def _lengths(case, name, n, default, cumulative):
    # actual_seq_lengths[_kv]: one length per batch (cumulative for TND, as the Ascend docs say); absent: the shape
    vals = attr(case, name, None)
    if vals is None:
        return [default] * n
    vals = [int(x) for x in (vals if isinstance(vals, (list, tuple)) else [vals])]
    if cumulative:
        vals = [b - a for a, b in zip([0] + vals[:-1], vals)]
    return vals * n if len(vals) == 1 and n > 1 else vals


def _paged_dims(case, layout, heads, n_kv):
    # page attention (Ascend docs): the KV caches are [blocknum, blocksize, H] or [blocknum, N_kv, blocksize, D]
    # whatever input_layout says; block_table [B, maxBlockNumPerSeq]; the query keeps its layout
    q, v = shape(case, "$q"), shape(case, "$v")
    b, s_q, d = {"BSH": (q[0], q[1], q[-1] // heads), "BSND": (q[0], q[1], q[-1]), "BNSD": (q[0], q[2], q[-1]),
                 "TND": (None, q[0], q[-1])}[layout]
    d_v = v[-1] // n_kv if len(v) == 3 else v[-1]
    return {"b": b, "hq": heads, "hkv": n_kv, "s_q": s_q, "s_k": 0, "d": d, "d_v": d_v}


def flops_parts(case):
    # torch_npu.npu_fused_infer_attention_score (Ascend docs): 2 * N_q * (D + D_rope + D_v) per unmasked
    # (query, key) pair of every sequence; GQA shares K/V heads, each query head still does QK^T and PV
    layout = str(attr(case, "$layout", "BSH")).upper().split("_")[0]     # BSH is the op's default layout
    heads = int(attr(case, "$heads", 1))
    n_kv = int(attr(case, "$kv_heads", 0)) or heads                      # 0 = num_heads (no GQA)
    if $paged_test:
        if attr(case, "$seq_kv", None) is None:
            raise ValueError("case rejected: page attention needs actual_seq_lengths_kv (Ascend docs)")
        dims = _paged_dims(case, layout, heads, n_kv)
    else:
        dims = attention_dims(case, "$q", "$k", "$v", layout, heads)
        if n_kv != dims["hkv"]:
            raise ValueError(f"case rejected: num_key_value_heads {n_kv} but the key has {dims['hkv']} heads")
    tnd = layout == "TND"
    if tnd and (attr(case, "$seq", None) is None or attr(case, "$seq_kv", None) is None):
        raise ValueError("case rejected: TND needs actual_seq_lengths and actual_seq_lengths_kv (cumulative)")
    n = len(attr(case, "$seq")) if tnd else dims["b"]
    s_q = _lengths(case, "$seq", n, dims["s_q"], tnd)
    s_k = _lengths(case, "$seq_kv", len(s_q), dims["s_k"], tnd)
    mode = int(attr(case, "$mode", 0))
    pre, nxt = attr(case, "$pre", 2147483647), attr(case, "$next", 2147483647)
    pairs = sum(npu_sparse_pairs(mode, a, b, pre, nxt, atten_mask=HAS_MASK) for a, b in zip(s_q, s_k))
    d_rope = shape(case, "$rope")[-1] if has(case, "$rope") else 0       # MLA: query_rope widens QK^T
    return {"attn": attention_flops(pairs, dims["hq"], dims["d"] + d_rope, dims["d_v"])}


def flops(case):
    return float(sum(flops_parts(case).values()))
'''

T_SPARSE_FA = """
SPARSE_BLOCK = $block_expr   # keys per selected index (sparse_block_size; 1 = token-level selection)
$recorded

$value_fn

$selected_fn

def flops_parts(case, args):
    # torch_npu.npu_sparse_flash_attention (Ascend docs): softmax(Q K~^T) V~ over the keys sparse_indices selects:
    # 2 * N1 * selected_keys * (D + D_rope + D_v) per query token. query [B, S1, N1, D] (BSND) or [T, N1, D] (TND)
    q, v = shape(case, "$q"), shape(case, "$v")
    n1, d, d_v = q[-2], q[-1], v[-1]
    d_rope = shape(case, "$rope")[-1] if has(case, "$rope") else 0
    selected = selected_keys(case, args) * SPARSE_BLOCK       # keys read per query head, summed over tokens
    return {$parts_expr}
$indexer_fn

def flops(case, args):
    return float(sum(flops_parts(case, args).values()))
"""

T_SELECTED_FROM_VALUES = """
def selected_keys(case, args):
    # the index slots sparse_indices really fills, counted on the drawn values - never a sparse_count default:
    # per row the entries before the first -1 (padding ends a row's list). sparse_indices [B, S1, N2, K] /
    # [T, N2, K]: the N1 / N2 query heads of a KV head share its list, so each query head reads total / N2 keys
    import torch
    idx = torch.as_tensor(_value(case, args, "$idx", $idx_pos))
    if idx.device.type == "meta":
        raise RuntimeError("sparse_indices came without values (meta): the selected keys cannot be counted")
    n2 = idx.shape[-2] if idx.dim() >= 3 else 1
    return int(torch.cumprod((idx >= 0).to(torch.int64), dim=-1).sum().item()) // n2
"""

T_SELECTED_UPPER_BOUND = """
def selected_keys(case, args):
    # REVIEW: sparse_indices is computed inside forward() (no input carries it): every index slot is counted, an
    # REVIEW: upper bound - a -1 ends a token's list and causal rows select fewer keys; count them if you can
    q = shape(case, "$q")
    return math.prod(q[:-2]) * int(attr(case, "$count"))     # query tokens x the case's sparse_count
"""

T_VALUE_FN = """

def _value(case, args, name, pos):
    # an input's values: the case file's attribute, else the forward argument the seeded draw built (model.py's
    # get_input_groups(), the draw verify and collect time; flops(case, args) receives it)
    if has(case, name):
        try:
            return attr(case, name)
        except KeyError:
            pass
    if args is None or pos is None or pos >= len(args):
        raise ValueError(f"case rejected: {name} has no values here (not an attribute, no forward argument {pos})")
    return args[pos]
"""

T_INDEXER_FN = """

def _lengths(case, args, name, pos, cumulative):
    vals = _value(case, args, name, pos) if has(case, name) or (args is not None and pos is not None) else None
    if vals is None:
        return None
    vals = [int(x) for x in (vals.reshape(-1).tolist() if hasattr(vals, "reshape") else
                             vals if isinstance(vals, (list, tuple)) else [vals])]
    return [b - a for a, b in zip([0] + vals[:-1], vals)] if cumulative else vals


def _indexer(case, args):
    # torch_npu.npu_lightning_indexer (Ascend docs, DeepSeek DSA): scores = sum_h W[h] * ReLU(Q_h K^T), then top-k;
    # per (query token, key) pair and index head: 2 * D (Q K^T) + 2 (the weighted head sum); top-k compares only.
    # Layouts (Ascend docs, sgl-kernel-npu tests/python/sgl_kernel_npu/test_lightning_indexer.py): query BSND
    # [B, S1, N, D] or TND [T, N, D] (actual_seq_lengths_query cumulative); key BSND [B, S2, N2, D], TND, or
    # PA_BSND [blocks, block_size, N2, D] (paged: actual_seq_lengths_key per batch gives each S2)
    lq = str(attr(case, "$lq", "BSND")).upper()
    lk = str(attr(case, "$lk", "BSND")).upper()
    q, k = shape(case, "$iq"), shape(case, "$ik")
    n, d = q[-2], q[-1]
    s1 = _lengths(case, args, "$seq_q", $seq_q_pos, lq.startswith("TND"))
    if s1 is None:
        if lq.startswith("TND"):
            raise ValueError("case rejected: TND query without actual_seq_lengths_query")
        s1 = [q[1]] * q[0]
    s2 = _lengths(case, args, "$seq_k", $seq_k_pos, lk.startswith("TND"))
    if s2 is None:
        if lk.startswith("PA"):
            raise ValueError("case rejected: paged key without actual_seq_lengths_key")
        s2 = [k[0]] if lk.startswith("TND") else [k[1]] * k[0]
    if len(s2) == 1 and len(s1) > 1:
        s2 = s2 * len(s1)
    if len(s1) != len(s2):
        raise ValueError(f"case rejected: {len(s1)} query sequences but {len(s2)} key lengths")
    mode = int(attr(case, "$imode", 3))
    pairs = sum(attention_pairs(a, b, causal=True, align="bottom_right") if mode == 3 else a * b
                for a, b in zip(s1, s2))
    # REVIEW: + 2 per pair and head for the weighted head sum follows the tracer; check it is matrix work on the
    # REVIEW: Cube here (else drop it: vector work)
    return 2 * n * pairs * (d + 1)
"""

T_LIGHTNING = """
$value_fn
$indexer_fn

def flops_parts(case, args):
    return {"indexer": _indexer(case, args)}


def flops(case, args):
    return float(sum(flops_parts(case, args).values()))
"""

def render_npu_attention(cls, f, cv, tensors, recorded=None) -> tuple:
    """(body, imports, part_names) of a torch_npu inference/sparse attention draft: ``cls`` one of
    "npu_fused_infer_attention", "sparse_flash_attention", "lightning_indexer"; ``f`` the reference's features,
    ``cv`` its case view (names matched by regex, the Ascend docs' names as fallbacks); ``recorded``: the
    per-case selected-key counts of the seeded draw ({case id: count}) or why there are none (sparse attention)."""
    def t(rx, pos, **kw):
        return cv.tensor(rx, **kw) or (tensors[pos] if len(tensors) > pos else rx.split("|")[0])

    def a(rx, dflt):
        return cv.attr(rx) or dflt
    if cls == "npu_fused_infer_attention":
        table = cv.tensor(r"block_tables?", floating=False) or cv.attr(r"^block_tables?$")
        paged_note = ("# page attention when the case gives block_table: s_kv = actual_seq_lengths_kv per batch"
                      if table else "# REVIEW: model.py names block_table but no case input does: page attention "
                      "counts s_kv = actual_seq_lengths_kv, not the key's shape" if f.has_token(r"block_table")
                      else "")
        body = string.Template(T_NPU_FIA).substitute(
            q=t(r"q|query", 0), k=t(r"k|key", 1), v=t(r"v|value", 2),
            layout=a(r"input_layout|^layout$", "input_layout"), heads=a(r"^num_heads$|head_num|n_heads", "num_heads"),
            kv_heads=a(r"num_key_value_heads|kv_heads|n_kv", "num_key_value_heads"),
            seq=a(r"^actual_seq_lengths$|^actual_seq_q", "actual_seq_lengths"),
            seq_kv=a(r"actual_seq_lengths_kv|actual_seq_kv", "actual_seq_lengths_kv"),
            mode=a(r"sparse_mode", "sparse_mode"), pre=a(r"pre_tok", "pre_tokens"), next=a(r"next_tok", "next_tokens"),
            rope=cv.tensor(r"query_rope|q_rope") or "query_rope",
            has_mask=str(bool(cv.tensor(r"atten_mask|attn_mask|mask", floating=False))),
            paged_test=f'has(case, "{table}")' if table else "False", paged_note=paged_note)
        return body, ["shape", "attr", "has", "attention_dims", "attention_flops", "npu_sparse_pairs"], ["attn"]
    with_indexer = f.called("npu_lightning_indexer")
    pos = _positions(f, cv)
    value_fn = string.Template(T_VALUE_FN).template
    seq_q = cv.attr(r"actual_seq_lengths_query|actual_seq_q") or cv.tensor(r"actual_seq_lengths_query|actual_seq_q",
                                                                           floating=False) or "actual_seq_lengths_query"
    seq_k = cv.attr(r"actual_seq_lengths_key|actual_seq_k") or cv.tensor(r"actual_seq_lengths_key|actual_seq_k",
                                                                         floating=False) or "actual_seq_lengths_key"
    indexer_fn = string.Template(T_INDEXER_FN).substitute(
        iq=cv.tensor(r"index_q\w*|q_index|indexer_q\w*|query_index") or t(r"q|query", 0),
        ik=cv.tensor(r"index_k\w*|k_index|indexer_k\w*|key_index") or t(r"k|key", 1),
        imode=a(r"sparse_mode", "sparse_mode"), lq=a(r"layout_query|input_layout|^layout$", "layout_query"),
        lk=a(r"layout_key|layout_kv", "layout_key"), seq_q=seq_q, seq_q_pos=pos.get(seq_q), seq_k=seq_k,
        seq_k_pos=pos.get(seq_k))
    if cls == "lightning_indexer":
        body = string.Template(T_LIGHTNING).substitute(indexer_fn=indexer_fn, value_fn=value_fn)
        return body, ["shape", "attr", "has", "attention_pairs"], ["indexer"]
    block = cv.attr(r"sparse_block_size|block_size")
    idx = cv.tensor(r"sparse_indices|\w*indices|topk\w*", floating=False)
    q = t(r"q|query|q_nope", 0)
    selected_fn = string.Template(T_SELECTED_FROM_VALUES).substitute(idx=idx, idx_pos=pos.get(idx)) if idx else \
        string.Template(T_SELECTED_UPPER_BOUND).substitute(q=q, count=a(r"sparse_count|topk|top_k|n_selected",
                                                                         "sparse_count"))
    body = string.Template(T_SPARSE_FA).substitute(
        selected_fn=selected_fn,
        q=q, v=t(r"v|value|kv|kv_cache", 2 if len(tensors) > 2 else 1),
        rope=cv.tensor(r"query_rope|q_rope|q_pe") or "query_rope",
        block_expr=f'None  # per case: attr {block!r}' if block else "1", value_fn=value_fn,
        recorded=recorded_note(recorded),
        parts_expr=('"attn": 2 * n1 * selected * (d + d_rope + d_v), "indexer": _indexer(case, args)'
                    if with_indexer else '"attn": 2 * n1 * selected * (d + d_rope + d_v)'),
        indexer_fn=indexer_fn if with_indexer else "")
    if block:
        body = body.replace("selected = selected_keys(case, args) * SPARSE_BLOCK",
                            f'selected = selected_keys(case, args) * int(attr(case, "{block}", 1))'
                            "  # REVIEW: a tail block shorter than sparse_block_size is counted whole", 1)
    parts = ["attn", "indexer"] if with_indexer else ["attn"]
    return body, ["shape", "attr", "has", "attention_pairs"] if with_indexer else ["shape", "attr", "has"], parts


def _positions(f, cv) -> dict:
    """{input name: its forward() argument position}: model.py's signature when it names the input, else the
    case file's order (the order get_input_groups() passes them in, the team's convention)."""
    names = forward_params(f.source)
    return {n: (names.index(n) if n in names else i) for i, n in enumerate(cv.info.order)}


def recorded_note(recorded) -> str:
    """The per-case selected-key counts of the seeded draw, as a comment block of the draft (evidence, not read)."""
    if not recorded:
        return ""
    if isinstance(recorded, str):
        return f"# selected keys per case not recorded at generation: {recorded}\n"
    rows = ", ".join(f"{cid}: {n}" for cid, n in sorted(recorded.items()))
    return (f"# selected keys (valid sparse_indices entries) per case in the seeded draw (seed 0), recorded when "
            f"the draft was written:\n# {{{rows}}}\n")
