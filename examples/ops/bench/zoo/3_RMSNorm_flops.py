"""flops.py for 3_RMSNorm: y = x / sqrt(mean(x^2, -1) + eps) * weight - no matrix work.

Vector-only convention (DESIGN.md): 4 FLOPs per element of x - square, sum, multiply by 1/rms, multiply by the
weight (the per-row rsqrt is negligible). The tracer counts 0 (no matrix work) and check_flops.py names that as
expected; read this operator through MBU (x read, y written, weight once per row block).
"""
from mfulib.flops_contract import attr, numel, shape

OPS_PER_ELEMENT = 4
KERNEL_PARTS = {"norm": ["*rmsnorm*", "*rms_norm*"]}


def flops_parts(case):
    x, w = shape(case, "x"), shape(case, "weight")
    if len(w) != 1 or w[0] != x[-1]:
        raise ValueError(f"case rejected: weight {w} must be [{x[-1]}] (x's last dim)")
    if not float(attr(case, "eps")) > 0:
        raise ValueError(f"case rejected: eps must be > 0, got {attr(case, 'eps')}")
    return {"norm": OPS_PER_ELEMENT * numel(case, "x")}


def flops(case):
    return float(sum(flops_parts(case).values()))
