"""Symbol analysis (mfulib/symbols.py) on the real case files of ../shared/data and on crafted followers."""
import json
import os

from mfulib import cases, symbols


def _groups(shared_dir, rel):
    path = os.path.join(shared_dir, "data", "npukernelbench", rel)
    cs = cases.read_case_file(path)
    infos = [cases.describe_case(c, i) for i, c in enumerate(cs)]
    groups = symbols.analyse(infos)
    symbols.unique_names(groups)
    chosen = symbols.choose(groups)
    return cs, infos, groups, dict(chosen)


def _by_kind(group):
    return {s.kind: s for s in group.symbols}


def test_fusion_attention_is_grouped_per_layout_with_layout_meanings(shared_dir):
    cs, infos, groups, chosen = _groups(shared_dir, "level4/3_FusionAttention.json")
    assert {g.layout for g in groups} == {"BSH", "SBH", "BSND", "BNSD"}
    assert sum(len(g.cases) for g in groups) == len(cs) == 50
    axes = {"BSH": (0, 1), "SBH": (1, 0), "BSND": (0, 1), "BNSD": (0, 2)}  # (batch axis, seq axis)
    for g in groups:
        k = _by_kind(g)
        b_ax, s_ax = axes[g.layout]
        assert k["batch"].positions == [("query", b_ax), ("key", b_ax), ("value", b_ax)]
        assert k["seq_q"].positions == [("query", s_ax), ("key", s_ax), ("value", s_ax)]
        assert any("self-attention" in e for e in k["seq_q"].evidence)
        assert k["seq_q"].scaled and k["batch"].scaled and not k["heads"].scaled
        # values are the cases' own
        for cid, v in zip(g.cases, k["seq_q"].values):
            assert infos[cid].tensor("query").shape[s_ax] == v
        # no symbol is made of a last axis (head_dim / hidden)
        assert all(ax != len(infos[g.cases[0]].tensor(t).shape) - 1 for s in g.symbols for t, ax in s.positions
                   if ax is not None)
    bsh = next(g for g in groups if g.layout == "BSH")
    heads = _by_kind(bsh)["heads"]
    assert heads.positions == [("head_num", None)] and ("query", 2) in heads.followers  # H = N x D follows
    bnsd = next(g for g in groups if g.layout == "BNSD")
    assert ("head_num", None) in _by_kind(bnsd)["heads"].followers
    assert all("@" in name for name in chosen)  # several groups: names say which group


def test_scaling_heads_in_bsh_scales_the_hidden_axis_and_head_num(shared_dir):
    cs, infos, groups, _ = _groups(shared_dir, "level4/3_FusionAttention.json")
    g = next(g for g in groups if g.layout == "BSH")
    cid = g.cases[0]
    new, refusals = symbols.scale_case(cs[cid], infos[cid], g, {"heads@BSH": 2})
    assert not refusals
    old_q, new_q = cs[cid]["inputs"][0], new["inputs"][0]
    assert new_q["shape"][2] == 2 * old_q["shape"][2] and new_q["shape"][:2] == old_q["shape"][:2]
    ent = {e["name"]: e for e in new["inputs"]}
    assert ent["head_num"]["value"] == 2 * infos[cid].attrs["head_num"]
    assert [e["name"] for e in new["inputs"]] == [e["name"] for e in cs[cid]["inputs"]]  # format kept


def test_ffn_scales_the_token_rows_only(shared_dir):
    cs, infos, groups, chosen = _groups(shared_dir, "level4/2_FFN.json")
    assert len(groups) == 1
    k = _by_kind(groups[0])
    assert k["seq"].positions == [("x", 0)] and k["seq"].scaled
    assert "row axis m" in k["seq"].evidence[0]
    assert list(chosen) == ["seq"]  # weights' K/N dims are hidden: never scaled by default
    assert all(s.kind == "hidden" for s in groups[0].symbols if s.name != "seq")
    new, _ = symbols.scale_case(cs[0], infos[0], groups[0], {"seq": 4})
    assert new["inputs"][0]["shape"] == [4 * infos[0].tensor("x").shape[0], infos[0].tensor("x").shape[1]]
    assert new["inputs"][1]["shape"] == cs[0]["inputs"][1]["shape"]


def test_batch_matmul_scales_batch_and_the_row_axis_m(shared_dir):
    cs, infos, groups, chosen = _groups(shared_dir, "level3/1_BatchMatmul.json")
    k = _by_kind(groups[0])
    assert k["batch"].positions == [("A", 0), ("B", 0)]
    assert k["seq"].positions == [("A", 1)]  # m of A[b, m, k]: scaling only b leaves it launch-bound
    assert k["hidden"].positions == [("B", 1)] and ("A", 2) in k["hidden"].followers
    assert set(chosen) == {"batch", "seq"}
    # in this file n equals m in every case, so by the rule B's last axis follows m (and the evidence says so)
    assert ("B", 2) in k["seq"].followers and any("B.2" in e for e in k["seq"].evidence)


def test_dependents_that_cannot_follow_are_refusals():
    line = {"inputs": [{"name": "q", "type": "tensor", "dtype": "float16", "shape": [2, 128, 64]},
                       {"name": "actual_seq_lengths", "type": "attr", "dtype": "list", "value": [100, 128, 90]}]}
    line2 = {"inputs": [{"name": "q", "type": "tensor", "dtype": "float16", "shape": [3, 64, 64], "data": [1]},
                        {"name": "actual_seq_lengths", "type": "attr", "dtype": "list", "value": [64, 60, 64]}]}
    infos = [cases.describe_case(line, 0), cases.describe_case(line2, 1)]
    (g,) = symbols.analyse(infos)
    k = _by_kind(g)
    new, refusals = symbols.scale_case(line, infos[0], g, {k["seq"].name: 2})
    assert new["inputs"][1]["value"] == [200, 256, 180] and not refusals  # lengths follow the sequence
    _new, refusals = symbols.scale_case(line, infos[0], g, {k["batch"].name: 2})
    assert refusals and "not one per batch" in refusals[0]  # 3 lengths, batch 2
    _new, refusals = symbols.scale_case(line2, infos[1], g, {k["batch"].name: 2})
    assert any("exact data" in r for r in refusals)
    assert json.dumps(line)  # the source line itself is not modified by scaling
    assert line["inputs"][0]["shape"] == [2, 128, 64]


def _crafted(lines):
    infos = [cases.describe_case(c, i) for i, c in enumerate(lines)]
    (g,) = symbols.analyse(infos)
    return g, {s.positions[0]: s for s in g.symbols}


def _attn_line(b, s, h, lengths):
    t = [{"name": n, "type": "tensor", "dtype": "float16", "shape": [b, s, h, 64]} for n in ("q", "k", "v")]
    return {"inputs": t + [{"name": "actual_seq_lengths", "type": "attr", "dtype": "list", "value": lengths},
                           {"name": "causal", "type": "attr", "dtype": "bool", "value": True}]}


def test_sequence_lengths_name_the_batch_and_seq_axes_of_4d_tensors_without_a_layout():
    # the bundled varlen attention: q/k/v [B, S, N, D], actual_seq_lengths one length per batch, no layout attribute
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "ops", "bench", "zoo",
                        "7_SparseVarlenAttention.json")
    infos = [cases.describe_case(c, i) for i, c in enumerate(cases.read_case_file(path))]
    groups = symbols.analyse(infos)
    symbols.unique_names(groups)
    chosen = dict(symbols.choose(groups))
    kinds = {s.positions[0]: s.kind for g in groups for s in g.symbols}
    assert kinds[("q", 0)] == "batch" and kinds[("q", 1)] == "seq"
    assert {s.kind for g in groups for s in g.symbols if s.name in chosen} == {"batch", "seq"}
    # crafted: the lengths fit axis 1 (padded) in every case, their count equals axis 0
    g, by = _crafted([_attn_line(2, 64, 4, [64, 37]), _attn_line(3, 48, 4, [48, 1, 20])])
    assert by[("q", 0)].kind == "batch" and "one length per batch" in by[("q", 0)].evidence[0]
    assert by[("q", 1)].kind == "seq" and "actual_seq_lengths" in by[("q", 1)].evidence[0]
    new, refusals = symbols.scale_case(_attn_line(2, 64, 4, [64, 37]), g.cases and cases.describe_case(
        _attn_line(2, 64, 4, [64, 37]), 0), g, {by[("q", 1)].name: 2})
    assert not refusals and new["inputs"][0]["shape"] == [2, 128, 4, 64] and new["inputs"][3]["value"] == [128, 74]


def test_sequence_length_rule_stays_silent_when_ambiguous():
    # axis 1 (64, 48) and axis 2 (64, 128) both bound the lengths and reach the longest in some case: no seq role
    g, by = _crafted([_attn_line(2, 64, 64, [64, 37]), _attn_line(3, 48, 128, [48, 1, 20])])
    assert by[("q", 0)].kind == "batch"  # the count rule is unambiguous (classes have distinct values)
    assert not any("actual_seq_lengths fits" in e for s in g.symbols for e in s.evidence)
    assert by[("q", 1)].kind == "other"  # no rule names it; the user picks with --scale-dims


def test_no_rule_never_outvotes_a_rule():
    # q's axis 0 is batch by position; k and v (later tensors) have no rule: the symbol stays batch
    lines = [{"inputs": [{"name": n, "type": "tensor", "dtype": "float16", "shape": [b, 8, s, 64]}
                         for n in ("q", "k", "v")]} for b, s in ((1, 64), (2, 48))]
    _g, by = _crafted(lines)
    assert by[("q", 0)].kind == "batch" and by[("q", 0)].positions == [("q", 0), ("k", 0), ("v", 0)]


def _qkv(qshape, kshape):
    return {"inputs": [{"name": "q", "type": "tensor", "dtype": "float16", "shape": qshape},
                       {"name": "k", "type": "tensor", "dtype": "float16", "shape": kshape},
                       {"name": "v", "type": "tensor", "dtype": "float16", "shape": kshape}]}


def test_grouped_query_attention_names_heads_and_by_elimination_the_sequences():
    # the bundled GQA: q [B, Nq, Sq, D], k/v [B, Nkv, Skv, D], no layout attribute; Nkv divides Nq, Skv does not
    # divide Sq in some case -> axis 1 heads, axis 2 the sequences (seq_q for q, seq_k for k/v), both scaled
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "ops", "bench", "zoo", "6_GQAAttention.json")
    infos = [cases.describe_case(c, i) for i, c in enumerate(cases.read_case_file(path))]
    (g,) = symbols.analyse(infos)
    chosen = dict(symbols.choose([g]))
    by = {s.positions[0]: s for s in g.symbols}
    assert by[("q", 1)].kind == "heads" and by[("k", 1)].kind == "heads"
    assert by[("q", 2)].kind == "seq_q" and by[("k", 2)].kind == "seq_k"
    assert {by[("q", 0)].name, by[("q", 2)].name, by[("k", 2)].name} == set(chosen)
    # [B, S, N, D] the other way round: the same rule finds heads on axis 2
    g, by = _crafted([_qkv([2, 64, 8, 64], [2, 64, 2, 64]), _qkv([1, 48, 4, 64], [1, 80, 2, 64])])
    assert by[("q", 2)].kind == "heads" and by[("q", 1)].kind == "seq_q" and by[("k", 1)].kind == "seq_k"


def test_attention_rule_stays_silent_when_heads_and_sequence_cannot_be_told_apart():
    # q [B, 8, 128, D] with k [B, 8, 64, D] in every case: a cross attention, or a grouped one? neither axis is
    # proven no-heads, so no middle axis gets a kind from this rule (the user picks with --scale-dims)
    _g, by = _crafted([_qkv([2, 8, 128, 64], [2, 8, 64, 64]), _qkv([1, 8, 256, 64], [1, 8, 128, 64])])
    assert by[("q", 0)].kind == "batch"
    assert by[("q", 1)].kind == "other" and by[("q", 2)].kind == "other"
