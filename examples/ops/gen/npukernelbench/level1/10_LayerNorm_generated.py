"""Triton implementation of 10_LayerNorm: F.layer_norm over trailing dims, optional weight / bias, eps 1e-5.

x is viewed as [rows, N] with N = prod(normalized_shape); statistics in float32, output in x's dtype.
One kernel, ``layernorm_fwd_kernel``, two modes picked on the host:
* N <= 8192: ROWS rows x next_pow2(N) columns per program, loaded once; mean, then the variance of the
  centred values (two-pass in registers, no E[x^2] - E[x]^2 cancellation); one read + one write per element;
* N > 8192 (e.g. normalized_shape [4096, 64]): one row per program in BLOCK_N chunks: a pass for the mean, a pass
  for the variance, a pass that normalises and stores (three reads of x, mostly from L2).
A missing weight or bias becomes a constexpr flag (HAS_W / HAS_B), never a tensor of ones/zeros.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

EPS = 1e-5
MAX_ONE_CHUNK = 8192
CHUNK = 4096


@triton.jit
def _scale_shift_store(v, mean, rstd, w_ptr, b_ptr, y_ptr, row_off, cols, ok, col_ok,
                       HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    out = (v - mean[:, None]) * rstd[:, None]
    if HAS_W:
        out = out * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_B:
        out = out + tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + row_off[:, None] + cols[None, :], out.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def layernorm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, N, eps,
                         HAS_W: tl.constexpr, HAS_B: tl.constexpr, ONE_CHUNK: tl.constexpr,
                         ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rid = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = rid < n_rows
    row_off = rid.to(tl.int64) * N                  # x and y are contiguous [rows, N]
    c = tl.arange(0, BLOCK_N)
    if ONE_CHUNK:
        col_ok = c < N
        ok = live[:, None] & col_ok[None, :]
        v = tl.load(x_ptr + row_off[:, None] + c[None, :], mask=ok, other=0.0).to(tl.float32)
        mean = tl.sum(v, axis=1) / N
        centred = tl.where(ok, v - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / N + eps)
        _scale_shift_store(v, mean, rstd, w_ptr, b_ptr, y_ptr, row_off, c, ok, col_ok, HAS_W, HAS_B)
    else:
        part = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + c
            part += tl.load(x_ptr + row_off[:, None] + cols[None, :],
                            mask=live[:, None] & (cols[None, :] < N), other=0.0).to(tl.float32)
        mean = tl.sum(part, axis=1) / N
        part = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + c
            ok = live[:, None] & (cols[None, :] < N)
            v = tl.load(x_ptr + row_off[:, None] + cols[None, :], mask=ok, other=0.0).to(tl.float32)
            dv = tl.where(ok, v - mean[:, None], 0.0)
            part += dv * dv
        rstd = 1.0 / tl.sqrt(tl.sum(part, axis=1) / N + eps)
        for start in range(0, N, BLOCK_N):
            cols = start + c
            col_ok = cols < N
            ok = live[:, None] & col_ok[None, :]
            v = tl.load(x_ptr + row_off[:, None] + cols[None, :], mask=ok, other=0.0).to(tl.float32)
            _scale_shift_store(v, mean, rstd, w_ptr, b_ptr, y_ptr, row_off, cols, ok, col_ok, HAS_W, HAS_B)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, normalized_shape, weight=None, bias=None):
        n = math.prod(normalized_shape)
        if tuple(x.shape[-len(normalized_shape):]) != tuple(normalized_shape):   # the reference's rule
            raise ValueError(f"case rejected: x {list(x.shape)} does not end in {list(normalized_shape)}")
        xc = x.contiguous()
        y = torch.empty_like(xc)
        n_rows = xc.numel() // n if n else 0
        if n_rows == 0:
            return y
        w = weight.contiguous().view(-1) if weight is not None else xc   # placeholder pointer when absent
        b = bias.contiguous().view(-1) if bias is not None else xc
        if n <= MAX_ONE_CHUNK:
            block_n = triton.next_power_of_2(n)
            rows = max(1, min(16, MAX_ONE_CHUNK // block_n))
            one_chunk = True
        else:
            block_n, rows, one_chunk = CHUNK, 1, False
        num_warps = min(16, max(4, rows * block_n // 512))
        layernorm_fwd_kernel[(triton.cdiv(n_rows, rows),)](
            xc, w, b, y, n_rows, n, EPS,
            HAS_W=weight is not None, HAS_B=bias is not None, ONE_CHUNK=one_chunk,
            ROWS=rows, BLOCK_N=block_n, num_warps=num_warps)
        return y
