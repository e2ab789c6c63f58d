"""flops.py for tril_bmm (bench/executed_ops/tril_bmm.py): C[i] = tril(A[i] @ B[i]), A [b, m, k], B [b, k, n].

FLOPs = 2 * b * m * n * k: the reference as written computes every product of the bmm before ``torch.tril`` zeroes
the upper triangle (the triangle itself is a selection, not arithmetic). This is the count the tracer sees too;
the Triton kernel executes only the tiles on and below the diagonal, so its executed count is lower, and the
numerator rule min(traced, executed) takes the executed one.
"""
from mfulib.flops.contract import dtype, matmul_flops, shape

KERNEL_PARTS = {"matmul": ["*tril*", "*bmm*", "*matmul*"]}


def flops_parts(case):
    a, b = shape(case, 0), shape(case, 1)            # A [b, m, k], B [b, k, n]
    if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        raise ValueError(f"case rejected: A {a} and B {b} are not [b,m,k] x [b,k,n]")
    if dtype(case, 0) != dtype(case, 1):
        raise ValueError(f"case rejected: A is {dtype(case, 0)} but B is {dtype(case, 1)}")
    return {"matmul": matmul_flops(a[1], b[2], a[2], batch=a[0])}


def flops(case):
    return float(sum(flops_parts(case).values()))
