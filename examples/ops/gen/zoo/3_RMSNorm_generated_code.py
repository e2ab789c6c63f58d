"""Triton implementation of 3_RMSNorm: y = x * rsqrt(mean(x^2, -1) + eps) * weight (float32 math, x's dtype out).

One kernel, ``rmsnorm_fwd_kernel``: each program normalises BLOCK_ROWS rows held whole in registers
(BLOCK_H = next power of two >= h), so x is read once and y written once: 2 * numel * itemsize bytes plus the
weight. Rows longer than MAX_HIDDEN do not fit this scheme; such a case is rejected per case.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_HIDDEN = 16384


@triton.jit
def rmsnorm_fwd_kernel(X, W, Y, n_rows, hidden, x_row_stride, y_row_stride, eps,
                       BLOCK_ROWS: tl.constexpr, BLOCK_H: tl.constexpr):
    r = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    h = tl.arange(0, BLOCK_H)
    h_in = h < hidden
    mask = (r[:, None] < n_rows) & h_in[None, :]
    r64 = r.to(tl.int64)
    xv = tl.load(X + r64[:, None] * x_row_stride + h[None, :], mask=mask, other=0.0).to(tl.float32)
    ms = tl.sum(xv * xv, axis=1) / hidden                 # mean of squares per row
    rstd = 1.0 / tl.sqrt(ms + eps)
    wv = tl.load(W + h, mask=h_in, other=0.0).to(tl.float32)
    out = xv * rstd[:, None] * wv[None, :]
    tl.store(Y + r64[:, None] * y_row_stride + h[None, :], out.to(Y.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, weight, eps):
        hidden = x.shape[-1]
        if weight.dim() != 1 or weight.shape[0] != hidden:
            raise ValueError(f"case rejected: weight {list(weight.shape)} must be [{hidden}] (x's last dim)")
        if hidden > MAX_HIDDEN:
            raise ValueError(f"case rejected: hidden size {hidden} > {MAX_HIDDEN}, rows no longer fit in registers")
        x2 = x.contiguous().view(-1, hidden)
        y2 = torch.empty_like(x2)
        n_rows = x2.shape[0]
        block_h = triton.next_power_of_2(hidden)
        block_rows = max(1, min(32, 8192 // block_h))
        num_warps = min(16, max(4, block_rows * block_h // 1024))
        if n_rows:
            rmsnorm_fwd_kernel[(triton.cdiv(n_rows, block_rows),)](
                x2, weight.contiguous(), y2, n_rows, hidden, x2.stride(0), y2.stride(0), float(eps),
                BLOCK_ROWS=block_rows, BLOCK_H=block_h, num_warps=num_warps)
        return y2.view(x.shape)
