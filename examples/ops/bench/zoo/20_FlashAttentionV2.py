"""20_FlashAttentionV2: a long-sequence causal self-attention layer as FlashAttention-V2 serves it (team-written zoo
operator; the reference is the plain dense form, the implementation in gen/zoo is the flash form).

forward(x, head_num), in case-file order:
    x [b, s, hidden]  float32 / float16 / bfloat16
    head_num (int attr): hidden % head_num == 0, head dim d = hidden / head_num
Output: y [b, s, hidden] in x's dtype. Always causal, top-left (query i sees keys j <= i; q and k have one length).

    q, k, v = x Wq^T, x Wk^T, x Wv^T          four bias-free Linear projections (nn.Linear layout [out, in]),
                                              [b, s, hidden] each, viewed as [b, head_num, s, d]
    scores  = q k^T / sqrt(d)                 DENSE [b, head_num, s, s] in float32, masked_fill(j > i, -inf)
    o       = softmax(scores) v               back in x's dtype, heads concatenated to [b, s, hidden]
    y       = o Wo^T

The reference materialises the whole score matrix on purpose: it is the textbook form a flash kernel replaces, and
its memory (2 x 4 * b * head_num * s^2 bytes live: the scores and their softmax) is what makes the reference run
out of device memory at scaled shapes where the flash kernel, which keeps one [BLOCK_M, BLOCK_N] tile on chip,
still runs ([1, 8192, 4096], 32 heads: 16 GiB; batch x8: 128 GiB). Verification then works on slices
(docs/ARCHITECTURE.md#verify-slices).

Weights: [hidden, hidden] float32 N(0, 1/hidden), so q/k/v keep unit variance, created lazily per hidden size (case
shapes vary; get_init_inputs() is []) from a CPU torch.Generator seeded with zlib.crc32("FlashAttentionV2/<name>/
<hidden>") - a stable hash and a private generator (the global RNG the tool seeds is left alone). ModelNew rebuilds
identical weights the same way.

FLOPs (2 per multiply-accumulate): projections 4 * 2*b*s*hidden^2; attention QK^T and PV each
2*b*head_num*d * s*(s+1)/2 (the pairs the causal mask keeps). This reference computes the masked half too.

Cases: os.path.splitext(__file__)[0] + ".json" (JSON Lines); data torch.randn on the CPU; this file seeds nothing.
"""
import json
import math
import os
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

WEIGHT_NAMES = ("q", "k", "v", "out")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def projection_weight(name, hidden):
    """[hidden, hidden] float32 CPU weight of projection ``name``; deterministic in (name, hidden)."""
    gen = torch.Generator().manual_seed(zlib.crc32(f"FlashAttentionV2/{name}/{hidden}".encode()))
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

    def forward(self, x, head_num):
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
        scores = q.float() @ k.float().transpose(-1, -2) / math.sqrt(d)  # [b, head_num, s, s], dense
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)  # key j > query i
        scores.masked_fill_(future, float("-inf"))
        o = (scores.softmax(dim=-1) @ v.float()).to(x.dtype)  # [b, head_num, s, d]
        return F.linear(o.transpose(1, 2).reshape(b, s, hidden), wo)


def get_input_groups():
    case_path = os.path.splitext(__file__)[0] + ".json"
    groups = []
    with open(case_path, encoding="utf-8-sig") as f:
        for line in f:
            if not line.strip():
                continue
            x_spec, head_num = json.loads(line)["inputs"]
            x = torch.randn(x_spec["shape"], dtype=DTYPES[x_spec["dtype"]])
            groups.append([x, int(head_num["value"])])
    return groups


def get_init_inputs():
    return []
