"""flops.py for 6_GQAAttention: grouped-query attention, q [b, hq, s_q, d], k = v [b, hkv, s_kv, d].

Causal here is aligned to the bottom-right corner (query i sees key j iff j <= i + s_kv - s_q: the last query sees
every key, as in prefill with a KV cache and FlashAttention-2). With s_q < s_kv that keeps more than half of the
pairs; with s_q > s_kv the first s_q - s_kv rows see no key and count 0 - the count never exceeds the dense one.
Top-left alignment would be wrong for this reference whenever s_q != s_kv (case 2: s_q 32, s_kv 96).

FLOPs = 2 * b * hq * pairs * (d + d): every query head does its own QK^T and PV; sharing key/value heads (GQA)
saves memory traffic, not FLOPs.
"""
from mfulib.flops.contract import attention_dims, attention_flops, attention_pairs, attr

KERNEL_PARTS = {"attn": ["*gqa_attn*", "*attn_fwd*", "*flash*"]}


def flops_parts(case):
    dims = attention_dims(case, "q", "k", "v", "BNSD")   # raises "case rejected" when heads/dims do not pair
    pairs = attention_pairs(dims["s_q"], dims["s_k"], causal=bool(attr(case, "causal")), align="bottom_right")
    return {"attn": attention_flops(pairs, dims["hq"], dims["d"], dims["d_v"], batch=dims["b"])}


def flops(case):
    return float(sum(flops_parts(case).values()))
