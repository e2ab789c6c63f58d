"""flops.py for 2_Softmax: y = softmax(x, dim) - no matrix work.

docs/ARCHITECTURE.md#flops: flops(case) is matrix work only, so it is 0 here: this operator has no MFU ("—") and is read
through MBU (x read once, y written once: 2 * numel * itemsize bytes at least). Its vector arithmetic is
vector_flops(case): 5 FLOPs per element - max, subtract, exp, sum, divide (the kb convention, and the cost of
aten::_softmax in the tracer's element-cost table, mfulib/flops/vector_costs.py), checked by check_flops.py.
"""
from mfulib.flops.contract import attr, numel, shape

OPS_PER_ELEMENT = 5
KERNEL_PARTS = {"softmax": ["*softmax*"]}


def _check(case):
    x = shape(case, "x")
    dim = int(attr(case, "dim", -1))
    if not -len(x) <= dim < len(x):                  # the reference rejects an out-of-range dim
        raise ValueError(f"case rejected: dim {dim} is out of range for a {len(x)}-D x")


def flops_parts(case):
    _check(case)
    return {"softmax": 0.0}


def flops(case):
    return float(sum(flops_parts(case).values()))


def vector_flops(case):
    _check(case)
    return float(OPS_PER_ELEMENT * numel(case, "x"))
