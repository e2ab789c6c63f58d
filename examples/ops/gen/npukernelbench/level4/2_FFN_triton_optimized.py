"""Triton implementation of 2_FFN (npu_ffn semantics): y = act(x @ W1) @ W2 for all seven npu_ffn activations.

Activations (same definitions as the reference): fastgelu = v * sigmoid(1.702 v); gelu = tanh approximation,
written as v * sigmoid(2 * sqrt(2/pi) * (v + 0.044715 v^3)) (identical to 0.5 v (1 + tanh(...))); relu; silu;
gated geglu / swiglu / reglu = act(a) * b with a, b the first and second half of x @ W1.

Launches (2 kernels, distinct names so a profile separates the two GEMMs):
* ``ffn1_matmul_act_kernel``: H = act(x @ W1), 2-D grid of BLOCK_M x BLOCK_N tiles of H; for gated activations
  every x tile feeds two dots (columns j and j + n1/2 of W1) and the epilogue multiplies them, so H is
  [m, n1/2]. H is kept in x's dtype; accumulation is float32.
* ``ffn2_matmul_kernel``: y = H @ W2, same tiling.
Cases whose shapes npu_ffn would refuse are rejected per case, with the reason.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

ACT_OF = {"fastgelu": ("fastgelu", False), "gelu": ("gelu_tanh", False), "relu": ("relu", False),
          "silu": ("silu", False), "geglu": ("gelu_tanh", True), "swiglu": ("silu", True),
          "reglu": ("relu", True)}


@triton.jit
def _epilogue_act(z, ACT: tl.constexpr):
    if ACT == "fastgelu":
        z = z * tl.sigmoid(1.702 * z)
    elif ACT == "gelu_tanh":
        z = z * tl.sigmoid(1.5957691216057308 * (z + 0.044715 * z * z * z))
    elif ACT == "relu":
        z = tl.where(z > 0.0, z, 0.0)
    elif ACT == "silu":
        z = z * tl.sigmoid(z)
    return z


@triton.jit
def ffn1_matmul_act_kernel(x_ptr, w1_ptr, h_ptr, M, K1, NH,
                           stride_xm, stride_xk, stride_w1k, stride_w1n, stride_hm, stride_hn,
                           ACT: tl.constexpr, GLU: tl.constexpr,
                           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    i = tl.program_id(0) * BM + tl.arange(0, BM)          # rows of x / H
    j = tl.program_id(1) * BN + tl.arange(0, BN)          # columns of H (and of W1's first half)
    kr = tl.arange(0, BK)
    i_ok = i < M
    j_ok = j < NH
    xs = x_ptr + i[:, None].to(tl.int64) * stride_xm + kr[None, :] * stride_xk
    ws = w1_ptr + kr[:, None] * stride_w1k + j[None, :] * stride_w1n
    acc_a = tl.zeros((BM, BN), dtype=tl.float32)
    acc_b = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K1, BK)):
        k_left = K1 - k * BK
        xt = tl.load(xs, mask=i_ok[:, None] & (kr[None, :] < k_left), other=0.0)
        wmask = (kr[:, None] < k_left) & j_ok[None, :]
        acc_a += tl.dot(xt, tl.load(ws, mask=wmask, other=0.0))
        if GLU:
            acc_b += tl.dot(xt, tl.load(ws + NH * stride_w1n, mask=wmask, other=0.0))
        xs += BK * stride_xk
        ws += BK * stride_w1k
    out = _epilogue_act(acc_a, ACT)
    if GLU:
        out = out * acc_b
    hs = h_ptr + i[:, None].to(tl.int64) * stride_hm + j[None, :] * stride_hn
    tl.store(hs, out.to(h_ptr.dtype.element_ty), mask=i_ok[:, None] & j_ok[None, :])


@triton.jit
def ffn2_matmul_kernel(h_ptr, w2_ptr, y_ptr, M, K2, N2,
                       stride_hm, stride_hk, stride_w2k, stride_w2n, stride_ym, stride_yn,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    i = tl.program_id(0) * BM + tl.arange(0, BM)
    j = tl.program_id(1) * BN + tl.arange(0, BN)
    kr = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K2, BK)):
        kk = k * BK + kr
        ht = tl.load(h_ptr + i[:, None].to(tl.int64) * stride_hm + kk[None, :] * stride_hk,
                     mask=(i[:, None] < M) & (kk[None, :] < K2), other=0.0)
        wt = tl.load(w2_ptr + kk[:, None] * stride_w2k + j[None, :] * stride_w2n,
                     mask=(kk[:, None] < K2) & (j[None, :] < N2), other=0.0)
        acc += tl.dot(ht, wt)
    ys = y_ptr + i[:, None].to(tl.int64) * stride_ym + j[None, :] * stride_yn
    tl.store(ys, acc.to(y_ptr.dtype.element_ty), mask=(i[:, None] < M) & (j[None, :] < N2))


def _pick_tiles(m, n, k, elem_bytes):
    """(BM, BN, BK, num_warps): 128 x 128 tiles on large problems, shrunk (>= 16, tl.dot's minimum) on small."""
    bm = max(16, min(128, triton.next_power_of_2(m)))
    bn = max(16, min(128, triton.next_power_of_2(n)))
    bk = max(16, min(128 // elem_bytes, triton.next_power_of_2(k)))       # 64 for 2-byte, 32 for 4-byte types
    return bm, bn, bk, (8 if bm * bn == 128 * 128 else 4)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, weight1, weight2, activation):
        if activation not in ACT_OF:
            raise ValueError(f"case rejected: activation {activation!r} is not one of {sorted(ACT_OF)}")
        act, glu = ACT_OF[activation]
        if not 2 <= x.dim() <= 8 or weight1.dim() != 2 or weight2.dim() != 2 or x.shape[-1] != weight1.shape[0]:
            raise ValueError(f"case rejected: x {list(x.shape)} / weight1 {list(weight1.shape)} / weight2 "
                             f"{list(weight2.shape)} are not [..., k1] / [k1, n1] / [k2, n2]")
        k1, n1 = weight1.shape
        k2, n2 = weight2.shape
        nh = n1 // 2 if glu else n1
        if (glu and n1 % 2) or k2 != nh or (not glu and n2 != k1):
            raise ValueError(f"case rejected: {activation} needs weight2 with {nh} rows"
                             + ("" if glu else f" and {k1} columns") + f", got {list(weight2.shape)}")
        x2 = x.reshape(-1, k1)
        m = x2.shape[0]
        h = torch.empty((m, nh), dtype=x.dtype, device=x.device)
        y = torch.empty((m, n2), dtype=x.dtype, device=x.device)
        if m == 0:
            return y.reshape(*x.shape[:-1], n2)

        bm, bn, bk, warps = _pick_tiles(m, nh, k1, x.element_size())
        ffn1_matmul_act_kernel[(triton.cdiv(m, bm), triton.cdiv(nh, bn))](
            x2, weight1, h, m, k1, nh,
            x2.stride(0), x2.stride(1), weight1.stride(0), weight1.stride(1), h.stride(0), h.stride(1),
            ACT=act, GLU=glu, BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=3)

        bm, bn, bk, warps = _pick_tiles(m, n2, nh, x.element_size())
        ffn2_matmul_kernel[(triton.cdiv(m, bm), triton.cdiv(n2, bn))](
            h, weight2, y, m, nh, n2,
            h.stride(0), h.stride(1), weight2.stride(0), weight2.stride(1), y.stride(0), y.stride(1),
            BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=3)
        return y.reshape(*x.shape[:-1], n2)
