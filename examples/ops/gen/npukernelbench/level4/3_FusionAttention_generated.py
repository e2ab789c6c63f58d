"""3_FusionAttention, Triton flash-attention forward for the npu_fusion_attention cases (team-written).

Kernel launched per forward: fusion_attn_fwd_kernel, grid (cdiv(S_q, BLOCK_M), B * N). All four layouts (BSH,
SBH, BSND, BNSD) are read and written in place through [B, N, S, D] strides - no transposes, no copies; the output
has query's layout. sparse_mode 0 and 4 (band with the default unlimited pre/next_tockens) run unmasked, 2 and 3
run causal aligned top-left / bottom-right and skip the key blocks past the diagonal. Dropout (keep_prob < 1):
Philox numbers from tl.rand in the kernel, keyed by (seed + batch*head, query row * S_kv + key column), with the
seed drawn from torch's CPU generator at each call; P' = P * mask / keep_prob after the softmax, as the operator.

Rejected per case (ValueError "case rejected: ..."): sparse_mode 1/5/6/7/8 (they need atten_mask, prefix or
varlen lengths the case file does not give - same reasons as the reference), head_dim > 256 (q and accumulator
tiles of one query block would not fit on chip; 7 of the 50 real cases), inconsistent shapes.

Dropout switch, as in the reference: ``ModelNew.dropout_enabled = False`` or ``MFU_DISABLE_DROPOUT=1`` (read at
each call) turns dropout off; correctness is compared that way.

Tolerances vs the reference (normalised max error): float16 1e-2, bfloat16 2e-2; float32 1e-4 in the Triton
interpreter, ~1e-2 on CUDA (tl.dot on fp32 uses TF32 by default).
"""
import os

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_HEAD_DIM = 256


@triton.jit
def fusion_attn_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, qk_scale_log2, N, GROUP, S_Q, S_KV, DIAG,
                           seed, keep_prob, inv_keep_prob,
                           sq_b, sq_n, sq_s, sk_b, sk_n, sk_s, sv_b, sv_n, sv_s, so_b, so_n, so_s,
                           HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, DROPOUT: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """o[b, n, i] = sum_j P'[i, j] v[b, n // GROUP, j] with P = softmax_j(scale * q_i . k_j), j <= i + DIAG if CAUSAL."""
    block_m = tl.program_id(0)
    bn = tl.program_id(1)
    batch = (bn // N).to(tl.int64)
    head = bn % N
    head_kv = head // GROUP
    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols_d = tl.arange(0, BLOCK_D)
    d_ok = cols_d < HEAD_DIM
    row_ok = rows < S_Q
    q = tl.load(q_ptr + batch * sq_b + head * sq_n + rows[:, None] * sq_s + cols_d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    k_base = k_ptr + batch * sk_b + head_kv * sk_n
    v_base = v_ptr + batch * sv_b + head_kv * sv_n
    kv_stop = S_KV
    if CAUSAL:
        kv_stop = tl.maximum(tl.minimum(S_KV, block_m * BLOCK_M + BLOCK_M + DIAG), 0)
    row_max = tl.full((BLOCK_M,), -1.0e30, dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for kv_start in range(0, kv_stop, BLOCK_N):
        cols = kv_start + tl.arange(0, BLOCK_N)
        col_ok = cols < S_KV
        k_t = tl.load(k_base + cols[None, :] * sk_s + cols_d[:, None], mask=col_ok[None, :] & d_ok[:, None],
                      other=0.0)
        logits = tl.dot(q, k_t) * qk_scale_log2
        seen = col_ok[None, :]
        if CAUSAL:
            seen = seen & (cols[None, :] <= rows[:, None] + DIAG)
        logits = tl.where(seen, logits, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(logits, 1))
        p = tl.exp2(logits - new_max[:, None])
        rescale = tl.exp2(row_max - new_max)
        row_sum = row_sum * rescale + tl.sum(p, 1)  # the softmax denominator counts dropped entries too
        if DROPOUT:
            uniform = tl.rand(seed + bn, rows[:, None] * S_KV + cols[None, :])
            p = tl.where(uniform < keep_prob, p, 0.0)
        v = tl.load(v_base + cols[:, None] * sv_s + cols_d[None, :], mask=col_ok[:, None] & d_ok[None, :],
                    other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * rescale[:, None])
        row_max = new_max
    out = acc / tl.where(row_sum > 0.0, row_sum, 1.0)[:, None]  # no visible key (mode 3, S_q > S_kv): 0
    if DROPOUT:
        out = out * inv_keep_prob
    tl.store(o_ptr + batch * so_b + head * so_n + rows[:, None] * so_s + cols_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


def heads_view(t, layout, heads):
    """[B, N, S, D] view of a tensor stored in ``layout`` (BSH/SBH split H into heads x D)."""
    if layout in ("BSH", "SBH"):
        t = t.unflatten(-1, (heads, t.shape[-1] // heads))
        return t.permute(0, 2, 1, 3) if layout == "BSH" else t.permute(1, 2, 0, 3)
    return t.permute(0, 2, 1, 3) if layout == "BSND" else t


class ModelNew(nn.Module):
    dropout_enabled = True

    def __init__(self):
        super().__init__()

    def plan(self, query, key, value, head_num, input_layout, scale, keep_prob, sparse_mode):
        """Check a case and return its launch plan (views and sizes); works on meta tensors, launches nothing.

        Raises ValueError("case rejected: <reason>") for a case this kernel does not run."""
        if sparse_mode in (1, 5, 6, 7, 8):
            needs = {1: "the full atten_mask (allMask)", 5: "prefix (non-compressed prefix mode)",
                     6: "prefix and a compressed atten_mask", 7: "actual_seq_qlen/kvlen with layout TND (varlen)",
                     8: "actual_seq_qlen/kvlen with layout TND (varlen)"}[sparse_mode]
            raise ValueError(f"case rejected: sparse_mode {sparse_mode} needs {needs}, which the case does not give")
        if sparse_mode not in (0, 2, 3, 4):
            raise ValueError(f"case rejected: sparse_mode {sparse_mode} is not defined by npu_fusion_attention")
        if input_layout not in ("BSH", "SBH", "BSND", "BNSD"):
            raise ValueError(f"case rejected: input_layout {input_layout!r} is not BSH, SBH, BSND or BNSD")
        if not 0.0 < keep_prob <= 1.0:
            raise ValueError(f"case rejected: keep_prob {keep_prob} is outside (0, 1]")
        split = input_layout in ("BSH", "SBH")
        if query.dim() != (3 if split else 4) or key.shape != value.shape or key.dim() != query.dim():
            raise ValueError(f"case rejected: shapes {list(query.shape)}, {list(key.shape)}, {list(value.shape)} "
                             f"do not fit layout {input_layout}")
        if split and (head_num <= 0 or query.shape[-1] % head_num):
            raise ValueError(f"case rejected: hidden {query.shape[-1]} is not divisible by head_num {head_num}")
        d = query.shape[-1] // head_num if split else query.shape[-1]
        if split and key.shape[-1] % d:
            raise ValueError(f"case rejected: key hidden {key.shape[-1]} is not a multiple of head_dim {d}")
        heads_kv = key.shape[-1] // d if split else key.shape[2 if input_layout == "BSND" else 1]
        q4 = heads_view(query, input_layout, head_num)
        k4, v4 = heads_view(key, input_layout, heads_kv), heads_view(value, input_layout, heads_kv)
        if q4.shape[1] != head_num or heads_kv == 0 or head_num % heads_kv or k4.shape[0] != q4.shape[0] \
                or k4.shape[3] != d:
            raise ValueError(f"case rejected: query {list(query.shape)} / key {list(key.shape)} do not pair with "
                             f"head_num {head_num} in layout {input_layout}")
        if d > MAX_HEAD_DIM:
            raise ValueError(f"case rejected: head_dim {d} > {MAX_HEAD_DIM}: one query block's q and accumulator "
                             f"tiles would not fit on chip in this kernel")
        wide = query.dtype == torch.float32 or d > 128
        block_m, block_n = (64, 32 if d > 64 else 64) if wide else (128, 64)
        return {"q": q4, "k": k4, "v": v4, "b": q4.shape[0], "n": head_num, "group": head_num // heads_kv,
                "s_q": q4.shape[2], "s_kv": k4.shape[2], "d": d, "block_m": block_m, "block_n": block_n,
                "causal": sparse_mode in (2, 3), "diag": k4.shape[2] - q4.shape[2] if sparse_mode == 3 else 0,
                "warps": 4 if d <= 64 else 8, "stages": 2 if wide else 3}

    def forward(self, query, key, value, head_num, input_layout, scale, keep_prob, sparse_mode):
        if query.stride(-1) != 1 or key.stride(-1) != 1 or value.stride(-1) != 1:
            query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
        plan = self.plan(query, key, value, head_num, input_layout, scale, keep_prob, sparse_mode)
        out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        o4, q4, k4, v4 = heads_view(out, input_layout, head_num), plan["q"], plan["k"], plan["v"]
        dropout = keep_prob < 1.0 and self.dropout_enabled and os.environ.get("MFU_DISABLE_DROPOUT", "0") != "1"
        seed = int(torch.randint(0, 2 ** 30, (1,)).item()) if dropout else 0
        grid = (triton.cdiv(plan["s_q"], plan["block_m"]), plan["b"] * plan["n"])
        fusion_attn_fwd_kernel[grid](
            q4, k4, v4, o4, float(scale) * 1.4426950408889634, plan["n"], plan["group"], plan["s_q"], plan["s_kv"],
            plan["diag"], seed, float(keep_prob), 1.0 / float(keep_prob),
            q4.stride(0), q4.stride(1), q4.stride(2), k4.stride(0), k4.stride(1), k4.stride(2),
            v4.stride(0), v4.stride(1), v4.stride(2), o4.stride(0), o4.stride(1), o4.stride(2),
            HEAD_DIM=plan["d"], CAUSAL=plan["causal"], DROPOUT=dropout, BLOCK_M=plan["block_m"],
            BLOCK_N=plan["block_n"], BLOCK_D=max(16, triton.next_power_of_2(plan["d"])),
            num_warps=plan["warps"], num_stages=plan["stages"])
        return out
