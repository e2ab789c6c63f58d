"""FLOP formulas and plain-torch stand-ins for more torch_npu fused ops (registered in
:data:`mfulib.flops.formulas.REGISTRY`; installed as ``torch_npu.<op>`` by :mod:`mfulib.flops.npu_standins`).

Signatures follow the Ascend operator documentation (torch_npu / op-plugin docs and the ops-transformer READMEs;
the MindSpore ops of the same name document the same arguments). Matrix FLOPs, 2 per multiply-accumulate:

* ``npu_sparse_flash_attention(query, key, value, sparse_indices, scale_value, *, block_table=None,
  actual_seq_lengths_query=None, actual_seq_lengths_kv=None, query_rope=None, key_rope=None,
  sparse_block_size=1, layout_query="BSND", layout_kv="BSND", sparse_mode=3, ...)``: softmax(Q K~^T) V~ over the
  keys ``sparse_indices`` selects per query token (index -1 ends the list; each index a block of
  ``sparse_block_size`` keys): ``2 * N1 * selected_keys * (D + D_rope + D_v)`` per query token. The selected count
  needs the indices' values; without them every slot counts (``needs_values``). Indices [B, S1, N2, K]: the
  N1 / N2 query heads of a KV head share its list, so the count is ``2 * N1 * (selected / N2) * (...)``.
* ``npu_lightning_indexer(query, key, weights, *, actual_seq_lengths_query=None, actual_seq_lengths_key=None,
  block_table=None, layout_query="BSND", layout_key="BSND", sparse_count=2048, sparse_mode=3, ...)``:
  Top-k{ 1_g @ [(W 1_Sk) * ReLU(Q_index K_index^T)] } (DeepSeek DSA): per (query token, key) pair and query head
  ``2 * D`` (Q K^T) + 2 (the weighted head sum) over the pairs ``sparse_mode`` keeps (3: bottom-right causal,
  0: all). The numeric stand-in computes the real top-k indices on CPU tensors, so a reference that feeds them to
  npu_sparse_flash_attention goes on with real values.
* ``npu_lstm(x, weight, bias, seqMask, h, c, has_biases, num_layers, dropout, train, bidirectional,
  batch_first, flag_seq, direction)`` (op-plugin docs/context/(beta)torch_npu-npu_lstm.md): the four gate GEMMs
  of every time step: ``2 * T * B * 4H * (I + H)``, one direction (bidirectional is documented as unsupported).
* vector-only (0 matrix FLOPs; their vector work is the element-cost table's, :mod:`mfulib.flops.vector_costs`):
  ``npu_rms_norm(x, gamma, epsilon=1e-6) -> (y, rstd)``, ``npu_rotary_mul(x, r1, r2, rotary_mode="half")``,
  ``npu_swiglu(x, dim=-1)``, ``npu_group_norm_swish(input, num_groups, weight, bias, eps=1e-5, swish_scale=1.0)
  -> (y, mean, rstd)``; their stand-ins compute the documented result in plain torch.
"""
from __future__ import annotations

import math

from mfulib.flops.formulas import BIG_TOKENS, REGISTRY, Count, band_pairs, shape_of

_DOC = "Ascend torch_npu / op-plugin operator docs"


def _bsnd_tokens(shape, layout):
    """(batch or None, tokens per batch, heads, head dim) for BSND [B, S, N, D] / TND [T, N, D]."""
    if str(layout).upper().startswith("TND"):
        return None, shape[0], shape[1], shape[2]
    return shape[0], shape[1], shape[2], shape[3]


@REGISTRY.register("npu::npu_sparse_flash_attention", f"{_DOC}: softmax(Q K~^T / sqrt(d)) V~ over the selected keys",
                   python="torch_npu.npu_sparse_flash_attention")
def sparse_flash_attention_flops(values, query, key, value, sparse_indices, scale_value=None, *args,
                                 query_rope=None, sparse_block_size=1, layout_query="BSND", **kwargs):
    qs = shape_of(query)
    _, _, n1, d = _bsnd_tokens(qs, layout_query)
    d_rope = shape_of(query_rope)[-1] if query_rope is not None else 0
    d_v = shape_of(value)[-1]
    idx = values(sparse_indices)
    slots = shape_of(sparse_indices)
    # sparse_indices [B, S1, N2, K] (BSND) / [T, N2, K] (TND): query heads share their KV head's (N2) index list,
    # so a query token's N1 heads read sum(selected) / N2 keys each
    n2 = slots[-2] if len(slots) >= 3 else 1
    if idx is None:
        selected = math.prod(slots) * int(sparse_block_size)
        return Count(2 * n1 * selected * (d + d_rope + d_v) // max(n2, 1),
                     ("sparse_indices without values: every slot counted",), True)
    import torch
    valid = idx >= 0
    # a -1 ends a token's list: count the slots before the first -1
    ends = torch.cumprod(valid.to(torch.int64), dim=-1)
    selected = int(ends.sum().item()) * int(sparse_block_size)
    return Count(2 * n1 * selected * (d + d_rope + d_v) // max(n2, 1),
                 (f"sparse attention: {selected} selected keys",))


@REGISTRY.register("npu::npu_lightning_indexer", f"{_DOC}: Top-k(1_g @ ((W 1_Sk) * ReLU(Q K^T))), DeepSeek DSA",
                   python="torch_npu.npu_lightning_indexer")
def lightning_indexer_flops(values, query, key, weights, *args, layout_query="BSND", layout_key="BSND",
                            sparse_mode=3, **kwargs):
    qs, ks = shape_of(query), shape_of(key)
    b, s1, n1, d = _bsnd_tokens(qs, layout_query)
    _, s2, _, _ = _bsnd_tokens(ks, layout_key)
    if int(sparse_mode) == 3:
        pairs = band_pairs(s1, s2, -BIG_TOKENS, s2 - s1)  # bottom-right causal
    else:
        pairs = s1 * s2
    return Count(2 * (b or 1) * n1 * pairs * (d + 1))


_LSTM_SOURCE = ("torch_npu.npu_lstm docs (op-plugin docs/context/(beta)torch_npu-npu_lstm.md): DynamicRNN, "
                "one layer, bidirectional/batch_first not supported; op-plugin LstmKernelNpu: steps = x.size(0), "
                "batch = x.size(1), hidden = bias.size(0) / 4; gates [i j f o] = [x_t, h_(t-1)] @ W")


@REGISTRY.register("npu::npu_lstm", _LSTM_SOURCE, python="torch_npu.npu_lstm")
def lstm_flops(values, input, weight, bias, seq_mask, h, c, *args, **kwargs):
    """``2 * T * B * 4H * (I + H)``: the four gate GEMMs of each of the T steps, one direction (the documented
    op is single-layer and unidirectional: ``bidirectional`` is "not supported", ``direction`` only picks the
    direction). x [T, B, I]; weight [I + H, 4H]; bias [4H] (H = bias.size(0) / 4, else h's last dim).
    Source: :data:`_LSTM_SOURCE`."""
    t, b, i = shape_of(input)[:3]
    hidden = shape_of(bias)[0] // 4 if bias is not None and shape_of(bias) else shape_of(h)[-1]
    notes = ()
    w = shape_of(weight)
    if math.prod(w) != 4 * hidden * (i + hidden):
        notes = (f"npu_lstm: weight {w} is not [I + H, 4H] = [{i + hidden}, {4 * hidden}]: counted from x and bias",)
    return Count(2 * t * b * 4 * hidden * (i + hidden), notes)


def _vector_only(name, source):
    @REGISTRY.register(f"npu::{name}", f"{_DOC}: {source} - no matrix work", python=f"torch_npu.{name}")
    def formula(values, *args, **kwargs):
        return Count(0, (f"{name}: vector work only (no matrix FLOPs)",))
    return formula


_vector_only("npu_rms_norm", "y = x * rsqrt(mean(x^2) + eps) * gamma")
_vector_only("npu_rotary_mul", "y = x * r1 + rotate_half(x) * r2")
_vector_only("npu_swiglu", "y = silu(a) * b, (a, b) = x.chunk(2, dim)")
_vector_only("npu_group_norm_swish", "y = swish(group_norm(x) * weight + bias)")


# ----------------------------------------------------------------------------------------------------------------
# Plain-torch stand-ins (values where the inputs have them; zeros of the documented shapes on meta)
# ----------------------------------------------------------------------------------------------------------------

def standin_rms_norm(x, gamma, epsilon=1e-6):
    import torch
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    rstd = torch.rsqrt(x.float().pow(2).mean(dim=dims, keepdim=True) + epsilon)
    return (x.float() * rstd * gamma.float()).to(x.dtype), rstd


def standin_rotary_mul(x, r1, r2, rotary_mode="half"):
    import torch
    a, b = x.chunk(2, dim=-1)
    return x * r1 + torch.cat((-b, a), dim=-1) * r2


def standin_swiglu(x, dim=-1):
    import torch.nn.functional as F
    a, b = x.chunk(2, dim=dim)
    return F.silu(a) * b


def standin_group_norm_swish(input, num_groups, weight=None, bias=None, eps=1e-5, swish_scale=1.0):
    import torch
    import torch.nn.functional as F
    n = input.shape[0]
    g = input.float().reshape(n, num_groups, -1)
    mean, var = g.mean(-1), g.var(-1, unbiased=False)
    y = F.group_norm(input.float(), num_groups, weight.float() if weight is not None else None,
                     bias.float() if bias is not None else None, eps)
    return (y * torch.sigmoid(swish_scale * y)).to(input.dtype), mean, torch.rsqrt(var + eps)


def standin_lstm(input, weight, bias, seq_mask, h, c, *args, **kwargs):
    import torch
    t, b = input.shape[0], input.shape[1]
    hid = h.shape[-1]
    z = torch.zeros(t, b, hid, dtype=input.dtype, device=input.device)
    return (z,) + tuple(z.clone() for _ in range(7))


def standin_sparse_flash_attention(query, key, value, sparse_indices, scale_value=None, *args, **kwargs):
    import torch
    out_shape = list(query.shape[:-1]) + [value.shape[-1]]
    return torch.zeros(out_shape, dtype=query.dtype, device=query.device), None, None


def standin_lightning_indexer(query, key, weights, *args, sparse_count=2048, sparse_mode=3, layout_query="BSND",
                              **kwargs):
    """BSND: indices [B, S1, 1, sparse_count] (int32, -1 past the keys a query may see) and their scores. CPU
    tensors get the real top-k (so a reference can go on with them); meta tensors get meta outputs."""
    import torch
    b, s1, n1, d = query.shape
    s2 = key.shape[1]
    shape = [b, s1, 1, int(sparse_count)]
    if query.device.type == "meta":
        return (torch.empty(shape, dtype=torch.int32, device="meta"),
                torch.empty(shape, dtype=query.dtype, device="meta"))
    scores = torch.relu(torch.einsum("bsnd,btd->bsnt", query.float(), key[:, :, 0].float()))
    scores = (scores * weights.float()[..., None]).sum(2)  # [b, s1, s2]
    if int(sparse_mode) == 3:
        i = torch.arange(s1)[:, None] + (s2 - s1)
        scores = scores.masked_fill(torch.arange(s2)[None, :] > i, float("-inf"))
    k = min(int(sparse_count), s2)
    val, idx = scores.topk(k, dim=-1)
    idx = torch.where(torch.isinf(val), torch.full_like(idx, -1), idx).to(torch.int32)
    pad = int(sparse_count) - k
    if pad:
        idx = torch.cat([idx, torch.full((b, s1, pad), -1, dtype=torch.int32)], dim=-1)
        val = torch.cat([val, torch.full((b, s1, pad), float("-inf"))], dim=-1)
    return idx[:, :, None], val[:, :, None].to(query.dtype)


STANDINS = {
    "torch_npu.npu_sparse_flash_attention": standin_sparse_flash_attention,
    "torch_npu.npu_lightning_indexer": standin_lightning_indexer,
    "torch_npu.npu_lstm": standin_lstm,
    "torch_npu.npu_rms_norm": standin_rms_norm,
    "torch_npu.npu_rotary_mul": standin_rotary_mul,
    "torch_npu.npu_swiglu": standin_swiglu,
    "torch_npu.npu_group_norm_swish": standin_group_norm_swish,
}
