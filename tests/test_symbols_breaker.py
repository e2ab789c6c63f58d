"""Symbol analysis on operators a tester wrote to break it (tests/fixtures/symbol_ops: reference model + case file
each): an FFN whose token count equals its hidden size, grouped-query attention without a layout attribute, a
batched matmul plus a bias. The scaled cases are checked by running each reference Model's forward on them with
torch on CPU - a check independent of the symbol code: an inconsistent scaling cannot multiply or broadcast."""
import importlib.util
import os

import pytest
import torch

from mfulib.core import cases
from mfulib.core import symbols
from mfulib.search import probe_axes

OPS = os.path.join(os.path.dirname(__file__), "fixtures", "symbol_ops")


def _load(op):
    path = os.path.join(OPS, f"{op}.json")
    cs = cases.read_case_file(path)
    infos = [cases.describe_case(c, i) for i, c in enumerate(cs)]
    groups = symbols.analyse(infos)
    symbols.unique_names(groups)
    chosen = dict(symbols.choose(groups))
    spec = importlib.util.spec_from_file_location(f"symbol_op_{op}", os.path.join(OPS, f"{op}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return cs, infos, groups, chosen, mod.Model()


def _run(model, case):
    args = [e["value"] if e.get("type") == "attr" else torch.randn(e["shape"]) for e in case["inputs"]]
    with torch.no_grad():
        return model(*args)


def _scaled_shapes_run(op):
    """Every case scaled x2 in each chosen symbol alone and in all together; each one runs the reference."""
    cs, infos, (g,), chosen, model = _load(op)
    shapes = []
    for c, info in zip(cs, infos):
        for factors in [{n: 2} for n in chosen] + [{n: 2 for n in chosen}]:
            new, refusals = symbols.scale_case(c, info, g, factors)
            assert not refusals
            _run(model, new)  # raises on a shape that does not multiply or broadcast
            shapes.append((info.case_id, tuple(factors), [e.get("shape") for e in new["inputs"]]))
    return g, chosen, shapes


def test_ffn_whose_tokens_equal_the_hidden_size_scales_the_tokens_only():
    # x [T, H] @ weight1 [H, F] @ weight2 [F, H], T = H in every case: x's last axis equals both the token symbol
    # and the weight symbol; the weight's wins, so only x's rows scale
    g, chosen, shapes = _scaled_shapes_run("FFNEq")
    assert list(chosen) == ["seq"]
    assert shapes[0] == (0, ("seq",), [[128, 64], [64, 128], [128, 64]])
    seq = g.symbol("seq")
    assert seq.positions == [("x", 0)] and seq.followers == []
    assert any("belongs to the weight's symbol" in e for e in seq.evidence)


def test_grouped_query_attention_with_equal_sequences_scales_the_sequence():
    # q [b, 8, s, 32], k/v [b, 2, s, 32]: the heads differ, the sequence is equal in q and k; no shape rule tells
    # the middle axes apart, the names do (torch's [batch, heads, seq, head_dim])
    g, chosen, shapes = _scaled_shapes_run("GQA")
    kinds = {s.positions[0]: s for s in g.symbols}
    assert kinds[("q", 2)].kind == "seq_q" and kinds[("q", 2)].positions == [("q", 2), ("k", 2), ("v", 2)]
    assert kinds[("q", 1)].kind == "heads" and kinds[("k", 1)].kind == "heads"
    assert {s.kind for s in g.symbols if s.name in chosen} == {"batch", "seq_q"}
    assert (0, ("seq_q",), [[1, 8, 128, 32], [1, 2, 128, 32], [1, 2, 128, 32], None]) in shapes


def test_batched_matmul_bias_follows_the_column_axis(tmp_path):
    # torch.bmm(A [b, m, k], B [b, k, n]) + bias [n]: bias is named like a weight, but it is an addend of the data
    # GEMM's output, so it follows n; the weights message says so rather than "no operand is named as a weight"
    g, chosen, shapes = _scaled_shapes_run("BmmBias")
    assert set(chosen) == {"batch", "seq", "gemm_k", "gemm_n"}
    assert g.symbol("gemm_n").followers == [("bias", 0)]
    assert (0, ("gemm_n",), [[2, 32, 48], [2, 48, 32], [32]]) in shapes
    w = probe_axes.weights_evidence([g], os.path.join(OPS, "BmmBias.py"))
    assert w["operands"] == [] and w["output_biases"] == ["bias"]
    assert "bias is named like a bias but is added to a data GEMM's output: it follows gemm_n" in w["why"]
    assert "no other case operand is named as a weight" in w["why"]
    # the FFN's weights are named as such
    _c, _i, groups, _ch, _m = _load("FFNEq")
    w = probe_axes.weights_evidence(groups, os.path.join(OPS, "FFNEq.py"))
    assert w["operands"] == ["weight1", "weight2"] and w["output_biases"] == []


def test_a_bias_of_a_weight_product_stays():
    # x [T, H] @ weight [H, F] + bias [F]: bias is the weight product's, its size is no data symbol: it stays
    line = lambda t: {"inputs": [{"name": n, "type": "tensor", "dtype": "float32", "shape": s}
                                 for n, s in (("x", [t, 64]), ("weight", [64, 96]), ("bias", [96]))]}
    lines = [line(32), line(48)]
    infos = [cases.describe_case(c, i) for i, c in enumerate(lines)]
    (g,) = symbols.analyse(infos)
    chosen = dict(symbols.choose([g]))
    new, _ = symbols.scale_case(lines[0], infos[0], g, {n: 2 for n in chosen})
    assert [e["shape"] for e in new["inputs"]] == [[64, 64], [64, 96], [96]]
    assert "bias" in g.weights and not g.biases


BREAKER_OPS = {  # operator: (the symbol kinds that scale, what else must hold)
    "BmmTransposedB": ({"batch", "seq", "gemm_k", "gemm_n"}, "a @ b.transpose(-1, -2): n is b's axis -2"),
    "BroadcastMatmul": ({"batch", "seq", "gemm_k", "gemm_n"}, "einsum('bmk,kn->bmn'): one y for every batch"),
    "LinearSquare": ({"seq"}, "F.linear(x [T, T], w [F, T]): x's last axis is the weight's"),
    "FFNProjNames": ({"seq"}, "x @ gate_proj / up_proj / down_proj: Hugging Face's names are weights"),
    "LayerNormEq": ({"batch", "seq"}, "x [b, s, s] with weight/bias [s]: x's last axis is the 1-D weights'"),
    "MoECombine": ({"batch", "seq"}, "topk_weights [T, k] is the router's output: data"),
    "ProbsV": ({"batch", "seq", "gemm_k", "gemm_n"}, "attn_weights @ v: attention probabilities are data"),
    "ExpertBmm": ({"seq"}, "x [E, C, H] @ weight [E, H, F]: E is the weights', it stays"),
    # a second breaker's operators
    "AttnBias": ({"batch", "seq_q"}, "attn_bias [b, h, s, s] is an attention input, not a weight"),
    "AttnMaskAlibi": ({"batch", "seq_q"}, "a mask [b, 1, s, s] beside ALiBi [1, h, s, s]: no product"),
    "Int8Scales": ({"seq", "gemm_k", "gemm_n"}, "a_scale [m, 1], b_scale [1, n]: no product, they follow m / n"),
    "ChainMatmul": ({"seq", "gemm_k", "gemm_n"}, "(x @ y) @ z: y's n is z's k, one symbol"),
    "LoRA": ({"batch", "seq", "gemm_k", "gemm_n"}, "(x @ lora_a) @ lora_b: the rank is one symbol"),
    "BmmBroadcastBatch": ({"batch", "seq", "gemm_k", "gemm_n"}, "[1, m, k] x [B, k, n]: A's 1 is a broadcast"),
    "GroupedMatmul": ({"seq"}, "group_list [E] sums to the tokens: it follows them"),
    "AttnHFNames": ({"batch", "seq_q"}, "query_states / key_states / value_states + attention_mask"),
    "Conv2dLayout": ({"batch", "seq"}, "layout NCHW: N batch, C channels stay, H scales (W is the last axis)"),
    "Conv1dNoLayout": ({"batch"}, "F.conv1d(x [N, C, L], weight [O, C, K]), no layout: C is the weight's, it stays"),
    "RoPE": ({"batch", "seq"}, "x [b, s, h, d] * cos [s, d]: a positional table's rows are the sequence"),
    "PagedDecode": ({"batch"}, "query [b, h, d] beside key_cache [blocks, block_size, h_kv, d]: axis 1 is heads"),
    "DecodeMHA": ({"batch", "seq_k"}, "query [b, h, d], key/value [b, L, h, d]: the key length L scales"),
    "DecodeGQA": ({"batch", "seq_k"}, "q [b, 8, d], k/v [b, 2, L, d]: k's axis 1 divides the heads, L scales"),
}


@pytest.mark.parametrize("op", sorted(BREAKER_OPS))
def test_operators_a_breaker_wrote_scale_only_to_shapes_their_reference_runs(op):
    # each chosen symbol x2 alone and all together, every case: the reference runs on each (no inconsistent
    # candidate for the probe to waste gate 2 on), and the kinds that scale are the ones a GEMM expert would pick
    kinds, _what = BREAKER_OPS[op]
    g, chosen, shapes = _scaled_shapes_run(op)
    assert {g.symbol(n).kind for n in chosen} == kinds, (op, [(s.name, s.kind, s.positions) for s in g.symbols])
    assert shapes


def test_the_breakers_weights_and_ties_are_named_with_their_evidence():
    _c, _i, (g,), _ch, _m = _load("FFNProjNames")
    assert sorted(g.weights) == ["down_proj", "gate_proj", "up_proj"]
    for op, data in (("MoECombine", "topk_weights"), ("ProbsV", "attn_weights")):
        _c, _i, (g,), _ch, _m = _load(op)
        assert data not in g.weights, op
    _c, _i, (g,), chosen, _m = _load("ExpertBmm")
    (tied,) = [s for s in g.symbols if ("x", 0) in s.positions]
    assert tied.weight and not tied.scaled and any("leading axis of the weight weight" in e for e in tied.evidence)
    _c, _i, (g,), chosen, _m = _load("LayerNormEq")
    seq = g.symbol("seq")
    assert seq.positions == [("x", 1)] and ("x", 2) not in seq.followers
    assert any("belongs to the weight's symbol" in e for e in seq.evidence)
    _c, _i, (g,), chosen, _m = _load("BmmTransposedB")
    assert g.symbol("gemm_n").positions == [("b", 1)] and g.symbol("gemm_k").followers == [("b", 2)]
    assert "transposed" in g.symbol("gemm_n").evidence[0]


def test_a_second_breakers_shared_dimensions_are_one_symbol_and_counts_follow_the_tokens():
    _c, _i, (g,), chosen, _m = _load("ChainMatmul")
    (mid,) = [sym for sym in g.symbols if ("y", 1) in sym.positions]
    assert ("z", 0) in mid.positions and mid.scaled  # one dimension in two products
    _c, _i, (g,), chosen, _m = _load("Int8Scales")
    assert ("a_scale", 0) in g.symbol("seq").positions and ("b_scale", 1) in g.symbol("gemm_n").followers
    _c, _i, (g,), chosen, _m = _load("AttnBias")
    assert "attn_bias" not in g.weights and ("attn_bias", 2) in g.symbol("seq_q").positions
    cs, infos, (g,), chosen, _m = _load("GroupedMatmul")
    new, refusals = symbols.scale_case(cs[0], infos[0], g, {"seq": 2})
    lists = [e["value"] for e in new["inputs"] if e["name"] == "group_list"]
    assert not refusals and lists == [[2 * v for v in cs[0]["inputs"][2]["value"]]]


def test_a_decode_query_keeps_its_heads_and_its_block_table_follows_the_batch():
    _c, _i, (g,), chosen, _m = _load("PagedDecode")
    (heads,) = [s for s in g.symbols if ("query", 1) in s.positions]
    assert heads.kind == "heads" and not heads.scaled and "decode" in heads.evidence[0]
    assert ("block_tables", 0) in g.symbol("batch").positions and ("context_lens", 0) in g.symbol("batch").followers
