"""6_GQAAttention: grouped-query attention, query heads share key/value heads (team-written zoo operator).

forward(q, k, v, causal, scale), in case-file order:
    q [b, hq, s_q, d], k [b, hkv, s_kv, d], v [b, hkv, s_kv, d]   same floating dtype; hq % hkv == 0
    causal (bool attr): bottom-right aligned - query i sees key j iff j <= i + (s_kv - s_q), i.e. the last query
        sees every key (prefill with a KV cache); with s_q == s_kv it is the usual lower triangle
    scale (float attr): multiplies q k^T (typically 1/sqrt(d))
Output: o [b, hq, s_q, d] in q's dtype; query head h reads kv head h // (hq / hkv).
A query row that sees no key (causal with s_q > s_kv) outputs 0, as flash-attention kernels return it.

FLOPs: 4 * b * hq * s_q * s_kv * d (QK^T and PV); causal keeps about half when s_q == s_kv. This reference
computes dense scores per chunk of query rows (<= 2^28 fp32 elements live, so seq-16k cases fit one GPU), in float32.

Cases: os.path.splitext(__file__)[0] + ".json"; data torch.randn on the CPU; this file seeds nothing.
"""
import json
import os

import torch
import torch.nn as nn

SCORE_CHUNK_ELEMS = 1 << 28
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def check_gqa_shapes(q, k, v):
    """Raise ValueError("case rejected: ...") unless q/k/v are [b, hq, s_q, d] / [b, hkv, s_kv, d] with hkv | hq."""
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"case rejected: need q [b,hq,s,d] and k = v [b,hkv,s_kv,d], got "
                         f"{list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"case rejected: batch/head dim of q {list(q.shape)} and k {list(k.shape)} differ")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"case rejected: hq {q.shape[1]} is not a multiple of hkv {k.shape[1]}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"case rejected: mixed dtypes {q.dtype}, {k.dtype}, {v.dtype}")


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v, causal, scale):
        check_gqa_shapes(q, k, v)
        b, hq, s_q, d = q.shape
        hkv, s_kv = k.shape[1], k.shape[2]
        group = hq // hkv
        # [b, hkv, 1, s_kv, d]: broadcast over the `group` query heads of each kv head, never repeated in memory
        kf, vf = k.float()[:, :, None], v.float()[:, :, None]
        out = torch.empty_like(q)
        rows = max(1, SCORE_CHUNK_ELEMS // max(1, b * hq * s_kv))
        for i0 in range(0, s_q, rows):
            i1 = min(s_q, i0 + rows)
            qi = q[:, :, i0:i1].float().view(b, hkv, group, i1 - i0, d)
            scores = qi @ kf.transpose(-1, -2) * scale  # [b, hkv, group, i1-i0, s_kv]
            if causal:
                qpos = torch.arange(i0, i1, device=q.device)[:, None] + (s_kv - s_q)
                scores.masked_fill_(torch.arange(s_kv, device=q.device)[None, :] > qpos, float("-inf"))
            probs = scores.softmax(dim=-1).nan_to_num(0.0)  # rows with no visible key: NaN -> 0
            out[:, :, i0:i1] = (probs @ vf).view(b, hq, i1 - i0, d).to(q.dtype)
        return out


def get_input_groups():
    groups = []
    with open(os.path.splitext(__file__)[0] + ".json", encoding="utf-8-sig") as f:
        for line in f:
            if line.strip():
                spec = {item["name"]: item for item in json.loads(line)["inputs"]}
                q, k, v = (torch.randn(spec[n]["shape"], dtype=DTYPES[spec[n]["dtype"]]) for n in ("q", "k", "v"))
                groups.append([q, k, v, bool(spec["causal"]["value"]), float(spec["scale"]["value"])])
    return groups


def get_init_inputs():
    return []
