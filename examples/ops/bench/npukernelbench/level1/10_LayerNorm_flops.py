"""flops.py for 10_LayerNorm (NPUKernelBench level1, real cases): F.layer_norm over the trailing normalized_shape.

docs/ARCHITECTURE.md#flops: no matrix work, so flops(case) is 0: no MFU ("—"); this operator is memory-bound, read it
through MBU. vector_flops(case), per element of x: sum for the mean, centre, square, sum for the variance,
normalise = 5 FLOPs, plus 1 for the weight and 1 for the bias when the case gives them (both are optional in this
file) - the kb convention and the cost of aten::native_layer_norm in the tracer's element-cost table
(mfulib/flops/vector_costs.py), checked by check_flops.py.
"""
from mfulib.flops.contract import attr, has, numel, shape

KERNEL_PARTS = {"norm": ["*layernorm*", "*layer_norm*"]}


def _check(case):
    x, norm = shape(case, "x"), list(attr(case, "normalized_shape"))
    if not norm or x[len(x) - len(norm):] != norm:
        raise ValueError(f"case rejected: normalized_shape {norm} is not a suffix of x's shape {x}")
    for name in ("weight", "bias"):
        if has(case, name) and shape(case, name) != norm:
            raise ValueError(f"case rejected: {name} shape {shape(case, name)} != normalized_shape {norm}")


def flops_parts(case):
    _check(case)
    return {"norm": 0.0}


def flops(case):
    return float(sum(flops_parts(case).values()))


def vector_flops(case):
    _check(case)
    return float((5 + has(case, "weight") + has(case, "bias")) * numel(case, "x"))
