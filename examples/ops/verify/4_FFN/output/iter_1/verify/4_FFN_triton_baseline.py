"""Baseline (unfused) Triton implementation of 4_FFN: y = act(x @ W1) @ W2.

Three launches, nothing fused: ``ffn_up_gemm_naive_kernel`` writes the full x @ W1 [m, n1] to memory,
``ffn_up_act_elementwise_kernel`` reads it back and applies the activation (gated ones read both halves and write
[m, n1/2]), and ``ffn_down_gemm_naive_kernel`` does the second matmul (kernel names match 4_FFN_flops.py's
KERNEL_PARTS: up = first GEMM + activation, down = second GEMM). Fixed 32 x 32 x 32 tiles, no grouping,
and an extra round trip of the [m, n1] intermediate through memory: the "before" picture of this verify dir.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

GATE_OF = {"swiglu": "silu", "geglu": "gelu"}


@triton.jit
def _gemm_tile(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc, BS: tl.constexpr):
    r = tl.program_id(0) * BS + tl.arange(0, BS)
    c = tl.program_id(1) * BS + tl.arange(0, BS)
    kk = tl.arange(0, BS)
    acc = tl.zeros((BS, BS), dtype=tl.float32)
    for k in range(0, K, BS):
        a = tl.load(a_ptr + r[:, None] * lda + (k + kk)[None, :], mask=(r[:, None] < M) & (k + kk < K)[None, :],
                    other=0.0)
        b = tl.load(b_ptr + (k + kk)[:, None] * ldb + c[None, :], mask=(k + kk < K)[:, None] & (c[None, :] < N),
                    other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + r[:, None] * ldc + c[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(r[:, None] < M) & (c[None, :] < N))


@triton.jit
def ffn_up_gemm_naive_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc, BS: tl.constexpr):
    _gemm_tile(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc, BS)


@triton.jit
def ffn_down_gemm_naive_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc, BS: tl.constexpr):
    _gemm_tile(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc, BS)


@triton.jit
def ffn_up_act_elementwise_kernel(z_ptr, h_ptr, total, n_out, ld_z, ACT: tl.constexpr, GATED: tl.constexpr,
                           BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < total
    row = idx // n_out
    col = idx % n_out
    z = tl.load(z_ptr + row * ld_z + col, mask=ok, other=0.0).to(tl.float32)
    if ACT == "relu":
        a = tl.maximum(z, 0.0)
    elif ACT == "gelu":
        a = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))
    else:
        a = z * tl.sigmoid(z)
    if GATED:
        a = a * tl.load(z_ptr + row * ld_z + col + n_out, mask=ok, other=0.0).to(tl.float32)
    tl.store(h_ptr + idx, a.to(h_ptr.dtype.element_ty), mask=ok)


def _gemm(kernel, a, b):
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    kernel[(triton.cdiv(m, 32), triton.cdiv(n, 32))](a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0), BS=32)
    return c


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, weight1, weight2, activation):
        gated = activation in GATE_OF
        n1 = weight1.shape[1]
        n_out = n1 // 2 if gated else n1
        if activation not in ("relu", "gelu", "silu") and not gated:
            raise ValueError(f"case rejected: activation {activation!r} is not implemented here")
        if weight2.shape[0] != n_out or (gated and n1 % 2):
            raise ValueError(f"case rejected: weight2 {list(weight2.shape)} must have {n_out} rows for {activation}")
        x, weight1, weight2 = x.contiguous(), weight1.contiguous(), weight2.contiguous()
        z = _gemm(ffn_up_gemm_naive_kernel, x, weight1)         # [m, n1], written to memory
        h = torch.empty((x.shape[0], n_out), dtype=x.dtype, device=x.device)
        ffn_up_act_elementwise_kernel[(triton.cdiv(h.numel(), 1024),)](
            z, h, h.numel(), n_out, z.stride(0), ACT=GATE_OF.get(activation, activation), GATED=gated, BLOCK=1024)
        return _gemm(ffn_down_gemm_naive_kernel, h, weight2)
