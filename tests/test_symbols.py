"""Symbol analysis (mfulib/core/symbols.py) on the real case files of ../shared/data and on crafted followers."""
import json
import os

from mfulib.core import cases
from mfulib.core import symbols


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


def _analyse_file(path, scale_dims=None):
    cs = cases.read_case_file(path)
    infos = [cases.describe_case(c, i) for i, c in enumerate(cs)]
    groups = symbols.analyse(infos)
    symbols.unique_names(groups)
    return cs, infos, groups, dict(symbols.choose(groups, scale_dims))


ZOO = os.path.join(os.path.dirname(__file__), "..", "examples", "ops", "bench", "zoo")


def test_batch_matmul_scales_batch_m_k_and_n(shared_dir):
    # two data operands A [b, m, k] @ B [b, k, n]: m, k and n all set the GEMM's arithmetic intensity, so all scale;
    # B's last axis (n) is a symbol of its own, and A's last axis follows k only. The real file has n = m in every
    # case: m and n still stay two symbols (a batch-only, m-only, k-only or n-only candidate stays possible)
    for path in (os.path.join(shared_dir, "data", "npukernelbench", "level3", "1_BatchMatmul.json"),
                 os.path.join(ZOO, "1_BatchMatmul.json")):
        cs, infos, groups, chosen = _analyse_file(path)
        (g,) = groups
        k = _by_kind(g)
        assert k["batch"].positions == [("A", 0), ("B", 0)]
        assert k["seq"].positions == [("A", 1)] and "row axis m" in k["seq"].evidence[0]
        assert k["gemm_k"].positions == [("B", 1)] and k["gemm_k"].followers == [("A", 2)]
        assert k["gemm_n"].positions == [("B", 2)] and "two data operands" in k["gemm_n"].evidence[0]
        assert ("B", 2) not in k["seq"].followers and ("A", 2) not in k["seq"].followers
        assert set(chosen) == {"batch", "seq", "gemm_k", "gemm_n"} and not any(s.weight for s in g.symbols)
        # scaling k alone keeps the product consistent: A's last axis and B's axis 1 double, nothing else
        a, b = infos[0].tensor("A").shape, infos[0].tensor("B").shape
        new, refusals = symbols.scale_case(cs[0], infos[0], g, {"gemm_k": 2})
        assert not refusals and new["inputs"][0]["shape"] == [a[0], a[1], 2 * a[2]]
        assert new["inputs"][1]["shape"] == [b[0], 2 * b[1], b[2]]
        new, _ = symbols.scale_case(cs[0], infos[0], g, {"gemm_n": 4})
        assert new["inputs"][0]["shape"] == list(a) and new["inputs"][1]["shape"] == [b[0], b[1], 4 * b[2]]


def test_ffn_weights_are_never_scaled(shared_dir):
    # x [T, K1] @ weight1 [K1, N1] @ weight2 [K2, N2]: weight operands (by name); only the token rows scale, and no
    # weight axis follows a data symbol - not even with --scale-dims naming the weights' kind
    for path in (os.path.join(shared_dir, "data", "npukernelbench", "level4", "2_FFN.json"),
                 os.path.join(ZOO, "4_FFN.json")):
        cs, infos, groups, chosen = _analyse_file(path)
        (g,) = groups
        assert list(chosen) == ["seq"]
        weights = [s for s in g.symbols if s.weight]
        assert {t for s in weights for t, _a in s.positions} == {"weight1", "weight2"}
        assert all(any("named as a weight" in e for e in s.evidence) for s in weights)
        assert not any(t.startswith("weight") for s in g.symbols if not s.weight for t, _a in s.followers)
        assert "gemm_k" not in {s.kind for s in g.symbols}  # x @ weight1 is no batched matmul of two data operands
        new, _ = symbols.scale_case(cs[0], infos[0], g, {"seq": 4})
        assert new["inputs"][0]["shape"] == [4 * infos[0].tensor("x").shape[0], infos[0].tensor("x").shape[1]]
        assert [e["shape"] for e in new["inputs"][1:3]] == [e["shape"] for e in cs[0]["inputs"][1:3]]
        _c, _i, _g, chosen = _analyse_file(path, ["seq", "hidden"])
        assert list(chosen) == ["seq"]  # hidden is a weight's axis here: never chosen


def test_a_one_case_ffn_whose_rows_equal_the_hidden_size_keeps_its_weights(tmp_path):
    # T = K1 = N1 in the only case: by equality alone x's rows and the weights' axes would be one symbol
    line = {"inputs": [_t("x", [256, 256]), _t("weight1", [256, 256]), _t("weight2", [256, 256])]}
    infos = [cases.describe_case(line, 0)]
    (g,) = symbols.analyse(infos)
    chosen = dict(symbols.choose([g]))
    new, _ = symbols.scale_case(line, infos[0], g, {n: 2 for n in chosen})
    assert [e["shape"] for e in new["inputs"]] == [[512, 256], [256, 256], [256, 256]]


def test_factors_label_shows_each_symbol_and_its_factor():
    assert symbols.factors_label({"batch": 4, "seq": 2}) == "batch x4,seq x2"
    assert symbols.factors_label({"batch": 4, "seq": 1}, sep="") == "batchx4"
    assert symbols.factors_label({}) == "x1"


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


def _t(name, shape):
    return {"name": name, "type": "tensor", "dtype": "float16", "shape": shape}


def _a(name, value):
    return {"name": name, "type": "attr", "dtype": "list", "value": value}


def test_packed_tokens_without_a_layout_are_the_sequence_and_no_other_axis_is():
    # q/k/v [T, N, D] with the lengths summing to T: axis 0 is the sequence (packed), so the rank-3 position rule's
    # "axis 1 is seq" is wrong there (it is heads) and must not scale by default
    lines = [{"inputs": [_t(n, [t, 8, 64]) for n in ("q", "k", "v")] + [_a("actual_seq_lengths", ls)]}
             for t, ls in ((100, [60, 40]), (300, [100, 100, 100]), (50, [50]))]
    g, by = _crafted(lines)
    assert by[("q", 0)].kind == "seq" and by[("q", 1)].kind == "other"
    assert [name for name, _why in symbols.choose([g])] == [by[("q", 0)].name]  # heads never scale by default
    # heads equal to the number of sequences in every case: packed tokens have no batch axis, so no batch role
    lines = [{"inputs": [_t("q", [t, n, 64]), _a("actual_seq_lengths", ls)]}
             for t, n, ls in ((100, 2, [60, 40]), (300, 3, [100, 100, 100]))]
    g, by = _crafted(lines)
    assert by[("q", 0)].kind == "seq" and by[("q", 1)].kind == "other"
    new, refusals = symbols.scale_case(lines[0], cases.describe_case(lines[0], 0), g, {by[("q", 0)].name: 2})
    assert not refusals and new["inputs"][0]["shape"] == [200, 2, 64] and new["inputs"][1]["value"] == [120, 80]


def _cross(b, sq, skv, lq, lk, layout=None):
    t = [_t("q", [b, sq, 4, 64]), _t("k", [b, skv, 4, 64]), _t("v", [b, skv, 4, 64])]
    extra = [] if layout is None else [{"name": "input_layout", "type": "attr", "dtype": "str", "value": layout}]
    return {"inputs": t + [_a("actual_seq_lengths", lq), _a("actual_seq_lengths_kv", lk)] + extra}


def test_each_length_list_follows_the_sequence_it_fits_not_any_scaled_one():
    # cross attention BSND: scaling only seq_k must leave the query's lengths within the query's unscaled S
    lines = [_cross(2, 64, 128, [64, 30], [128, 100], "BSND"), _cross(3, 32, 256, [32, 1, 20], [256, 200, 7], "BSND")]
    infos = [cases.describe_case(c, i) for i, c in enumerate(lines)]
    (g,) = symbols.analyse(infos)
    new, refusals = symbols.scale_case(lines[0], infos[0], g, {"seq_k": 2})
    vals = {e["name"]: e.get("value", e.get("shape")) for e in new["inputs"]}
    assert not refusals and vals["q"][1] == 64 and vals["k"][1] == 256
    assert vals["actual_seq_lengths"] == [64, 30] and vals["actual_seq_lengths_kv"] == [256, 200]
    new, _ = symbols.scale_case(lines[0], infos[0], g, {"seq_q": 4, "seq_k": 2})
    vals = {e["name"]: e.get("value") for e in new["inputs"]}
    assert vals["actual_seq_lengths"] == [256, 120] and vals["actual_seq_lengths_kv"] == [256, 200]
    # no layout; the query's lengths fit both S_q (no role: ambiguous) and S_kv (seq, by the kv lengths): the
    # default scales S_kv and batch, and the query's lengths must stay <= S_q
    lines = [_cross(2, 64, 64, [64, 30], [64, 60]), _cross(3, 32, 256, [32, 1, 20], [32, 200, 7])]
    g, by = _crafted(lines)
    assert by[("k", 1)].kind == "seq" and by[("q", 1)].kind == "other"
    new, refusals = symbols.scale_case(lines[0], cases.describe_case(lines[0], 0), g,
                                       {by[("k", 1)].name: 2, by[("q", 0)].name: 2})
    vals = {e["name"]: e.get("value", e.get("shape")) for e in new["inputs"]}
    assert not refusals and vals["q"][:2] == [4, 64] and vals["k"][:2] == [4, 128]
    assert vals["actual_seq_lengths"] == [64, 30, 64, 30] and max(vals["actual_seq_lengths"]) <= vals["q"][1]
    assert vals["actual_seq_lengths_kv"] == [128, 120, 128, 120]


def test_lengths_that_are_not_integers_are_a_refusal_not_a_crash():
    # [B, S, H] by position; a sequence-length list with None / a nested list / a bool / a float in it
    for bad in (None, [64], True, 37.5, "37"):
        lines = [{"inputs": [_t("x", [2, 64, 128]), _a("actual_seq_lengths", [64, bad])]},
                 {"inputs": [_t("x", [3, 48, 128]), _a("actual_seq_lengths", [48, 1, 20])]}]
        g, by = _crafted(lines)
        new, refusals = symbols.scale_case(lines[0], cases.describe_case(lines[0], 0), g, {by[("x", 1)].name: 2})
        assert refusals and "not an integer length" in refusals[0], (bad, refusals)
        assert new["inputs"][1]["value"] == [64, bad]  # left as written; gate 2 reports the refusal
        new, refusals = symbols.scale_case(lines[0], cases.describe_case(lines[0], 0), g, {by[("x", 0)].name: 2})
        assert not refusals and new["inputs"][1]["value"] == [64, bad, 64, bad]  # tiling needs no arithmetic


def test_a_constant_axis_equal_to_batch_by_chance_does_not_scale_with_it():
    # MQA decode, batch 1 in every case and one key/value head: k's and v's heads axis equals the batch (1) in every
    # case, so it joins the batch class; with "no rule never outvotes a rule" it became batch and scaled (x16: 16 key
    # heads for 8 query heads). A constant class splits off such positions (same rank, another axis).
    lines = [{"inputs": [_t("q", [1, 8, s, 64]), _t("k", [1, 1, s, 64]), _t("v", [1, 1, s, 64]),
                         _a("actual_seq_lengths", [s - 3])]} for s in (64, 128, 256)]
    g, by = _crafted(lines)
    assert by[("q", 0)].kind == "batch" and by[("q", 0)].positions == [("q", 0), ("k", 0), ("v", 0)]
    assert by[("k", 1)].kind == "other" and by[("k", 1)].positions == [("k", 1), ("v", 1)]
    assert "only by chance" in by[("k", 1)].evidence[0]
    new, refusals = symbols.scale_case(lines[0], cases.describe_case(lines[0], 0), g, {by[("q", 0)].name: 16})
    assert not refusals and [e.get("shape") for e in new["inputs"][:3]] == [[16, 8, 64, 64], [16, 1, 64, 64],
                                                                            [16, 1, 64, 64]]
    assert new["inputs"][3]["value"] == [61] * 16
    # batch equal to heads (8) in every case, q/k/v [B, N, S, D]: the heads axes do not scale with the batch
    lines = [{"inputs": [_t(n, [8, 8, s, 64]) for n in ("q", "k", "v")]} for s in (64, 128)]
    _g, by = _crafted(lines)
    assert by[("q", 0)].positions == [("q", 0), ("k", 0), ("v", 0)] and by[("q", 1)].kind == "heads"
    assert by[("q", 1)].name not in dict(symbols.choose([_g]))
    assert by[("q", 2)].kind == "seq_q"  # the names (torch's [batch, heads, seq, head_dim]) name the sequence


def test_a_lengths_tensor_follows_a_constant_batch():
    # actual_seq_lengths as a 1-D tensor [B] with exact data, batch 2 in every case: scaling the batch left it at
    # [2] beside q [4, ...] with no refusal (a constant last axis follows nothing); now it follows, and its data
    # is a refusal
    def line(s, data):
        lens = {"name": "actual_seq_lengths", "type": "tensor", "dtype": "int64", "shape": [2]}
        if data:
            lens["data"] = [s, s - 1]
        return {"inputs": [_t(n, [2, s, 4, 64]) for n in ("q", "k", "v")] + [lens]}
    for data in (True, False):
        lines = [line(64, data), line(128, data)]
        g, by = _crafted(lines)
        assert ("actual_seq_lengths", 0) in by[("q", 0)].followers
        new, refusals = symbols.scale_case(lines[0], cases.describe_case(lines[0], 0), g, {by[("q", 0)].name: 2})
        assert new["inputs"][3]["shape"] == [4] and new["inputs"][0]["shape"][0] == 4
        assert bool(refusals) == data and (not data or "exact data" in refusals[0])


def test_lengths_that_no_axis_bounds_stay_and_bounded_ones_follow_their_axis():
    # paged attention: the block table (32 blocks of 16 = 512 tokens) bounds the lengths, no axis does; scaling
    # doubled them to 1000 > 512. Lengths below their axis in every case (never equal) still follow it.
    def paged(b, n, nb, mb, lens):
        return {"inputs": [_t("q", [b, n, 128]), _t("k_cache", [nb, 16, n, 128]), _t("v_cache", [nb, 16, n, 128]),
                           _t("block_table", [b, mb]), _a("seq_lens", lens)]}
    lines = [paged(2, 8, 64, 32, [500, 300]), paged(4, 16, 128, 64, [1000, 20, 3, 999])]
    g, by = _crafted(lines)
    new, refusals = symbols.scale_case(lines[0], cases.describe_case(lines[0], 0), g,
                                       {s.name: 2 for s in g.symbols if s.kind in ("batch", "seq")})
    assert not refusals and new["inputs"][0]["shape"][0] == 4 and new["inputs"][4]["value"] == [500, 300] * 2
    lines = [{"inputs": [_t("x", [b, s, 128]), _a("actual_seq_lengths", ls)]}
             for b, s, ls in ((2, 64, [50, 30]), (3, 48, [40, 1, 20]))]
    g, by = _crafted(lines)
    new, refusals = symbols.scale_case(lines[0], cases.describe_case(lines[0], 0), g, {by[("x", 1)].name: 2})
    assert not refusals and new["inputs"][0]["shape"] == [2, 128, 128] and new["inputs"][1]["value"] == [100, 60]


def test_key_lengths_name_the_key_sequence_and_leave_the_query_sequence_alone():
    # rank-3 cross attention q [B, S_q, H], k/v [B, S_kv, H] with only the key's lengths: S_kv is seq by the
    # lengths (it was "other", and the lengths doubled past it), and q's S_q stays seq by position
    lines = [{"inputs": [_t("q", [b, sq, 128]), _t("k", [b, skv, 128]), _t("v", [b, skv, 128]),
                         _a("actual_seq_lengths_kv", lk)]}
             for b, sq, skv, lk in ((2, 16, 64, [64, 30]), (3, 32, 128, [128, 1, 20]))]
    g, by = _crafted(lines)
    assert by[("q", 1)].kind == "seq" and by[("k", 1)].kind == "seq" and by[("q", 0)].kind == "batch"
    new, refusals = symbols.scale_case(lines[0], cases.describe_case(lines[0], 0), g,
                                       {by[("q", 1)].name: 2, by[("k", 1)].name: 2})
    assert not refusals and new["inputs"][0]["shape"] == [2, 32, 128] and new["inputs"][1]["shape"] == [2, 128, 128]
    assert new["inputs"][3]["value"] == [128, 60]
    new, refusals = symbols.scale_case(lines[0], cases.describe_case(lines[0], 0), g, {by[("q", 1)].name: 2})
    assert not refusals and new["inputs"][3]["value"] == [64, 30]  # S_kv unscaled: its lengths stay


def test_lengths_whose_sum_equals_another_axis_by_chance_stay_within_their_own():
    # one case: the key's lengths sum to 64 = S_q and their longest is 16 = S_kv: scaling S_q (and the batch) but
    # not S_kv doubled the key's lengths past S_kv (16)
    line = {"inputs": [_t("q", [8, 64, 1, 64]), _t("k", [8, 16, 1, 64]), _t("v", [8, 16, 1, 64]),
                       _a("actual_seq_lengths", [35, 24, 64, 36, 45, 4, 42, 46]),
                       _a("actual_seq_lengths_kv", [1, 5, 16, 16, 8, 14, 3, 1])]}
    g, by = _crafted([line])
    assert by[("q", 1)].kind == "seq" and by[("k", 1)] is not by[("q", 1)]
    new, refusals = symbols.scale_case(line, cases.describe_case(line, 0), g,
                                       {by[("q", 1)].name: 2, by[("q", 0)].name: 2})
    vals = {e["name"]: e.get("value", e.get("shape")) for e in new["inputs"]}
    assert not refusals and vals["q"][:2] == [16, 128] and vals["k"][:2] == [16, 16]
    assert vals["actual_seq_lengths"] == [2 * x for x in [35, 24, 64, 36, 45, 4, 42, 46]] * 2
    assert vals["actual_seq_lengths_kv"] == [1, 5, 16, 16, 8, 14, 3, 1] * 2


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


def test_names_decide_where_shapes_cannot_tell_heads_and_sequence_apart():
    # q [B, 8, 128, D] with k [B, 8, 64, D] in every case: a cross attention, or a grouped one? the shapes do not
    # say; the names q/k/v do, by torch's SDPA layout [batch, heads, seq, head_dim]: axis 1 heads, axis 2 the
    # query / key sequences, each its own symbol
    _g, by = _crafted([_qkv([2, 8, 128, 64], [2, 8, 64, 64]), _qkv([1, 8, 256, 64], [1, 8, 128, 64])])
    assert by[("q", 0)].kind == "batch"
    assert by[("q", 1)].kind == "heads" and by[("q", 2)].kind == "seq_q" and by[("k", 2)].kind == "seq_k"
    assert "scaled_dot_product_attention" in by[("q", 2)].evidence[0]
    # tensors not named as attention operands: no attention rule; their shapes read as a product with the second
    # transposed (a @ bᵀ, the last axes equal, the axes -2 not): m, k and n, b's and c's key axis one n, and every
    # last axis that is a product's k follows it, constant or not (one ladder scales a consistent case)
    line = lambda qs, ks: {"inputs": [_t("a", qs), _t("b", ks), _t("c", ks)]}
    g, by = _crafted([line([2, 8, 128, 64], [2, 8, 64, 64]), line([1, 8, 256, 64], [1, 8, 128, 64])])
    assert by[("a", 1)].kind == "batch" and by[("a", 2)].kind == "seq" and "transposed" in by[("a", 2)].evidence[0]
    assert by[("b", 2)].positions == [("b", 2), ("c", 2)] and by[("b", 2)].kind == "gemm_n"
    assert by[("a", 3)].kind == "gemm_k" and by[("a", 3)].followers == [("b", 3), ("c", 3)]


def test_key_heads_equal_to_the_batch_or_to_a_decode_query_length_do_not_scale_with_them():
    # k [B, S, Nkv, D] with Nkv = B in every case (1, 1, 2): one tensor holds one batch axis, so k's axis 2 is no
    # batch; "no rule never outvotes a rule" made it batch, and batch x2 gave 2 key heads beside 1 query head
    def line(q, k, lens):
        return {"inputs": [_t("q", q), _t("k", k), _t("v", k), _a("actual_seq_lengths", lens)]}
    lines = [line([1, 64, 8, 64], [1, 64, 1, 64], [64]), line([1, 256, 1, 64], [1, 256, 1, 64], [256]),
             line([2, 256, 16, 64], [2, 256, 2, 64], [256, 71])]
    g, by = _crafted(lines)
    assert by[("q", 0)].positions == [("q", 0), ("k", 0), ("v", 0)] and by[("k", 2)].kind == "heads"
    # decode MQA, q [B, 1, Nq, D], k [B, S, 1, D]: S_q = 1 = N_kv in every case; scaling the query's sequence
    # doubled the key heads too
    lines = [{"inputs": [_t("q", [8, 1, nq, 64]), _t("k", [8, s, 1, 64]), _t("v", [8, s, 1, 64]),
                         _a("actual_seq_lengths_kv", lens)]}
             for nq, s, lens in ((4, 128, [13, 99, 128, 95, 41, 104, 62, 126]),
                                 (1, 16, [9, 13, 16, 2, 13, 15, 10, 12]))]
    g, by = _crafted(lines)
    assert by[("q", 1)].positions == [("q", 1)] and by[("k", 2)].kind == "heads"
    new, refusals = symbols.scale_case(lines[0], cases.describe_case(lines[0], 0), g,
                                       {n: 2 for n, _why in symbols.choose([g])})
    assert not refusals and new["inputs"][1]["shape"][2] == 1 and new["inputs"][0]["shape"][2] == 4


def test_query_lengths_stay_within_a_query_axis_that_elimination_named_heads():
    # one case, q [1, 1, 16, D] (decode), k [1, 16, 16, D]: S_kv = 16 = N merge, and elimination names q's axis 1
    # (S_q = 1) heads; the query's lengths [1] fit only that axis, and doubled past it when only sequence axes counted
    line = {"inputs": [_t("q", [1, 1, 16, 64]), _t("k", [1, 16, 16, 64]), _t("v", [1, 16, 16, 64]),
                       _a("actual_seq_lengths", [1]), _a("actual_seq_lengths_kv", [16])]}
    g, _by = _crafted([line])
    new, refusals = symbols.scale_case(line, cases.describe_case(line, 0), g, {n: 2 for n, _w in symbols.choose([g])})
    vals = {e["name"]: e.get("value", e.get("shape")) for e in new["inputs"]}
    assert not refusals and max(vals["actual_seq_lengths"]) <= vals["q"][1]
    assert max(vals["actual_seq_lengths_kv"]) <= vals["k"][1] and len(vals["actual_seq_lengths"]) == vals["q"][0]
