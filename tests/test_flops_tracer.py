"""The independent FLOP tracer (mfulib.flops.tracer): FlopCounterMode plus the formulas and mask handling it lacks.

Every expected number is worked out by hand in a comment (2 FLOPs per multiply-accumulate).
"""
import json
import math
import os
import textwrap

import pytest
import torch
import torch.nn.functional as F

from mfulib.flops import dispatch as flop_dispatch
from mfulib.flops import formulas as flop_formulas
from mfulib.flops import npu_standins
from mfulib.flops import tracer as fc
from mfulib.core.opdir import OpDir

# the torch_npu stand-ins and the npu:: test double apply only where no real torch_npu is importable
needs_no_torch_npu = pytest.mark.skipif(npu_standins.real_torch_npu() is not None,
                                        reason="a real torch_npu is installed: its ops run instead of the stand-ins")


def write_workdir(tmp_path, ref_src, case_lines, name="Op"):
    """A work dir by hand: model.py reads model.json (splitext), the perf cases hold the same lines."""
    d = tmp_path / name
    d.mkdir()
    (d / "model.py").write_text(textwrap.dedent(ref_src))
    (d / "model_new.py").write_text("class ModelNew:\n    pass\n")
    body = "".join(json.dumps(c) + "\n" for c in case_lines)
    (d / "model.json").write_text(body)
    (d / f"{name}_perf_cases.jsonl").write_text(body)
    return OpDir(d)


def tensor(name, shape, dtype="float32"):
    return {"name": name, "type": "tensor", "required": True, "dtype": dtype, "shape": shape}


def attr_(name, value, dtype="int"):
    return {"name": name, "type": "attr", "required": True, "dtype": dtype, "value": value}


LOADER = '''
import json, os, torch, torch.nn as nn, torch.nn.functional as F
DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
def get_input_groups():
    out = []
    for line in open(os.path.splitext(__file__)[0] + ".json"):
        if line.strip():
            out.append([torch.randn(e["shape"], dtype=DT[e["dtype"]]) if e["type"] == "tensor" else e["value"]
                        for e in json.loads(line)["inputs"]])
    return out
def get_init_inputs():
    return []
'''


# ------------------------------------------------------------------------------------------------ registry, basics

def test_the_formula_registry_refuses_a_second_formula_for_the_same_op():
    reg = flop_formulas.FormulaRegistry()
    reg.register("aten::mv", "test")(lambda *a: flop_formulas.Count(1))
    with pytest.raises(ValueError, match="duplicate"):
        reg.register("aten::mv", "test")(lambda *a: flop_formulas.Count(2))


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_plain_matmul_counts_two_flops_per_multiply_accumulate(device):
    a, b = torch.randn(3, 5, 7, device=device), torch.randn(3, 7, 2, device=device)
    r = fc.trace_callable(lambda x, y: x @ y, [a, b], device)
    assert r.total_flops == 2 * 3 * 5 * 7 * 2  # 420
    assert r.unseen_ops == {}


# ------------------------------------------------------------------------------------------------ attention

def test_cpu_sdpa_is_counted_where_flopcountermode_alone_sees_zero():
    from torch.utils.flop_counter import FlopCounterMode
    q = torch.randn(1, 2, 16, 8)
    with FlopCounterMode(display=False) as plain:
        F.scaled_dot_product_attention(q, q, q)
    assert plain.get_total_flops() == 0  # the gap this tracer closes (docs/sources.md#flopcountermode)
    r = fc.trace_callable(lambda x: F.scaled_dot_product_attention(x, x, x), [q], "cpu")
    assert r.total_flops == 2 * 2 * 16 * 16 * (8 + 8)  # b*h * s*s pairs * (d + d) * 2 = 16384


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_causal_sdpa_counts_only_the_lower_triangle(device):
    q = torch.randn(1, 2, 16, 8, device=device)
    r = fc.trace_callable(lambda x: F.scaled_dot_product_attention(x, x, x, is_causal=True), [q], device)
    assert r.total_flops == 2 * 2 * (16 * 17 // 2) * (8 + 8)  # 136 pairs per head: 8704


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_boolean_sdpa_mask_built_from_index_math_is_counted_from_its_values(device):
    def fn(x):
        i = torch.arange(16, device=x.device)
        keep = (i[None, :] <= i[:, None]) & (i[None, :] >= i[:, None] - 3)  # window of 4 keys, causal
        return F.scaled_dot_product_attention(x, x, x, attn_mask=keep)
    r = fc.trace_callable(fn, [torch.randn(1, 1, 16, 8, device=device)], device)
    pairs = 1 + 2 + 3 + 4 * 13  # rows 0..2 see 1..3 keys, the other 13 rows see 4: 58
    assert r.total_flops == 2 * pairs * (8 + 8)
    assert not r.needs_values


def _masked_attention(q, k, v, diag):
    """softmax(q k^T masked to j <= i + diag) v, written with matmuls as references do."""
    s_q, s_k = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    qi = torch.arange(s_q, device=q.device)[:, None] + diag
    scores = scores.masked_fill(torch.arange(s_k, device=q.device)[None, :] > qi, float("-inf"))
    return scores.softmax(-1).nan_to_num(0.0) @ v


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_top_left_causal_written_with_masked_fill_is_halved_exactly(device):
    q = torch.randn(2, 3, 10, 4, device=device)
    r = fc.trace_callable(lambda x: _masked_attention(x, x, x, 0), [q], device)
    dense = 2 * 2 * 3 * 10 * 10 * 4 * 2  # two bmm over b*h=6, 100 pairs, d=4: 9600
    assert r.torch_counted_flops == dense
    assert r.total_flops == 2 * 6 * 55 * (4 + 4)  # 55 kept pairs per head: 5280
    assert {c["role"] for c in r.mask_corrections} == {"scores", "probabilities"}


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_bottom_right_causal_with_more_keys_keeps_more_than_half_but_never_exceeds_dense(device):
    q, k = torch.randn(1, 1, 4, 8, device=device), torch.randn(1, 1, 10, 8, device=device)
    r = fc.trace_callable(lambda a, b: _masked_attention(a, b, b, 10 - 4), [q, k], device)
    pairs = 7 + 8 + 9 + 10  # query i sees keys j <= i + 6: 34 of 40
    assert r.total_flops == 2 * pairs * (8 + 8)
    assert r.total_flops <= r.torch_counted_flops


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_bottom_right_causal_with_more_queries_counts_rows_without_keys_as_zero(device):
    q, k = torch.randn(1, 1, 10, 8, device=device), torch.randn(1, 1, 4, 8, device=device)
    r = fc.trace_callable(lambda a, b: _masked_attention(a, b, b, 4 - 10), [q, k], device)
    pairs = 1 + 2 + 3 + 4  # rows 0..5 see nothing, rows 6..9 see 1..4 keys
    assert r.total_flops == 2 * pairs * (8 + 8)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_where_mask_with_minus_inf_counts_only_the_kept_pairs(device):
    def fn(x):
        i = torch.arange(8, device=x.device)
        scores = torch.where(i[None, :] <= i[:, None], x @ x.transpose(-1, -2), float("-inf"))
        return scores.softmax(-1) @ x
    r = fc.trace_callable(fn, [torch.randn(2, 8, 4, device=device)], device)
    assert r.total_flops == 2 * 2 * 36 * (4 + 4)  # 36 = 8*9/2 kept pairs, b = 2


def test_an_sdpa_imported_by_name_into_the_reference_module_is_intercepted_too(tmp_path):
    ref = LOADER + '''
from torch.nn.functional import scaled_dot_product_attention
class Model(nn.Module):
    def forward(self, q):
        return scaled_dot_product_attention(q, q, q, is_causal=True)
'''
    od = write_workdir(tmp_path, ref, [{"inputs": [tensor("q", [1, 2, 16, 8])]}])
    r = fc.trace_case(od, 0)
    assert r.total_flops == 2 * 2 * 136 * (8 + 8)  # the causal count, not the dense math-path bmm count
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention  # patch undone


def test_an_additive_minus_inf_bias_masks_scores_like_masked_fill():
    def fn(x):
        bias = torch.full((6, 6), float("-inf")).triu(1)  # 0 on and below the diagonal
        return ((x @ x.transpose(-1, -2)) + bias).softmax(-1) @ x
    r = fc.trace_callable(fn, [torch.randn(1, 6, 2)], "cpu")
    assert r.total_flops == 2 * 21 * (2 + 2)  # 21 kept pairs


# ------------------------------------------------------------------------------------------------ blind spots

def test_a_custom_op_is_named_as_unseen_instead_of_silently_counting_zero():
    if not hasattr(torch.ops, "mfu_testdouble") or not hasattr(torch.ops.mfu_testdouble, "mystery_mm"):
        lib = torch.library.Library("mfu_testdouble", "DEF")  # test double: an opaque vendor op
        lib.define("mystery_mm(Tensor a, Tensor b) -> Tensor")
        lib.impl("mystery_mm", lambda a, b: a @ b, "CPU")
        lib.impl("mystery_mm", lambda a, b: a.new_empty(a.shape[0], b.shape[1]), "Meta")
        test_a_custom_op_is_named_as_unseen_instead_of_silently_counting_zero.lib = lib
    r = fc.trace_callable(lambda a, b: torch.ops.mfu_testdouble.mystery_mm(a, b),
                          [torch.randn(4, 8), torch.randn(8, 3)], "cpu")
    assert r.total_flops == 0
    assert r.unseen_ops == {"mfu_testdouble::mystery_mm": 1}


def test_vector_only_work_is_listed_as_vector_ops_not_as_unseen():
    r = fc.trace_callable(lambda x: F.layer_norm(x, [8]), [torch.randn(4, 8, device="meta")], "meta")
    assert r.total_flops == 0 and r.unseen_ops == {}
    assert "aten::native_layer_norm" in r.vector_ops


@pytest.mark.parametrize("name", ["aten::linalg_solve", "aten::_int_mm", "aten::mkldnn_convolution",
                                  "mylib::fused_attention"])
def test_matrix_like_or_foreign_ops_without_a_formula_are_classified_unseen(name):
    assert flop_dispatch.classify_uncounted(name) == "unseen"


@pytest.mark.parametrize("name", ["aten::add", "aten::_softmax", "aten::native_layer_norm", "aten::convert_element_type",
                                  "prims::convert_element_type", "aten::addcmul"])
def test_pointwise_and_reduction_ops_are_classified_vector(name):
    assert flop_dispatch.classify_uncounted(name) == "vector"


# ------------------------------------------------------------------------------------------------ torch_npu ops

FA_REF = LOADER + '''
class Model(nn.Module):
    def forward(self, query, key, value, head_num, input_layout, sparse_mode, prefix, qlen):
        import torch_npu
        kw = {"prefix": prefix} if prefix else {}
        if qlen:
            kw.update(actual_seq_qlen=qlen, actual_seq_kvlen=qlen)
        return torch_npu.npu_fusion_attention(query, key, value, head_num, input_layout, scale=0.1,
                                              sparse_mode=sparse_mode, **kw)[0]
'''


def _fa_case(layout, shape, heads, mode, prefix=None, qlen=None):
    return {"inputs": [tensor("query", shape, "float16"), tensor("key", shape, "float16"),
                       tensor("value", shape, "float16"), attr_("head_num", heads), attr_("input_layout", layout, "str"),
                       attr_("sparse_mode", mode), attr_("prefix", prefix, "list"), attr_("qlen", qlen, "list")]}


@needs_no_torch_npu
def test_npu_fusion_attention_is_counted_per_layout_and_sparse_mode_without_torch_npu(tmp_path):
    cases = [
        _fa_case("BSH", [2, 16, 64], 4, 0),     # B2 N4 D16 S16, no mask: 256 pairs
        _fa_case("SBH", [16, 2, 64], 4, 2),     # top-left causal: 136 pairs
        _fa_case("BSND", [2, 16, 4, 16], 4, 3),  # bottom-right causal, S_q == S_kv: 136
        _fa_case("BNSD", [2, 4, 16, 16], 4, 4),  # band with unlimited pre/next tokens: 256
        _fa_case("BNSD", [2, 4, 16, 16], 4, 5, prefix=[6, 6]),  # causal + first 6 keys: 136 + (5+4+3+2+1) = 151
        _fa_case("TND", [24, 4, 16], 4, 3, qlen=[10, 24]),  # varlen: sequences 10 and 14: 55 + 105 = 160 pairs
    ]
    od = write_workdir(tmp_path, FA_REF, cases)
    per_pair = 2 * 4 * (16 + 16)  # N * (D + D_v) * 2
    expected = [2 * 256 * per_pair, 2 * 136 * per_pair, 2 * 136 * per_pair, 2 * 256 * per_pair,
                2 * 151 * per_pair, 160 * per_pair]
    for i, want in enumerate(expected):
        r = fc.trace_case(od, i)
        assert r.status == "ok", r.reason
        assert r.total_flops == want, (i, r.total_flops, want)
        assert r.formula_flops == {"torch_npu.npu_fusion_attention": want}


@needs_no_torch_npu
def test_npu_ffn_and_fused_infer_attention_standins_count_their_documented_work(tmp_path):
    ref = LOADER + '''
class Model(nn.Module):
    def forward(self, x, w1, w2, q, k, v):
        import torch_npu
        y = torch_npu.npu_ffn(x, w1, w2, "relu")
        o, _ = torch_npu.npu_fused_infer_attention_score(q, k, v, num_heads=8, num_key_value_heads=2,
                                                         input_layout="BNSD", sparse_mode=3,
                                                         actual_seq_lengths_kv=[20, 32])
        return y, o
'''
    case = {"inputs": [tensor("x", [6, 32]), tensor("w1", [32, 64]), tensor("w2", [64, 32]),
                       tensor("q", [2, 8, 1, 16]), tensor("k", [2, 2, 32, 16]), tensor("v", [2, 2, 32, 16])]}
    od = write_workdir(tmp_path, ref, [case])
    r = fc.trace_case(od, 0)
    ffn = 2 * 6 * 32 * 64 + 2 * 6 * 64 * 32  # 49152
    attn = 2 * 8 * (20 + 32) * (16 + 16)  # decode: 1 query sees all kv (bottom-right), 8 query heads: 26624
    assert r.formula_flops == {"torch_npu.npu_ffn": ffn, "torch_npu.npu_fused_infer_attention_score": attn}
    assert r.total_flops == ffn + attn


@needs_no_torch_npu
def test_a_dispatcher_level_npu_op_is_counted_by_the_same_registry():
    if not hasattr(torch.ops, "npu") or not hasattr(torch.ops.npu, "npu_ffn"):
        lib = torch.library.Library("npu", "DEF")  # test double of the op a real torch_npu registers
        lib.define("npu_ffn(Tensor x, Tensor weight1, Tensor weight2, str activation) -> Tensor")
        lib.impl("npu_ffn", lambda x, w1, w2, a: torch.relu(x @ w1) @ w2, "CPU")
        lib.impl("npu_ffn", lambda x, w1, w2, a: x.new_empty(x.shape[0], w2.shape[1]), "Meta")
        test_a_dispatcher_level_npu_op_is_counted_by_the_same_registry.lib = lib
    x, w1, w2 = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 8)
    r = fc.trace_callable(lambda *a: torch.ops.npu.npu_ffn(*a), [x, w1, w2, "relu"], "cpu")
    assert r.total_flops == 2 * 4 * 8 * 16 * 2  # two GEMMs of 512 MACs: 2048
    assert r.unseen_ops == {}


# ------------------------------------------------------------------------------------------------ whole cases

def test_a_huge_case_is_traced_on_meta_without_allocating_it(tmp_path):
    ref = LOADER + '''
class Model(nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)
'''
    # 2 x [64, 16384, 16384] fp32 = 128 GiB of inputs: only meta tensors can hold them
    od = write_workdir(tmp_path, ref, [{"inputs": [tensor("a", [64, 16384, 16384]), tensor("b", [64, 16384, 16384])]}])
    r = fc.trace_case(od, 0)
    assert (r.status, r.device) == ("ok", "meta")
    assert r.total_flops == 2 * 64 * 16384 ** 3


def test_a_reference_that_needs_data_values_falls_back_to_the_cpu_within_the_caps(tmp_path):
    ref = LOADER + '''
class Model(nn.Module):
    def forward(self, x):
        n = int(x.abs().max().item() > -1) * x.shape[0]   # data-dependent: impossible on meta
        return x[:n] @ x[:n].T
'''
    od = write_workdir(tmp_path, ref, [{"inputs": [tensor("x", [1024, 1024])]}])
    r = fc.trace_case(od, 0)
    assert (r.status, r.device) == ("ok", "cpu")
    assert r.total_flops == 2 * 1024 ** 3
    assert [a["device"] for a in r.attempts] == ["meta", "cpu"]
    capped = fc.trace_case(od, 0, max_cpu_input_bytes=1000)
    assert capped.status == "skipped" and "CPU caps" in capped.reason


def test_a_case_the_reference_rejects_comes_back_rejected_with_the_reason(tmp_path):
    ref = LOADER + '''
class Model(nn.Module):
    def forward(self, x):
        raise ValueError("case rejected: odd sizes are not supported")
'''
    od = write_workdir(tmp_path, ref, [{"inputs": [tensor("x", [3, 3])]}])
    r = fc.trace_case(od, 0)
    assert (r.status, r.reason) == ("rejected", "odd sizes are not supported")


def test_variable_length_attention_is_counted_from_the_actual_lengths(tmp_path):
    ref = LOADER + '''
class Model(nn.Module):
    def forward(self, q, lengths):
        out = torch.zeros_like(q)
        for b, n in enumerate(lengths):         # each sequence at its own length, padding never attended
            x = q[b, :n]
            out[b, :n] = (x @ x.T).softmax(-1) @ x
        return out
'''
    od = write_workdir(tmp_path, ref, [{"inputs": [tensor("q", [2, 32, 8]), attr_("lengths", [32, 5], "list")]}])
    r = fc.trace_case(od, 0)
    assert r.total_flops == 2 * (32 * 32 + 5 * 5) * (8 + 8)  # 33568, not the padded 2 * 2 * 1024 * 16 = 65536
    assert os.path.basename(od.cases_path) == "Op_perf_cases.jsonl"


MASK_REF = '''
import json, math, os, torch, torch.nn as nn
def get_input_groups():
    out = []
    for line in open(os.path.splitext(__file__)[0] + ".json"):
        if line.strip():
            q, k, m = (e["shape"] for e in json.loads(line)["inputs"])
            mask = torch.zeros(m)
            for i in range(m[0]):  # a key padding mask: batch item i keeps its first keys
                mask[i, :, :, (m[-1] // (i + 2)):] = -1e9
            out.append([torch.randn(q), torch.randn(k), mask])
    return out
def get_init_inputs():
    return []
class Model(nn.Module):
    def forward(self, q, k, attn_mask):
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + attn_mask
        return s.softmax(-1) @ k
'''


def _mask_case(b, h, s, d):
    return {"inputs": [tensor("q", [b, h, s, d]), tensor("k", [b, h, s, d]), tensor("attn_mask", [b, 1, s, s])]}


def test_an_additive_float_mask_above_the_float_shadow_size_is_counted_from_its_values(tmp_path):
    # a new user's report: a float mask of more than 2^16 elements lost its values on the way to meta and was
    # counted dense (no flag) while smaller cases of the same operator counted the kept pairs
    od = write_workdir(tmp_path, MASK_REF, [_mask_case(2, 2, 256, 8)])  # mask 131072 elements, drawn for real
    r = fc.trace_case(od, 0)
    kept = 256 * (256 // 2) + 256 * (256 // 3)  # rows x kept keys, per batch item
    assert r.inputs_drawn == "timed" and not r.needs_values
    assert r.total_flops == 2 * 2 * kept * 2 * 8  # two matmuls over the kept pairs, 2 heads


def test_a_mask_whose_values_the_meta_build_dropped_is_flagged_never_silently_dense(tmp_path):
    # inputs above the real-draw cap (256 MiB) are built as shapes: the mask's values are gone. The meta count says
    # it needs them, so the case is traced again on the CPU where it fits (exact), else stays flagged - never a
    # silent dense count (a 256 MiB mask [1, 1, 8192, 8192] beside 4 MiB q and k)
    od = write_workdir(tmp_path, MASK_REF, [_mask_case(1, 2, 8192, 64)])
    kept = 8192 * (8192 // 2)
    r = fc.trace_case(od, 0)
    assert [a["device"] for a in r.attempts] == ["meta", "cpu"] and r.total_flops == 2 * 2 * kept * 2 * 64
    r = fc.trace_case(od, 0, max_cpu_input_bytes=1 << 20)  # no CPU retrace allowed: the meta count, flagged
    assert r.device == "meta" and r.inputs_drawn != "timed" and r.needs_values, (r.inputs_drawn, r.notes)
    assert any("mask without values" in n for n in r.notes)
    assert r.total_flops == 2 * 2 * 8192 * 8192 * 2 * 64  # dense
