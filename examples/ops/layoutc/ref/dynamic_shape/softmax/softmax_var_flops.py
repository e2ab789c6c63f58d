"""flops.py for softmax_var: y = softmax(x, dim=-1) - no matrix work.

docs/ARCHITECTURE.md#flops: flops(case) is matrix work only, so it is 0 here: this operator has no MFU ("—") and is read
through MBU (x read once, y written once). Its vector arithmetic is vector_flops(case): 5 FLOPs per element - max,
subtract, exp, sum, divide (the kb convention, and the cost of aten::_softmax in the tracer's element-cost table,
mfulib/flops/vector_costs.py), checked by check_flops.py.
"""
from mfulib.flops.contract import numel

OPS_PER_ELEMENT = 5
KERNEL_PARTS = {"softmax": ["*softmax*"]}


def flops_parts(case):
    return {"softmax": 0.0}


def flops(case):
    return float(sum(flops_parts(case).values()))


def vector_flops(case):
    return float(OPS_PER_ELEMENT * numel(case, "x"))
