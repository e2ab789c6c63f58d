"""flops.py for a multi-head attention block with four projections (examples/ops/bench/zoo/5_MHABlock.py).

A complete, checked example of the flops.py contract (docs/ARCHITECTURE.md#flops; check it with
``python3 scripts/check_flops.py --op-dir <work dir>``). The operator:

    x [b, s, hidden]   head_num (int)   causal (bool, top-left: query i sees keys j <= i; here s_q == s_k)
    q, k, v = x Wq^T, x Wk^T, x Wv^T        three [hidden, hidden] projections
    o       = softmax(q k^T / sqrt(d) [+ causal mask]) v       per head, d = hidden / head_num
    y       = o Wo^T                         the fourth projection

FLOPs (2 per multiply-accumulate; softmax, scaling and the mask itself are not counted):

    proj = 4 * 2*b*s*hidden*hidden               q, k, v and out: each [b*s, hidden] @ [hidden, hidden]
    attn = 2*b*head_num*pairs*(d + d)            QK^T (d MACs per pair) and PV (d MACs per pair)
    pairs = s*s dense, s*(s+1)/2 causal          only the (i, j) pairs the mask keeps are counted

The operator's name says "attention", but the projections hold most of the work unless s >> hidden:
at s = 512, hidden = 1024 the projections are 80% of the FLOPs (dense) and 89% (causal). Counting only the
attention core makes the MFU numerator 5-9x too small - check_flops.py reports that as "< 0.5: projections
missed". Forgetting the causal reduction reports "flops.py counts the dense score matrix".

KERNEL_PARTS maps the implementation's Triton kernels to the parts (fnmatch on kernel names; the first match
wins; unmatched kernels form "other"): examples/ops/gen/zoo/5_MHABlock_triton_optimized.py launches
``matmul_kernel`` four times (the projections) and ``flash_attn_fwd_kernel`` once.
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
    causal = bool(attr(case, "causal", False))
    pairs = attention_pairs(s, s, causal=causal)               # per (batch, head)
    return {
        "proj": 4 * matmul_flops(b * s, hidden, hidden),       # [b*s, hidden] @ [hidden, hidden], x4
        "attn": attention_flops(pairs, heads, d, d, batch=b),  # QK^T + PV over the kept pairs
    }


def flops(case):
    return float(sum(flops_parts(case).values()))
