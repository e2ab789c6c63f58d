"""flops.py for 10_LayerNorm (NPUKernelBench level1, real cases): F.layer_norm over the trailing normalized_shape.

No matrix work. Vector-only convention (DESIGN.md), per element of x: sum for the mean, centre, square, sum for
the variance, normalise = 5 FLOPs, plus 1 for the weight and 1 for the bias when the case gives them (both are
optional in this file). The tracer counts 0 (aten::native_layer_norm is vector work) and check_flops.py names that
as expected. This operator is memory-bound: read it through MBU, not MFU.
"""
from mfulib.flops_contract import attr, has, numel, shape

KERNEL_PARTS = {"norm": ["*layernorm*", "*layer_norm*"]}


def flops_parts(case):
    x, norm = shape(case, "x"), list(attr(case, "normalized_shape"))
    if not norm or x[len(x) - len(norm):] != norm:
        raise ValueError(f"case rejected: normalized_shape {norm} is not a suffix of x's shape {x}")
    for name in ("weight", "bias"):
        if has(case, name) and shape(case, name) != norm:
            raise ValueError(f"case rejected: {name} shape {shape(case, name)} != normalized_shape {norm}")
    per_element = 5 + has(case, "weight") + has(case, "bias")
    return {"norm": per_element * numel(case, "x")}


def flops(case):
    return float(sum(flops_parts(case).values()))
