"""flops.py for 3_RMSNorm: y = x / sqrt(mean(x^2, -1) + eps) * weight - no matrix work.

docs/ARCHITECTURE.md#flops: flops(case) is matrix work only, so it is 0: no MFU ("—"); read this operator through MBU (x
read, y written, weight once per row block). vector_flops(case), per element of x: square, mean (sum), multiply
by 1/rms, multiply by the weight = 4; per row: add eps, rsqrt = 2. For x [4, 64]: 4 * 256 + 2 * 4 = 1032 - the
sum of the reference's ops in the tracer's element-cost table (mfulib/flops/vector_costs.py), checked by check_flops.py.
"""
import math

from mfulib.flops.contract import attr, numel, shape

OPS_PER_ELEMENT = 4
OPS_PER_ROW = 2
KERNEL_PARTS = {"norm": ["*rmsnorm*", "*rms_norm*"]}


def _check(case):
    x, w = shape(case, "x"), shape(case, "weight")
    if len(w) != 1 or w[0] != x[-1]:
        raise ValueError(f"case rejected: weight {w} must be [{x[-1]}] (x's last dim)")
    if not float(attr(case, "eps")) > 0:
        raise ValueError(f"case rejected: eps must be > 0, got {attr(case, 'eps')}")
    return x


def flops_parts(case):
    _check(case)
    return {"norm": 0.0}


def flops(case):
    return float(sum(flops_parts(case).values()))


def vector_flops(case):
    x = _check(case)
    return float(OPS_PER_ELEMENT * numel(case, "x") + OPS_PER_ROW * math.prod(x[:-1]))
