"""flops.py for sparse, variable-length attention with rope (examples/ops/bench/zoo/7_SparseVarlenAttention.py).

A complete, checked example of the flops.py contract for the three things that most often make a FLOP count
wrong without anyone noticing (check it with ``python3 scripts/check_flops.py --op-dir <work dir>``):

1. **Variable length.** q/k/v are padded to [b, s, heads, d]; sequence i really has L_i = actual_seq_lengths[i]
   tokens. Only those are computed (the padding is never attended and its output rows are 0), so the count runs
   over L_i, never over the padded s: with lengths [4096, 512] in s = 4096 the padded count is almost 2x too high.
   check_flops.py names that mistake ("count from the actual lengths, not the padded maximum").
2. **Sparsity.** Query i of a sequence sees key j only if j <= i (causal) and j >= i - window_left (sliding
   window; -1 = unlimited). The FLOPs are those of the (i, j) pairs kept: attention_pairs() counts them exactly
   (about L^2/2 causal, about L*(window_left+1) with a window), never the dense L^2.
3. **Rope.** Rotary embedding multiplies q and k elementwise by cos/sin tables: vector work, not counted (the convention
   of docs/ARCHITECTURE.md#flops counts matrix work only). It still costs kernel time, so it gets its own part with 0
   FLOPs: the decomposition then shows the rope kernel's time next to an MFU of 0 instead of hiding it in "attn".

FLOPs per sequence (2 per multiply-accumulate; GQA does not change them - each of the hq query heads does its
own QK^T and PV, whatever key head it reads):

    attn_i = 2 * hq * pairs(L_i) * (d + d)        QK^T: d MACs per pair; PV: d MACs per pair

If the lengths were drawn at random by get_input_groups() instead of given in the case file, define
``flops(case, args)`` instead: check_flops.py then passes the built forward arguments (seeded, the seed is
recorded) and the lengths are read from them (args[3] here).
"""
from mfulib.flops.contract import attention_flops, attention_pairs, attr, shape

KERNEL_PARTS = {
    "attn": ["*varlen_attn*", "*attn_fwd*", "*flash*"],
    "rope": ["*rope*", "*rotary*"],
}


def _dims(case):
    q, k, v = shape(case, "q"), shape(case, "k"), shape(case, "v")   # [b, s, hq, d], [b, s, hkv, d] x2
    if len(q) != 4 or k != v or q[:2] != k[:2] or q[3] != k[3]:
        raise ValueError(f"case rejected: need q [b,s,hq,d], k = v [b,s,hkv,d]; got {q}, {k}, {v}")
    b, s, hq, d = q
    hkv = k[2]
    if hkv == 0 or hq % hkv or d % 2:                 # the reference rejects these too (GQA groups, rope pairs)
        raise ValueError(f"case rejected: need hq % hkv == 0 and an even head dim, got hq {hq}, hkv {hkv}, d {d}")
    lengths = [int(n) for n in attr(case, "actual_seq_lengths")]
    if len(lengths) != b or any(not 0 <= n <= s for n in lengths):
        raise ValueError(f"case rejected: actual_seq_lengths {lengths} must hold {b} lengths in [0, {s}]")
    return hq, d, lengths


def flops_parts(case):
    hq, d, lengths = _dims(case)
    causal = bool(attr(case, "causal"))
    window_left = int(attr(case, "window_left", -1))  # -1: no window
    attn = 0
    for n in lengths:                                  # real length of each sequence, not the padded s
        pairs = attention_pairs(n, n, causal=causal, window_left=window_left)
        attn += attention_flops(pairs, hq, d, d)
    return {"attn": attn, "rope": 0}                   # rope: elementwise, 0 FLOPs by convention


def flops(case):
    return float(sum(flops_parts(case).values()))
