"""flops.py for a long-sequence causal attention layer (examples/ops/bench/zoo/20_FlashAttentionV2.py).

The operator (check with ``python3 scripts/check_flops.py --op-dir <work dir>``, docs/ARCHITECTURE.md#flops):

    x [b, s, hidden]   head_num (int)   always causal, top-left (query i sees keys j <= i; s_q == s_k == s)
    q, k, v = x Wq^T, x Wk^T, x Wv^T        three [hidden, hidden] projections
    o       = softmax(q k^T / sqrt(d) + causal mask) v       per head, d = hidden / head_num
    y       = o Wo^T                         the fourth projection

FLOPs (2 per multiply-accumulate; softmax, scaling and the mask itself are not counted):

    proj = 4 * 2*b*s*hidden*hidden                   q, k, v and out: each [b*s, hidden] @ [hidden, hidden]
    attn = QK^T + PV = 2 * (2*b*head_num*d * s*(s+1)/2)
                                                     each product over the s*(s+1)/2 (i, j) pairs with j <= i
                                                     (mfulib.flops.contract.attention_pairs, top-left causal)

The pairs are counted exactly, s*(s+1)/2 and not s^2/2: the diagonal is kept. This is the count the tracer makes
of the reference (its causal mask is known from ``ones(s, s).triu(1)``, mfulib.flops.lazy_masks), so flops.py and
the tracer agree to the FLOP; FlashAttention-2's paper (Dao 2023, section 4.1) rounds the same count to half of
4*s^2*d per head. At [1, 8192, 4096], 32 heads: proj 1.0995e12, attn 5.498e11, total 1.649e12.

KERNEL_PARTS maps the implementation's Triton kernels to the parts (fnmatch on kernel names; the first match
wins): examples/ops/gen/zoo/20_FlashAttentionV2_triton.py launches ``matmul_kernel`` twice (the fused QKV and the
output projection) and ``flash_attn_causal_kernel`` once.
"""
from mfulib.flops.contract import attention_flops, attention_pairs, attr, matmul_flops, shape

KERNEL_PARTS = {
    "attn": ["*flash_attn*", "*attention*", "*attn_fwd*"],
    "proj": ["*matmul*", "*gemm*", "*linear*"],
}


def _dims(case):
    b, s, hidden = shape(case, "x")              # x [b, s, hidden]
    heads = int(attr(case, "head_num"))
    if heads <= 0 or hidden % heads:             # the reference rejects these cases too
        raise ValueError(f"case rejected: hidden {hidden} is not divisible by head_num {heads}")
    return b, s, hidden, heads, hidden // heads


def flops_parts(case):
    b, s, hidden, heads, d = _dims(case)
    pairs = attention_pairs(s, s, causal=True)                 # s*(s+1)/2 per (batch, head)
    return {
        "proj": 4 * matmul_flops(b * s, hidden, hidden),       # [b*s, hidden] @ [hidden, hidden], x4
        "attn": attention_flops(pairs, heads, d, d, batch=b),  # QK^T + PV over the kept pairs
    }


def flops(case):
    return float(sum(flops_parts(case).values()))
