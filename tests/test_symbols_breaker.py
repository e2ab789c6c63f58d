"""Symbol analysis on operators a tester wrote to break it (tests/fixtures/symbol_ops: reference model + case file
each): an FFN whose token count equals its hidden size, grouped-query attention without a layout attribute, a
batched matmul plus a bias. The scaled cases are checked by running each reference Model's forward on them with
torch on CPU - a check independent of the symbol code: an inconsistent scaling cannot multiply or broadcast."""
import importlib.util
import os

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
