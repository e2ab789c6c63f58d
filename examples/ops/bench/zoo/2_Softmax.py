"""2_Softmax: softmax along one dimension, y = exp(x - max) / sum(exp(x - max)) (torch.softmax).

Inputs, in case-file order = forward order:
    x [..., n] floating tensor (float32 / float16 / bfloat16);
    dim (int attr): the reduced dimension, usually -1.
Output: y, same shape and dtype as x.
No matrix work: ~5 vector FLOPs per element (max, subtract, exp, sum, divide); read it through bandwidth
(x read once, y written once: 2 * numel * itemsize bytes at minimum).

Cases are read from the .json named like this file (os.path.splitext(__file__)[0] + ".json"), so a renamed copy
reads its renamed case file. Data: torch.randn for even case indices, uniform(-4, 4) for odd ones, on the CPU; no
seeding here (the tool seeds).
"""
import json
import os

import torch
import torch.nn as nn

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, dim=-1):
        if not -x.dim() <= dim < x.dim():
            raise ValueError(f"case rejected: dim {dim} is out of range for a {x.dim()}-D x")
        return torch.softmax(x, dim=dim)


def get_input_groups():
    case_path = os.path.splitext(__file__)[0] + ".json"
    groups = []
    with open(case_path, encoding="utf-8-sig") as f:
        for idx, line in enumerate(l for l in f if l.strip()):
            spec = {item["name"]: item for item in json.loads(line)["inputs"]}
            x_spec = spec["x"]
            x = torch.empty(x_spec["shape"], dtype=DTYPES[x_spec["dtype"]])
            if idx % 2 == 0:
                x.normal_()
            else:
                x.uniform_(-4.0, 4.0)
            dim = spec["dim"]["value"] if "dim" in spec else -1
            groups.append([x, dim])
    return groups


def get_init_inputs():
    return []
