"""10_LayerNorm (NPUKernelBench level1): F.layer_norm over the trailing ``normalized_shape`` dims.

    y = (x - mean) / sqrt(var + eps) * weight + bias      (mean, biased var over the last len(normalized_shape) dims)

Inputs, in case-file order = forward order:
    x [..., *normalized_shape]; normalized_shape (list attr); weight, bias: optional tensors of shape
    normalized_shape ("required": false - a case may give either, both or neither; a missing one is passed as
    None, so the arguments stay positional even when only bias is given).
eps = 1e-5 (F.layer_norm's default; the case file gives none).
Output: y, same shape and dtype as x.
No matrix work (~8 vector FLOPs per element); memory-bound: read it through bandwidth.

Cases are read from the .json named like this file (os.path.splitext(__file__)[0] + ".json"). Data: x ~ randn
(even case index) or uniform(-3, 3) (odd); weight ~ 1 + 0.1 randn; bias ~ 0.1 randn. No seeding here.
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

EPS = 1e-5
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, normalized_shape, weight=None, bias=None):
        shape = list(normalized_shape)
        if not shape or list(x.shape[x.dim() - len(shape):]) != shape:
            raise ValueError(f"case rejected: normalized_shape {shape} is not a suffix of x's shape {list(x.shape)}")
        for name, t in (("weight", weight), ("bias", bias)):
            if t is not None and list(t.shape) != shape:
                raise ValueError(f"case rejected: {name} shape {list(t.shape)} != normalized_shape {shape}")
        return F.layer_norm(x, shape, weight, bias, eps=EPS)


def get_input_groups():
    json_path = os.path.splitext(__file__)[0] + ".json"
    groups = []
    with open(json_path, encoding="utf-8-sig") as f:
        for idx, line in enumerate(l for l in f if l.strip()):
            spec = {item["name"]: item for item in json.loads(line)["inputs"]}
            xs = spec["x"]
            x = torch.randn(xs["shape"]) if idx % 2 == 0 else torch.empty(xs["shape"]).uniform_(-3.0, 3.0)
            weight = bias = None
            if "weight" in spec:
                weight = (1.0 + 0.1 * torch.randn(spec["weight"]["shape"])).to(DTYPES[spec["weight"]["dtype"]])
            if "bias" in spec:
                bias = (0.1 * torch.randn(spec["bias"]["shape"])).to(DTYPES[spec["bias"]["dtype"]])
            groups.append([x.to(DTYPES[xs["dtype"]]), list(spec["normalized_shape"]["value"]), weight, bias])
    return groups


def get_init_inputs():
    return []
