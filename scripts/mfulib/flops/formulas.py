"""FLOP formulas the tracer applies where torch's FlopCounterMode has none, as pure functions of the op's arguments.

Each formula is registered in :data:`REGISTRY` under its dispatcher name (``aten::mv``, ``npu::npu_ffn``) with the
source of its semantics, and is called ``fn(values, *op_args, **op_kwargs) -> Count``: it reads shapes from its
arguments and, where a mask decides the count, the mask's values through ``values(tensor)`` (the tensor itself off
meta, its recorded shadow on meta, or None when unknown) - torch's ``flop_counter.py`` habit (``shape_wrapper``:
formulas of shapes only), with the one extra input masks need passed explicitly, never read from a global.
Covered: CPU SDPA ``aten::_scaled_dot_product_flash_attention_for_cpu`` (FlopCounterMode counts it 0), the CUDA
SDPA kernels again with ``is_causal`` honoured, ``mv/addmv/dot/vdot/addbmm/_grouped_mm``, and the torch_npu fused
ops ``npu_fusion_attention`` (layouts BSH/SBH/BSND/BNSD/TND, ``sparse_mode`` 0-8, ``prefix``, varlen
``actual_seq_qlen/kvlen``), ``npu_fused_infer_attention_score`` (GQA, paged KV, ``actual_seq_lengths[_kv]``) and
``npu_ffn``. Attention pairs are counted by per-row sums here, deliberately not by the closed forms flops.py
authors use (:mod:`mfulib.flops.contract`), so a mistake in one does not hide in the other.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

BIG_TOKENS = 1 << 62                # "no limit" for band offsets (torch_npu uses 2147483647)
NEG_MASK_THRESHOLD = -1e4           # a fill/bias value at or below this masks a score (-inf, finfo.min, -1e9...)


# ----------------------------------------------------------------------------------------------------------------
# Formula registry
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class Count:
    """What one formula counted for one call: FLOPs (2 per MAC), notes, and whether values were missing."""
    flops: int
    notes: tuple = ()
    needs_values: bool = False


@dataclass
class Formula:
    name: str            # dispatcher name "namespace::op" (also the key of the registry)
    fn: object           # fn(values, *args, **kwargs) -> Count: values(tensor) -> its real values or None
    source: str          # where the formula's semantics come from
    python: str | None   # "module.attr" of a Python-level entry point to intercept while tracing, if any
    overrides_torch: bool = False
    user: bool = False   # registered by a work directory's flops.py (mfulib.flops.user_formulas), not built in


class FormulaRegistry:
    """FLOP formulas by dispatcher op name ("aten::mv", "npu::npu_ffn"). Registering a name twice raises."""

    def __init__(self):
        self._by_name: dict = {}

    def register(self, name: str, source: str, python: str | None = None, overrides_torch: bool = False):
        """Decorator: register ``fn`` as the formula of op ``name``; raises ValueError on a duplicate name."""
        def deco(fn):
            if name in self._by_name:
                raise ValueError(f"duplicate FLOP formula for {name} (already {self._by_name[name].fn.__name__})")
            self._by_name[name] = Formula(name, fn, source, python, overrides_torch)
            return fn
        return deco

    def get(self, name: str):
        return self._by_name.get(name)

    def names(self) -> list:
        return sorted(self._by_name)

    def python_entries(self) -> list:
        return [f for f in self._by_name.values() if f.python]

    def __contains__(self, name):
        return name in self._by_name


REGISTRY = FormulaRegistry()

def shape_of(t):
    return [int(d) for d in t.shape]


# ----------------------------------------------------------------------------------------------------------------
# Attention pair counting (the tracer's own arithmetic: a per-row numpy sum, deliberately not the closed forms
# that flops.py authors use from mfulib.flops.contract, so that the two stay independent)
# ----------------------------------------------------------------------------------------------------------------

def band_pairs(s_q: int, s_k: int, lo: int, hi: int) -> int:
    """Number of (i, j), 0 <= i < s_q, 0 <= j < s_k, with i + lo <= j <= i + hi.

    Top-left causal: lo=-inf, hi=0. Bottom-right causal (FlashAttention-2, torch_npu sparse_mode 3):
    hi = s_k - s_q (rows with no key count 0, never more than the dense s_q * s_k).
    """
    import numpy as np
    if s_q <= 0 or s_k <= 0:
        return 0
    i = np.arange(s_q, dtype=np.int64)
    start = np.clip(i + max(lo, -BIG_TOKENS), 0, s_k)
    end = np.clip(i + min(hi, BIG_TOKENS) + 1, 0, s_k)
    return int(np.maximum(end - start, 0).sum())


def broadcast_count(allowed, target_shape) -> int:
    """Number of True entries of bool tensor ``allowed`` broadcast to ``target_shape`` (no materialisation)."""
    shape = list(allowed.shape)
    target = [int(d) for d in target_shape]
    if len(shape) > len(target):
        raise ValueError(f"mask of shape {shape} does not broadcast to {target}")
    shape = [1] * (len(target) - len(shape)) + shape
    factor = 1
    for m, t in zip(shape, target):
        if m == 1 and t != 1:
            factor *= t
        elif m != t:
            raise ValueError(f"mask of shape {list(allowed.shape)} does not broadcast to {target}")
    return int(torch_count_nonzero(allowed)) * factor


def torch_count_nonzero(t) -> int:
    """Non-zero entries of a CPU tensor (count_nonzero: ~10x faster than a bool sum) or of a mask described by
    its construction (:class:`mfulib.flops.lazy_masks.BandMask`, counted in O(rows))."""
    import torch
    if not isinstance(t, torch.Tensor) and callable(getattr(t, "band_entries", None)):
        return int(t.count_nonzero())
    return int(torch.count_nonzero(t).item())


def _allowed_from_mask_values(vals, true_means_masked: bool):
    """Bool CPU tensor of the positions that take part, from a bool/int mask or an additive float bias."""
    import torch
    if vals.dtype == torch.bool:
        return ~vals if true_means_masked else vals
    if vals.is_floating_point():
        return vals > NEG_MASK_THRESHOLD  # additive bias: -inf (or a huge negative) removes the pair
    return (vals == 0) if true_means_masked else (vals != 0)


# ----------------------------------------------------------------------------------------------------------------
# SDPA formulas
# ----------------------------------------------------------------------------------------------------------------

def _sdpa_count(values, query, key, value, attn_mask=None, is_causal=False) -> Count:
    """QK^T and PV over the unmasked pairs: 2 * (d_qk + d_v) * pairs, pairs summed over batch x heads."""
    q, k, v = shape_of(query), shape_of(key), shape_of(value)
    s_q, d_qk, s_k, d_v = q[-2], q[-1], k[-2], v[-1]
    rows = math.prod(q[:-2])  # batch x query heads (GQA keys broadcast to the query heads)
    dense_pairs = rows * s_q * s_k
    if is_causal:
        pairs = rows * band_pairs(s_q, s_k, -BIG_TOKENS, 0)  # torch: ones(L, S).tril(diagonal=0) = top-left
        return Count(2 * (d_qk + d_v) * pairs, ("sdpa is_causal: top-left causal pairs",))
    if attn_mask is None:
        return Count(2 * (d_qk + d_v) * dense_pairs)
    vals = values(attn_mask)
    if vals is None:
        return Count(2 * (d_qk + d_v) * dense_pairs, ("sdpa attn_mask without values (meta): counted dense",), True)
    allowed = _allowed_from_mask_values(vals, true_means_masked=False)  # SDPA bool mask: True = takes part
    pairs = broadcast_count(allowed, q[:-2] + [s_q, s_k])
    return Count(2 * (d_qk + d_v) * pairs, (f"sdpa attn_mask: {pairs} of {dense_pairs} pairs",))


_SDPA_SOURCE = "torch SDPA docs: is_causal = ones(L, S).tril(); bool attn_mask True = take part; float = added"


@REGISTRY.register("aten::_scaled_dot_product_flash_attention_for_cpu", _SDPA_SOURCE)
def _sdpa_for_cpu(values, query, key, value, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None, **_):
    return _sdpa_count(values, query, key, value, attn_mask, is_causal)


@REGISTRY.register("aten::_scaled_dot_product_flash_attention", _SDPA_SOURCE, overrides_torch=True)
def _sdpa_flash(values, query, key, value, dropout_p=0.0, is_causal=False, *_, **__):
    return _sdpa_count(values, query, key, value, None, is_causal)


@REGISTRY.register("aten::_scaled_dot_product_efficient_attention", _SDPA_SOURCE, overrides_torch=True)
def _sdpa_efficient(values, query, key, value, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0,
                    is_causal=False, *_, **__):
    return _sdpa_count(values, query, key, value, attn_bias, is_causal)


@REGISTRY.register("aten::_scaled_dot_product_cudnn_attention", _SDPA_SOURCE, overrides_torch=True)
def _sdpa_cudnn(values, query, key, value, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0, is_causal=False,
                *_, **__):
    return _sdpa_count(values, query, key, value, attn_bias, is_causal)


@REGISTRY.register("aten::_scaled_dot_product_fused_attention_overrideable", _SDPA_SOURCE)
def _sdpa_overrideable(values, query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, *_, **__):
    return _sdpa_count(values, query, key, value, attn_bias, is_causal)


@REGISTRY.register("python::scaled_dot_product_attention", _SDPA_SOURCE,
                   python="torch.nn.functional.scaled_dot_product_attention")
def _sdpa_python(values, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                 enable_gqa=False):
    return _sdpa_count(values, query, key, value, attn_mask, is_causal)


# ----------------------------------------------------------------------------------------------------------------
# Other aten matrix ops FlopCounterMode has no formula for
# ----------------------------------------------------------------------------------------------------------------

_ATEN_SOURCE = "2 FLOPs per multiply-accumulate (docs/ARCHITECTURE.md#flops); shapes as in the aten schema"


@REGISTRY.register("aten::mv", _ATEN_SOURCE)
def _mv(values, mat, vec, **_):
    m, k = shape_of(mat)
    return Count(2 * m * k)


@REGISTRY.register("aten::addmv", _ATEN_SOURCE)
def _addmv(values, self_, mat, vec, **_):
    m, k = shape_of(mat)
    return Count(2 * m * k)


@REGISTRY.register("aten::dot", _ATEN_SOURCE)
def _dot(values, a, b, **_):
    return Count(2 * shape_of(a)[0])


@REGISTRY.register("aten::vdot", _ATEN_SOURCE)
def _vdot(values, a, b, **_):
    return Count(2 * shape_of(a)[0])


@REGISTRY.register("aten::addbmm", _ATEN_SOURCE)
def _addbmm(values, self_, batch1, batch2, **_):
    b, m, k = shape_of(batch1)
    return Count(2 * b * m * k * shape_of(batch2)[-1])


_GMM_SOURCE = ("torch.nn.functional.grouped_mm docs (torch 2.13): offs[i] marks the END of group i along the "
               "jagged dimension of the 2-D operand, elements beyond offs[-1] are ignored; 3-D x 3-D takes no offs")


@REGISTRY.register("aten::_grouped_mm", _GMM_SOURCE)
def _grouped_mm(values, mat_a, mat_b, offs=None, *_, **__):
    """2 FLOPs per MAC where torch computes (:data:`_GMM_SOURCE`): [G, M, K] x [G, K, N] every group; the 2-D
    operand's jagged dimension (A [M, K] x B [G, K, N]: rows; [M, K] x [K, N]: K; [G, M, K] x [K, N]: columns)
    up to ``offs[-1]`` (all of it, flagged ``needs_values``, when offs has no values)."""
    a, b = shape_of(mat_a), shape_of(mat_b)
    dims = {(3, 3): lambda e: (a[0] * a[1], a[2], b[2]), (2, 3): lambda e: (e, a[1], b[2]),
            (2, 2): lambda e: (a[0], e, b[1]), (3, 2): lambda e: (a[1], a[2], e)}.get((len(a), len(b)))
    if dims is None:
        return Count(0, (f"_grouped_mm shapes {a} x {b} not understood: counted 0",))
    jagged = {(2, 3): a[0], (2, 2): a[1], (3, 2): b[-1]}.get((len(a), len(b)))
    ends = values(offs) if offs is not None and jagged is not None else None
    end, notes = jagged, ()
    if ends is not None and ends.numel():
        end = min(int(ends.reshape(-1)[-1]), jagged)
        notes = (f"_grouped_mm: the groups end at {end} of {jagged} (offs are end offsets)",)
    elif jagged is not None and offs is not None:
        notes = ("_grouped_mm offs without values (meta): the whole jagged dimension counted",)
    m, k, n = dims(end)
    return Count(2 * m * k * n, notes, jagged is not None and offs is not None and ends is None)


# ----------------------------------------------------------------------------------------------------------------
# torch_npu fused ops
# ----------------------------------------------------------------------------------------------------------------

_FA_SOURCE = ("torch_npu.npu_fusion_attention docs (hiascend.com, PyTorch 6.0 API list): layouts BSH/SBH/BSND/BNSD/"
              "TND; atten_mask 1/True = masked; sparse_mode 0 default(+pre/next tokens from top-left), 1 allMask, "
              "2 leftUpCausal, 3 rightDownCausal, 4 band (pre/next tokens from bottom-right), 5/6 prefix, "
              "7/8 varlen rightDown/leftUp causal; ops-transformer docs/context/sparse_mode_introduction.md")


def fa_dims(layout, query, key, value, head_num):
    """(b, n_q, n_kv, s_q, s_k, d, d_v) for a torch_npu attention layout; raises ValueError if inconsistent."""
    lay = str(layout).upper().split("_")[0]
    q, k, v = shape_of(query), shape_of(key), shape_of(value)
    if lay in ("BSH", "SBH"):
        if len(q) != 3:
            raise ValueError(f"layout {layout} needs 3-D query, got {q}")
        b, s_q, h_q = (q[0], q[1], q[2]) if lay == "BSH" else (q[1], q[0], q[2])
        s_k, h_k = (k[1], k[2]) if lay == "BSH" else (k[0], k[2])
        if head_num <= 0 or h_q % head_num:
            raise ValueError(f"hidden {h_q} not divisible by head_num {head_num}")
        d = h_q // head_num
        n_kv = h_k // d
        d_v = v[2] // n_kv if n_kv else d
        return b, head_num, n_kv, s_q, s_k, d, d_v
    if lay == "BSND":
        return q[0], q[2], k[2], q[1], k[1], q[3], v[3]
    if lay == "BNSD":
        return q[0], q[1], k[1], q[2], k[2], q[3], v[3]
    if lay == "TND":
        return None, q[1], k[1], q[0], k[0], q[2], v[2]
    raise ValueError(f"unknown input_layout {layout!r}")


def npu_mode_pairs(mode, s_q, s_k, pre, nxt, prefix_b=None):
    """Unmasked pairs of one (batch, head) for a sparse_mode whose mask is defined by shape (not mode 0/1)."""
    import numpy as np
    off = s_k - s_q
    if mode in (2, 8):
        return band_pairs(s_q, s_k, -BIG_TOKENS, 0)
    if mode in (3, 7):
        return band_pairs(s_q, s_k, -BIG_TOKENS, off)
    if mode == 4:
        return band_pairs(s_q, s_k, off - int(pre), off + int(nxt))
    if mode in (5, 6):
        if prefix_b is None:
            raise ValueError(f"sparse_mode {mode} (prefix) needs prefix")
        i = np.arange(s_q, dtype=np.int64)
        return int(np.clip(np.maximum(i + off + 1, int(prefix_b)), 0, s_k).sum())
    raise ValueError(f"sparse_mode {mode} is not a shape-defined mode")


def _npu_attention_count(values, op, b, n_q, s_q_list, s_k_list, d, d_v, sparse_mode, atten_mask, pre, nxt,
                         prefix=None, varlen=False) -> Count:
    """Sum over sequences of 2 * n_q * (d + d_v) * pairs(sequence)."""
    notes, needs = [], False
    sparse_mode = int(sparse_mode or 0)
    per_head = 2 * n_q * (d + d_v)
    if sparse_mode in (0, 1) and atten_mask is not None:
        vals = values(atten_mask)
        if vals is not None and not varlen:
            allowed = _allowed_from_mask_values(vals, true_means_masked=True)
            pairs = broadcast_count(allowed, [b, n_q, s_q_list[0], s_k_list[0]])
            return Count(2 * (d + d_v) * pairs, (f"{op}: atten_mask values: {pairs} pairs",))
        if sparse_mode == 1:
            notes.append(f"{op} sparse_mode 1 (allMask) without mask values: counted dense")
            needs = True
        else:
            notes.append(f"{op} sparse_mode 0 with atten_mask without values: counted from pre/next tokens")
            needs = vals is None
    total = 0
    for i, (s_q, s_k) in enumerate(zip(s_q_list, s_k_list)):
        if sparse_mode == 0:
            pairs = band_pairs(s_q, s_k, -int(pre), int(nxt)) if atten_mask is not None else s_q * s_k
        elif sparse_mode == 1:
            pairs = s_q * s_k
        else:
            pfx = None if prefix is None else list(prefix)[min(i, len(prefix) - 1)]
            pairs = npu_mode_pairs(sparse_mode, s_q, s_k, pre, nxt, pfx)
        total += per_head * pairs
    return Count(total, tuple(notes), needs)


def _lengths(lengths, cumulative):
    vals = [int(x) for x in (lengths.tolist() if hasattr(lengths, "tolist") else lengths)]
    if not cumulative:
        return vals
    return [b - a for a, b in zip([0] + vals[:-1], vals)]


@REGISTRY.register("npu::npu_fusion_attention", _FA_SOURCE, python="torch_npu.npu_fusion_attention")
def npu_fusion_attention_flops(values, query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                               atten_mask=None, scale=1.0, keep_prob=1.0, pre_tockens=2147483647,
                               next_tockens=2147483647, inner_precise=0, prefix=None, actual_seq_qlen=None,
                               actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False, **_):
    b, n_q, n_kv, s_q, s_k, d, d_v = fa_dims(input_layout, query, key, value, int(head_num))
    if str(input_layout).upper() == "TND":
        if actual_seq_qlen is None:
            raise ValueError("TND layout needs actual_seq_qlen / actual_seq_kvlen (cumulative)")
        s_q_list = _lengths(actual_seq_qlen, cumulative=True)
        s_k_list = _lengths(actual_seq_kvlen if actual_seq_kvlen is not None else actual_seq_qlen, True)
        return _npu_attention_count(values, "npu_fusion_attention", len(s_q_list), n_q, s_q_list, s_k_list, d, d_v,
                                    sparse_mode, atten_mask, pre_tockens, next_tockens, prefix, varlen=True)
    return _npu_attention_count(values, "npu_fusion_attention", b, n_q, [s_q] * b, [s_k] * b, d, d_v, sparse_mode,
                                atten_mask, pre_tockens, next_tockens, prefix)


_FIA_SOURCE = ("torch_npu.npu_fused_infer_attention_score docs (hiascend.com PyTorch 6.0.0/7.0.0 API list, "
               "ptaoplist_000837 / ptaoplist_001232): input_layout BSH/BSND/BNSD/TND (+ _NBSD/_BNSD output suffix), "
               "num_heads, num_key_value_heads (0 = num_heads; num_heads a multiple of it), actual_seq_lengths[_kv] "
               "(per batch; cumulative for TND), block_table/block_size (paged KV), query_rope/key_rope (MLA), "
               "sparse_mode 0-4 as FlashAttentionScore; Ascend/op-plugin docs/context/"
               "torch_npu-npu_fused_infer_attention_score.md: TND needs both length lists, cumulative, their count "
               "= batch; page attention: k/v caches [blocknum, blocksize, H] or [blocknum, N_kv, blocksize, D], "
               "block_table [B, maxBlockNumPerSeq], actual_seq_lengths_kv required = the real KV length per batch")


@REGISTRY.register("npu::npu_fused_infer_attention_score", _FIA_SOURCE,
                   python="torch_npu.npu_fused_infer_attention_score")
def npu_fused_infer_attention_score_flops(values, query, key, value, *, atten_mask=None, actual_seq_lengths=None,
                                          actual_seq_lengths_kv=None, num_heads=1, pre_tokens=2147483647,
                                          next_tokens=2147483647, input_layout="BSH", num_key_value_heads=0,
                                          sparse_mode=0, block_table=None, block_size=0, query_rope=None, **_):
    """``2 * N_q * (D + D_rope + D_v)`` per unmasked (query, key) pair, summed over the batch's sequences
    (source: :data:`_FIA_SOURCE`). GQA shares K/V heads but every query head does its own QK^T and PV, so the
    count is per query head. Shapes: BSH q [B, S, N_q*D], k/v [B, S_kv, N_kv*D(_v)]; BSND [B, S, N, D];
    BNSD [B, N, S, D]; TND [T, N, D] with cumulative ``actual_seq_lengths[_kv]``; paged KV: k/v [blocks,
    block_size, H] or [blocks, N_kv, block_size, D], s_kv from ``actual_seq_lengths_kv``. Raises ValueError for an
    unknown layout, N_q not a multiple of N_kv, a hidden size not divisible by num_heads, or the length lists the
    docs require (TND: both; paged: actual_seq_lengths_kv) missing."""
    if isinstance(key, (list, tuple)):
        key, value = key[0], value[0]
    lay = str(input_layout).upper().split("_")[0]
    q, k, v = shape_of(query), shape_of(key), shape_of(value)
    n_q = int(num_heads)
    n_kv = int(num_key_value_heads) or n_q
    if n_q <= 0 or n_q % n_kv:
        raise ValueError(f"npu_fused_infer_attention_score: num_heads {n_q} is not a multiple of "
                         f"num_key_value_heads {n_kv}")
    paged = block_table is not None
    if lay in ("BSH", "SBH"):
        b, s_q = (q[0], q[1]) if lay == "BSH" else (q[1], q[0])
        if q[2] % n_q:
            raise ValueError(f"npu_fused_infer_attention_score: hidden {q[2]} not divisible by num_heads {n_q}")
        d = q[2] // n_q
        d_v = v[-1] // n_kv if (paged or len(v) == 3) else v[-1]
    elif lay == "BSND":
        b, s_q, d, d_v = q[0], q[1], q[3], v[-1]
    elif lay == "BNSD":
        b, s_q, d, d_v = q[0], q[2], q[3], v[-1]
    elif lay == "TND":
        b, s_q, d, d_v = None, q[0], q[2], v[-1]
    else:
        raise ValueError(f"unknown input_layout {input_layout!r}")
    if paged and len(v) == 3 and lay != "BSH":
        d_v = v[-1] // n_kv  # paged BBH cache [blocks, block_size, N_kv * D]
    d_rope = shape_of(query_rope)[-1] if query_rope is not None else 0
    notes = []
    if paged:
        s_k = shape_of(block_table)[-1] * int(block_size)
        if actual_seq_lengths_kv is None:  # the docs: page attention needs actual_seq_lengths_kv
            raise ValueError("case rejected: npu_fused_infer_attention_score: page attention (block_table) needs "
                             "actual_seq_lengths_kv, the real KV length of each batch")
    else:
        s_k = {"BSH": k[1] if len(k) > 1 else 0, "SBH": k[0], "BSND": k[1] if len(k) > 1 else 0,
               "BNSD": k[2] if len(k) > 2 else 0, "TND": k[0]}[lay]
    cumulative = lay == "TND"
    if lay == "TND" and (actual_seq_lengths is None or actual_seq_lengths_kv is None):
        raise ValueError("case rejected: npu_fused_infer_attention_score: TND layout needs actual_seq_lengths and "
                         "actual_seq_lengths_kv (cumulative, one entry per batch)")
    s_q_list = _lengths(actual_seq_lengths, cumulative) if actual_seq_lengths is not None else [s_q] * b
    if actual_seq_lengths_kv is not None:
        s_k_list = _lengths(actual_seq_lengths_kv, cumulative)
    else:
        s_k_list = [s_k] * len(s_q_list)
    if b is not None and len(s_q_list) == 1 and b > 1:
        s_q_list = s_q_list * b
    if len(s_k_list) == 1 and len(s_q_list) > 1:
        s_k_list = s_k_list * len(s_q_list)
    c = _npu_attention_count(values, "npu_fused_infer_attention_score", len(s_q_list), n_q, s_q_list, s_k_list,
                             d + d_rope, d_v, sparse_mode, atten_mask, pre_tokens, next_tokens,
                             varlen=actual_seq_lengths is not None or actual_seq_lengths_kv is not None)
    return Count(c.flops, c.notes + tuple(notes), c.needs_values)


_FFN_SOURCE = ("torch_npu.npu_ffn docs (hiascend.com PyTorch 6.0.0 API list, ptaoplist_000849; Ascend/MindSpeed "
               "docs/ops/ffn.md): y = act(x @ W1 + b1) @ W2 + b2; x [M, K1] (2-8 dims); W1 [K1, N1] / experts "
               "[E, K1, N1]; W2 [K2, N2] / [E, K2, N2]; expert_tokens = tokens per expert (counts), "
               "expert_tokens_index = their cumulative end indices (the MindSpeed example: M 512, E 8, counts "
               "[64] * 8 = index [64, 128, ..., 512]); not both; with experts the tokens must add up to M; "
               "GLU activations (geglu/swiglu/reglu) halve N1 into K2")


def ffn_expert_counts(m: int, n_experts, expert_tokens=None, expert_tokens_index=None):
    """Tokens per expert of ``npu_ffn`` ([count per expert], or None without experts) from ``expert_tokens``
    (counts) or ``expert_tokens_index`` (cumulative end indices: counts = differences, the first from 0), list or
    int tensor, at most 256 entries (:data:`_FFN_SOURCE`). ``m``: rows of x; ``n_experts``: E of the [E, K, N]
    weights (None for 2-D weights). Raises ValueError (the op's own constraints) for both given, more entries
    than experts, a negative count / decreasing index, or tokens that do not add up to M - "case rejected: ..."
    messages, since the op itself refuses such a call."""
    if expert_tokens is not None and expert_tokens_index is not None:
        raise ValueError("case rejected: npu_ffn: expert_tokens and expert_tokens_index cannot both be given")
    given = expert_tokens if expert_tokens is not None else expert_tokens_index
    if given is None:
        return None
    counts = _lengths(given, cumulative=expert_tokens is None)
    what = "expert_tokens" if expert_tokens is not None else "expert_tokens_index"
    if len(counts) > 256 or (n_experts is not None and len(counts) > n_experts):
        raise ValueError(f"case rejected: npu_ffn: {what} has {len(counts)} entries for {n_experts} experts (at most 256)")
    if any(c < 0 for c in counts):
        raise ValueError(f"case rejected: npu_ffn: {what} {list(given)[:8]}: negative count or decreasing index")
    if sum(counts) != m:
        raise ValueError(f"case rejected: npu_ffn: {what} covers {sum(counts)} tokens, x has M = {m} rows (they must match)")
    return counts


@REGISTRY.register("npu::npu_ffn", _FFN_SOURCE, python="torch_npu.npu_ffn")
def npu_ffn_flops(values, x, weight1, weight2, activation, *args, expert_tokens=None, expert_tokens_index=None,
                  **kwargs):
    """``2 * M * K1 * N1 + 2 * M * K2 * N2``: each of the M tokens goes through one matmul pair (its expert's when
    weights are [E, K, N]); the per-expert token counts (:func:`ffn_expert_counts`) must add up to the M rows
    of x. The GLU split is already in the shapes (N1 = 2 * K2). Biases and the activation are vector work.
    Source: :data:`_FFN_SOURCE`. Raises ValueError when x's last dim is not K1 or the token counts are invalid."""
    xs, w1, w2 = shape_of(x), shape_of(weight1), shape_of(weight2)
    k1, n1 = w1[-2], w1[-1]
    k2, n2 = w2[-2], w2[-1]
    if xs[-1] != k1:
        raise ValueError(f"npu_ffn: x last dim {xs[-1]} != weight1 K1 {k1}")
    m = math.prod(xs[:-1])
    counts = ffn_expert_counts(m, w1[0] if len(w1) == 3 else None, expert_tokens, expert_tokens_index)
    notes = () if counts is None else (f"npu_ffn: {m} tokens over {len(counts)} experts {counts[:8]}",)
    return Count(2 * m * k1 * n1 + 2 * m * k2 * n2, notes)


@REGISTRY.register("aten::mkldnn_rnn_layer", "PyTorch nn.LSTM/GRU equations: per time step gates = W_ih x_t + "
                   "W_hh h_(t-1) (the CPU oneDNN kernel of one layer and direction)")
def mkldnn_rnn_layer_flops(values, input, weight0, weight1, weight2, weight3, hx, cx, reverse, batch_sizes, mode,
                           hidden_size, num_layers, has_biases, bidirectional, batch_first, *args, **kwargs):
    """2 * T * B * (rows(W_ih) * I + rows(W_hh) * H): the gate GEMMs of every step of this layer/direction."""
    x, w_ih, w_hh = shape_of(input), shape_of(weight0), shape_of(weight1)
    t, b = (x[1], x[0]) if batch_first else (x[0], x[1])
    return Count(2 * t * b * (w_ih[0] * w_ih[1] + w_hh[0] * w_hh[1]))
