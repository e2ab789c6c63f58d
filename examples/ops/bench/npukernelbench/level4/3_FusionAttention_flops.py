"""flops.py for 3_FusionAttention (NPUKernelBench level4, real cases): torch_npu.npu_fusion_attention.

Layouts (input_layout): BSH [B, S, N*D], SBH [S, B, N*D], BSND [B, S, N, D], BNSD [B, N, S, D]; D = H / head_num
for BSH/SBH. FLOPs = 2 * B * N * pairs * (D + D_v): QK^T and PV over the (i, j) pairs the sparse_mode keeps
(torch_npu's sparse_mode documentation; mfulib.flops.contract.npu_sparse_pairs):

    0 defaultMask, no atten_mask given: every pair (pre/next tokens are ignored without a mask)
    2 leftUpCausal:    j <= i                      s*(s+1)/2 when S_q == S_kv
    3 rightDownCausal: j <= i + S_kv - S_q         the same as 2 when S_q == S_kv (every case of this file)
    4 band with the default, unlimited pre/next tokens: every pair
    1 allMask, 5/6 prefix, 7/8 varlen: rejected, as the reference rejects them - the case file gives neither the
      atten_mask, the prefix list nor actual_seq_qlen/kvlen their result depends on.

keep_prob < 1 (dropout) changes no FLOPs. The tracer agrees on every supported case: it follows the reference's
masked_fill of the scores (values known even on meta tensors) and counts only the unmasked pairs.
"""
from mfulib.flops.contract import attention_dims, attention_flops, attr, npu_sparse_pairs

UNSUPPORTED = {1: "allMask needs the full atten_mask", 5: "prefix needs the per-batch prefix list",
               6: "prefix (compressed) needs prefix and the compressed mask",
               7: "varlen needs actual_seq_qlen/kvlen and layout TND", 8: "varlen needs actual_seq_qlen/kvlen and TND"}
KERNEL_PARTS = {"attn": ["*fusion_attn*", "*attn_fwd*", "*flash*"]}


def flops_parts(case):
    mode = int(attr(case, "sparse_mode", 0))
    if mode in UNSUPPORTED:
        raise ValueError(f"case rejected: sparse_mode {mode}: {UNSUPPORTED[mode]}")
    if not 0.0 < float(attr(case, "keep_prob", 1.0)) <= 1.0:
        raise ValueError(f"case rejected: keep_prob {attr(case, 'keep_prob')} is outside (0, 1]")
    dims = attention_dims(case, "query", "key", "value", attr(case, "input_layout"), int(attr(case, "head_num")))
    pairs = npu_sparse_pairs(mode, dims["s_q"], dims["s_k"])      # no atten_mask, default pre/next tokens
    return {"attn": attention_flops(pairs, dims["hq"], dims["d"], dims["d_v"], batch=dims["b"])}


def flops(case):
    return float(sum(flops_parts(case).values()))
