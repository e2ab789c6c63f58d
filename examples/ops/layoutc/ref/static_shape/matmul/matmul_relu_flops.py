"""flops.py for matmul_relu: C = relu(A @ B), A [M, K], B [K, N].

FLOPs = 2 * M * N * K (2 per multiply-accumulate: each of the M*N outputs is a K-long dot product). The relu is not
counted (activations are not matrix work; docs/ARCHITECTURE.md#flops and mfulib.flops.contract).
"""
from mfulib.flops.contract import dtype, matmul_flops, shape

KERNEL_PARTS = {"matmul": ["*matmul*"]}


def flops_parts(case):
    a, b = shape(case, "A"), shape(case, "B")
    if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        raise ValueError(f"case rejected: A {a} and B {b} are not [M, K] x [K, N]")
    if dtype(case, "A") != dtype(case, "B"):
        raise ValueError(f"case rejected: A is {dtype(case, 'A')} but B is {dtype(case, 'B')}")
    return {"matmul": matmul_flops(a[0], b[1], a[1])}


def flops(case):
    return float(sum(flops_parts(case).values()))
