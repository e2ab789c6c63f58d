"""3_RMSNorm: root-mean-square normalisation over the last dimension with a learned scale.

    y = x / sqrt(mean(x^2, dim=-1) + eps) * weight      (computed in float32, returned in x's dtype)

Inputs, in case-file order = forward order:
    x [..., h] floating tensor; weight [h] (same dtype); eps (float attr).
Output: y, same shape and dtype as x.
No matrix work: ~4 vector FLOPs per element; memory-bound (x read, y written, weight read once per row block).

Cases are read from "3_RMSNorm.json" beside this file (hard-coded name). Data: x ~ randn (even case index) or
uniform(-2, 2) (odd); weight ~ 1 + 0.1 * randn. No seeding here (the tool seeds).
"""
import json
import os

import torch
import torch.nn as nn

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, weight, eps):
        if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
            raise ValueError(f"case rejected: weight {list(weight.shape)} must be [{x.shape[-1]}] (x's last dim)")
        if not eps > 0:
            raise ValueError(f"case rejected: eps must be > 0, got {eps}")
        x32 = x.float()
        inv_rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + eps)
        return (x32 * inv_rms * weight.float()).to(x.dtype)


def get_input_groups():
    with open(os.path.join(os.path.dirname(__file__), "3_RMSNorm.json"), encoding="utf-8-sig") as f:
        cases = [json.loads(line) for line in f if line.strip()]
    groups = []
    for i, case in enumerate(cases):
        x_spec, w_spec, eps_spec = case["inputs"]
        x = torch.randn(x_spec["shape"]) if i % 2 == 0 else torch.empty(x_spec["shape"]).uniform_(-2.0, 2.0)
        weight = 1.0 + 0.1 * torch.randn(w_spec["shape"])
        groups.append([x.to(DTYPES[x_spec["dtype"]]), weight.to(DTYPES[w_spec["dtype"]]), float(eps_spec["value"])])
    return groups


def get_init_inputs():
    return []
