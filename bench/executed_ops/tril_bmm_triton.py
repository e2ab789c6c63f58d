"""Triton implementation of tril_bmm (bench/executed_ops/tril_bmm.py): C[i] = tril(A[i] @ B[i]).

One kernel, ``tril_bmm_kernel``: grid = (tiles of C per batch, b). A program whose BLOCK_M x BLOCK_N tile lies
wholly above the diagonal (its first column > its last row) stores zeros and runs no k step; every other tile
walks k in BLOCK_K steps with ``tl.dot`` (float32 accumulation) and zeroes its entries above the diagonal before
the store. Executed matrix work per batch: (tiles on or below the diagonal) x 2 * BLOCK_M * BLOCK_N *
BLOCK_K * ceil(K / BLOCK_K) - about half the dense 2 * m * n * k for a square C. Tiles: ``tile_config``.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def tril_bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                    stride_ab, stride_am, stride_ak,
                    stride_bb, stride_bk, stride_bn,
                    stride_cb, stride_cm, stride_cn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tile_m = pid // tiles_n
    tile_n = pid % tiles_n
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    # a tile wholly above the diagonal: no k step (its zeros are stored below)
    k_end = tl.where(tile_n * BLOCK_N > tile_m * BLOCK_M + BLOCK_M - 1, 0, K)
    a_tile = a_ptr + batch * stride_ab + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_tile = b_ptr + batch * stride_bb + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k_end, BLOCK_K):
        k_ok = (k0 + ks) < K
        a = tl.load(a_tile, mask=(rows[:, None] < M) & k_ok[None, :], other=0.0)
        b = tl.load(b_tile, mask=k_ok[:, None] & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    acc = tl.where(cols[None, :] <= rows[:, None], acc, 0.0)
    c_tile = c_ptr + batch * stride_cb + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_tile, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def tile_config(m, n, k, dtype):
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): 128 x 128 x 64 (32 for float32) on large problems,
    powers of two >= 16 (tl.dot's least) on small ones."""
    block_m = min(128, max(16, triton.next_power_of_2(m)))
    block_n = min(128, max(16, triton.next_power_of_2(n)))
    block_k = min(32 if dtype == torch.float32 else 64, max(16, triton.next_power_of_2(k)))
    return block_m, block_n, block_k, 8 if block_m * block_n >= 128 * 128 else 4, 3


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        if A.dim() != 3 or B.dim() != 3 or A.shape[0] != B.shape[0] or A.shape[2] != B.shape[1]:
            raise ValueError(f"case rejected: A {list(A.shape)} and B {list(B.shape)} are not [b,m,k] x [b,k,n]")
        batch, m, k = A.shape
        n = B.shape[2]
        C = torch.empty((batch, m, n), dtype=A.dtype, device=A.device)
        block_m, block_n, block_k, num_warps, num_stages = tile_config(m, n, k, A.dtype)
        grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n), batch)
        tril_bmm_kernel[grid](
            A, B, C, m, n, k,
            A.stride(0), A.stride(1), A.stride(2),
            B.stride(0), B.stride(1), B.stride(2),
            C.stride(0), C.stride(1), C.stride(2),
            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps, num_stages=num_stages)
        return C
