"""3_FusionAttention: plain-torch reference for torch_npu.npu_fusion_attention (NPUKernelBench level4 real cases).

The case file is the real one, ../shared/data/npukernelbench/level4/3_FusionAttention.json (not copied into the
project); this file reads os.path.splitext(__file__)[0] + ".json", so stage it beside the reference under that
name (prepare_op_dir.py does: model.py + model.json).

forward(query, key, value, head_num, input_layout, scale, keep_prob, sparse_mode), in case-file order:
    query/key/value: float16 / bfloat16 / float32 in input_layout
        BSH  [B, S, H]      head_dim D = H / head_num (key/value: H_kv = N_kv * D)
        SBH  [S, B, H]      as BSH with S and B swapped
        BSND [B, S, N, D]
        BNSD [B, N, S, D]
        head_num N must be a multiple of the key/value head count N_kv (GQA), as torch_npu allows.
    scale (float): multiplies Q K^T;  keep_prob (float, (0, 1]): dropout keep probability on the softmax output
    sparse_mode (int), as documented for npu_fusion_attention (Ascend PyTorch API reference, "sparse_mode"):
        0 defaultMask   - no atten_mask given and pre/next_tockens at their unlimited default: no mask
        2 leftUpCausal  - query i sees key j iff j <= i (causal aligned to the top-left corner)
        3 rightDownCausal - query i sees key j iff j <= i + (S_kv - S_q) (aligned to the bottom-right corner);
                          rows that see no key (S_q > S_kv) output 0, as the operator's "invalid row" handling does
        4 band          - pre_tockens/next_tockens bound the band; the case file gives none, so they keep their
                          default 2147483647 and the band covers everything: no mask
      Rejected per case (ValueError "case rejected: ..."), because their result depends on inputs the case file
      does not give: 1 allMask (needs the full atten_mask), 5 prefix non-compressed (needs prefix), 6 prefix
      compressed (needs prefix and the compressed mask), 7/8 varlen (need actual_seq_qlen/kvlen and layout TND).
Output: attention_out only (the operator also returns softmax_max/sum, softmax_out, seed, offset, numels), same
layout and dtype as query: softmax(scale * Q K^T [masked]) with dropout, times V; softmax and matmuls in float32.

Dropout: P' = P * mask / keep_prob (mask ~ Bernoulli(keep_prob)), applied after the softmax as the operator does.
It draws from torch's RNG, so it cannot match an implementation's RNG: correctness is compared with dropout off.
Switch it off with the class attribute ``Model.dropout_enabled = False`` or the environment variable
``MFU_DISABLE_DROPOUT=1`` (read at each call; mfulib.verify.correctness sets it). Dropout changes no FLOPs.

FLOPs: 4 * B * N * S_q * S_kv * D (QK^T and PV); about half for modes 2/3 with S_q == S_kv.
Data: torch.randn on the CPU; this file seeds nothing.
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SCORE_CHUNK_ELEMS = 1 << 28
DISABLE_DROPOUT_ENV = "MFU_DISABLE_DROPOUT"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
UNSUPPORTED_SPARSE_MODES = {
    1: "sparse_mode 1 (allMask) takes the whole mask from atten_mask, which the case file does not give",
    5: "sparse_mode 5 (prefix, non-compressed) needs the per-batch prefix list, which the case file does not give",
    6: "sparse_mode 6 (prefix, compressed) needs prefix and the compressed atten_mask, which the case file does not give",
    7: "sparse_mode 7 (varlen rightDownCausal) needs actual_seq_qlen/actual_seq_kvlen and layout TND",
    8: "sparse_mode 8 (varlen leftUpCausal) needs actual_seq_qlen/actual_seq_kvlen and layout TND",
}


def bnsd_view(t, layout, heads):
    """View of ``t`` (in ``layout``) as [B, N, S, D] without copying; ``heads`` splits H for BSH/SBH."""
    if layout == "BSH":
        return t.unflatten(-1, (heads, t.shape[-1] // heads)).permute(0, 2, 1, 3)
    if layout == "SBH":
        return t.unflatten(-1, (heads, t.shape[-1] // heads)).permute(1, 2, 0, 3)
    if layout == "BSND":
        return t.permute(0, 2, 1, 3)
    return t


def layout_dims(query, key, head_num, input_layout):
    """(B, N, N_kv, S_q, S_kv, D) of a case; raises ValueError("case rejected: ...") for inconsistent shapes."""
    if input_layout not in ("BSH", "SBH", "BSND", "BNSD"):
        raise ValueError(f"case rejected: input_layout {input_layout!r} is not one of BSH, SBH, BSND, BNSD")
    rank = 3 if input_layout in ("BSH", "SBH") else 4
    if query.dim() != rank or key.dim() != rank:
        raise ValueError(f"case rejected: layout {input_layout} needs {rank}-D query/key, got {list(query.shape)}")
    if rank == 3:
        if head_num <= 0 or query.shape[-1] % head_num:
            raise ValueError(f"case rejected: hidden {query.shape[-1]} is not divisible by head_num {head_num}")
        d = query.shape[-1] // head_num
        if key.shape[-1] % d:
            raise ValueError(f"case rejected: key hidden {key.shape[-1]} is not a multiple of head_dim {d}")
        heads_kv = key.shape[-1] // d
    else:
        n_axis = 2 if input_layout == "BSND" else 1
        if query.shape[n_axis] != head_num:
            raise ValueError(f"case rejected: query has {query.shape[n_axis]} heads but head_num is {head_num}")
        d, heads_kv = query.shape[-1], key.shape[n_axis]
    qv, kv = bnsd_view(query, input_layout, head_num), bnsd_view(key, input_layout, heads_kv)
    if heads_kv == 0 or head_num % heads_kv or qv.shape[0] != kv.shape[0] or kv.shape[3] != d:
        raise ValueError(f"case rejected: query {list(query.shape)} and key {list(key.shape)} do not pair "
                         f"(batch, head_dim, or head_num {head_num} not a multiple of key heads {heads_kv})")
    return qv.shape[0], head_num, heads_kv, qv.shape[2], kv.shape[2], d


def dropout_active(cls, keep_prob):
    return keep_prob < 1.0 and cls.dropout_enabled and os.environ.get(DISABLE_DROPOUT_ENV, "0") != "1"


class Model(nn.Module):
    dropout_enabled = True

    def __init__(self):
        super().__init__()

    def forward(self, query, key, value, head_num, input_layout, scale, keep_prob, sparse_mode):
        if sparse_mode in UNSUPPORTED_SPARSE_MODES:
            raise ValueError(f"case rejected: {UNSUPPORTED_SPARSE_MODES[sparse_mode]}")
        if sparse_mode not in (0, 2, 3, 4):
            raise ValueError(f"case rejected: sparse_mode {sparse_mode} is not defined by npu_fusion_attention")
        if not 0.0 < keep_prob <= 1.0:
            raise ValueError(f"case rejected: keep_prob {keep_prob} is outside (0, 1]")
        b, n, n_kv, s_q, s_kv, d = layout_dims(query, key, head_num, input_layout)
        if value.shape != key.shape:
            raise ValueError(f"case rejected: value {list(value.shape)} differs from key {list(key.shape)}")
        group = n // n_kv
        q = bnsd_view(query, input_layout, n).float()
        k = bnsd_view(key, input_layout, n_kv).float()[:, :, None]  # [B, N_kv, 1, S_kv, D]
        v = bnsd_view(value, input_layout, n_kv).float()[:, :, None]
        out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        out_bnsd = bnsd_view(out, input_layout, n)
        diag = {2: 0, 3: s_kv - s_q}.get(sparse_mode)  # query i sees key j iff j <= i + diag
        rows = max(1, SCORE_CHUNK_ELEMS // max(1, b * n * s_kv))
        for i0 in range(0, s_q, rows):
            i1 = min(s_q, i0 + rows)
            scores = q[:, :, i0:i1].reshape(b, n_kv, group, i1 - i0, d) @ k.transpose(-1, -2) * scale
            if diag is not None:
                qpos = torch.arange(i0, i1, device=query.device)[:, None] + diag
                scores.masked_fill_(torch.arange(s_kv, device=query.device)[None, :] > qpos, float("-inf"))
            probs = scores.softmax(dim=-1).nan_to_num(0.0)  # a row that sees no key outputs 0
            if dropout_active(type(self), keep_prob):
                probs = F.dropout(probs, p=1.0 - keep_prob, training=True)
            out_bnsd[:, :, i0:i1] = (probs @ v).reshape(b, n, i1 - i0, d).to(query.dtype)
        return out


def get_input_groups():
    with open(os.path.splitext(__file__)[0] + ".json", encoding="utf-8-sig") as f:
        case_lines = [json.loads(line)["inputs"] for line in f if line.strip()]
    return [[torch.randn(t["shape"], dtype=DTYPES[t["dtype"]]) for t in inputs[:3]]
            + [int(inputs[3]["value"]), str(inputs[4]["value"]), float(inputs[5]["value"]),
               float(inputs[6]["value"]), int(inputs[7]["value"])] for inputs in case_lines]


def get_init_inputs():
    return []
