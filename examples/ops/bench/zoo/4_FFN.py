"""4_FFN: feed-forward block y = act(x @ W1) @ W2, with plain or gated (GLU) activations.

Inputs, in case-file order = forward order:
    x [m, k] ; weight1 [k, n1] ; weight2 [k2, n2] (one floating dtype);
    activation (str attr): "relu", "gelu" (erf form, as F.gelu), "silu", or a gated one:
        "swiglu": silu(a) * b,   "geglu": gelu(a) * b,   where [a | b] = x @ W1 split into two halves
        along the last dim (a = first n1/2 columns, the gate; b = the last n1/2).
    Shapes must chain: k2 = n1 for plain activations, k2 = n1 / 2 for gated ones.
Output: y [m, n2] in x's dtype.
FLOPs: 2*m*k*n1 (first GEMM) + 2*m*k2*n2 (second GEMM); the activation is not counted.

A case whose shapes do not chain is rejected per case: forward raises ValueError("case rejected: <reason>").
Cases are read from os.path.splitext(__file__)[0] + ".json". Data: x ~ randn (even case index) or
uniform(-2, 2) (odd); W1 ~ randn / sqrt(k), W2 ~ randn / sqrt(k2), so activations stay O(1) in fp16.
No seeding here (the tool seeds).
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
PLAIN = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}
GATED = {"swiglu": F.silu, "geglu": F.gelu}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, weight1, weight2, activation):
        if activation not in PLAIN and activation not in GATED:
            raise ValueError(f"case rejected: activation {activation!r} is not one of {sorted(PLAIN) + sorted(GATED)}")
        k, n1 = weight1.shape
        if x.shape[-1] != k:
            raise ValueError(f"case rejected: x's last dim {x.shape[-1]} != weight1 rows {k}")
        hidden = n1 // 2 if activation in GATED else n1
        if activation in GATED and n1 % 2:
            raise ValueError(f"case rejected: {activation} splits x @ W1 in halves but weight1 has {n1} columns (odd)")
        if weight2.shape[0] != hidden:
            raise ValueError(f"case rejected: {activation} gives {hidden} hidden features but weight2 has "
                             f"{weight2.shape[0]} rows (weight2 must be [{hidden}, n2])")
        h = x @ weight1                                   # [m, n1]
        if activation in GATED:
            gate, up = h.chunk(2, dim=-1)                 # [m, n1/2] each
            h = GATED[activation](gate) * up
        else:
            h = PLAIN[activation](h)
        return h @ weight2                                # [m, n2]


def get_input_groups():
    path = os.path.splitext(__file__)[0] + ".json"
    with open(path, encoding="utf-8-sig") as f:
        lines = [line for line in f if line.strip()]
    groups = []
    for i, line in enumerate(lines):
        x_s, w1_s, w2_s, act_s = json.loads(line)["inputs"]
        dtype = DTYPES[x_s["dtype"]]
        x = torch.randn(x_s["shape"]) if i % 2 == 0 else torch.empty(x_s["shape"]).uniform_(-2.0, 2.0)
        w1 = torch.randn(w1_s["shape"]) * w1_s["shape"][0] ** -0.5
        w2 = torch.randn(w2_s["shape"]) * w2_s["shape"][0] ** -0.5
        groups.append([x.to(dtype), w1.to(DTYPES[w1_s["dtype"]]), w2.to(DTYPES[w2_s["dtype"]]), act_s["value"]])
    return groups


def get_init_inputs():
    return []
