"""7_SparseVarlenAttention: padded variable-length attention with rotary embedding and a sparse (causal /
sliding-window) pattern (team-written zoo operator).

forward(q, k, v, actual_seq_lengths, rope_theta, causal, window_left, scale), in case-file order:
    q [b, s, hq, d], k [b, s, hkv, d], v [b, s, hkv, d]   padded batch, same floating dtype; hq % hkv == 0, d even
    actual_seq_lengths (list attr of b ints, or an int tensor [b]): valid tokens of each sequence, 0 <= L_i <= s;
        tokens at positions >= L_i are padding: never attended, and their output rows are 0
    rope_theta (float attr): rotary base. q and k get rotary position embedding (rotate-half / GPT-NeoX form) at
        positions 0..L_i-1: x' = x * cos(p w) + rotate_half(x) * sin(p w), w_j = rope_theta^(-2j/d), j < d/2
    causal (bool attr): query i sees key j only if j <= i
    window_left (int attr): sliding window, query i sees key j only if j >= i - window_left (-1 = unlimited)
    scale (float attr): multiplies q k^T
Output: o [b, s, hq, d] in q's dtype; query head h reads kv head h // (hq / hkv).

FLOPs: per sequence 4 * hq * d * (visible (i, j) pairs): L^2 dense, about L^2/2 causal, about L*(window_left+1)
causal with a window - from the lengths, not from the padded s. This reference computes each sequence's dense
L x L scores (chunked over query rows, <= 2^28 fp32 elements live) and masks; rope in float32.

Cases: os.path.splitext(__file__)[0] + ".json"; data torch.randn on the CPU (padding too); this file seeds nothing.
"""
import json
import os

import torch
import torch.nn as nn

SCORE_CHUNK_ELEMS = 1 << 28
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def rope_inv_freq(head_dim, theta, device):
    """w_j = theta^(-2j/d), j < d/2, float32 [d/2] (ModelNew builds its cos/sin tables from the same expression)."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))


def apply_rope(x, cos, sin):
    """x [L, h, d] float32, cos/sin [L, d/2]: rotate-half rotary embedding."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def sequence_lengths(actual_seq_lengths, batch, seq):
    """Per-batch lengths as a list of ints; raises ValueError("case rejected: ...") when inconsistent with [b, s]."""
    lens = actual_seq_lengths.tolist() if torch.is_tensor(actual_seq_lengths) else list(actual_seq_lengths)
    if len(lens) != batch or any(not 0 <= int(n) <= seq for n in lens):
        raise ValueError(f"case rejected: actual_seq_lengths {lens} must hold {batch} lengths in [0, {seq}]")
    return [int(n) for n in lens]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v, actual_seq_lengths, rope_theta, causal, window_left, scale):
        if q.dim() != 4 or k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
            raise ValueError(f"case rejected: need q [b,s,hq,d], k = v [b,s,hkv,d]; got "
                             f"{list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
        b, s, hq, d = q.shape
        hkv = k.shape[2]
        if hkv == 0 or hq % hkv or d % 2:
            raise ValueError(f"case rejected: need hq % hkv == 0 and an even head dim (rope), got hq {hq}, "
                             f"hkv {hkv}, d {d}")
        lens = sequence_lengths(actual_seq_lengths, b, s)
        group = hq // hkv
        angles = torch.outer(torch.arange(s, dtype=torch.float32, device=q.device), rope_inv_freq(d, rope_theta, q.device))
        cos, sin = angles.cos(), angles.sin()  # [s, d/2]
        out = torch.zeros_like(q)
        for bi, n in enumerate(lens):
            if n == 0:
                continue
            qb = apply_rope(q[bi, :n].float(), cos[:n], sin[:n]).transpose(0, 1)  # [hq, n, d]
            kb = apply_rope(k[bi, :n].float(), cos[:n], sin[:n]).transpose(0, 1)[:, None]  # [hkv, 1, n, d]
            vb = v[bi, :n].float().transpose(0, 1)[:, None]
            rows = max(1, SCORE_CHUNK_ELEMS // (hq * n))
            for i0 in range(0, n, rows):
                i1 = min(n, i0 + rows)
                scores = qb[:, i0:i1].reshape(hkv, group, i1 - i0, d) @ kb.transpose(-1, -2) * scale
                i = torch.arange(i0, i1, device=q.device)[:, None]
                j = torch.arange(n, device=q.device)[None, :]
                hidden = torch.zeros(i1 - i0, n, dtype=torch.bool, device=q.device)
                if causal:
                    hidden |= j > i
                if window_left >= 0:
                    hidden |= j < i - window_left
                scores.masked_fill_(hidden, float("-inf"))  # every row keeps key i itself: no empty row
                o = scores.softmax(dim=-1) @ vb  # [hkv, group, i1-i0, d]
                out[bi, i0:i1] = o.reshape(hq, i1 - i0, d).transpose(0, 1).to(q.dtype)
        return out


def get_input_groups():
    groups = []
    with open(os.path.splitext(__file__)[0] + ".json", encoding="utf-8-sig") as f:
        for line in f:
            if not line.strip():
                continue
            inputs = json.loads(line)["inputs"]
            q, k, v = (torch.randn(t["shape"], dtype=DTYPES[t["dtype"]]) for t in inputs[:3])
            lens, theta, causal, window_left, scale = (a["value"] for a in inputs[3:8])
            groups.append([q, k, v, list(lens), float(theta), bool(causal), int(window_left), float(scale)])
    return groups


def get_init_inputs():
    return []
