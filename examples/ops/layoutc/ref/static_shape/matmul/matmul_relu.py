"""matmul_relu (layout C reference, agent-benchmark style): C = relu(A @ B).

A [M, K] float32, B [K, N] float32 -> C [M, N] float32. Inputs come from get_inputs() (no case file), the
constructor takes nothing (get_init_inputs() returns []). Small shapes so the CPU interpreter runs it in seconds.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A, B):
        return torch.relu(torch.matmul(A, B))


M, K, N = 96, 64, 80


def get_inputs():
    A = torch.randn(M, K, dtype=torch.float32)
    B = torch.randn(K, N, dtype=torch.float32)
    return [A, B]


def get_init_inputs():
    return []
