"""tril_bmm: the lower triangle of a batched matrix multiply, C[i] = tril(A[i] @ B[i]) - a dense reference
that over-counts: it computes every product and then zeroes the upper triangle, while the Triton kernel
(tril_bmm_triton.py) skips the tiles above the diagonal. A test operator of bench/executed_flops_h200.py (the
numerator rule min(traced, executed) must pick the executed count here), not a bundled example.

Inputs, in case-file order = forward order:
    A [b, m, k], B [b, k, n]: same floating dtype (float32 / float16 / bfloat16).
Output: C [b, m, n] in the input dtype.
FLOPs (the reference, as written): 2 * b * m * n * k.

Cases are read from "tril_bmm.json" beside this file (hard-coded name, as most NPUKernelBench references
do). Data: torch.randn for even case indices, uniform(-1, 1) for odd ones, on the CPU; this file seeds nothing
(the tool seeds before calling get_input_groups()).
"""
import json
import os

import torch
import torch.nn as nn

CASE_FILE = os.path.join(os.path.dirname(__file__), "tril_bmm.json")

DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "fp16": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        if A.dim() != 3 or B.dim() != 3:
            raise ValueError(f"case rejected: bmm needs 3-D A and B, got {A.dim()}-D and {B.dim()}-D")
        if A.shape[0] != B.shape[0] or A.shape[2] != B.shape[1]:
            raise ValueError(f"case rejected: A {list(A.shape)} and B {list(B.shape)} are not [b,m,k] x [b,k,n]")
        if A.dtype != B.dtype:
            raise ValueError(f"case rejected: A is {A.dtype} but B is {B.dtype}")
        return torch.tril(torch.bmm(A, B))


def _random_tensor(spec, case_index):
    shape, dtype = spec["shape"], DTYPES[spec["dtype"]]
    if case_index % 2 == 0:
        return torch.randn(shape, dtype=dtype)
    return torch.empty(shape, dtype=dtype).uniform_(-1.0, 1.0)


def get_input_groups():
    groups = []
    with open(CASE_FILE, encoding="utf-8-sig") as f:
        lines = [line for line in f if line.strip()]
    for case_index, line in enumerate(lines):
        inputs = json.loads(line)["inputs"]
        groups.append([_random_tensor(inputs[0], case_index), _random_tensor(inputs[1], case_index)])
    return groups


def get_init_inputs():
    return []
