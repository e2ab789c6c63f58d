"""flops.py for 2_FFN (NPUKernelBench level4, real cases): torch_npu.npu_ffn, y = act(x @ W1) @ W2.

x [..., k1] (m = product of the leading dims), W1 [k1, n1], W2 [k2, n2]. FLOPs, 2 per MAC, activation not counted:
up = 2 m k1 n1, down = 2 m k2 n2.

Rejections follow npu_ffn's shape rules (CANN aclnn_ffn.cpp, as the reference documents them): a GLU activation
(geglu/swiglu/reglu) halves x @ W1, so k2 must be n1 / 2 - every gated case of the public file has k2 = n1 and is
rejected, by the reference and here; a plain activation needs k2 = n1 and n2 = k1; x has 2..8 dims; k <= 65535.
"""
from mfulib.flops.contract import attr, ffn_parts, shape

PLAIN = ("fastgelu", "gelu", "relu", "silu")
GATED = ("geglu", "swiglu", "reglu")
MAX_K = 65535
KERNEL_PARTS = {"up": ["*ffn1*"], "down": ["*ffn2*"]}


def flops_parts(case):
    act = attr(case, "activation")
    x, w1, w2 = shape(case, "x"), shape(case, "weight1"), shape(case, "weight2")
    if act not in PLAIN + GATED:
        raise ValueError(f"case rejected: activation {act!r} is not one of {list(PLAIN + GATED)}")
    if not 2 <= len(x) <= 8 or max(w1[0], w2[0]) > MAX_K:
        raise ValueError(f"case rejected: x needs 2..8 dims and k1, k2 <= {MAX_K}; got x {x}, W1 {w1}, W2 {w2}")
    if act in PLAIN and w2[1] != w1[0]:
        raise ValueError(f"case rejected: W2 columns {w2[1]} != W1 rows {w1[0]} (npu_ffn maps back to k1)")
    return ffn_parts(x, w1, w2, gated=act in GATED)


def flops(case):
    return float(sum(flops_parts(case).values()))
