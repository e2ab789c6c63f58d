"""Triton implementation of softmax_var as a plain launcher function (agent-benchmark style, no ModelNew).

y = softmax(x, dim=-1) for a 2-D x [rows, n]: one program per row, the whole row in one BLOCK_N = next power of 2
>= n block (masked lanes load -inf, so they add exp(-inf) = 0 to the sum); computed in fp32, stored in x's dtype.
The reduced dimension is the last one, as the reference's get_init_inputs() sets it.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_row_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride_y + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=ok)


def softmax_triton_torch(x: torch.Tensor) -> torch.Tensor:
    x2 = x.contiguous().view(-1, x.shape[-1])
    y2 = torch.empty_like(x2)
    n_rows, n_cols = x2.shape
    softmax_row_kernel[(n_rows,)](x2, y2, n_cols, x2.stride(0), y2.stride(0),
                                  BLOCK_N=triton.next_power_of_2(n_cols))
    return y2.view(x.shape)
