"""The tracer counts masks from how they were built, at any size (mfulib.flops.lazy_masks).

Hand values (2 FLOPs per multiply-accumulate), FlashAttention-V2 layer x [1, s, 4096], 32 heads, d = 128:
    projections 4 * 2 * s * 4096 * 4096;  attention 2 * 32 * pairs * (128 + 128)
    s = 8192, causal: pairs = 8192 * 8193 / 2 = 33558528
        -> 1099511627776 + 2 * 32 * 33558528 * 256 = 1099511627776 + 549822922752 = 1649334550528 (1.6493e12;
        dense: 2 * 1099511627776 = 2.1990e12)
    s = 8192, window 256 (tril().triu(-255)): pairs = 256 * 8192 - 255 * 256 / 2 = 2064512
        -> 1099511627776 + 2 * 32 * 2064512 * 256 = 1133336592384
"""
import math

import pytest
import torch
import torch.nn.functional as F

from mfulib.flops import dispatch as flop_dispatch
from mfulib.flops import check as fchk
from mfulib.flops import contract as fcon
from mfulib.flops import tracer as fc
from mfulib.flops.lazy_masks import BandMask, constant
from test_flops_check import write_dir

S, H, D = 8192, 32, 128
HIDDEN = H * D
PROJ_8192 = 4 * 2 * S * HIDDEN * HIDDEN                                   # 1099511627776
FAV2_CAUSAL_8192 = PROJ_8192 + 2 * H * (S * (S + 1) // 2) * (D + D)       # 1649334550528
assert FAV2_CAUSAL_8192 == 1649334550528


def fav2(x, mask, s=S):
    b, h, d, hidden = 1, H, D, HIDDEN
    w = [torch.empty(hidden, hidden, dtype=x.dtype, device=x.device) for _ in range(4)]
    q, k, v = (F.linear(x, wi).view(b, s, h, d).transpose(1, 2) for wi in w[:3])
    if mask == "sdpa_is_causal":
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        dev, dt = x.device, x.dtype
        if mask == "triu_ones":
            scores = scores.masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool, device=dev), 1), -math.inf)
        elif mask == "arange":
            i = torch.arange(s, device=dev)
            scores = scores.masked_fill(i[None, :] > i[:, None], float("-inf"))
        elif mask == "tril_bias":
            keep = torch.tril(torch.ones(s, s, device=dev, dtype=dt))
            scores = scores + torch.zeros(s, s, device=dev, dtype=dt).masked_fill(keep == 0, float("-inf"))
        elif mask == "where_tril":
            scores = torch.where(torch.ones(s, s, dtype=torch.bool, device=dev).tril(), scores, float("-inf"))
        elif mask == "float_bias_mul":  # (1 - tril) * -1e9, the BERT-style additive mask
            scores = scores + (1.0 - torch.ones(s, s, device=dev, dtype=torch.float32).tril()).to(dt) * -1e4
        elif mask == "window":
            keep = torch.ones(s, s, dtype=torch.bool, device=dev).tril().triu(-255)
            scores = scores.masked_fill(~keep, float("-inf"))
        elif mask == "random":
            scores = scores.masked_fill(torch.rand(s, s, device=dev) > 0.5, float("-inf"))
        o = scores.softmax(-1) @ v
    return F.linear(o.transpose(1, 2).reshape(b, s, hidden), w[3])


@pytest.mark.parametrize("mask", ["triu_ones", "arange", "tril_bias", "where_tril", "float_bias_mul",
                                  "sdpa_is_causal"])
def test_a_causal_8192_token_layer_counts_1_649e12_however_its_mask_is_built(mask):
    """The case that was miscounted: causal FA-V2 [1, 8192, 4096], 32 heads = 1.6493e12 (module docstring), not the
    dense 2.1990e12, on meta tensors with no s^2 mask values materialised."""
    x = torch.empty(1, S, HIDDEN, dtype=torch.float16, device="meta")
    r = fc.trace_callable(lambda t: fav2(t, mask), [x], "meta")
    assert r.total_flops == FAV2_CAUSAL_8192 and not r.needs_values, r.notes


def test_a_window_band_from_tril_then_triu_is_exact_at_8192():
    """keep = ones.tril().triu(-255): every query sees itself and the 255 keys before it: 2064512 pairs per head,
    total 1133336592384 (module docstring)."""
    x = torch.empty(1, S, HIDDEN, dtype=torch.float16, device="meta")
    r = fc.trace_callable(lambda t: fav2(t, "window"), [x], "meta")
    assert r.total_flops == PROJ_8192 + 2 * H * (256 * S - 255 * 256 // 2) * (D + D) == 1133336592384


def test_a_mask_whose_values_cannot_be_known_says_needs_values_and_the_check_is_unverified(tmp_path):
    """A random mask of 8192^2 entries cannot be known without its values: the tracer says so (needs_values,
    dense 2.1990e12 as the upper bound) and check_flops gives 'unverified', not a failure of a correct flops.py
    nor a pass."""
    x = torch.empty(1, S, HIDDEN, dtype=torch.float16, device="meta")
    r = fc.trace_callable(lambda t: fav2(t, "random"), [x], "meta")
    assert r.needs_values and r.total_flops == 2 * PROJ_8192  # dense = 2 x projections here (s = hidden * 2)
    ev = {"status": "ok", "flops": float(FAV2_CAUSAL_8192), "flops_parts": None, "vector_flops": None,
          "reason": None}
    cmp = fchk.compare_with_tracer(ev, r, {"inputs": []}, 0)
    assert cmp["status"] == "unverified" and "needs values" in cmp["diagnosis"]


@pytest.mark.parametrize("mask", ["triu_ones", "arange", "tril_bias", "where_tril", "float_bias_mul", "window"])
def test_descriptions_agree_with_materialised_masks_on_small_shapes(monkeypatch, mask):
    """s = 64 (window 256 covers everything, so 'window' is plain causal here): the description path (forced for
    every mask by a description threshold of 0) and the value path give the same count: projections
    4 * 2 * 64 * 4096^2 = 8589934592 plus 2 * 32 * 2080 * 256 = 34078720 causal attention."""
    s = 64
    want = 4 * 2 * s * HIDDEN * HIDDEN + 2 * H * (s * (s + 1) // 2) * (D + D)
    x = torch.empty(1, s, HIDDEN, dtype=torch.float16, device="meta")
    by_values = fc.trace_callable(lambda t: fav2(t, mask, s), [x], "meta")
    monkeypatch.setattr(flop_dispatch, "DESCRIBE_MIN_NUMEL", 0)
    by_description = fc.trace_callable(lambda t: fav2(t, mask, s), [x], "meta")
    assert by_values.total_flops == by_description.total_flops == want


@pytest.mark.parametrize("r0, c0, lo, hi", [(0, 0, 1, 1 << 62), (3, 0, -(1 << 62), 0), (0, 5, -2, 3),
                                            (7, 2, 0, 0)])
def test_band_mask_counts_equal_the_materialised_tensor(r0, c0, lo, hi):
    """A [2, 9, 13] bool band (rows offset r0, columns c0) counts exactly what torch counts on the same values."""
    m = BandMask((2, 9, 13), torch.bool, lo, hi, True, False, r0=r0, c0=c0)
    r = torch.arange(9)[:, None] + r0
    c = torch.arange(13)[None, :] + c0
    d = c - r
    real = ((d >= max(lo, -10 ** 6)) & (d <= min(hi, 10 ** 6))).expand(2, 9, 13)
    assert m.count_nonzero() == int(real.sum())
    assert (~m).count_nonzero() == int((~real).sum())
    assert torch.equal(m.materialize(), real) and torch.equal((~m).materialize(), ~real)
    assert constant((4, 5), torch.float32, -math.inf).compare("le", -1e4).all()


def test_a_materialised_float_band_is_the_tensor_torch_builds():
    """An additive bias zeros(9, 13).masked_fill(c > r, -inf) as a float16 band, and a 1-D band, materialise to the
    tensors torch builds from the same construction."""
    r, c = torch.arange(9)[:, None], torch.arange(13)[None, :]
    bias = torch.zeros(9, 13, dtype=torch.float16).masked_fill(c > r, float("-inf"))
    m = BandMask((3, 9, 13), torch.float16, -(1 << 62), 0, 0.0, -math.inf)
    assert torch.equal(m.materialize(), bias.expand(3, 9, 13)) and m.materialize().dtype == torch.float16
    row = BandMask((13,), torch.bool, 2, 4, True, False)
    assert torch.equal(row.materialize(), (c[0] >= 2) & (c[0] <= 4))


@pytest.mark.parametrize("build", ["flip", "inplace_or"])
def test_a_mid_size_described_mask_gets_its_values_when_an_uncovered_op_needs_them(build):
    """s = 512: the causal mask (262144 entries) is described, not computed; torch.flip (twice) and an in-place
    ``hidden |= j > i`` on a described zeros mask (7_SparseVarlenAttention's form) are no constructions the
    descriptions know, so they need values, which come from the descriptions: the count stays
    the causal 4 * 2 * 512 * 4096^2 + 2 * 32 * (512 * 513 / 2) * 256 = 68719476736 + 2151677952 = 70871154688."""
    s = 512
    want = 4 * 2 * s * HIDDEN * HIDDEN + 2 * H * (s * (s + 1) // 2) * (D + D)
    assert want == 70871154688 and flop_dispatch.DESCRIBE_MIN_NUMEL < s * s <= flop_dispatch.SHADOW_MAX_NUMEL

    def flipped(x):
        w = [torch.empty(HIDDEN, HIDDEN, dtype=x.dtype, device=x.device) for _ in range(4)]
        q, k, v = (F.linear(x, wi).view(1, s, H, D).transpose(1, 2) for wi in w[:3])
        i = torch.arange(s, device=x.device)
        if build == "flip":
            masked = (i[None, :] > i[:, None]).flip(-1).flip(-1)
        else:
            masked = torch.zeros(s, s, dtype=torch.bool, device=x.device)
            masked |= i[None, :] > i[:, None]
        scores = (q @ k.transpose(-1, -2)).masked_fill(masked, float("-inf"))
        return F.linear((scores.softmax(-1) @ v).transpose(1, 2).reshape(1, s, HIDDEN), w[3])
    r = fc.trace_callable(flipped, [torch.empty(1, s, HIDDEN, dtype=torch.float16, device="meta")], "meta")
    assert r.total_flops == want and not r.needs_values, r.notes


def test_a_chunked_reference_slicing_a_big_described_mask_counts_each_chunk(tmp_path):
    """5_MHABlock-style chunking over query rows of a registered 8192^2 causal mask (mask[i0:i1] per chunk of
    1024 rows): the slices keep their row origin, so the total is still the causal 1649334550528."""
    def chunked(x):
        s, h, d, hidden = S, H, D, HIDDEN
        w = [torch.empty(hidden, hidden, dtype=x.dtype, device=x.device) for _ in range(4)]
        q, k, v = (F.linear(x, wi).view(1, s, h, d).transpose(1, 2) for wi in w[:3])
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        outs = []
        for i0 in range(0, s, 1024):
            sc = (q[:, :, i0:i0 + 1024] @ k.transpose(-1, -2)).masked_fill(mask[i0:i0 + 1024], float("-inf"))
            outs.append(sc.softmax(-1) @ v)
        o = torch.cat(outs, dim=2)
        return F.linear(o.transpose(1, 2).reshape(1, s, hidden), w[3])
    x = torch.empty(1, S, HIDDEN, dtype=torch.float16, device="meta")
    r = fc.trace_callable(chunked, [x], "meta")
    assert r.total_flops == FAV2_CAUSAL_8192 and not r.needs_values


def test_check_flops_passes_a_correct_flops_py_on_the_8192_causal_layer(tmp_path):
    """End to end through a work dir (the defect: check_flops failed the correct 1.649e12 and `make all` stopped)."""
    ref = '''
import math
class Model(nn.Module):
    def forward(self, x, head_num):
        b, s, hidden = x.shape
        d = hidden // head_num
        w = [torch.empty(hidden, hidden, dtype=x.dtype, device=x.device) for _ in range(4)]
        q, k, v = (F.linear(x, wi).view(b, s, head_num, d).transpose(1, 2) for wi in w[:3])
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        scores = scores.masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool, device=x.device), 1), -1e30)
        o = scores.softmax(-1) @ v
        return F.linear(o.transpose(1, 2).reshape(b, s, hidden), w[3])
'''
    flops = '''
from mfulib.flops.contract import attention_flops, attention_pairs, attr, matmul_flops, shape
def flops(case):
    b, s, hidden = shape(case, "x")
    n = attr(case, "head_num")
    return float(4 * matmul_flops(b * s, hidden, hidden)
                 + attention_flops(attention_pairs(s, s, causal=True), n, hidden // n, batch=b))
'''
    case = {"inputs": [{"name": "x", "type": "tensor", "required": True, "dtype": "float16",
                        "shape": [1, S, HIDDEN]},
                       {"name": "head_num", "type": "attr", "required": True, "dtype": "int", "value": H}]}
    od = write_dir(tmp_path, ref, [case], flops)
    row = fchk.check_case(fcon.load_flops(od.flops_py), od, 0)
    assert row["flops"] == FAV2_CAUSAL_8192 and row["tracer"]["total_flops"] == FAV2_CAUSAL_8192
    assert row["status"] == "pass", row["diagnosis"]
