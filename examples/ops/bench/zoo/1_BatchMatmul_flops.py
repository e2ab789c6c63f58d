"""flops.py for 1_BatchMatmul (torch.bmm): C[i] = A[i] @ B[i], A [b, m, k], B [b, k, n].

FLOPs = 2 * b * m * n * k (2 per multiply-accumulate: every one of the b*m*n outputs is a k-long dot product).
Used for the zoo cases and the real NPUKernelBench level3 cases (npukernelbench/level3/1_BatchMatmul_flops.py
links here: same reference). Cases the reference rejects (not 3-D, shapes that do not chain, mixed dtypes) are
rejected here too, so flops.py never prices a case that cannot run. The small cases ([1, 8, 16]) time launch
overhead, not the GEMM: read their MFU with that in mind.
"""
from mfulib.flops.contract import dtype, matmul_flops, shape

KERNEL_PARTS = {"matmul": ["*bmm*", "*matmul*", "*gemm*"]}


def flops_parts(case):
    a, b = shape(case, 0), shape(case, 1)            # A [b, m, k], B [b, k, n], by position as forward takes them
    if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        raise ValueError(f"case rejected: A {a} and B {b} are not [b,m,k] x [b,k,n]")
    if dtype(case, 0) != dtype(case, 1):
        raise ValueError(f"case rejected: A is {dtype(case, 0)} but B is {dtype(case, 1)}")
    return {"matmul": matmul_flops(a[1], b[2], a[2], batch=a[0])}


def flops(case):
    return float(sum(flops_parts(case).values()))
