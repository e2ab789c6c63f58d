"""7_SparseVarlenAttention, Triton implementation (team-written; device-agnostic host code, GPU-style grids).

Kernels launched per forward:
    rope_kernel              x2: q -> q_rot, then k -> k_rot, rotate-half rotary embedding from cached cos/sin
                             tables; programs whose tokens are all padding exit at once
    varlen_attn_fwd_kernel   grid (cdiv(s, BLOCK_M), b * hq): reads actual_seq_lengths[b] on the device; a query
                             block past the sequence end only writes zeros; key blocks run from the sliding
                             window's first block to the causal diagonal / the sequence end, never into padding
so a decomposition has an "attn" part (varlen_attn_fwd_kernel) and a vector-only "rope" part (rope_kernel).

cos/sin tables [s, d/2] (float32) come from the reference's expression (theta^(-2j/d) outer positions) and are
cached per (s, d, theta, device), like a rotary cache; the lengths tensor is cached per (lengths, device).

Tolerances vs the reference (normalised max error): float16 1e-2, bfloat16 2e-2 (rotated q/k are rounded to the
input dtype before the dot); float32 1e-4 in the Triton interpreter, ~1e-2 on CUDA (TF32 tl.dot by default).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rope_kernel(x_ptr, out_ptr, cos_ptr, sin_ptr, lens_ptr, S, NH,
                stride_xb, stride_xs, stride_xh, stride_ob, stride_os, stride_oh,
                HALF: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """Rows r = token * NH + head of batch program_id(1); out = x * cos + rotate_half(x) * sin (float32 math)."""
    batch = tl.program_id(1)
    seq_len = tl.load(lens_ptr + batch)
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    if tl.program_id(0) * BLOCK_R < seq_len * NH:
        token = rows // NH
        head = rows % NH
        cols = tl.arange(0, BLOCK_HALF)
        mask = (token < seq_len)[:, None] & (cols < HALF)[None, :]
        x_row = x_ptr + batch.to(tl.int64) * stride_xb + token[:, None] * stride_xs + head[:, None] * stride_xh
        x1 = tl.load(x_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(x_row + HALF + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        c = tl.load(cos_ptr + token[:, None] * HALF + cols[None, :], mask=mask, other=0.0)
        s = tl.load(sin_ptr + token[:, None] * HALF + cols[None, :], mask=mask, other=0.0)
        o_row = out_ptr + batch.to(tl.int64) * stride_ob + token[:, None] * stride_os + head[:, None] * stride_oh
        tl.store(o_row + cols[None, :], (x1 * c - x2 * s).to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(o_row + HALF + cols[None, :], (x2 * c + x1 * s).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def varlen_attn_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lens_ptr, qk_scale_log2, S, HQ, GROUP, WINDOW_LEFT,
                           stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh,
                           stride_ob, stride_os, stride_oh,
                           HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """Padded [b, s, h, d] q/k/v; k and v share strides (same-shaped contiguous buffers). Every row of o below s
    is written: zeros past the sequence end."""
    block_m = tl.program_id(0)
    batch = tl.program_id(1) // HQ
    head = tl.program_id(1) % HQ
    seq_len = tl.load(lens_ptr + batch)
    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < HEAD_DIM
    o_ptrs = (o_ptr + batch.to(tl.int64) * stride_ob + offs_m[:, None] * stride_os + head * stride_oh
              + offs_d[None, :])
    row_ok = offs_m[:, None] < seq_len
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    if block_m * BLOCK_M < seq_len:
        q = tl.load(q_ptr + batch.to(tl.int64) * stride_qb + offs_m[:, None] * stride_qs + head * stride_qh
                    + offs_d[None, :], mask=row_ok & d_ok, other=0.0)
        kv_base = batch.to(tl.int64) * stride_kb + (head // GROUP) * stride_kh
        lo = 0
        if WINDOW:
            lo = tl.maximum(block_m * BLOCK_M - WINDOW_LEFT, 0) // BLOCK_N * BLOCK_N
        hi = seq_len
        if CAUSAL:
            hi = tl.minimum(seq_len, (block_m + 1) * BLOCK_M)
        m_i = tl.full((BLOCK_M,), -1.0e30, dtype=tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for start_n in range(lo, hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            n_ok = offs_n < seq_len
            k_t = tl.load(k_ptr + kv_base + offs_n[None, :] * stride_ks + offs_d[:, None],
                          mask=n_ok[None, :] & (offs_d[:, None] < HEAD_DIM), other=0.0)
            qk = tl.dot(q, k_t) * qk_scale_log2
            visible = n_ok[None, :]
            if CAUSAL:
                visible = visible & (offs_n[None, :] <= offs_m[:, None])
            if WINDOW:
                visible = visible & (offs_n[None, :] >= offs_m[:, None] - WINDOW_LEFT)
            qk = tl.where(visible, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            p = tl.exp2(qk - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
            v = tl.load(v_ptr + kv_base + offs_n[:, None] * stride_ks + offs_d[None, :],
                        mask=n_ok[:, None] & d_ok, other=0.0)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new
        acc = tl.where(row_ok, acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None], 0.0)
    tl.store(o_ptrs, acc.to(o_ptr.dtype.element_ty), mask=(offs_m[:, None] < S) & d_ok)


def require(ok, reason):
    if not ok:
        raise ValueError(f"case rejected: {reason}")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._rope_tables = {}
        self._lens = {}

    def rope_tables(self, s, d, theta, device):
        key = (s, d, float(theta), str(device))
        if key not in self._rope_tables:
            inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))
            angles = torch.outer(torch.arange(s, dtype=torch.float32, device=device), inv_freq)
            self._rope_tables[key] = (angles.cos().contiguous(), angles.sin().contiguous())
        return self._rope_tables[key]

    def lengths(self, actual_seq_lengths, b, s, device):
        if torch.is_tensor(actual_seq_lengths):
            lens = actual_seq_lengths.to(device=device, dtype=torch.int32)
            require(lens.numel() == b, f"actual_seq_lengths has {lens.numel()} entries for batch {b}")
            return lens.clamp(0, s)
        key = (tuple(int(n) for n in actual_seq_lengths), str(device))
        require(len(key[0]) == b and all(0 <= n <= s for n in key[0]),
                f"actual_seq_lengths {list(key[0])} must hold {b} lengths in [0, {s}]")
        if key not in self._lens:
            self._lens[key] = torch.tensor(key[0], dtype=torch.int32, device=device)
        return self._lens[key]

    def rope(self, x, cos, sin, lens):
        b, s, nh, d = x.shape
        out = torch.empty((b, s, nh, d), dtype=x.dtype, device=x.device)
        block_r = 64
        rope_kernel[(triton.cdiv(s * nh, block_r), b)](
            x, out, cos, sin, lens, s, nh, x.stride(0), x.stride(1), x.stride(2),
            out.stride(0), out.stride(1), out.stride(2),
            HALF=d // 2, BLOCK_R=block_r, BLOCK_HALF=triton.next_power_of_2(d // 2), num_warps=4)
        return out

    def forward(self, q, k, v, actual_seq_lengths, rope_theta, causal, window_left, scale):
        require(q.dim() == 4 and k.dim() == 4 and k.shape == v.shape,
                f"need 4-D q [b,s,hq,d] and k = v [b,s,hkv,d], got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
        b, s, hq, d = q.shape
        hkv = k.shape[2]
        require(k.shape[:2] == (b, s) and k.shape[3] == d, f"k {list(k.shape)} does not pair with q {list(q.shape)}")
        require(hkv > 0 and hq % hkv == 0, f"hq {hq} is not a multiple of hkv {hkv}")
        require(d % 2 == 0 and d <= 256, f"head dim {d}: rope needs an even head dim, and this kernel tiles "
                                         "at most 256 on chip")
        if q.stride(-1) != 1 or k.stride(-1) != 1:
            q, k = q.contiguous(), k.contiguous()
        lens = self.lengths(actual_seq_lengths, b, s, q.device)
        cos, sin = self.rope_tables(s, d, rope_theta, q.device)
        q_rot, k_rot = self.rope(q, cos, sin, lens), self.rope(k, cos, sin, lens)
        v = v.contiguous()  # same strides as k_rot (contiguous [b, s, hkv, d]): the kernel takes one set
        small = q.dtype != torch.float32 and d <= 128
        block_m, block_n = (128, 64) if small else (64, 32)
        o = torch.empty_like(q_rot)
        varlen_attn_fwd_kernel[(triton.cdiv(s, block_m), b * hq)](
            q_rot, k_rot, v, o, lens, scale * 1.4426950408889634, s, hq, hq // hkv, int(window_left),
            q_rot.stride(0), q_rot.stride(1), q_rot.stride(2), k_rot.stride(0), k_rot.stride(1), k_rot.stride(2),
            o.stride(0), o.stride(1), o.stride(2),
            HEAD_DIM=d, CAUSAL=bool(causal), WINDOW=int(window_left) >= 0, BLOCK_M=block_m, BLOCK_N=block_n,
            BLOCK_D=max(16, triton.next_power_of_2(d)), num_warps=8 if small and d > 64 else 4, num_stages=2)
        return o
