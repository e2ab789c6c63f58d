"""flops.py for softmax_var: y = softmax(x, dim=-1) - no matrix work.

Convention for vector-only operators (DESIGN.md: an operator with no matrix work counts its vector arithmetic and
is read mainly through memory bandwidth): 5 FLOPs per element - max, subtract, exp, sum, divide. The tracer counts
0 here (softmax is not matrix work), and check_flops.py reports that as expected.
"""
from mfulib.flops_contract import numel

OPS_PER_ELEMENT = 5
KERNEL_PARTS = {"softmax": ["*softmax*"]}


def flops_parts(case):
    return {"softmax": OPS_PER_ELEMENT * numel(case, "x")}


def flops(case):
    return float(sum(flops_parts(case).values()))
