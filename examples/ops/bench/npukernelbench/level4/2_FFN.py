"""2_FFN (NPUKernelBench level4): torch_npu.npu_ffn without experts, quantisation or bias, in plain torch.

    y = act(x @ weight1) @ weight2

Inputs, in case-file order = forward order:
    x [..., k1] (2 to 8 dims), weight1 [k1, n1], weight2 [k2, n2], activation (str attr).
Output: y [..., n2] in x's dtype.
FLOPs: 2 * m * k1 * n1 + 2 * m * k2 * n2 with m = numel(x) / k1 (the activation is not counted).

Activations, as npu_ffn names them (torch_npu docs: fastgelu, gelu, relu, silu, geglu, swiglu, reglu):
    fastgelu: x * sigmoid(1.702 x)   (CANN FastGelu: x / (1 + exp(-1.702|x|)) * exp(0.851 (x - |x|)), the same)
    gelu:     tanh approximation     (the FFN kernel calls AscendC Gelu, the tanh form; CANN's grouped-matmul code
                                      names that activation GELU_TANH)
    relu, silu
    geglu / swiglu / reglu: [a | b] = x @ weight1 split in halves along the last dim; gelu(a) * b, silu(a) * b,
        relu(a) * b (a = first half, as torch_npu.npu_swiglu / npu_geglu define the split), then @ weight2.
Shape rules, from CANN's aclnn_ffn.cpp (CheckFmapWeightShape, GluShapeCheck): x has 2..8 dims; x's last dim =
k1; k1, k2 <= 65535; gated: n1 even and k2 = n1 / 2; plain: k2 = n1 and n2 = k1. A case that breaks them is
rejected per case with ValueError("case rejected: ...") - in the public case file that is every gated case
(weight2 has n1 rows, not n1 / 2).
Dtypes: npu_ffn itself takes float16 / bfloat16 (int8 quantised) x only; this reference also computes the
file's float32 cases with the same formula, so they can be measured off the NPU.

Cases: "2_FFN.json" beside this file (hard-coded name). Data: x ~ randn (even case index) or uniform(-2, 2)
(odd); weights ~ randn / sqrt(rows), which keeps activations O(1). No seeding here (the tool seeds).
"""
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
MAX_K = 65535


def _fastgelu(v):
    return v * torch.sigmoid(1.702 * v)


def _gelu_tanh(v):
    return F.gelu(v, approximate="tanh")


ELEMENTWISE = {"fastgelu": _fastgelu, "gelu": _gelu_tanh, "relu": F.relu, "silu": F.silu}
GLU = {"geglu": _gelu_tanh, "swiglu": F.silu, "reglu": F.relu}


def check_ffn_shapes(x_shape, w1_shape, w2_shape, activation):
    """Return None if npu_ffn accepts the shapes, else the reason (aclnn_ffn.cpp rules, see module doc)."""
    if activation not in ELEMENTWISE and activation not in GLU:
        return f"activation {activation!r} is not one of {sorted(ELEMENTWISE) + sorted(GLU)}"
    if not 2 <= len(x_shape) <= 8:
        return f"x must have 2..8 dims, it has {len(x_shape)}"
    if len(w1_shape) != 2 or len(w2_shape) != 2:
        return "weight1 and weight2 must be 2-D (expert weights need expert_tokens, which the case does not give)"
    (k1, n1), (k2, n2) = w1_shape, w2_shape
    if x_shape[-1] != k1:
        return f"x's last dim {x_shape[-1]} != weight1 rows {k1}"
    if k1 > MAX_K or k2 > MAX_K:
        return f"k1 = {k1} and k2 = {k2} must be <= {MAX_K}"
    if activation in GLU:
        if n1 % 2:
            return f"{activation} splits x @ weight1 in halves, but weight1 has an odd column count {n1}"
        if k2 != n1 // 2:
            return (f"{activation} halves x @ weight1 ({n1} -> {n1 // 2} columns), so weight2 needs {n1 // 2} rows, "
                    f"it has {k2}")
        return None
    if k2 != n1:
        return f"weight2 rows {k2} != weight1 columns {n1}"
    if n2 != k1:
        return f"weight2 columns {n2} != weight1 rows {k1} (npu_ffn maps back to the input hidden size)"
    return None


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, weight1, weight2, activation):
        reason = check_ffn_shapes(list(x.shape), list(weight1.shape), list(weight2.shape), activation)
        if reason:
            raise ValueError(f"case rejected: {reason}")
        h = torch.matmul(x, weight1)                      # [..., n1]
        if activation in GLU:
            a, b = torch.chunk(h, 2, dim=-1)              # [..., n1/2] each
            h = GLU[activation](a) * b
        else:
            h = ELEMENTWISE[activation](h)
        return torch.matmul(h, weight2)                   # [..., n2]


def get_input_groups():
    json_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "2_FFN.json")
    groups = []
    with open(json_path, "r", encoding="utf-8-sig") as f:
        for idx, line in enumerate(line for line in f if line.strip()):
            inputs = json.loads(line)["inputs"]
            x_in, w1_in, w2_in, act_in = inputs
            x = torch.empty(x_in["shape"], dtype=torch.float32)
            if idx % 2 == 0:
                x.normal_()
            else:
                x.uniform_(-2.0, 2.0)
            w1 = torch.randn(w1_in["shape"]) / math.sqrt(w1_in["shape"][-2])
            w2 = torch.randn(w2_in["shape"]) / math.sqrt(w2_in["shape"][-2])
            groups.append([x.to(DTYPES[x_in["dtype"]]), w1.to(DTYPES[w1_in["dtype"]]),
                           w2.to(DTYPES[w2_in["dtype"]]), act_in["value"]])
    return groups


def get_init_inputs():
    return []
