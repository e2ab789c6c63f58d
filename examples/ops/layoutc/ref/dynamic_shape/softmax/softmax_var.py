"""softmax_var (layout C dynamic-shape reference, agent-benchmark style): y = softmax(x, dim=-1).

Several shapes through get_inputs_dyn_list() (one case per entry); the reduced dimension is a constructor argument
(get_init_inputs() returns [dim]), as akg's dynamic-shape references pass theirs.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim=-1):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x):
        return torch.softmax(x, dim=self.dim)


def get_inputs_dyn_list():
    x1 = torch.randn(4, 100, dtype=torch.float32)     # non-aligned row length
    x2 = torch.randn(16, 256, dtype=torch.float32)
    x3 = torch.randn(33, 1000, dtype=torch.float32)   # non-aligned rows and row length
    return [[x1], [x2], [x3]]


def get_init_inputs():
    return [-1]
