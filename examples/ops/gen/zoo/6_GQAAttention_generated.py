"""6_GQAAttention, Triton implementation (team-written; device-agnostic host code, GPU-style grid).

Kernel launched per forward: gqa_attn_fwd_kernel, grid (cdiv(s_q, BLOCK_M), b * hq); query head h reads kv head
h // (hq / hkv) (the repeated K/V tiles come from L2, not from a repeated copy in memory).

Each program runs its key blocks in two phases: blocks every query row of the tile sees in full (no mask work),
then the blocks cut by the bottom-right causal diagonal or by the end of the keys (masked). Keys past the diagonal
are never loaded, so causal costs about half the dense work. Rows that see no key (s_q > s_kv, causal) output 0.

Tolerances vs the reference (normalised max error): float16 1e-2, bfloat16 2e-2; float32 1e-4 in the Triton
interpreter, ~1e-2 on CUDA (tl.dot on fp32 uses TF32 by default).
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gqa_kv_step(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m, d_ok, kv_len, diag_offset, qk_scale_log2,
                 stride_kn, stride_vn, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, PAD_D: tl.constexpr,
                 CAUSAL: tl.constexpr):
    """One key block of the online softmax. MASKED: the block may hold keys past the end or past the causal
    diagonal; PAD_D: BLOCK_D > head dim, so loads are masked along d as well."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    if MASKED or PAD_D:
        n_ok = offs_n < kv_len
        k_t = tl.load(k_ptrs + start_n * stride_kn, mask=n_ok[None, :] & d_ok[:, None], other=0.0)
        v = tl.load(v_ptrs + start_n * stride_vn, mask=n_ok[:, None] & d_ok[None, :], other=0.0)
    else:
        k_t = tl.load(k_ptrs + start_n * stride_kn)
        v = tl.load(v_ptrs + start_n * stride_vn)
    scores = tl.dot(q, k_t) * qk_scale_log2  # [BLOCK_M, BLOCK_N], log2 domain
    if MASKED:
        visible = offs_n[None, :] < kv_len
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None] + diag_offset)
        scores = tl.where(visible, scores, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(scores, 1))
    p = tl.exp2(scores - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i * alpha + tl.sum(p, 1), m_new


@triton.jit
def gqa_attn_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, qk_scale_log2, HQ, GROUP, S_Q, S_KV,
                        stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_kn,
                        stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_os,
                        HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    block_m = tl.program_id(0)
    bh = tl.program_id(1)
    batch = bh // HQ
    head = bh % HQ
    kv_head = head // GROUP
    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    q_ptrs = q_ptr + batch.to(tl.int64) * stride_qb + head * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :]
    q = tl.load(q_ptrs, mask=(offs_m[:, None] < S_Q) & d_ok[None, :], other=0.0)
    k_ptrs = (k_ptr + batch.to(tl.int64) * stride_kb + kv_head * stride_kh
              + offs_n[None, :] * stride_kn + offs_d[:, None])  # K^T tile [BLOCK_D, BLOCK_N]
    v_ptrs = (v_ptr + batch.to(tl.int64) * stride_vb + kv_head * stride_vh
              + offs_n[:, None] * stride_vn + offs_d[None, :])

    diag_offset = S_KV - S_Q  # bottom-right alignment: query i sees key j <= i + diag_offset
    first_row = block_m * BLOCK_M
    if CAUSAL:
        full_end = tl.minimum(first_row + diag_offset + 1, S_KV)  # keys every row of the tile sees
        kv_end = tl.minimum(first_row + BLOCK_M + diag_offset, S_KV)
    else:
        full_end = S_KV
        kv_end = S_KV
    full_end = tl.maximum(full_end, 0) // BLOCK_N * BLOCK_N
    kv_end = tl.maximum(kv_end, 0)

    m_i = tl.full((BLOCK_M,), -1.0e30, dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for start_n in range(0, full_end, BLOCK_N):
        acc, l_i, m_i = _gqa_kv_step(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m, d_ok, S_KV, diag_offset,
                                     qk_scale_log2, stride_kn, stride_vn, BLOCK_N, False, BLOCK_D != HEAD_DIM, CAUSAL)
    for start_n in range(full_end, kv_end, BLOCK_N):
        acc, l_i, m_i = _gqa_kv_step(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m, d_ok, S_KV, diag_offset,
                                     qk_scale_log2, stride_kn, stride_vn, BLOCK_N, True, BLOCK_D != HEAD_DIM, CAUSAL)
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # l == 0: the row saw no key -> 0
    o_ptrs = o_ptr + batch.to(tl.int64) * stride_ob + head * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :]
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=(offs_m[:, None] < S_Q) & d_ok[None, :])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v, causal, scale):
        if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
            raise ValueError(f"case rejected: need q [b,hq,s,d] and k = v [b,hkv,s_kv,d], got "
                             f"{list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
        b, hq, s_q, d = q.shape
        hkv, s_kv = k.shape[1], k.shape[2]
        if hkv == 0 or hq % hkv:
            raise ValueError(f"case rejected: hq {hq} is not a multiple of hkv {hkv}")
        if d > 256:
            raise ValueError(f"case rejected: head dim {d} > 256, larger than one on-chip tile of this kernel")
        if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        # tile sizes: q tile + double-buffered k/v tiles within shared memory; fp32 tiles are twice the bytes
        wide = q.dtype == torch.float32 or d > 128
        block_m, block_n = (64, 32 if d > 64 else 64) if wide else (128, 64)
        o = torch.empty_like(q)
        grid = (triton.cdiv(s_q, block_m), b * hq)
        gqa_attn_fwd_kernel[grid](
            q, k, v, o, scale * 1.4426950408889634, hq, hq // hkv, s_q, s_kv,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
            HEAD_DIM=d, CAUSAL=bool(causal), BLOCK_M=block_m, BLOCK_N=block_n,
            BLOCK_D=max(16, triton.next_power_of_2(d)),
            num_warps=4 if d <= 64 else 8, num_stages=2 if wide else 3)
        return o
