"""flops.py for 4_FFN: y = act(x @ W1) @ W2 with relu/gelu/silu or a gated swiglu/geglu.

x [m, k], W1 [k, n1], W2 [h, n2]; a gated activation splits x @ W1 = [gate | up] into halves, so the second GEMM
takes h = n1 / 2 features (h = n1 otherwise). FLOPs (2 per MAC, activation not counted):

    up   = 2 * m * k * n1          the first GEMM computes both halves for a gated activation
    down = 2 * m * h * n2

Cases whose weights do not chain are rejected, as the reference rejects them. KERNEL_PARTS: the implementation
(examples/ops/gen/zoo/4_FFN_triton_ascend_impl.py) launches ffn_up_act_kernel (GEMM 1 + activation) and
ffn_down_kernel.
"""
from mfulib.flops.contract import attr, ffn_parts, shape

GATED = ("swiglu", "geglu")
ACTIVATIONS = ("relu", "gelu", "silu") + GATED
KERNEL_PARTS = {"up": ["*ffn_up*", "*up_act*"], "down": ["*ffn_down*"]}


def flops_parts(case):
    act = attr(case, "activation")
    if act not in ACTIVATIONS:
        raise ValueError(f"case rejected: activation {act!r} is not one of {list(ACTIVATIONS)}")
    return ffn_parts(shape(case, "x"), shape(case, "weight1"), shape(case, "weight2"), gated=act in GATED)


def flops(case):
    return float(sum(flops_parts(case).values()))
