"""Baseline (naive) Triton implementation of 2_Softmax: three passes over each row.

One program per row, BLOCK = 1024-element chunks: pass 1 finds the max, pass 2 sums exp(x - max), pass 3
writes exp(x - max) / sum. x is read three times and the grid has one small program per row, so short rows
leave the device idle. The reduced dim is moved last first (a copy) when it is not already last.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_three_pass_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * n
    offs = tl.arange(0, BLOCK)
    lane_max = tl.full((BLOCK,), float("-inf"), tl.float32)
    for s in range(0, n, BLOCK):
        v = tl.load(x_ptr + base + s + offs, mask=s + offs < n, other=float("-inf"))
        lane_max = tl.maximum(lane_max, v.to(tl.float32))
    m = tl.max(lane_max, axis=0)
    lane_sum = tl.zeros((BLOCK,), tl.float32)
    for s in range(0, n, BLOCK):
        v = tl.load(x_ptr + base + s + offs, mask=s + offs < n, other=float("-inf"))
        lane_sum += tl.exp(v.to(tl.float32) - m)
    total = tl.sum(lane_sum, axis=0)
    for s in range(0, n, BLOCK):
        v = tl.load(x_ptr + base + s + offs, mask=s + offs < n, other=float("-inf"))
        tl.store(y_ptr + base + s + offs, (tl.exp(v.to(tl.float32) - m) / total).to(y_ptr.dtype.element_ty),
                 mask=s + offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, dim=-1):
        xt = x.transpose(dim, -1).contiguous()
        y = torch.empty_like(xt)
        n = xt.shape[-1]
        if xt.numel():
            softmax_three_pass_kernel[(xt.numel() // n,)](xt, y, n, BLOCK=1024)
        return y.transpose(dim, -1)
