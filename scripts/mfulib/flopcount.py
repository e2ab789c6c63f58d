"""Independent FLOP tracer: run the reference ``Model.forward`` and count its matrix work, without an accelerator.

Base: torch's ``FlopCounterMode`` (torch/utils/flop_counter.py), which counts every aten mm/addmm/bmm/baddbmm/
convolution exactly (2 FLOPs per multiply-accumulate, the DESIGN.md convention). What it lacks, this module adds
(reference/environment_notes.md, "FLOP counting on CPU"):

* **Formulas it has none for**, in :data:`REGISTRY` (a registry that refuses duplicates):
  CPU SDPA ``aten::_scaled_dot_product_flash_attention_for_cpu`` (FlopCounterMode counts it 0), the CUDA SDPA
  kernels again with ``is_causal`` honoured (torch: "NB: We aren't accounting for causal attention here"),
  ``mv/addmv/dot/vdot/addbmm/_grouped_mm``, and the torch_npu fused ops ``npu_fusion_attention`` (layouts
  BSH/SBH/BSND/BNSD/TND, ``sparse_mode`` 0-8, ``prefix``, varlen ``actual_seq_qlen/kvlen``),
  ``npu_fused_infer_attention_score`` (GQA, paged KV through ``block_table``, ``actual_seq_lengths[_kv]``) and
  ``npu_ffn``. They apply at the dispatcher (a real torch_npu registers ``npu::*`` ops) and, where no torch_npu
  is importable, through stand-in functions installed as ``torch_npu.<op>`` while tracing: they return zero
  tensors of the documented output shapes and count the formula, so NPU-only references trace on a CPU.
* **Masked attention written with matmuls** (``scores.masked_fill(mask, -inf)``, ``torch.where(mask, s, -inf)``,
  an additive ``-inf`` bias): the tracer follows each matmul output through pointwise/view/softmax ops; when a
  mask with known values is applied to it, that matmul and the matmul that consumes the masked probabilities are
  counted over the unmasked (q, k) pairs only - exactly, for any mask (causal top-left or bottom-right, window,
  padding, block-sparse). ``F.scaled_dot_product_attention`` is intercepted in Python the same way (``is_causal``
  is top-left causal, ``torch.ones(L, S).tril()``, as torch documents it; a boolean/additive ``attn_mask`` is
  counted from its values).
* **Nothing is silently zero**: every op seen is classified - counted (by torch or by a formula here), vector work
  (pointwise/reduction/softmax/norm/copy: not counted by the convention) or **unseen**: a matrix-like aten op
  without a formula, an op from another namespace (custom or vendor op), a Triton kernel launched directly.
  Unseen ops are reported by name with their call counts.

Where it runs: on **meta** tensors by default (no data, no big allocation): while the case is built, large
floating tensors are created on meta, and small tensors (index math, masks, lengths) keep real values in a side
table ("shadows") so masks built on the fly (``arange(...) > arange(...)``, ``tril``) and ``.item()`` on small
tensors still work. A reference that needs the values of big tensors fails on meta; :func:`trace_case` then runs it
on the CPU when it fits the caps, or reports the case as skipped with the reason.

Approximations (each is also written into the result's notes where it happens): a mask whose values are unknown
(meta without shadow) is counted dense and flagged ``needs_values``; masks applied to a sliced score tensor are
not followed; two masks on reshaped tensors combine as independent fractions.
"""
from __future__ import annotations

import contextlib
import functools
import math
import re
import sys
import types
from dataclasses import dataclass, field
from fractions import Fraction

from .errors import rejection_reason

BIG_TOKENS = 1 << 62                # "no limit" for band offsets (torch_npu uses 2147483647)
NEG_MASK_THRESHOLD = -1e4           # a fill/bias value at or below this masks a score (-inf, finfo.min, -1e9...)
SHADOW_MAX_NUMEL = 1 << 24          # small tensors keep real values beside their meta twin
SHADOW_MATMUL_MAX_NUMEL = 1 << 16   # ... but matmuls are evaluated on the CPU only when tiny
META_BUILD_MIN_NUMEL = 1 << 20      # while building a case, floating tensors this big are created on meta
META_BUILD_INT_MIN_NUMEL = 1 << 24  # integer/bool tensors stay real (indices, lengths) unless this big


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
    fn: object           # fn(*args, **kwargs) -> Count, called with the op's own arguments
    source: str          # where the formula's semantics come from
    python: str | None   # "module.attr" of a Python-level entry point to intercept while tracing, if any
    overrides_torch: bool = False


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

_STATE_STACK: list = []  # the active tracer state (formulas read tensor values through it)


def _values(t):
    """Real values of tensor ``t`` (itself off meta; its shadow on meta), or None when unknown."""
    import torch
    if not isinstance(t, torch.Tensor):
        return None
    if t.device.type != "meta":
        return t
    return _STATE_STACK[-1].shadow_of(t) if _STATE_STACK else None


def _shape(t):
    return [int(d) for d in t.shape]


# ----------------------------------------------------------------------------------------------------------------
# Attention pair counting (the tracer's own arithmetic: a per-row numpy sum, deliberately not the closed forms
# that flops.py authors use from mfulib.flops_contract, so that the two stay independent)
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
    """Non-zero entries of a CPU tensor (count_nonzero: ~10x faster than a bool sum)."""
    import torch
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

def _sdpa_count(query, key, value, attn_mask=None, is_causal=False) -> Count:
    """QK^T and PV over the unmasked pairs: 2 * (d_qk + d_v) * pairs, pairs summed over batch x heads."""
    q, k, v = _shape(query), _shape(key), _shape(value)
    s_q, d_qk, s_k, d_v = q[-2], q[-1], k[-2], v[-1]
    rows = math.prod(q[:-2])  # batch x query heads (GQA keys broadcast to the query heads)
    dense_pairs = rows * s_q * s_k
    if is_causal:
        pairs = rows * band_pairs(s_q, s_k, -BIG_TOKENS, 0)  # torch: ones(L, S).tril(diagonal=0) = top-left
        return Count(2 * (d_qk + d_v) * pairs, ("sdpa is_causal: top-left causal pairs",))
    if attn_mask is None:
        return Count(2 * (d_qk + d_v) * dense_pairs)
    vals = _values(attn_mask)
    if vals is None:
        return Count(2 * (d_qk + d_v) * dense_pairs, ("sdpa attn_mask without values (meta): counted dense",), True)
    allowed = _allowed_from_mask_values(vals, true_means_masked=False)  # SDPA bool mask: True = takes part
    pairs = broadcast_count(allowed, q[:-2] + [s_q, s_k])
    return Count(2 * (d_qk + d_v) * pairs, (f"sdpa attn_mask: {pairs} of {dense_pairs} pairs",))


_SDPA_SOURCE = "torch SDPA docs: is_causal = ones(L, S).tril(); bool attn_mask True = take part; float = added"


@REGISTRY.register("aten::_scaled_dot_product_flash_attention_for_cpu", _SDPA_SOURCE)
def _sdpa_for_cpu(query, key, value, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None, **_):
    return _sdpa_count(query, key, value, attn_mask, is_causal)


@REGISTRY.register("aten::_scaled_dot_product_flash_attention", _SDPA_SOURCE, overrides_torch=True)
def _sdpa_flash(query, key, value, dropout_p=0.0, is_causal=False, *_, **__):
    return _sdpa_count(query, key, value, None, is_causal)


@REGISTRY.register("aten::_scaled_dot_product_efficient_attention", _SDPA_SOURCE, overrides_torch=True)
def _sdpa_efficient(query, key, value, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0,
                    is_causal=False, *_, **__):
    return _sdpa_count(query, key, value, attn_bias, is_causal)


@REGISTRY.register("aten::_scaled_dot_product_cudnn_attention", _SDPA_SOURCE, overrides_torch=True)
def _sdpa_cudnn(query, key, value, attn_bias=None, compute_log_sumexp=False, dropout_p=0.0, is_causal=False,
                *_, **__):
    return _sdpa_count(query, key, value, attn_bias, is_causal)


@REGISTRY.register("aten::_scaled_dot_product_fused_attention_overrideable", _SDPA_SOURCE)
def _sdpa_overrideable(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, *_, **__):
    return _sdpa_count(query, key, value, attn_bias, is_causal)


@REGISTRY.register("python::scaled_dot_product_attention", _SDPA_SOURCE,
                   python="torch.nn.functional.scaled_dot_product_attention")
def _sdpa_python(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return _sdpa_count(query, key, value, attn_mask, is_causal)


# ----------------------------------------------------------------------------------------------------------------
# Other aten matrix ops FlopCounterMode has no formula for
# ----------------------------------------------------------------------------------------------------------------

_ATEN_SOURCE = "2 FLOPs per multiply-accumulate (DESIGN.md); shapes as in the aten schema"


@REGISTRY.register("aten::mv", _ATEN_SOURCE)
def _mv(mat, vec, **_):
    m, k = _shape(mat)
    return Count(2 * m * k)


@REGISTRY.register("aten::addmv", _ATEN_SOURCE)
def _addmv(self_, mat, vec, **_):
    m, k = _shape(mat)
    return Count(2 * m * k)


@REGISTRY.register("aten::dot", _ATEN_SOURCE)
def _dot(a, b, **_):
    return Count(2 * _shape(a)[0])


@REGISTRY.register("aten::vdot", _ATEN_SOURCE)
def _vdot(a, b, **_):
    return Count(2 * _shape(a)[0])


@REGISTRY.register("aten::addbmm", _ATEN_SOURCE)
def _addbmm(self_, batch1, batch2, **_):
    b, m, k = _shape(batch1)
    return Count(2 * b * m * k * _shape(batch2)[-1])


@REGISTRY.register("aten::_grouped_mm", "torch._grouped_mm: groups split the rows of the 2-D operand by offs")
def _grouped_mm(mat_a, mat_b, offs=None, *_, **__):
    a, b = _shape(mat_a), _shape(mat_b)
    if len(a) == 2 and len(b) == 3:       # [M, K] x [G, K, N], rows split over groups: 2*M*K*N in total
        return Count(2 * a[0] * a[1] * b[2])
    if len(a) == 3 and len(b) == 3:       # [G, M, K] x [G, K, N]
        return Count(2 * a[0] * a[1] * a[2] * b[2])
    if len(a) == 2 and len(b) == 2:       # [M, K] x [K, N], K split over groups
        return Count(2 * a[0] * a[1] * b[1])
    if len(a) == 3 and len(b) == 2:       # [G, M, K] x [K, N] (N split over groups)
        return Count(2 * a[1] * a[2] * b[1])
    return Count(0, (f"_grouped_mm shapes {a} x {b} not understood: counted 0",))


# ----------------------------------------------------------------------------------------------------------------
# torch_npu fused ops
# ----------------------------------------------------------------------------------------------------------------

_FA_SOURCE = ("torch_npu.npu_fusion_attention docs (hiascend.com, PyTorch 6.0 API list): layouts BSH/SBH/BSND/BNSD/"
              "TND; atten_mask 1/True = masked; sparse_mode 0 default(+pre/next tokens from top-left), 1 allMask, "
              "2 leftUpCausal, 3 rightDownCausal, 4 band (pre/next tokens from bottom-right), 5/6 prefix, "
              "7/8 varlen rightDown/leftUp causal; ops-transformer docs/context/sparse_mode_introduction.md")


def _fa_dims(layout, query, key, value, head_num):
    """(b, n_q, n_kv, s_q, s_k, d, d_v) for a torch_npu attention layout; raises ValueError if inconsistent."""
    lay = str(layout).upper().split("_")[0]
    q, k, v = _shape(query), _shape(key), _shape(value)
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


def _npu_mode_pairs(mode, s_q, s_k, pre, nxt, prefix_b=None):
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


def _npu_attention_count(op, b, n_q, s_q_list, s_k_list, d, d_v, sparse_mode, atten_mask, pre, nxt,
                         prefix=None, varlen=False) -> Count:
    """Sum over sequences of 2 * n_q * (d + d_v) * pairs(sequence)."""
    notes, needs = [], False
    sparse_mode = int(sparse_mode or 0)
    per_head = 2 * n_q * (d + d_v)
    if sparse_mode in (0, 1) and atten_mask is not None:
        vals = _values(atten_mask)
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
            pairs = _npu_mode_pairs(sparse_mode, s_q, s_k, pre, nxt, pfx)
        total += per_head * pairs
    return Count(total, tuple(notes), needs)


def _lengths(values, cumulative):
    vals = [int(x) for x in (values.tolist() if hasattr(values, "tolist") else values)]
    if not cumulative:
        return vals
    return [b - a for a, b in zip([0] + vals[:-1], vals)]


@REGISTRY.register("npu::npu_fusion_attention", _FA_SOURCE, python="torch_npu.npu_fusion_attention")
def npu_fusion_attention_flops(query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                               atten_mask=None, scale=1.0, keep_prob=1.0, pre_tockens=2147483647,
                               next_tockens=2147483647, inner_precise=0, prefix=None, actual_seq_qlen=None,
                               actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False, **_):
    b, n_q, n_kv, s_q, s_k, d, d_v = _fa_dims(input_layout, query, key, value, int(head_num))
    if str(input_layout).upper() == "TND":
        if actual_seq_qlen is None:
            raise ValueError("TND layout needs actual_seq_qlen / actual_seq_kvlen (cumulative)")
        s_q_list = _lengths(actual_seq_qlen, cumulative=True)
        s_k_list = _lengths(actual_seq_kvlen if actual_seq_kvlen is not None else actual_seq_qlen, True)
        return _npu_attention_count("npu_fusion_attention", len(s_q_list), n_q, s_q_list, s_k_list, d, d_v,
                                    sparse_mode, atten_mask, pre_tockens, next_tockens, prefix, varlen=True)
    return _npu_attention_count("npu_fusion_attention", b, n_q, [s_q] * b, [s_k] * b, d, d_v, sparse_mode,
                                atten_mask, pre_tockens, next_tockens, prefix)


@REGISTRY.register("npu::npu_fused_infer_attention_score",
                   "torch_npu.npu_fused_infer_attention_score docs: num_heads, num_key_value_heads (GQA), "
                   "actual_seq_lengths[_kv], block_table/block_size (paged KV), sparse_mode as FlashAttentionScore",
                   python="torch_npu.npu_fused_infer_attention_score")
def npu_fused_infer_attention_score_flops(query, key, value, *, atten_mask=None, actual_seq_lengths=None,
                                          actual_seq_lengths_kv=None, num_heads=1, pre_tokens=2147483647,
                                          next_tokens=2147483647, input_layout="BSH", num_key_value_heads=0,
                                          sparse_mode=0, block_table=None, block_size=0, **_):
    if isinstance(key, (list, tuple)):
        key, value = key[0], value[0]
    lay = str(input_layout).upper().split("_")[0]
    q = _shape(query)
    n_q = int(num_heads)
    n_kv = int(num_key_value_heads) or n_q
    if lay in ("BSH", "SBH"):
        b, s_q = (q[0], q[1]) if lay == "BSH" else (q[1], q[0])
        d = q[2] // n_q
    elif lay == "BSND":
        b, s_q, d = q[0], q[1], q[3]
    elif lay == "BNSD":
        b, s_q, d = q[0], q[2], q[3]
    elif lay == "TND":
        b, s_q, d = None, q[0], q[2]
    else:
        raise ValueError(f"unknown input_layout {input_layout!r}")
    notes = []
    k = _shape(key)
    if block_table is not None:
        max_blocks = _shape(block_table)[-1]
        s_k = max_blocks * int(block_size)
        if actual_seq_lengths_kv is None:
            notes.append("paged KV without actual_seq_lengths_kv: every sequence counted at the block table's "
                         f"capacity {s_k}")
    else:
        s_k = {"BSH": k[1] if len(k) > 1 else 0, "SBH": k[0], "BSND": k[1] if len(k) > 1 else 0,
               "BNSD": k[2] if len(k) > 2 else 0, "TND": k[0]}[lay]
    cumulative = lay == "TND"
    s_q_list = _lengths(actual_seq_lengths, cumulative) if actual_seq_lengths is not None else [s_q] * b
    if actual_seq_lengths_kv is not None:
        s_k_list = _lengths(actual_seq_lengths_kv, cumulative)
    else:
        s_k_list = [s_k] * len(s_q_list)
    if b is not None and len(s_q_list) == 1 and b > 1:
        s_q_list = s_q_list * b
    if len(s_k_list) == 1 and len(s_q_list) > 1:
        s_k_list = s_k_list * len(s_q_list)
    c = _npu_attention_count("npu_fused_infer_attention_score", len(s_q_list), n_q, s_q_list, s_k_list, d, d,
                             sparse_mode, atten_mask, pre_tokens, next_tokens,
                             varlen=actual_seq_lengths is not None or actual_seq_lengths_kv is not None)
    del n_kv  # GQA: FLOPs are per query head; the KV head count does not change them
    return Count(c.flops, c.notes + tuple(notes), c.needs_values)


@REGISTRY.register("npu::npu_ffn", "torch_npu.npu_ffn docs: y = act(x @ W1 [+b1]) @ W2 [+b2]; GLU activations "
                   "split x @ W1 in halves; experts: weights [E, K, N], each token through one expert",
                   python="torch_npu.npu_ffn")
def npu_ffn_flops(x, weight1, weight2, activation, *args, **kwargs):
    xs, w1, w2 = _shape(x), _shape(weight1), _shape(weight2)
    m = math.prod(xs[:-1])
    k1, n1 = w1[-2], w1[-1]
    k2, n2 = w2[-2], w2[-1]
    return Count(2 * m * k1 * n1 + 2 * m * k2 * n2)


# Output shapes of the stand-ins (what the documented ops return), used only where no torch_npu exists.

def _fa_out_shape(layout, query, value, n_q, d_v):
    q = _shape(query)
    lay = str(layout).upper().split("_")[0]
    if lay in ("BSH", "SBH"):
        return q[:2] + [n_q * d_v]
    return q[:-1] + [d_v]


def _standin_npu_fusion_attention(query, key, value, head_num, input_layout, *args, **kwargs):
    import torch
    b, n_q, _, s_q, _, _, d_v = _fa_dims(input_layout, query, key, value, int(head_num))
    out = torch.zeros(_fa_out_shape(input_layout, query, value, n_q, d_v), dtype=query.dtype, device=query.device)
    stat_shape = [s_q, n_q, 8] if b is None else [b, n_q, s_q, 8]
    smax = torch.zeros(stat_shape, dtype=torch.float32, device=query.device)
    return out, smax, smax.clone(), torch.zeros(0, dtype=query.dtype, device=query.device), 0, 0, 0


def _standin_npu_fused_infer_attention_score(query, key, value, *args, **kwargs):
    import torch
    return torch.zeros_like(query), torch.zeros(0, dtype=torch.float32, device=query.device)


def _standin_npu_ffn(x, weight1, weight2, activation, *args, **kwargs):
    import torch
    return torch.zeros(_shape(x)[:-1] + [_shape(weight2)[-1]], dtype=x.dtype, device=x.device)


_STANDINS = {
    "torch_npu.npu_fusion_attention": _standin_npu_fusion_attention,
    "torch_npu.npu_fused_infer_attention_score": _standin_npu_fused_infer_attention_score,
    "torch_npu.npu_ffn": _standin_npu_ffn,
}


# ----------------------------------------------------------------------------------------------------------------
# Op classification
# ----------------------------------------------------------------------------------------------------------------

_MATMUL_PACKETS = ("mm", "bmm", "addmm", "baddbmm")  # FlopCounterMode formulas whose outputs the tracer follows
_MATRIX_LIKE = re.compile(r"(^|_)(mm|bmm|matmul|mv|dot|vdot|addmv|addr|ger|linear|einsum|tensordot|kron)($|_)"
                          r"|conv(olution|_|\d|$)|attention|attn|rnn|lstm|gru|linalg|cholesky|triangular_solve")
_VECTOR_NAMESPACES = ("aten", "prims", "prim", "profiler", "_c10d_functional")
_SOFTMAX_LIKE = {"_softmax", "_safe_softmax", "_log_softmax", "softmax", "log_softmax", "native_dropout",
                 "nan_to_num", "nan_to_num_"}
_VIEW_LIKE = {"view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "transpose", "permute", "t",
              "clone", "contiguous", "_to_copy", "to", "detach", "alias", "unsqueeze", "squeeze", "lift_fresh",
              "lift_fresh_copy", "as_strided", "flatten", "unflatten", "_unsafe_view_copy", "view_copy"}
_RANDOM_TAG = "nondeterministic_seeded"


def op_name(func) -> str:
    """'aten::mm' style name of an OpOverload."""
    return f"{func.namespace}::{func._overloadpacket.__name__}"


def classify_uncounted(name: str) -> str:
    """'unseen' for a matrix-like or foreign op with no formula, else 'vector' (not counted by convention)."""
    ns, _, base = name.partition("::")
    if ns not in _VECTOR_NAMESPACES:
        return "unseen"
    return "unseen" if _MATRIX_LIKE.search(base) else "vector"


# ----------------------------------------------------------------------------------------------------------------
# Tracer state and dispatch mode
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class _Lineage:
    """A tensor derived from matmul event ``event`` (its scores), with the mask applied so far."""
    event: int
    allowed: object = None       # bool CPU tensor broadcastable to the scores at masking time
    fraction: Fraction = Fraction(1)  # unmasked fraction of the scores (exact)
    unknown: bool = False        # a mask without values was applied


@dataclass
class _MatmulEvent:
    op: str
    dense_flops: int
    out_fraction: Fraction | None = None   # its output was masked afterwards (QK^T)
    in_fraction: Fraction | None = None    # an operand was a masked tensor (P V)
    unknown: bool = False


class _State:
    def __init__(self, device_kind: str):
        from torch.utils.weak import WeakTensorKeyDictionary
        self.device_kind = device_kind
        self.shadows = WeakTensorKeyDictionary()
        self.lineage = WeakTensorKeyDictionary()
        self.events: list = []
        self.formula_counts: dict = {}     # formula name -> flops
        self.formula_calls: dict = {}
        self.seen: dict = {}               # op name -> calls
        self.unseen: dict = {}             # op name -> calls
        self.unseen_reasons: dict = {}
        self.vector: dict = {}
        self.notes: list = []
        self.needs_values = False

    # -- values -----------------------------------------------------------------------------------------------
    def shadow_of(self, t):
        return self.shadows.get(t)

    def value_of(self, t):
        if t.device.type != "meta":
            return t
        return self.shadows.get(t)

    def note(self, text):
        if text not in self.notes:
            self.notes.append(text)

    # -- formulas ---------------------------------------------------------------------------------------------
    def add_formula(self, name, count: Count):
        self.formula_counts[name] = self.formula_counts.get(name, 0) + int(count.flops)
        self.formula_calls[name] = self.formula_calls.get(name, 0) + 1
        for n in count.notes:
            self.note(n)
        if count.needs_values:
            self.needs_values = True

    def add_unseen(self, name, reason):
        self.unseen[name] = self.unseen.get(name, 0) + 1
        self.unseen_reasons.setdefault(name, reason)


def _flatten(obj):
    import torch
    from torch.utils._pytree import tree_flatten
    return [x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]


def _tree_map(fn, obj):
    from torch.utils._pytree import tree_map
    return tree_map(fn, obj)


def _is_neg_fill(value, state) -> bool:
    """True when ``value`` (number or tensor) is a masking fill: every element <= NEG_MASK_THRESHOLD."""
    import torch
    if isinstance(value, torch.Tensor):
        vals = state.value_of(value)
        if vals is None or vals.numel() == 0 or not vals.is_floating_point():
            return False
        return bool((vals <= NEG_MASK_THRESHOLD).all())
    try:
        return float(value) <= NEG_MASK_THRESHOLD
    except (TypeError, ValueError):
        return False


def _make_mode_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
    from torch.utils.flop_counter import flop_registry as torch_flop_registry

    class _TraceMode(TorchDispatchMode):
        """Sees every op that actually executes (it sits under FlopCounterMode), keeps shadows and lineage."""

        def __init__(self, state: _State, registry: FormulaRegistry):
            super().__init__()
            self.state = state
            self.registry = registry

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            st = self.state
            if st.device_kind == "meta" and func._overloadpacket.__name__ == "_to_copy" and args and \
                    isinstance(args[0], torch.Tensor) and args[0].device.type == "meta" and \
                    kwargs.get("device") is not None and torch.device(kwargs["device"]).type != "meta":
                kwargs = dict(kwargs, device=torch.device("meta"))  # .cpu()/.npu() of a meta tensor stays meta
            try:
                out = func(*args, **kwargs)
            except Exception as exc:  # data-dependent ops on meta: evaluate on the shadows when all are known
                out = self._from_shadows(func, args, kwargs, exc)
                return out
            self._observe(func, args, kwargs, out)
            if st.device_kind == "meta":
                self._shadow(func, args, kwargs, out)
            return out

        # -- shadows -----------------------------------------------------------------------------------------
        def _cpu_args(self, args, kwargs):
            st = self.state
            missing = []

            def conv(x):
                if isinstance(x, torch.Tensor):
                    v = st.value_of(x)
                    if v is None:
                        missing.append(x)
                    return v
                if isinstance(x, torch.device) and x.type == "meta":
                    return torch.device("cpu")
                return x
            a = _tree_map(conv, args)
            k = _tree_map(conv, kwargs)
            if k.get("device") is not None and str(k["device"]) == "meta":
                k["device"] = torch.device("cpu")
            return (None, None) if missing else (a, k)

        def _from_shadows(self, func, args, kwargs, exc):
            a, k = self._cpu_args(args, kwargs)
            if a is None:
                raise exc
            with _disable_current_modes():
                cpu_out = func(*a, **k)
            st = self.state
            st.seen[op_name(func)] = st.seen.get(op_name(func), 0) + 1

            def to_meta(x):
                if isinstance(x, torch.Tensor) and x.device.type != "meta":
                    with _disable_current_modes():
                        m = torch.empty_like(x, device="meta")
                    st.shadows[m] = x
                    return m
                return x
            return _tree_map(to_meta, cpu_out)

        def _shadow(self, func, args, kwargs, out):
            st = self.state
            outs = [t for t in _flatten(out) if t.device.type == "meta"]
            if not outs or torch.Tag.nondeterministic_seeded in func.tags:
                return
            limit = SHADOW_MATMUL_MAX_NUMEL if func._overloadpacket.__name__ in _MATMUL_PACKETS else SHADOW_MAX_NUMEL
            if any(t.numel() > limit for t in outs):
                self._drop_mutated(func, args)
                return
            ins = _flatten((args, kwargs))
            name = func._overloadpacket.__name__
            if name in ("_to_copy", "copy_", "copy") and any(t.device.type != "meta" for t in ins):
                src = [t for t in ins if t.device.type != "meta"][0]
                if src.is_floating_point() and src.numel() > (1 << 16):
                    return  # a big real float tensor moved to meta: its values are not needed
            a, k = self._cpu_args(args, kwargs)
            if a is None:
                self._drop_mutated(func, args)
                return
            try:
                with _disable_current_modes():
                    cpu_out = func(*a, **k)
            except Exception:
                self._drop_mutated(func, args)
                return
            flat_meta = [x for x in _flatten_all(out)]
            flat_cpu = [x for x in _flatten_all(cpu_out)]
            if len(flat_meta) != len(flat_cpu):
                return
            for m, c in zip(flat_meta, flat_cpu):
                if isinstance(m, torch.Tensor) and m.device.type == "meta" and isinstance(c, torch.Tensor):
                    st.shadows[m] = c

        def _drop_mutated(self, func, args):
            if func._schema.is_mutable and args and isinstance(args[0], torch.Tensor):
                self.state.shadows.pop(args[0], None)

        # -- counting and lineage ------------------------------------------------------------------------------
        def _observe(self, func, args, kwargs, out):
            st = self.state
            name = op_name(func)
            base = func._overloadpacket.__name__
            st.seen[name] = st.seen.get(name, 0) + 1
            formula = self.registry.get(name)
            if formula is not None:
                try:
                    st.add_formula(name, formula.fn(*args, **kwargs))
                except Exception as exc:  # the op ran, but its arguments defeat the formula: say so
                    st.add_unseen(name, f"formula failed: {type(exc).__name__}: {exc}")
                return
            packet = func._overloadpacket
            if packet in torch_flop_registry:
                if base in _MATMUL_PACKETS and isinstance(out, torch.Tensor):
                    self._matmul(base, packet, args, kwargs, out)
                return
            kind = classify_uncounted(name)
            if kind == "unseen":
                st.add_unseen(name, "no FLOP formula for this op")
                return
            st.vector[name] = st.vector.get(name, 0) + 1
            self._lineage(base, func, args, kwargs, out)

        def _matmul(self, base, packet, args, kwargs, out):
            st = self.state
            dense = int(torch_flop_registry[packet](*args, **kwargs, out_val=out))
            ev = _MatmulEvent(op=f"aten::{base}", dense_flops=dense)
            operands = [a for a in args if isinstance(a, torch.Tensor)]
            if base in ("addmm", "baddbmm"):
                operands = operands[1:]
            for t in operands:
                lin = st.lineage.get(t)
                if lin is not None and (lin.allowed is not None or lin.unknown):
                    ev.in_fraction = lin.fraction if ev.in_fraction is None else ev.in_fraction * lin.fraction
                    ev.unknown = ev.unknown or lin.unknown
            st.events.append(ev)
            st.lineage[out] = _Lineage(event=len(st.events) - 1)

        def _lineage(self, base, func, args, kwargs, out):
            st = self.state
            if not isinstance(out, torch.Tensor):
                if base == "native_dropout" and isinstance(out, tuple):
                    out = out[0]
                else:
                    return
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if base in ("masked_fill", "masked_fill_"):
                self._masked_fill(args, out)
                return
            if base == "where" and len(args) >= 3:
                self._where(args, out)
                return
            if base in ("add", "add_") and len(tensors) == 2:
                if self._additive_mask(tensors, out):
                    return
            src = next((t for t in tensors if t in st.lineage), None)
            if src is None:
                return
            lin = st.lineage[src]
            pointwise = torch.Tag.pointwise in func.tags
            if not (pointwise or base in _SOFTMAX_LIKE or base in _VIEW_LIKE):
                if lin.allowed is not None:
                    st.note(f"a masked score tensor went through aten::{base}; its consumers are counted dense")
                return
            if out.numel() < src.numel() or (src.numel() and out.numel() % src.numel()):
                return
            st.lineage[out] = lin

        def _apply_mask(self, src, out, allowed, unknown=False):
            st = self.state
            lin = st.lineage[src]
            new = _Lineage(event=lin.event, unknown=lin.unknown or unknown)
            if unknown:
                new.allowed, new.fraction = lin.allowed, lin.fraction
                st.needs_values = True
                st.note("a mask without values (meta) was applied to attention scores: counted dense")
            else:
                combined = allowed
                if lin.allowed is not None:
                    try:
                        combined = torch.logical_and(lin.allowed, allowed)
                    except RuntimeError:
                        combined = None
                        st.note("two masks on differently shaped score tensors: fractions multiplied")
                total = math.prod(out.shape) or 1
                if combined is not None:  # exact rational fractions: the corrected counts stay integers
                    new.allowed = combined
                    new.fraction = Fraction(broadcast_count(combined, out.shape), total)
                else:
                    new.allowed = allowed
                    new.fraction = lin.fraction * Fraction(broadcast_count(allowed, out.shape), total)
            st.lineage[out] = new
            ev = st.events[lin.event]
            ev.out_fraction = new.fraction
            ev.unknown = ev.unknown or new.unknown

        def _fill(self, src, out, fill, mask, keep_where_true):
            """``out`` = ``src`` with ``fill`` where the mask says; a masking fill (-inf) removes those pairs."""
            st = self.state
            if not _is_neg_fill(fill, st):
                st.lineage[out] = st.lineage[src]
                return
            vals = st.value_of(mask)
            if vals is None:
                self._apply_mask(src, out, None, unknown=True)
            else:
                self._apply_mask(src, out, vals.bool() if keep_where_true else torch.logical_not(vals))

        def _masked_fill(self, args, out):
            if args[0] in self.state.lineage:  # masked_fill(scores, mask, value): mask True = filled
                self._fill(args[0], out, args[2], args[1], keep_where_true=False)

        def _where(self, args, out):
            cond, a, b = args[0], args[1], args[2]  # where(cond, a, b): a where cond is True
            if isinstance(a, torch.Tensor) and a in self.state.lineage:
                self._fill(a, out, b, cond, keep_where_true=True)
            elif isinstance(b, torch.Tensor) and b in self.state.lineage:
                self._fill(b, out, a, cond, keep_where_true=False)

        def _additive_mask(self, tensors, out) -> bool:
            st = self.state
            src = next((t for t in tensors if t in st.lineage), None)
            if src is None:
                return False
            bias = tensors[1] if src is tensors[0] else tensors[0]
            if bias in st.lineage:
                return False
            vals = st.value_of(bias)
            if vals is None or not vals.is_floating_point():
                return False
            allowed = vals > NEG_MASK_THRESHOLD
            if bool(allowed.all()):
                return False
            self._apply_mask(src, out, allowed)
            return True

    return _TraceMode


def _flatten_all(obj):
    from torch.utils._pytree import tree_flatten
    return tree_flatten(obj)[0]


@functools.lru_cache(maxsize=1)
def _trace_mode_class():
    return _make_mode_class()


# ----------------------------------------------------------------------------------------------------------------
# Python-level interception (SDPA, torch_npu stand-ins, Triton launches)
# ----------------------------------------------------------------------------------------------------------------

def _real_torch_npu():
    """The real torch_npu module if importable with its ops, else None (the compat stand-in does not count)."""
    mod = sys.modules.get("torch_npu")
    if mod is not None and not getattr(mod, "__mfu_standin__", False) and not getattr(mod, "__mfu_trace__", False):
        return mod
    if mod is None:
        import importlib.util
        if importlib.util.find_spec("torch_npu") is None:
            return None
        try:
            import torch_npu  # noqa: F401
            return sys.modules["torch_npu"]
        except Exception:
            return None
    return None


@contextlib.contextmanager
def npu_standins():
    """While active, ``import torch_npu`` gives a module whose fused ops are counting stand-ins (only where no
    real torch_npu is importable; the compat layer's stand-in, if installed, gets the ops added and removed)."""
    if _real_torch_npu() is not None:
        yield False
        return
    old = sys.modules.get("torch_npu")
    mod = old if old is not None else types.ModuleType("torch_npu")
    added = []
    if old is None:
        mod.__mfu_trace__ = True
        mod.__doc__ = "mfulib.flopcount stand-in: torch_npu fused ops that count FLOPs and return zeros"
        sys.modules["torch_npu"] = mod
    for path in _STANDINS:
        attr = path.split(".", 1)[1]
        if not hasattr(mod, attr):
            setattr(mod, attr, _counting(path, _STANDINS[path]))
            added.append(attr)
    try:
        yield True
    finally:
        for attr in added:
            try:
                delattr(mod, attr)
            except AttributeError:
                pass
        if old is None:
            sys.modules.pop("torch_npu", None)


def _counting(path, impl):
    """Wrap a Python entry point: count its formula, run ``impl`` with the tracer's modes off."""
    formula = next(f for f in REGISTRY.python_entries() if f.python == path)

    @functools.wraps(impl)
    def wrapper(*args, **kwargs):
        from torch.utils._python_dispatch import _disable_current_modes
        if not _STATE_STACK:
            return impl(*args, **kwargs)
        st = _STATE_STACK[-1]
        st.seen[path] = st.seen.get(path, 0) + 1
        st.add_formula(path, formula.fn(*args, **kwargs))
        with _disable_current_modes():
            return impl(*args, **kwargs)
    wrapper.__mfu_counting__ = True
    return wrapper


@contextlib.contextmanager
def _python_patches(module=None):
    """Patch F.scaled_dot_product_attention (and aliases of it in ``module``) and Triton launches."""
    import torch.nn.functional as F
    patched = []
    orig = F.scaled_dot_product_attention
    wrapped = _counting("torch.nn.functional.scaled_dot_product_attention", orig)
    patched.append((F, "scaled_dot_product_attention", orig))
    F.scaled_dot_product_attention = wrapped
    if module is not None:
        for k, v in list(vars(module).items()):
            if v is orig:
                patched.append((module, k, v))
                setattr(module, k, wrapped)
    jit = sys.modules.get("triton.runtime.jit")
    if jit is not None and hasattr(jit, "JITFunction"):
        orig_run = jit.JITFunction.run

        def run(self, *a, **k):
            if _STATE_STACK:
                name = f"triton::{getattr(self, '__name__', None) or getattr(self.fn, '__name__', '?')}"
                _STATE_STACK[-1].add_unseen(name, "a Triton kernel launched by the reference: the tracer cannot "
                                                  "count it (not run while tracing)")
                return None
            return orig_run(self, *a, **k)
        patched.append((jit.JITFunction, "run", orig_run))
        jit.JITFunction.run = run
    try:
        yield
    finally:
        for obj, attr, val in reversed(patched):
            setattr(obj, attr, val)


# ----------------------------------------------------------------------------------------------------------------
# Trace one call
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class TraceResult:
    """What the tracer counted for one call of the reference.

    ``total_flops`` = FlopCounterMode's count + formulas here - the masked pairs removed from matmuls.
    ``unseen_ops``: {op: calls} of ops with matrix-like semantics or from another namespace that have no formula
    (their work is NOT in the total). ``vector_ops``: ops seen and not counted by the convention.
    """
    status: str = "ok"                      # ok | rejected | skipped | error
    device: str | None = None               # meta | cpu
    total_flops: float | None = None
    torch_counted_flops: float = 0.0        # FlopCounterMode's own total (dense)
    formula_flops: dict = field(default_factory=dict)
    mask_corrections: list = field(default_factory=list)
    by_op: dict = field(default_factory=dict)
    unseen_ops: dict = field(default_factory=dict)
    unseen_reasons: dict = field(default_factory=dict)
    vector_ops: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    needs_values: bool = False
    reason: str | None = None
    seed: int | None = None
    attempts: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def trace_callable(fn, args, device_kind="cpu", module=None, registry: FormulaRegistry = REGISTRY,
                   shadows=None) -> TraceResult:
    """Run ``fn(*args)`` under the tracer and return a :class:`TraceResult` (exceptions propagate).

    ``device_kind`` says where the tensors live ("meta" enables shadows); ``shadows`` maps meta tensors to their
    real CPU values (small inputs); ``module`` is searched for module-level aliases of SDPA to intercept.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    state = _State(device_kind)
    for t, v in (shadows or {}).items():
        state.shadows[t] = v
    zero = {}
    for f in registry._by_name.values():
        ns, _, base = f.name.partition("::")
        packet = getattr(getattr(torch.ops, ns, None), base, None) if ns != "python" else None
        if packet is not None:
            zero[packet] = _zero_flops  # FlopCounterMode must not count (or decompose) what the formulas count
    mode = _trace_mode_class()(state, registry)
    counter = FlopCounterMode(display=False, custom_mapping=zero)
    _STATE_STACK.append(state)
    try:
        with _python_patches(module), torch.no_grad(), mode, counter:
            fn(*args)
    finally:
        _STATE_STACK.pop()
    return _result(state, counter)


def _zero_flops(*args, **kwargs):
    return 0


def _result(state: _State, counter) -> TraceResult:
    res = TraceResult(device=state.device_kind)
    by_op: dict = {}
    for packet, n in counter.get_flop_counts().get("Global", {}).items():
        by_op[f"aten::{getattr(packet, '__name__', str(packet))}"] = float(n)
    res.torch_counted_flops = float(sum(by_op.values()))
    removed = 0.0
    for i, ev in enumerate(state.events):
        frac = None
        if ev.out_fraction is not None and ev.in_fraction is not None:
            frac = ev.out_fraction * ev.in_fraction
            state.note("a matmul both consumed and produced masked scores: fractions multiplied")
        elif ev.out_fraction is not None:
            frac = ev.out_fraction
        elif ev.in_fraction is not None:
            frac = ev.in_fraction
        if frac is None or ev.unknown and frac == 1.0:
            continue
        counted = float(ev.dense_flops * frac)
        removed += ev.dense_flops - counted
        res.mask_corrections.append({"event": i, "op": ev.op, "role": "scores" if ev.out_fraction is not None
                                     else "probabilities", "dense_flops": ev.dense_flops,
                                     "counted_flops": counted, "unmasked_fraction": float(frac)})
        by_op[ev.op] = by_op.get(ev.op, 0.0) - (ev.dense_flops - counted)
    for name, n in state.formula_counts.items():
        by_op[name] = by_op.get(name, 0.0) + float(n)
    res.formula_flops = {k: float(v) for k, v in state.formula_counts.items()}
    res.by_op = by_op
    res.total_flops = res.torch_counted_flops + sum(res.formula_flops.values()) - removed
    res.unseen_ops = dict(state.unseen)
    res.unseen_reasons = dict(state.unseen_reasons)
    res.vector_ops = dict(state.vector)
    res.notes = list(state.notes)
    res.needs_values = state.needs_values
    return res


# ----------------------------------------------------------------------------------------------------------------
# Trace one case of a work directory
# ----------------------------------------------------------------------------------------------------------------

def _make_build_mode_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class _MetaBuildMode(TorchDispatchMode):
        """While get_input_groups()/Model() run: big floating tensors are created on meta, and moving a meta
        tensor to the CPU keeps it on meta, so building a huge case allocates nothing."""

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            names = [a.name for a in func._schema.arguments]
            if "size" in names and "device" in names:
                i = names.index("size")
                size = args[i] if i < len(args) else kwargs.get("size")
                dtype = kwargs.get("dtype")
                if dtype is None and "dtype" in names and names.index("dtype") < len(args):
                    dtype = args[names.index("dtype")]
                is_float = dtype is None and func._overloadpacket.__name__ not in ("randint", "full") \
                    or (dtype is not None and dtype.is_floating_point)
                try:
                    numel = math.prod(int(s) for s in size)
                except TypeError:
                    numel = 0
                if numel >= (META_BUILD_MIN_NUMEL if is_float else META_BUILD_INT_MIN_NUMEL):
                    kwargs["device"] = torch.device("meta")
                    kwargs.pop("pin_memory", None)
            if func._overloadpacket.__name__ == "_to_copy" and args and isinstance(args[0], torch.Tensor) \
                    and args[0].device.type == "meta" and kwargs.get("device") is not None:
                kwargs["device"] = torch.device("meta")
            if func._overloadpacket.__name__ == "copy_" and len(args) >= 2 and args[1].device.type == "meta" \
                    and args[0].device.type != "meta":
                return args[0]  # values are not needed; the destination keeps its (CPU) storage
            return func(*args, **kwargs)

    return _MetaBuildMode


@functools.lru_cache(maxsize=1)
def _build_mode_class():
    return _make_build_mode_class()


def _to_meta_with_shadows(args, model):
    """Move args and the model to meta; small real tensors (and module buffers) keep their values as shadows."""
    import torch
    shadows = {}

    def conv(x):
        if isinstance(x, torch.Tensor) and x.device.type != "meta":
            m = x.to("meta")
            if x.numel() <= SHADOW_MAX_NUMEL and (not x.is_floating_point() or x.numel() <= (1 << 16)):
                shadows[m] = x
            return m
        return x
    new_args = _tree_map(conv, args)
    if isinstance(model, torch.nn.Module):
        old_bufs = {n: b for n, b in model.named_buffers()}
        model.to("meta")
        for n, b in model.named_buffers():
            old = old_bufs.get(n)
            if old is not None and old.device.type != "meta" and old.numel() <= SHADOW_MAX_NUMEL:
                shadows[b] = old
    return new_args, shadows


def trace_case(opdir, case_id: int, seed: int = 0, prefer: str = "meta", max_cpu_input_bytes: int = 1 << 30,
               max_cpu_flops: float = 5e10) -> TraceResult:
    """Trace the reference of ``opdir`` (an :class:`mfulib.opdir.OpDir`) on case ``case_id``.

    Tries meta first (``prefer="meta"``); falls back to a real CPU run when meta fails, or when a mask's values
    were missing, provided the case's inputs are at most ``max_cpu_input_bytes`` and (when known) its FLOPs at
    most ``max_cpu_flops``. A case the reference rejects (``ValueError("case rejected: ...")``) comes back with
    status "rejected"; one beyond the caps with status "skipped"; other failures "error". Never raises for a
    failing case.
    """
    info = opdir.describe(case_id)
    res = None
    attempts = []
    meta_res = None
    if prefer == "meta":
        meta_res = _trace_once(opdir, case_id, seed, "meta")
        attempts.append({"device": "meta", "status": meta_res.status, "reason": meta_res.reason})
        if meta_res.status == "rejected" or (meta_res.status == "ok" and not meta_res.needs_values):
            meta_res.attempts = attempts
            return meta_res
    fits = info.input_bytes <= max_cpu_input_bytes
    flops_known = meta_res is not None and meta_res.status == "ok"
    if flops_known and meta_res.total_flops > max_cpu_flops:
        fits = False
    if fits:
        res = _trace_once(opdir, case_id, seed, "cpu")
        attempts.append({"device": "cpu", "status": res.status, "reason": res.reason})
    elif meta_res is not None and meta_res.status == "ok":
        res = meta_res
        res.notes.append(f"CPU re-run for mask values skipped: case beyond the CPU caps "
                         f"({info.input_bytes} input bytes, {meta_res.total_flops:.3g} FLOPs)")
    else:
        why = meta_res.reason if meta_res is not None else "meta tracing not tried"
        res = TraceResult(status="skipped", seed=seed,
                          reason=f"meta trace failed ({why}) and the case is beyond the CPU caps "
                                 f"({info.input_bytes} input bytes > {max_cpu_input_bytes} or FLOPs above "
                                 f"{max_cpu_flops:.3g}); raise --max-cpu-bytes to trace it on the CPU")
    res.attempts = attempts
    return res


def _trace_once(opdir, case_id, seed, device_kind) -> TraceResult:
    from .opdir import in_directory
    built = None
    try:
        with npu_standins():
            try:
                if device_kind == "meta":
                    with _build_mode_class()():
                        built = opdir.build_case(case_id, impl="ref", seed=seed, device="cpu")
                    args, shadows = _to_meta_with_shadows(built.args, built.model)
                else:
                    built = opdir.build_case(case_id, impl="ref", seed=seed, device="cpu")
                    args, shadows = built.args, {}
                with in_directory(built.staging):
                    res = trace_callable(built.model, args, device_kind, module=built.module, shadows=shadows)
            except Exception as exc:
                reason = rejection_reason(exc)
                if reason is not None:
                    return TraceResult(status="rejected", device=device_kind, reason=reason, seed=seed)
                return TraceResult(status="error", device=device_kind, seed=seed,
                                   reason=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    finally:
        if built is not None:
            built.close()
    res.seed = seed
    return res


def build_reference_args(opdir, case_id: int, seed: int = 0):
    """Forward arguments of the reference for ``case_id`` as ``get_input_groups()`` builds them after seeding
    with ``seed``: large floating tensors come back as meta tensors (shapes only), small ones with their values.
    Exceptions from the operator files propagate."""
    with npu_standins():
        with _build_mode_class()():
            built = opdir.build_case(case_id, impl="ref", seed=seed, device="cpu")
    built.close()
    return built.args
