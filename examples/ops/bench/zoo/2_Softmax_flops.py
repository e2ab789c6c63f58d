"""flops.py for 2_Softmax: y = softmax(x, dim) - no matrix work.

Convention for vector-only operators (DESIGN.md: an operator with no matrix work counts its vector arithmetic and
is read mainly through MBU): 5 FLOPs per element - max, subtract, exp, sum, divide. The tracer counts 0 here
(softmax is not matrix work), and check_flops.py reports that as expected. MFU of this operator is not a useful
figure; its bandwidth is (x read once, y written once: 2 * numel * itemsize bytes at least).
"""
from mfulib.flops_contract import attr, numel, shape

OPS_PER_ELEMENT = 5
KERNEL_PARTS = {"softmax": ["*softmax*"]}


def flops_parts(case):
    x = shape(case, "x")
    dim = int(attr(case, "dim", -1))
    if not -len(x) <= dim < len(x):                  # the reference rejects an out-of-range dim
        raise ValueError(f"case rejected: dim {dim} is out of range for a {len(x)}-D x")
    return {"softmax": OPS_PER_ELEMENT * numel(case, "x")}


def flops(case):
    return float(sum(flops_parts(case).values()))
