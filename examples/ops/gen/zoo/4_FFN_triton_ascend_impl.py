"""Triton(-Ascend style) implementation of 4_FFN: y = act(x @ W1) @ W2, plain or gated activations.

Written the way Triton-Ascend generated code looks: host code uses torch_npu, torch.device("npu"), .npu(), and
sizes a persistent grid from ``get_device_limit(0)["vector_core_num"]``. Off the NPU it runs through the
project's compatibility layer (scripts/mfulib/run/compat.py), which reports the real device's core counts.

Two kernels per forward:
* ``ffn_up_act_kernel``: H = act(x @ W1) with the activation fused in the epilogue. Gated activations
  (swiglu / geglu) keep two accumulators per tile, gate = x @ W1[:, j] and up = x @ W1[:, j + n1/2], sharing
  each x tile, and store act(gate) * up, so H is [m, n1/2] and never [m, n1];
* ``ffn_down_kernel``: y = H @ W2.
Both are thin wrappers (distinct names, so a profile separates the two GEMMs) around one persistent body,
``_persistent_gemm``: min(tiles, vector_core_num) programs, each striding over output tiles in row-major order.
H is stored in x's dtype (as an unfused torch FFN would); accumulation is float32.
"""
import torch
import torch.nn as nn
import torch_npu
import triton
import triton.language as tl

GATED_ACTS = {"swiglu": "silu", "geglu": "gelu"}
PLAIN_ACTS = ("relu", "gelu", "silu")


@triton.jit
def _apply_act(v, ACT: tl.constexpr):
    if ACT == "relu":
        v = tl.maximum(v, 0.0)
    elif ACT == "gelu":
        v = 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))   # erf form, as F.gelu
    elif ACT == "silu":
        v = v * tl.sigmoid(v)
    return v   # ACT == "none": the second GEMM


@triton.jit
def _persistent_gemm(A, B, C, M, K, N, sam, sak, sbk, sbn, scm, scn,
                     ACT: tl.constexpr, GATED: tl.constexpr,
                     BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr):
    """C = act(A @ B[:, :N]) (* A @ B[:, N:2N] when GATED), one program per core striding over C's blocks."""
    core_idx = tl.program_id(0)
    core_num = tl.num_programs(0)
    n_blocks = tl.cdiv(N, BLOCK_SIZE_N)
    total_blocks = tl.cdiv(M, BLOCK_SIZE_M) * n_blocks
    for block_idx in range(core_idx, total_blocks, core_num):
        offs_m = (block_idx // n_blocks) * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_n = (block_idx % n_blocks) * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        offs_k = tl.arange(0, BLOCK_SIZE_K)
        m_valid = offs_m < M
        n_valid = offs_n < N
        gate_acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        if GATED:
            up_acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for kk in range(0, K, BLOCK_SIZE_K):
            k_valid = kk + offs_k < K
            a_blk = tl.load(A + offs_m[:, None] * sam + (kk + offs_k)[None, :] * sak,
                            mask=m_valid[:, None] & k_valid[None, :], other=0.0)
            b_off = (kk + offs_k)[:, None] * sbk + offs_n[None, :] * sbn
            b_mask = k_valid[:, None] & n_valid[None, :]
            gate_acc = tl.dot(a_blk, tl.load(B + b_off, mask=b_mask, other=0.0), gate_acc)
            if GATED:   # the "up" half of W1 starts N columns to the right
                up_acc = tl.dot(a_blk, tl.load(B + b_off + N * sbn, mask=b_mask, other=0.0), up_acc)
        c_val = _apply_act(gate_acc, ACT)
        if GATED:
            c_val = c_val * up_acc
        tl.store(C + offs_m[:, None] * scm + offs_n[None, :] * scn, c_val.to(C.dtype.element_ty),
                 mask=m_valid[:, None] & n_valid[None, :])


@triton.jit
def ffn_up_act_kernel(X, W1, H, M, K, N_H, sxm, sxk, swk, swn, shm, shn,
                      ACT: tl.constexpr, GATED: tl.constexpr,
                      BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr):
    _persistent_gemm(X, W1, H, M, K, N_H, sxm, sxk, swk, swn, shm, shn, ACT, GATED,
                     BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K)


@triton.jit
def ffn_down_kernel(H, W2, Y, M, K, N, shm, shk, swk, swn, sym, syn,
                    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr):
    _persistent_gemm(H, W2, Y, M, K, N, shm, shk, swk, swn, sym, syn, "none", False,
                     BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K)


def _blocks(m, n, k, dtype):
    bm = min(128, max(16, triton.next_power_of_2(m)))
    bn = min(128, max(16, triton.next_power_of_2(n)))
    bk = min(32 if dtype == torch.float32 else 64, max(16, triton.next_power_of_2(k)))
    return bm, bn, bk


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.device = torch.device("npu")
        self.core_num = torch_npu.npu.npu_config.get_device_limit(0)["vector_core_num"]

    def forward(self, x, weight1, weight2, activation):
        if activation not in GATED_ACTS and activation not in PLAIN_ACTS:
            raise ValueError(f"case rejected: activation {activation!r} is not implemented here")
        x, weight1, weight2 = x.npu(), weight1.npu(), weight2.npu()
        m, k = x.shape
        n1 = weight1.shape[1]
        gated = activation in GATED_ACTS
        n_h = n1 // 2 if gated else n1
        if weight1.shape[0] != k or (gated and n1 % 2) or weight2.shape[0] != n_h:
            raise ValueError(f"case rejected: x {list(x.shape)}, weight1 {list(weight1.shape)}, weight2 "
                             f"{list(weight2.shape)} do not chain for {activation}")
        n2 = weight2.shape[1]
        h = torch.empty((m, n_h), dtype=x.dtype, device=self.device)
        y = torch.empty((m, n2), dtype=x.dtype, device=self.device)

        bm, bn, bk = _blocks(m, n_h, k, x.dtype)
        tiles = triton.cdiv(m, bm) * triton.cdiv(n_h, bn)
        ffn_up_act_kernel[(min(tiles, self.core_num),)](
            x, weight1, h, m, k, n_h,
            x.stride(0), x.stride(1), weight1.stride(0), weight1.stride(1), h.stride(0), h.stride(1),
            ACT=GATED_ACTS.get(activation, activation), GATED=gated,
            BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, num_warps=8 if bm * bn >= 16384 else 4)

        bm, bn, bk = _blocks(m, n2, n_h, x.dtype)
        tiles = triton.cdiv(m, bm) * triton.cdiv(n2, bn)
        ffn_down_kernel[(min(tiles, self.core_num),)](
            h, weight2, y, m, n_h, n2,
            h.stride(0), h.stride(1), weight2.stride(0), weight2.stride(1), y.stride(0), y.stride(1),
            BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, num_warps=8 if bm * bn >= 16384 else 4)
        return y
