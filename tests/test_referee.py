"""The brute-force referee's pure parts (bench/bench_search_vs_bruteforce.py, bench/referee_bruteforce.py): the
subsets and factor grids it enumerates, which axes it scales, the dominance rule, the pass rule, and the
bookkeeping that lets a call stop between parts and a later call (or a fresh machine) go on. Expected values are
counted by hand here."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import bench_search_vs_bruteforce as ref  # noqa: E402
import referee_bruteforce as bf  # noqa: E402


def test_every_non_empty_subset_and_every_power_of_two_combination_once():
    assert bf.axis_subsets(["b", "s", "k"]) == [("b",), ("s",), ("k",), ("b", "s"), ("b", "k"), ("s", "k"),
                                                ("b", "s", "k")]
    assert bf.powers_of_two(16) == [2, 4, 8, 16] and bf.powers_of_two(3) == [2] and bf.powers_of_two(1) == []
    sets = bf.factor_sets(["b", "s"], 4)
    assert sets == [{"b": 2}, {"b": 4}, {"s": 2}, {"s": 4},
                    {"b": 2, "s": 2}, {"b": 2, "s": 4}, {"b": 4, "s": 2}, {"b": 4, "s": 4}]
    # 3 axes up to x16: 3 singles x 4 + 3 pairs x 16 + 1 triple x 64 = 124, no duplicate
    big = bf.factor_sets(["b", "s", "k"], 16)
    assert len(big) == 124 and len({json.dumps(f, sort_keys=True) for f in big}) == 124


def _case(*tensors):
    return {"inputs": [{"name": n, "type": "tensor", "dtype": "float16", "shape": s} for n, s in tensors]}


def _axes(cases):
    from mfulib.core.cases import describe_case
    from mfulib.core.symbols import analyse
    (group,) = analyse([describe_case(c, i) for i, c in enumerate(cases)])
    return bf.referee_axes(group)


def test_axes_batch_and_sequence_and_k_of_a_batched_matmul_but_never_a_weight():
    bmm = [_case(("A", [2, 64, 32]), ("B", [2, 32, 16])), _case(("A", [4, 128, 96]), ("B", [4, 96, 128]))]
    # b, m, k (B's axis -2; A's last axis follows it) and n (B's last axis): a matmul of two data operands
    assert sorted(_axes(bmm)) == ["batch", "gemm_k", "gemm_n", "seq"]
    ffn = [_case(("x", [64, 256]), ("weight1", [256, 512]), ("weight2", [512, 256])),
           _case(("x", [96, 384]), ("weight1", [384, 768]), ("weight2", [768, 384]))]
    assert _axes(ffn) == ["seq"]  # the hidden sizes sit on the weights
    assert bf.is_weight("weight1") and bf.is_weight("w2") and bf.is_weight("ffn_weight") and not bf.is_weight("x")


def test_enumerated_points_scale_the_case_and_refuse_inputs_over_the_limit():
    cases = [_case(("A", [2, 64, 32]), ("B", [2, 32, 16])), _case(("A", [4, 128, 96]), ("B", [4, 96, 128]))]
    # case 1 inputs: 2 * (4*128*96) * 2 B = 196608 B; the limit lets x1 and one doubling through, not x4
    pts = bf.enumerate_points(cases, [1], max_scale=2, max_input_bytes=400_000)
    assert len(pts) == 1 + 15 and pts[0]["factors"] == {} and pts[0]["case"] == cases[1]  # 4 axes: 15 subsets
    seq2 = next(p for p in pts if p["factors"] == {"seq": 2})
    assert [e["shape"] for e in seq2["case"]["inputs"]] == [[4, 256, 96], [4, 96, 128]]
    k2 = next(p for p in pts if p["factors"] == {"gemm_k": 2})
    assert [e["shape"] for e in k2["case"]["inputs"]] == [[4, 128, 192], [4, 192, 128]]
    n2 = next(p for p in pts if p["factors"] == {"gemm_n": 2})
    assert [e["shape"] for e in n2["case"]["inputs"]] == [[4, 128, 96], [4, 96, 256]]

    def hand_bytes(f):  # A = b*m*k, B = b*k*n elements of 2 B (fp16), each factor on the axes it sits on
        b, m, k, n = (f.get(a, 1) for a in ("batch", "seq", "gemm_k", "gemm_n"))
        return 2 * (4 * b * 128 * m * 96 * k + 4 * b * 96 * k * 128 * n)
    for p in pts:
        assert p["status"] == (None if hand_bytes(p["factors"]) <= 400_000 else "bytes"), p["factors"]
    assert sum(p["status"] is None for p in pts) == 1 + 4 + 1  # x1, each axis alone, and seq x2 with n x2


def test_dominance_only_from_a_smaller_failed_point_of_the_same_shape_family():
    failed = [{"b": 4}, {"s": 2, "k": 2}]
    assert bf.dominated({"b": 8}, failed) == {"b": 4}
    assert bf.dominated({"b": 4, "s": 2}, failed) == {"b": 4}
    assert bf.dominated({"s": 2, "k": 4}, failed) == {"s": 2, "k": 2}
    assert bf.dominated({"b": 2, "s": 8}, failed) is None and bf.dominated({"k": 8}, failed) is None


def test_pass_rule_ratio_or_spread_and_cost():
    # ratio 0.5/0.51 = 0.980 >= 0.97; cost 20/100 = 0.2 <= 0.25
    j = ref.judge([0.50, 0.50, 0.50], [0.51, 0.51, 0.51], 20.0, 100.0)
    assert abs(j["ratio"] - 0.5 / 0.51) < 1e-12 and j["limit_ok"] and j["cost_ok"] and j["pass"]
    # ratio 0.45/0.50 = 0.9 but the gap 0.05 is within the spreads 0.04 + 0.02
    j = ref.judge([0.41, 0.45, 0.45], [0.49, 0.50, 0.51], 30.0, 100.0)
    assert abs(j["combined_spread"] - 0.06) < 1e-12 and j["limit_ok"] and not j["cost_ok"] and j["pass"] is False
    # ratio 0.9, gap 0.05 beyond spreads 0.01 + 0.01
    j = ref.judge([0.445, 0.45, 0.455], [0.495, 0.50, 0.505], 10.0, 100.0)
    assert j["limit_ok"] is False and j["pass"] is False
    assert ref.judge([], [0.5], 1.0, 2.0)["limit_ok"] is None and ref.judge([0.5], [0.5], 1.0, 0)["pass"] is None


def test_the_search_cost_is_split_into_probe_stages_retime_and_the_rest():
    st = {"probe": {"wall_s": 36.0}, "search": {"wall_s": 72.0, "cost_s": {"stage1": 0.5, "stage2": 36.0,
                                                                          "retime": 28.0}}}
    # the rest of the grid search's process: 72 - (0.5 + 36 + 28) = 7.5 s
    assert ref.cost_parts(st) == {"probe": 36.0, "stage1": 0.5, "stage2": 36.0, "retime": 28.0, "grid_other": 7.5}
    assert ref.cost_parts({"probe": {"wall_s": 10.0}}) == {"probe": 10.0}  # the grid search has not run yet


def test_parts_are_skipped_when_done_and_a_call_stops_between_parts():
    need = lambda part: {"probe": 145}.get(part, 20)  # noqa: E731
    assert ref.next_part({}, 500, need) == ("prepare", "run")
    st = {"prepare": {}, "probe": {}}
    assert ref.next_part(st, 500, need) == ("search", "run")
    assert ref.next_part({"prepare": {}}, 100, need) == (None, "time: probe needs 145 s")
    assert ref.next_part(dict.fromkeys(ref.PARTS, {}), 500, need) == (None, "done")
    assert ref.next_part({"failed": "probe"}, 500, need) == (None, "failed in probe")
    assert ref.next_part({"skipped": "absent"}, 500, need)[0] is None


def _points():
    return [{"point": 0, "source_case": 3, "factors": {}, "status": None},
            {"point": 1, "source_case": 3, "factors": {"b": 2}, "status": None},
            {"point": 2, "source_case": 3, "factors": {"b": 4}, "status": None},
            {"point": 3, "source_case": 3, "factors": {"b": 2, "s": 2}, "status": "bytes"}]


def test_the_brute_force_resumes_from_its_rows_and_charges_a_crash_to_its_point(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"start": 0}\n{"row": {"point": 0, "status": "ok", "time_ns": 100}}\n{"start": 1}\n{"ro')
    timed, verified, started = bf.read_rows(str(rows))
    assert set(timed) == {0} and verified == {} and started == 1  # the cut line is ignored; point 1 was running
    assert bf.next_work(_points(), timed, verified, [0], 3) == ("time", _points()[1])
    timed[1] = {"point": 1, "status": "time"}
    kind, p, by = bf.next_work(_points(), timed, verified, [0], 3)
    assert (kind, p["point"], by) == ("dominated", 2, {"b": 2})  # x4 after x2 ran over the time limit
    timed[2] = {"point": 2, "status": "dominated"}
    assert bf.next_work(_points(), timed, verified, [0], 3) == ("verify", 0)
    assert bf.next_work(_points(), timed, {0: {"status": "pass"}}, [0], 3) is None


def test_a_brute_force_cut_by_its_budget_has_timed_the_originals_then_the_largest_points():
    pts = [dict(p, work=w) for p, w in zip(_points(), (1e9, 4e9, 2e9, 8e9))]  # point 3 is bytes-failed already
    assert bf.next_work(pts, {}, {}, [], 3) == ("time", pts[0])  # the original (x1) first
    ok = {"status": "ok"}
    assert bf.next_work(pts, {0: ok}, {}, [], 3) == ("time", pts[1])  # then 4e9 FLOPs before 2e9
    assert bf.next_work(pts, {0: ok, 1: ok}, {}, [], 3) == ("time", pts[2])
    assert bf.next_work(_points(), {}, {}, [], 3) == ("time", _points()[0])  # no figure: the enumeration's order


def test_the_state_tar_keeps_small_state_and_a_fresh_machine_resumes_from_it(tmp_path):
    import benchlib
    state = tmp_path / "old" / "state"
    files = {"op.json": 10, "op/work/model.py": 10, "op/brute_rows.jsonl": 10, "op/work/search/x.json": 10,
             "op/work/prof/t.json": 10, "op/work/big.json": 3 * 2 ** 20, "triton-cache/k.json": 10,
             "op/work/trace.bin": 10}
    for rel, size in files.items():
        (state / rel).parent.mkdir(parents=True, exist_ok=True)
        (state / rel).write_bytes(b"x" * size)
    packed = benchlib.pack_state(str(tmp_path / "t.tar.gz"), str(state), ref.keep_in_tar)
    assert packed == sorted(["op.json", "op/work/model.py", "op/brute_rows.jsonl"])
    new = tmp_path / "fresh" / "elsewhere"
    benchlib.unpack_state(str(tmp_path / "t.tar.gz"), str(new))
    assert sorted(os.path.relpath(os.path.join(d, f), new) for d, _s, fs in os.walk(new) for f in fs) == packed


def test_redo_search_drops_the_search_side_and_keeps_the_brute_force(tmp_path):
    st = {"op": "zoo/x", "prepare": {}, "probe": {"wall_s": 9}, "search": {"best": {}}, "brute_plan": {"n": 3},
          "brute_calls": [{"wall_s": 5}], "brute": {"case": {"inputs": []}}, "retime_cases": [4, 5],
          "retime_runs": [{}], "retime": {"runs": 1}, "errors": ["search: x"], "failed": "retime",
          "trees": {"prepare": "T1", "probe": "T1", "search": "T1", "brute": "T0", "retime": "T1"}}
    (tmp_path / "zoo__x.json").write_text(json.dumps(st))
    for rel in ("zoo__x/work/probe.json", "zoo__x/retime/run0/performance.json", "zoo__x/brute/model.py",
                "zoo__x/brute_rows.jsonl", "zoo__x/points.json", "zoo__x/orig_cases.jsonl"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    assert ref.drop_search_side(str(tmp_path), "zoo/x")
    kept = json.loads((tmp_path / "zoo__x.json").read_text())
    assert kept == {"op": "zoo/x", "brute_plan": {"n": 3}, "brute_calls": [{"wall_s": 5}],
                    "brute": {"case": {"inputs": []}}, "trees": {"brute": "T0"}}
    left = sorted(os.path.relpath(os.path.join(d, f), tmp_path) for d, _s, fs in os.walk(tmp_path) for f in fs)
    assert left == ["zoo__x.json", "zoo__x/brute/model.py", "zoo__x/brute_rows.jsonl", "zoo__x/orig_cases.jsonl",
                    "zoo__x/points.json"]
    assert ref.next_part(kept, 500, lambda p: 0) == ("prepare", "run")  # then probe, search; brute is done
    assert ref.next_part(dict(kept, prepare={}, probe={}, search={}), 500, lambda p: 0) == ("retime", "run")
    assert not ref.drop_search_side(str(tmp_path), "zoo/none")  # no state: nothing to drop


def test_the_brute_side_of_the_driver_is_pinned_since_a_kept_brute_force_is_judged_without_it():
    """make_results judges a kept brute-force part by MEASURES["referee_brute"], which leaves this driver out; its
    brute-side functions are pinned here. Changed on purpose? Brute parts measured before are stale: re-measure
    them (``--redo``), then update the digest."""
    import hashlib
    import inspect
    src = "".join(inspect.getsource(f) for f in (ref.write_brute_dir, ref.part_brute, ref.brute_summary))
    assert hashlib.sha256(src.encode()).hexdigest()[:16] == "557ae931121fa8bf"


def test_a_state_of_another_card_is_refused(tmp_path):
    (tmp_path / "peak.json").write_text(json.dumps({"device": {"name": "NVIDIA H200"}}))
    assert ref.other_card(str(tmp_path), "NVIDIA H200") is None
    why = ref.other_card(str(tmp_path), "NVIDIA H100 80GB HBM3")
    assert "measured on a NVIDIA H200" in why and "--state <new dir>" in why
    assert ref.other_card(str(tmp_path / "none"), "NVIDIA H100 80GB HBM3") is None  # a fresh state
    (tmp_path / "peak.json").write_text(json.dumps({"device": {"backend": "cpu", "name": "AMD EPYC"}}))
    assert ref.other_card(str(tmp_path), "cpu", "cpu") is None  # cpu: the backend alone is compared
    assert "cpu backend" in ref.other_card(str(tmp_path), "NVIDIA H200", "cuda")


def test_a_missing_row_says_why_from_its_own_figures():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import make_results as mr
    crit = {"ratio_min": 0.97, "cost_max": 0.25}
    # cost 100 s allowed 0.25 * 8 = 2 s; stage 2 + retime + counting = 30 + 20 + 5 = 55 s > 2 s: the fixed part
    small = {"cost_ok": False, "limit_ok": True, "brute_cost_s": 8.0, "brute": {"complete": True, "statuses":
             {"ok": 30, "oom": 10}}, "search_cost_parts_s": {"probe": 40.0, "stage2": 30.0, "retime": 20.0,
                                                              "counts": 5.0}}
    why = mr.referee_miss_why(small, crit)
    assert "collector runs alone" in why and "55.0 s" in why and "688%" in why and "(40 points)" in why
    # allowed 0.25 * 400 = 100 s: collector runs 60 s fit, the probe's 120 s alone does not (30%)
    probe = {"cost_ok": False, "brute_cost_s": 400.0, "search_cost_parts_s": {"probe": 120.0, "stage2": 30.0,
                                                                              "retime": 30.0}}
    assert mr.referee_miss_why(probe, crit).startswith("cost: the probe alone (120.0 s) is 30%")
    # probe 80 s and collector runs 60 s each fit in 100 s, together they do not
    both = dict(probe, search_cost_parts_s={"probe": 80.0, "stage2": 30.0, "retime": 30.0})
    assert "together exceed 25%" in mr.referee_miss_why(both, crit)
    # the limit: gap 0.05 beyond the combined spread 0.02
    lim = {"limit_ok": False, "cost_ok": True, "ratio": 0.9, "gap": 0.05, "combined_spread": 0.02}
    assert mr.referee_miss_why(lim, crit) == "limit: search / brute 0.900 < 0.97 and the gap 5.00% exceeds the " \
                                             "combined spread 2.00%"
    assert mr.referee_miss_why({"limit_ok": True, "cost_ok": True}, crit) is None


def test_the_brute_forces_code_is_exactly_the_library_it_imports(tmp_path):
    """MEASURES["referee_brute"] is bench/referee_bruteforce.py's import closure (freshness.import_closure): a
    module it never imports (the search, the tracer) cannot make its results stale, and every one it does can."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import freshness
    import make_results as mr
    closure = freshness.import_closure("bench/referee_bruteforce.py")
    assert set(closure) <= set(mr.MEASURES["referee_brute"])
    for rel in ("scripts/mfulib/__init__.py", "scripts/mfulib/verify/correctness.py", "scripts/mfulib/run/compat.py",
                "scripts/mfulib/core/symbols.py", "scripts/mfulib/flops/contract.py"):
        assert rel in closure, rel  # imported inside its functions (lazily) or as a package on the way
    assert not [r for r in closure if r.startswith("scripts/mfulib/search/") or r.endswith("trace_zygote.py")]
    # independent of the parser: import the closure in a fresh interpreter; no other library module gets loaded
    mods = [r[len("scripts/"):-3].replace("/", ".").removesuffix(".__init__") for r in closure]
    code = ("import sys, importlib; sys.path.insert(0, 'scripts'); sys.path.insert(0, 'bench')\n"
            f"import referee_bruteforce\nfor m in {mods!r}: importlib.import_module(m)\n"
            "print('\\n'.join(sorted(getattr(v, '__file__', None) or '' for k, v in sys.modules.items() "
            "if k == 'mfulib' or k.startswith('mfulib.'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    loaded = {os.path.relpath(f, ROOT).replace(os.sep, "/") for f in out.split() if f}
    assert loaded and loaded <= set(closure), sorted(loaded - set(closure))
    # by hand on a small tree: a lazy import, a relative one, a package on the way, a name that is not a module
    lib = tmp_path / "scripts" / "mfulib"
    (lib / "a").mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "a" / "__init__.py").write_text("")
    (lib / "a" / "b.py").write_text("from . import c\nfrom .c import helper\n")
    (lib / "a" / "c.py").write_text("import os\n")
    (lib / "z.py").write_text("")  # never imported
    (tmp_path / "entry.py").write_text("import json\n\ndef f():\n    from mfulib.a.b import thing\n")
    assert freshness.import_closure("entry.py", root=str(tmp_path)) == [
        "scripts/mfulib/__init__.py", "scripts/mfulib/a/__init__.py", "scripts/mfulib/a/b.py", "scripts/mfulib/a/c.py"]
