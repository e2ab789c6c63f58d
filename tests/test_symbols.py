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
