"""5_MHABlock: a multi-head attention block as a FlashAttentionV2 layer computes it (team-written zoo operator).

forward(x, head_num, causal), in case-file order:
    x [b, s, hidden]  float32 / float16 / bfloat16
    head_num (int attr): hidden % head_num == 0, head dim d = hidden / head_num
    causal (bool attr): mask key j > query i (top-left causal; q and k have the same length here)
Output: y [b, s, hidden] in x's dtype.

    q, k, v = x Wq^T, x Wk^T, x Wv^T          [b, s, hidden] each, viewed as [b, head_num, s, d]
    o       = softmax(q k^T / sqrt(d) [+ causal mask]) v      per head, softmax and matmuls in float32
    y       = o Wo^T                            (o back in x's dtype, heads concatenated to [b, s, hidden])

Weights: four bias-free [hidden, hidden] projections, N(0, 1/hidden) so that q/k/v keep unit variance. They are
created lazily per hidden size (case shapes vary; get_init_inputs() is []) from a CPU torch.Generator seeded with
zlib.crc32("MHABlock/<name>/<hidden>") - a stable hash (Python's str hash is salted per process), and a private
generator so the global RNG the tool seeds is left alone. ModelNew rebuilds identical weights the same way.

FLOPs (2 per multiply-accumulate): projections 4 * 2*b*s*hidden^2; attention 2 * 2*b*head_num*s^2*d (QK^T and PV),
about half of that when causal. This reference computes the masked half too (dense scores, then mask).

Memory: scores are computed per chunk of query rows (at most 2^28 fp32 elements = 1 GiB live) so the seq-16k
cases run on one GPU; the chunking changes neither the result nor the matmul FLOPs a tracer sees.

Cases: os.path.splitext(__file__)[0] + ".json" (JSON Lines); data torch.randn on the CPU; this file seeds nothing.
"""
import json
import math
import os
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

SCORE_CHUNK_ELEMS = 1 << 28
WEIGHT_NAMES = ("q", "k", "v", "out")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def projection_weight(name, hidden):
    """[hidden, hidden] float32 CPU weight for projection ``name``; deterministic in (name, hidden)."""
    gen = torch.Generator().manual_seed(zlib.crc32(f"MHABlock/{name}/{hidden}".encode()))
    return torch.randn(hidden, hidden, generator=gen) / math.sqrt(hidden)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self._weights = {}

    def weights(self, hidden, dtype, device):
        key = (hidden, dtype, str(device))
        if key not in self._weights:
            if torch.device(device).type == "meta":  # shape-only runs (FLOP tracing on meta tensors): no values
                self._weights[key] = [torch.empty(hidden, hidden, dtype=dtype, device="meta") for _ in WEIGHT_NAMES]
            else:
                self._weights[key] = [projection_weight(n, hidden).to(device=device, dtype=dtype)
                                      for n in WEIGHT_NAMES]
        return self._weights[key]

    def forward(self, x, head_num, causal):
        if x.dim() != 3:
            raise ValueError(f"case rejected: x must be [b, s, hidden], got {list(x.shape)}")
        b, s, hidden = x.shape
        if head_num <= 0 or hidden % head_num:
            raise ValueError(f"case rejected: hidden {hidden} is not divisible by head_num {head_num}")
        d = hidden // head_num
        wq, wk, wv, wo = self.weights(hidden, x.dtype, x.device)

        def heads(w):  # [b, s, hidden] -> [b, head_num, s, d]
            return F.linear(x, w).view(b, s, head_num, d).transpose(1, 2)

        q, k, v = heads(wq), heads(wk), heads(wv)
        kf, vf = k.float(), v.float()
        o = torch.empty(b, head_num, s, d, dtype=x.dtype, device=x.device)
        rows = max(1, SCORE_CHUNK_ELEMS // max(1, b * head_num * s))
        for i0 in range(0, s, rows):
            i1 = min(s, i0 + rows)
            scores = q[:, :, i0:i1].float() @ kf.transpose(-1, -2) / math.sqrt(d)  # [b, h, i1-i0, s]
            if causal:
                qi = torch.arange(i0, i1, device=x.device)[:, None]
                kj = torch.arange(s, device=x.device)[None, :]
                scores.masked_fill_(kj > qi, float("-inf"))
            o[:, :, i0:i1] = (scores.softmax(dim=-1) @ vf).to(x.dtype)  # [b, h, i1-i0, d]
        return F.linear(o.transpose(1, 2).reshape(b, s, hidden), wo)


def get_input_groups():
    case_path = os.path.splitext(__file__)[0] + ".json"
    groups = []
    with open(case_path, encoding="utf-8-sig") as f:
        for line in f:
            if not line.strip():
                continue
            x_spec, head_num, causal = json.loads(line)["inputs"]
            x = torch.randn(x_spec["shape"], dtype=DTYPES[x_spec["dtype"]])
            groups.append([x, int(head_num["value"]), bool(causal["value"])])
    return groups


def get_init_inputs():
    return []
