"""Issue 11 item 7: torch_npu stand-ins for the tracer (mfulib.npu_formulas), each with a hand-derived count.

They apply only where no real torch_npu is importable (a real one runs its own ops).
"""
import pytest
import torch
import torch.nn.functional as F

from mfulib import flopcount as fc
from mfulib import npu_standins
from mfulib.flopcount import _counting

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
    """T 10, B 3, I 16, H 32: 2 * 10 * 3 * (4 * 32) * (16 + 32) = 368640 (unidirectional)."""
    def ref(x, w, bias, h, c):
        import torch_npu
        return torch_npu.npu_lstm(x, w, bias, None, h, c, True, 1, 0.0, False, False, False, False, 0)[0]
    args = [torch.randn(10, 3, 16), torch.randn(48, 128), torch.randn(128), torch.randn(1, 3, 32),
            torch.randn(1, 3, 32)]
    assert trace(ref, args).total_flops == 368640


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
