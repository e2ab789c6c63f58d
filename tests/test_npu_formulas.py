"""torch_npu stand-ins for the tracer (mfulib.flops.npu_formulas), each with a hand-derived count.

They apply only where no real torch_npu is importable (a real one runs its own ops).
"""
import pytest
import torch
import torch.nn.functional as F

from mfulib.flops import tracer as fc
from mfulib.flops import npu_standins
from mfulib.flops.tracer import _counting

pytestmark = pytest.mark.skipif(npu_standins.real_torch_npu() is not None,
                                reason="a real torch_npu is installed: its ops run instead of the stand-ins")


def trace(fn, args, device="cpu"):
    with npu_standins.npu_standins(_counting):
        return fc.trace_callable(fn, args, device)


def test_lightning_indexer_feeds_sparse_flash_attention_with_real_indices():
    """b 1, s 16, query heads 4, d 8, sparse_count 8, sparse_mode 3 (causal, s_q = s_k):
    indexer: pairs 16 * 17 / 2 = 136 -> 2 * 4 * 136 * (8 + 1) = 9792;
    SFA: query i selects min(i + 1, 8) keys (the indexer's -1 past the causal limit) -> 8 * 16 - 28 = 100 keys,
    2 * 4 * 100 * (32 + 32) = 51200 (D = D_v = 32, no rope). Total 60992."""
    def ref(q, k, w, kv, qr):
        import torch_npu
        idx, _ = torch_npu.npu_lightning_indexer(q, k, w, sparse_count=8, sparse_mode=3)
        return torch_npu.npu_sparse_flash_attention(qr, kv, kv, idx, 1.0, sparse_block_size=1)[0]
    args = [torch.randn(1, 16, 4, 8), torch.randn(1, 16, 1, 8), torch.randn(1, 16, 4), torch.randn(1, 16, 1, 32),
            torch.randn(1, 16, 4, 32)]
    r = trace(ref, args)
    assert r.formula_flops == {"torch_npu.npu_lightning_indexer": 9792, "torch_npu.npu_sparse_flash_attention": 51200}
    assert r.total_flops == 60992 and not r.needs_values


def test_sparse_flash_attention_without_index_values_says_needs_values():
    """Meta indices [1, 16, 1, 8]: every slot counts, 16 * 8 = 128 keys -> 2 * 4 * 128 * 64 = 65536, flagged."""
    def ref(qr, kv, idx):
        import torch_npu
        return torch_npu.npu_sparse_flash_attention(qr, kv, kv, idx, 1.0)[0]
    args = [torch.empty(1, 16, 4, 32, device="meta"), torch.empty(1, 16, 1, 32, device="meta"),
            torch.empty(1, 16, 1, 8, dtype=torch.int32, device="meta")]
    r = trace(ref, args, "meta")
    assert r.total_flops == 65536 and r.needs_values


def test_npu_lstm_counts_the_four_gate_gemms_of_every_step():
    """T 10, B 3, I 16, H 32 (bias [4H] = [128], weight [I + H, 4H] = [48, 128]):
    2 * 10 * 3 * (4 * 32) * (16 + 32) = 368640, with train=True as well as False (positional args after c:
    has_biases, num_layers, dropout, train, bidirectional, ...; one direction per call, as documented)."""
    def ref(x, w, bias, h, c, train):
        import torch_npu
        out = torch_npu.npu_lstm(x, w, bias, None, h, c, True, 1, 0.0, train, False, False, False, False)
        assert len(out) == 8 and tuple(out[0].shape) == (10, 3, 32)
        return out[0]
    for train in (False, True):
        args = [torch.randn(10, 3, 16), torch.randn(48, 128), torch.randn(128), torch.randn(1, 3, 32),
                torch.randn(1, 3, 32), train]
        assert trace(ref, args).total_flops == 368640


def test_fused_infer_attention_bnsd_gqa_with_actual_seq_lengths():
    """BNSD, B 2, N_q 8, N_kv 2 (GQA), S_q 4, S_kv 32, D 16, D_v 16, sparse_mode 0 without mask (dense),
    actual_seq_lengths [4, 2], actual_seq_lengths_kv [20, 32]:
    pairs 4 * 20 + 2 * 32 = 144; 2 * N_q * (D + D_v) * pairs = 2 * 8 * 32 * 144 = 73728 (GQA shares K/V heads,
    each of the 8 query heads still does its QK^T and PV). Output [2, 8, 4, 16]."""
    seen = {}

    def ref(q, k, v):
        import torch_npu
        o, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, num_key_value_heads=2,
                                                         input_layout="BNSD", actual_seq_lengths=[4, 2],
                                                         actual_seq_lengths_kv=[20, 32])
        seen["shape"] = tuple(o.shape)
        return o
    r = trace(ref, [torch.randn(2, 8, 4, 16), torch.randn(2, 2, 32, 16), torch.randn(2, 2, 32, 16)])
    assert r.total_flops == 73728 and seen["shape"] == (2, 8, 4, 16)


def test_fused_infer_attention_bsh_with_a_different_value_dim_and_causal_mode():
    """BSH, B 1, S 8 (q and kv), num_heads 4, num_key_value_heads 1: q [1, 8, 4*16], k [1, 8, 16],
    v [1, 8, 32] -> D 16, D_v 32; sparse_mode 3 (bottom-right causal, S_q = S_kv): pairs 8 * 9 / 2 = 36;
    2 * 4 * (16 + 32) * 36 = 13824. Output [1, 8, 4 * 32]. num_heads 4 with 3 KV heads is rejected."""
    seen = {}

    def ref(q, k, v, n_kv):
        import torch_npu
        o, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=4, num_key_value_heads=n_kv,
                                                         input_layout="BSH", sparse_mode=3,
                                                         atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1))
        seen["shape"] = tuple(o.shape)
        return o
    args = [torch.randn(1, 8, 64), torch.randn(1, 8, 16), torch.randn(1, 8, 32)]
    assert trace(ref, args + [1]).total_flops == 13824 and seen["shape"] == (1, 8, 128)
    from mfulib.flops.formulas import npu_fused_infer_attention_score_flops
    with pytest.raises(ValueError, match="multiple of num_key_value_heads"):
        npu_fused_infer_attention_score_flops(lambda t: None, *args, num_heads=4, num_key_value_heads=3)


def test_npu_ffn_with_and_without_expert_tokens():
    """No experts: x [6, 32], W1 [32, 64], W2 [64, 32]: 2 * 6 * 32 * 64 * 2 = 49152.
    Experts (E 4, weights [4, 32, 64] / [4, 64, 32]), x [8, 32], expert_tokens [3, 0, 4, 1] = counts per expert
    (Ascend docs: 各专家的token数; they must add up to M = 8): each token through one expert:
    2 * 8 * 32 * 64 * 2 = 65536; the same as expert_tokens_index [3, 3, 7, 8] = cumulative end indices (MindSpeed
    docs/ops/ffn.md: counts [64] * 8 <-> index [64, 128, ..., 512]). That example by hand: M 512, K1 256,
    N1 = K2 1024, N2 256: 2 * 512 * 256 * 1024 * 2 = 536870912.
    swiglu (GLU): W1 [32, 128] -> halves of 64, W2 [64, 32]: 2 * 6 * 32 * 128 + 2 * 6 * 64 * 32 = 73728.
    Rejected as the op rejects them: x last dim 30 against K1 32; counts [3, 0, 4, 1] against 10 rows; index
    [3, 2, 7, 8] (decreasing); both given."""
    from mfulib.flops.formulas import npu_ffn_flops
    nov = lambda t: None  # noqa: E731
    x6, x8 = torch.empty(6, 32, device="meta"), torch.empty(8, 32, device="meta")
    w1, w2 = torch.empty(32, 64, device="meta"), torch.empty(64, 32, device="meta")
    e1, e2 = torch.empty(4, 32, 64, device="meta"), torch.empty(4, 64, 32, device="meta")
    assert npu_ffn_flops(nov, x6, w1, w2, "relu").flops == 49152
    assert npu_ffn_flops(nov, x8, e1, e2, "gelu", expert_tokens=[3, 0, 4, 1]).flops == 65536
    assert npu_ffn_flops(nov, x8, e1, e2, "gelu", expert_tokens_index=torch.tensor([3, 3, 7, 8])).flops == 65536
    big = [torch.empty(s, device="meta") for s in ([512, 256], [8, 256, 1024], [8, 1024, 256])]
    assert npu_ffn_flops(nov, *big, "relu", expert_tokens_index=list(range(64, 513, 64))).flops == 536870912
    assert npu_ffn_flops(nov, *big, "relu", expert_tokens=[64] * 8).flops == 536870912
    assert npu_ffn_flops(nov, x6, torch.empty(32, 128, device="meta"), w2, "swiglu").flops == 73728
    with pytest.raises(ValueError, match="K1"):
        npu_ffn_flops(nov, torch.empty(6, 30, device="meta"), w1, w2, "relu")
    for kw, msg in ((dict(expert_tokens=[3, 0, 4, 1]), "M = 10"), (dict(expert_tokens_index=[3, 2, 7, 10]),
                    "decreasing"), (dict(expert_tokens=[5, 5], expert_tokens_index=[5, 10]), "both")):
        with pytest.raises(ValueError, match=msg):
            npu_ffn_flops(nov, torch.empty(10, 32, device="meta"), e1, e2, "gelu", **kw)

    def ref(x, w1, w2):
        import torch_npu
        return torch_npu.npu_ffn(x, w1, w2, "fastgelu", expert_tokens=[3, 0, 4, 1])
    r = trace(ref, [torch.randn(8, 32), torch.randn(4, 32, 64), torch.randn(4, 64, 32)])
    assert r.total_flops == 65536


def test_the_npu_ffn_standin_computes_each_experts_rows_with_its_own_weights():
    """The stand-in's values: rows 0-2 through expert 0, none through expert 1, rows 3-6 through expert 2, row 7
    through expert 3 (counts [3, 0, 4, 1] = index [3, 3, 7, 8]); relu(x @ W1[e] + b1[e]) @ W2[e] + b2[e]."""
    from mfulib.flops.npu_standins import STANDINS
    g = torch.Generator().manual_seed(0)
    x, w1, w2 = (torch.randn(s, generator=g) for s in ([8, 32], [4, 32, 64], [4, 64, 32]))
    b1, b2 = torch.randn(4, 64, generator=g), torch.randn(4, 32, generator=g)
    ffn = STANDINS["torch_npu.npu_ffn"]
    got = ffn(x, w1, w2, "relu", expert_tokens_index=[3, 3, 7, 8], bias1=b1, bias2=b2)
    rows = [(0, 3, 0), (3, 7, 2), (7, 8, 3)]
    want = torch.cat([torch.relu(x[a:b] @ w1[e] + b1[e]) @ w2[e] + b2[e] for a, b, e in rows])
    assert torch.allclose(got, want, atol=1e-5)
    assert torch.allclose(ffn(x, w1, w2, "relu", expert_tokens=[3, 0, 4, 1], bias1=b1, bias2=b2), want, atol=1e-5)


def test_the_vector_only_standins_count_no_matrix_work_and_compute_the_documented_values():
    """npu_rms_norm / npu_rotary_mul / npu_swiglu / npu_group_norm_swish: 0 matrix FLOPs; values as documented."""
    x, g = torch.randn(4, 64), torch.rand(64) + 0.5
    out = {}

    def ref(x, g):
        import torch_npu
        out["rms"] = torch_npu.npu_rms_norm(x, g, 1e-6)[0]
        out["swiglu"] = torch_npu.npu_swiglu(x, -1)
        out["rot"] = torch_npu.npu_rotary_mul(x, torch.ones(64), torch.zeros(64))
        out["gns"] = torch_npu.npu_group_norm_swish(x.reshape(4, 8, 8), 2, torch.ones(8), torch.zeros(8))[0]
        return out["rms"]
    r = trace(ref, [x, g])
    assert r.total_flops == 0 and not r.unseen_ops
    torch.testing.assert_close(out["rms"], x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g)
    a, b = x.chunk(2, -1)
    torch.testing.assert_close(out["swiglu"], F.silu(a) * b)
    torch.testing.assert_close(out["rot"], x)
    y = F.group_norm(x.reshape(4, 8, 8), 2)
    torch.testing.assert_close(out["gns"], y * torch.sigmoid(y))


def test_sparse_flash_attention_query_heads_share_their_kv_heads_index_list():
    """query [1, 4, 4, 16] (N1 4), kv [1, 8, 2, 16] (N2 2), indices [1, 4, 2, 3] all valid: each query token's 4
    heads read 3 keys each (heads 0-1 the list of KV head 0, heads 2-3 that of KV head 1):
    2 * 4 heads * (4 tokens * 3 keys) * (16 + 16) = 3072 (not 2 * 4 * 24 * 32, which double-counts the lists)."""
    def ref(q, kv, idx):
        import torch_npu
        return torch_npu.npu_sparse_flash_attention(q, kv, kv, idx, 1.0)[0]
    idx = torch.zeros(1, 4, 2, 3, dtype=torch.int32)
    r = trace(ref, [torch.randn(1, 4, 4, 16), torch.randn(1, 8, 2, 16), idx])
    assert r.total_flops == 3072 and not r.needs_values
