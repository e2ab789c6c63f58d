"""Baseline (naive) Triton implementation of 1_BatchMatmul: C[i] = A[i] @ B[i].

Kept as the "before" of this verify directory: one program per (row of C, BLOCK_N columns, batch), computing
the row with broadcast multiplies and a reduction over BLOCK_K-long slices of k - no tl.dot, so no tensor/cube
units, and each A row is re-read for every column block. Correct for every shape; slow by design.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bmm_row_naive_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                         s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_cb, s_cm, s_cn,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    col = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    z = tl.program_id(2).to(tl.int64)
    kk = tl.arange(0, BLOCK_K)
    total = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a_row = tl.load(a_ptr + z * s_ab + row * s_am + (k + kk) * s_ak, mask=k + kk < K, other=0.0)
        b_blk = tl.load(b_ptr + z * s_bb + (k + kk)[:, None] * s_bk + col[None, :] * s_bn,
                        mask=(k + kk < K)[:, None] & (col < N)[None, :], other=0.0)
        total += tl.sum(a_row.to(tl.float32)[:, None] * b_blk.to(tl.float32), axis=0)
    tl.store(c_ptr + z * s_cb + row * s_cm + col * s_cn, total.to(c_ptr.dtype.element_ty), mask=col < N)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        b, m, k = A.shape
        n = B.shape[2]
        C = torch.empty((b, m, n), dtype=A.dtype, device=A.device)
        block_n = min(128, triton.next_power_of_2(n))
        grid = (m, triton.cdiv(n, block_n), b)
        bmm_row_naive_kernel[grid](A, B, C, m, n, k, *A.stride(), *B.stride(), *C.stride(),
                                   BLOCK_N=block_n, BLOCK_K=32)
        return C
