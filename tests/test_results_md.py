"""bench/RESULTS.md is generated from the packed validation results, never typed in.

* the committed RESULTS.md is exactly what bench/make_results.py regenerates from the committed pack directory;
* each section renders the numbers of its stage (checked on a synthetic pack: TEST DATA, not hardware output);
* the validation driver skips packed stages and records absent scripts, so calls resume where the last one ended.
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import make_results  # noqa: E402
import validate_h200  # noqa: E402
from mdtable import md_row  # noqa: E402


def test_committed_results_md_is_regenerated_from_the_committed_pack():
    pack = make_results.DEFAULT_PACK
    if not os.path.isdir(pack) or not os.listdir(pack):
        pytest.skip("no packed validation results committed yet (bench/validation/h200)")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "make_results.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_committed_results_of_another_card_are_regenerated_from_their_pack():
    """Stages that ran on another card (a device call that got an H100) are packed apart, in their own file."""
    pack = os.path.join(ROOT, "bench", "validation", "h100")
    if not os.path.isdir(pack) or not os.listdir(pack):
        pytest.skip("no H100 pack committed")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "make_results.py"), "--pack-dir", pack,
                        "--out", os.path.join(ROOT, "bench", "RESULTS_h100.md"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _write(pack, stage, doc):
    with open(os.path.join(pack, f"{stage}.json"), "w") as f:
        json.dump(doc, f)


def test_sections_render_their_stage_numbers(tmp_path):
    """Synthetic packs (test data): the rendered text carries the packed figures, and missing stages are listed."""
    base = {"created_at": "2026-12-01T10:00:00Z", "git_commit": "abc1234", "wall_s": 12.0, "rc": 0}
    _write(tmp_path, "ncu", {**base, "stage": "ncu", "result": {
        "rows": [{"op": "zoo/5_MHABlock", "case": 7, "position": 0, "kernel": "matmul_kernel",
                  "collector_median_us": 3387.9, "ncu_median_us": 3383.33, "diff": 0.00135, "eligible": True,
                  "within_tolerance": True}],
        "notes": [], "eligible": 1, "within": 1, "tolerance": 0.03, "min_us": 50.0, "cache_control": "none"}})
    _write(tmp_path, "makeall", {**base, "stage": "makeall", "result": {"target_s": 60, "method": "m", "runs": [
        {"op": "zoo/5_MHABlock", "mode": "warm", "rc": 0, "wall_s": 48.5,
         "maxima": {"mfu_ach": {"value": 0.5640, "case": 11}},
         "cases": [{"case": 11, "dtype": "float16", "flops": 2.0e12, "flops_tracer": 2.0e12, "numerator": "checked"}]},
        {"op": "zoo/1_BatchMatmul", "mode": "warm", "rc": 0, "wall_s": 71.0, "maxima": {}, "cases": []}]}})
    text = make_results.render(str(tmp_path))
    assert "3,387.90" in text and "+0.14%" in text and "**1/1**" in text
    mha = md_row(text, op="zoo/5_MHABlock", **{"Triton cache": "warm"})
    assert (mha["rc"], mha["wall s"], mha["<= target"], mha["best MFU@ach"]) == ("0", "48.5", "yes", "56.4%")
    bmm = md_row(text, op="zoo/1_BatchMatmul")
    assert (bmm["wall s"], bmm["<= target"]) == ("71.0", "no")  # over the 60 s target: said so
    fl = md_row(text, op="zoo/5_MHABlock", case="11")
    assert (fl["dtype"], fl["flops.py"], fl["tracer"], fl["ratio"], fl["numerator"]) == \
        ("float16", "2e+12", "2e+12", "1.0000", "checked")
    assert "## Not run yet" in text and "`peaks`" in text and "`ncu`" not in text.split("## Not run yet")[1]


def test_check_mode_fails_on_a_hand_edited_file(tmp_path):
    pack = tmp_path / "pack"
    pack.mkdir()
    _write(str(pack), "gemm", {"created_at": "t", "git_commit": "c", "wall_s": 1, "rc": 0, "result": {}})
    out = tmp_path / "RESULTS.md"
    assert make_results.main(["--pack-dir", str(pack), "--out", str(out)]) == 0
    assert make_results.main(["--pack-dir", str(pack), "--out", str(out), "--check"]) == 0
    out.write_text(out.read_text() + "\n| typed in | 99% |\n")
    assert make_results.main(["--pack-dir", str(pack), "--out", str(out), "--check"]) == 1


def test_driver_skips_packed_stages_and_records_absent_scripts(tmp_path, monkeypatch, capsys):
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "env.json").write_text("{}")
    monkeypatch.setitem(validate_h200.LIMITS, "referee", ("bench/does_not_exist.py", 10))
    rc = validate_h200.main(["--pack-dir", str(pack), "--stages", "env,referee", "--out", str(tmp_path / "out")])
    text = capsys.readouterr().out
    assert rc == 0
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.split()}
    assert "packed already" in lines["env"]
    assert "absent" in lines["referee"] and "bench/does_not_exist.py" in lines["referee"]
    assert not (tmp_path / "out" / "pack.tgz").exists()  # nothing ran, nothing packed


FAKE_MAKE = r'''#!/usr/bin/env python3
"""TEST DOUBLE of make for the batch stage: writes a few work-dir files per operator, sleeps, logs each call."""
import json, os, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a and not a.startswith("-"))
work = args["WORK"]
with open(os.environ["FAKE_MAKE_LOG"], "a") as f:
    f.write(json.dumps({"op": args["OP"], "target": sys.argv[-1], "probe_args": args.get("PROBE_ARGS")}) + "\n")
if sys.argv[-1] == "all":
    os.makedirs(os.path.join(work, ".state"), exist_ok=True)
    os.makedirs(os.path.join(work, "prof", "case0_asc"), exist_ok=True)
    open(os.path.join(work, "prof", "case0_asc", "trace.bin"), "w").write("x" * 1000)
    json.dump({"summary": {"verdict": "passed", "n_cases": 2}, "op_dir": work},
              open(os.path.join(work, "flops_check.json"), "w"))
    time.sleep(float(os.environ.get("FAKE_MAKE_SLEEP_S", "1.5")))
    open(os.path.join(work, ".state", "decompose.ok"), "w").close()
'''


def _batch_call(tmp_path, monkeypatch, out_name, pack, sleep_s, limit_s, fresh=False, **over):
    fake = tmp_path / "fake_make.py"
    fake.write_text(FAKE_MAKE)
    fake.chmod(0o755)
    monkeypatch.setenv("FAKE_MAKE_LOG", str(tmp_path / "make_calls.jsonl"))
    monkeypatch.setenv("FAKE_MAKE_SLEEP_S", str(sleep_s))
    monkeypatch.setattr(validate_h200, "BATCH_STOP_MARGIN_S", 1.0)
    monkeypatch.setattr(validate_h200, "BATCH_GRACE_S", 15.0)
    monkeypatch.setitem(validate_h200.BATCH_DEFAULTS, "examples", "zoo")  # the sets the stage must cover
    settings = dict(validate_h200.BATCH_DEFAULTS, examples="zoo", backend="cpu", make=str(fake), op_timeout_s=60,
                    **over)
    out, final = tmp_path / out_name / "work", tmp_path / out_name / "final"
    out.mkdir(parents=True)
    final.mkdir()
    res = validate_h200.stage_batch(str(out), limit_s, dict(os.environ), str(final), settings, str(pack), fresh)
    return res, final


def _made(tmp_path, since):
    """Operators the fake make ran ``all`` for after the first ``since`` logged calls."""
    lines = (tmp_path / "make_calls.jsonl").read_text().splitlines()[since:]
    return [json.loads(ln)["op"] for ln in lines if json.loads(ln)["target"] == "all"]


def _adopt(pack, res, final):
    """What the coordinator does between calls: unpack pack.tgz's batch.json and state tar into the pack dir."""
    (pack / validate_h200.BATCH_STATE_NAME).write_bytes((final / validate_h200.BATCH_STATE_NAME).read_bytes())
    (pack / "batch.json").write_text(json.dumps({**res, "pack_files": None}))


@pytest.mark.e2e
def test_batch_reruns_operators_finished_under_other_settings_and_force_starts_afresh(tmp_path, monkeypatch):
    """One batch table never mixes measuring settings: a call with another PROBE_ARGS runs every finished operator
    again (its record and work dir dropped, the reason logged in the call), a call with the same settings runs none,
    a different KEEP_PROF (not a measuring setting) runs none, and fresh (--force) forgets the earlier calls."""
    pack = tmp_path / "pack"
    pack.mkdir()
    res1, final1 = _batch_call(tmp_path, monkeypatch, "c1", pack, sleep_s=0.1, limit_s=120.0, probe_args="--budget-s 5")
    assert res1["complete"] is True, res1["log_tail"]
    names = sorted(o["name"] for o in res1["result"]["ops"])
    assert all(o["finished_by_call"] == 1 for o in res1["result"]["ops"])
    _adopt(pack, res1, final1)
    n = len((tmp_path / "make_calls.jsonl").read_text().splitlines())
    res2, final2 = _batch_call(tmp_path, monkeypatch, "c2", pack, sleep_s=0.1, limit_s=120.0, keep_prof=3,
                               probe_args="--budget-s 5")
    assert _made(tmp_path, n) == [] and res2["result"]["calls"][-1]["stale"] == []
    n = len((tmp_path / "make_calls.jsonl").read_text().splitlines())
    res3, final3 = _batch_call(tmp_path, monkeypatch, "c3", pack, sleep_s=0.1, limit_s=120.0, probe_args="--budget-s 9")
    assert sorted(_made(tmp_path, n)) == names
    stale = res3["result"]["calls"][-1]["stale"]
    assert sorted(s["name"] for s in stale) == names and "call 1 under other settings" in stale[0]["why"]
    assert res3["complete"] is True and all(o["finished_by_call"] == 2 for o in res3["result"]["ops"])
    _adopt(pack, res3, final3)
    assert not validate_h200.stage_done(str(pack), "batch", dict(res3["result"]["settings"], rerun=[names[0]]))
    n = len((tmp_path / "make_calls.jsonl").read_text().splitlines())
    res5, final5 = _batch_call(tmp_path, monkeypatch, "c5", pack, sleep_s=0.1, limit_s=120.0,
                               probe_args="--budget-s 9", rerun=[names[0]])
    assert _made(tmp_path, n) == [names[0]] and res5["result"]["calls"][-1]["stale"][0]["why"] == "--batch-rerun"
    with pytest.raises(SystemExit, match="no such operator"):
        _batch_call(tmp_path, monkeypatch, "c6", pack, sleep_s=0.1, limit_s=120.0, rerun=["zoo/nope"])
    n = len((tmp_path / "make_calls.jsonl").read_text().splitlines())
    res4, _ = _batch_call(tmp_path, monkeypatch, "c4", pack, sleep_s=0.1, limit_s=120.0, fresh=True,
                          probe_args="--budget-s 9")
    assert sorted(_made(tmp_path, n)) == names  # fresh: the state tar is not restored
    assert len(res4["result"]["calls"]) == 1 and res4["result"]["calls"][0]["restored_files"] == 0


@pytest.mark.e2e
def test_batch_stage_stops_cleanly_at_its_limit_and_the_next_call_resumes(tmp_path, monkeypatch):
    """A fake make (test double) per operator: the first call is interrupted (SIGINT, exit 130) with some operators
    done; its state tar holds job records and work JSONs but no prof/; a second call in another directory restores
    it, runs only the rest, and the stage is then complete."""
    pack = tmp_path / "pack"
    pack.mkdir()
    res1, final1 = _batch_call(tmp_path, monkeypatch, "call1", pack, sleep_s=2.0, limit_s=8.0)
    assert res1["rc"] == 130, res1["log_tail"]
    assert res1["complete"] is False
    ops1 = {o["name"]: o for o in res1["result"]["ops"]}
    done1 = [n for n, o in ops1.items() if o["status"] == "ok"]
    assert 1 <= len(done1) < len(ops1)
    assert ops1[done1[0]]["flops_check"]["verdict"] == "passed"
    tar_path = final1 / validate_h200.BATCH_STATE_NAME
    assert res1["pack_files"] == [str(tar_path)]
    import tarfile
    with tarfile.open(tar_path) as tar:
        names = tar.getnames()
    assert any(n.startswith("jobs/") for n in names) and "batch_summary.json" in names
    assert any(n.endswith("flops_check.json") for n in names) and any("/.state/" in n for n in names)
    assert not any("/prof/" in n for n in names)
    call = res1["result"]["calls"][0]
    assert "PROBE_ARGS=" + validate_h200.BATCH_DEFAULTS["probe_args"] in call["command"]
    # the coordinator unpacks pack.tgz into the pack dir between calls
    (pack / validate_h200.BATCH_STATE_NAME).write_bytes(tar_path.read_bytes())
    (pack / "batch.json").write_text(json.dumps({**res1, "pack_files": None}))
    calls_before = (tmp_path / "make_calls.jsonl").read_text().splitlines()
    res2, _ = _batch_call(tmp_path, monkeypatch, "call2", pack, sleep_s=0.2, limit_s=120.0)
    assert res2["rc"] == 0 and res2["complete"] is True, res2["log_tail"]
    rerun = [json.loads(ln)["op"] for ln in (tmp_path / "make_calls.jsonl").read_text().splitlines()
             [len(calls_before):] if json.loads(ln)["target"] == "all"]
    assert not set(rerun) & set(done1)  # finished operators were skipped
    assert all(o["status"] == "ok" for o in res2["result"]["ops"])
    assert len(res2["result"]["calls"]) == 2
    work2 = str(tmp_path / "call2" / "work")
    rec = json.loads(open(os.path.join(work2, "batch", "jobs", os.listdir(os.path.join(work2, "batch", "jobs"))[0]
                                       )).read())
    assert rec["work"].startswith(work2)  # paths of the restored records point into this call's directory


def test_stage_done_reruns_a_partial_resumable_stage(tmp_path):
    (tmp_path / "batch.json").write_text(json.dumps({"complete": False}))
    (tmp_path / "peaks.json").write_text(json.dumps({"rc": 0}))
    assert not validate_h200.stage_done(str(tmp_path), "batch")
    assert validate_h200.stage_done(str(tmp_path), "peaks")
    assert not validate_h200.stage_done(str(tmp_path), "referee")
    (tmp_path / "referee.json").write_text(json.dumps({"complete": True}))
    assert validate_h200.stage_done(str(tmp_path), "referee", referee_extra=[])
    # a complete referee asked to measure an operator again (--redo) runs again
    assert not validate_h200.stage_done(str(tmp_path), "referee", referee_extra=["--redo", "zoo/5_MHABlock"])
    assert not validate_h200.stage_done(str(tmp_path), "referee", referee_extra=["--redo=zoo/5_MHABlock"])
    assert not validate_h200.stage_done(str(tmp_path), "referee", referee_extra=["--redo-search", "zoo/5_MHABlock"])
    assert validate_h200.stage_done(str(tmp_path), "referee", referee_extra=["--redone", "x"])  # no such flag
    # a complete batch whose operators were finished under other measuring settings runs again
    calls = [{"finished": ["a"], "settings": {"probe_args": "--budget-s 20"}},
             {"finished": ["b"], "settings": {"probe_args": "--budget-s 45"}}]
    (tmp_path / "batch.json").write_text(json.dumps({"complete": True, "result": {
        "calls": calls, "ops": [{"name": "a", "status": "ok"}, {"name": "b", "status": "ok"}]}}))
    assert not validate_h200.stage_done(str(tmp_path), "batch", {"probe_args": "--budget-s 45"})
    calls[0]["settings"]["probe_args"] = "--budget-s 45"
    (tmp_path / "batch.json").write_text(json.dumps({"complete": True, "result": {
        "calls": calls, "ops": [{"name": "a", "status": "ok"}, {"name": "b", "status": "ok"}]}}))
    assert validate_h200.stage_done(str(tmp_path), "batch", {"probe_args": "--budget-s 45"})


SYNTH = {"created_at": "2026-12-01T12:00:00Z", "git_commit": "abc1234", "wall_s": 500.0, "rc": 0}  # TEST DATA


def test_referee_section_renders_ratio_costs_verdict_and_where_the_limits_differ(tmp_path):
    """Synthetic referee pack (test data, not hardware output): one operator judged, one skipped, one pending."""
    _write(tmp_path, "referee", {**SYNTH, "created_at": "2026-12-05T12:00:00Z", "stage": "referee",
                                 "command": "bench/bench_search_vs_bruteforce.py", "result": {
        "device": "NVIDIA H200", "pending": ["zoo/6_GQAAttention: time: brute needs 60 s"],
        "criteria": {"ratio_min": 0.97, "cost_max": 0.25, "retimes": 3},
        "settings": {"top": 8, "max_scale": 16, "probe_budget_s": 100.0},
        "ops": [{"op": "zoo/5_MHABlock", "parts_done": ["prepare", "probe", "search", "brute", "retime"],
                 "figure_kind": "MFU@ach", "metric": "mfu", "search_best": {"case": 13, "factors": {"seq": 4}},
                 "probe": {"complete": True}, "brute": {"source_case": 11, "factors": {"batch": 2, "seq": 2},
                                                         "verified": "full", "first_call_s": 30.0,
                                                         "statuses": {"ok": 40, "bytes": 3}},
                 "brute_plan": {"sources": [11, 12]}, "search_values": [0.60, 0.61, 0.62],
                 "brute_values": [0.63, 0.64, 0.65], "search_rate": 480.0, "brute_rate": 505.0,
                 "ratio": 0.953, "combined_spread": 0.04, "limit_ok": True, "search_cost_s": 50.0,
                 "brute_cost_s": 300.0, "cost_ratio": 0.1667, "cost_ok": True, "pass": True,
                 "step1_verify_s": 9.0, "differ": "factors {'seq': 4} vs {'batch': 2, 'seq': 2}"},
                {"op": "20_FlashAttentionV2", "parts_done": [], "skipped": "not a bundled example"},
                {"op": "zoo/6_GQAAttention", "parts_done": ["prepare"], "errors": ["probe: boom | x"]}]}})
    text = make_results.render(str(tmp_path))
    row = md_row(text, operator="zoo/5_MHABlock", figure="MFU@ach")
    assert row["search limit"] == "61.00% (case 13, seq x4)"
    assert row["brute-force best"] == "64.00% (case 11, batch x2, seq x2; full)"
    assert (row["search / brute"], row["limit ok"], row["pass"]) == ("0.953", "yes", "yes")
    assert (row["search cost s"], row["brute cost s (first calls)"], row["cost ratio"]) == (
        "50.0; step 1's verify 9.0 s apart", "300.0 (30.0)", "16.7% yes")
    assert md_row(text, operator="20_FlashAttentionV2")["note"] == "not a bundled example"
    assert row["note"] == "-"  # both sides from one call: no caveat
    assert "probe: boom \\| x" in text  # a pipe in an error does not break the table
    assert "**Partial:**" in text and "brute needs 60 s" in text
    glance = md_row(text, claim="search finds the limit (zoo/5_MHABlock)")
    assert (glance["measured"], glance["met"]) == ("search / brute 0.953, cost 16.7%", "yes")
    assert "Not run yet: no `batch.json`" in text.split("## Batch over")[1]


def test_a_row_stale_by_an_earlier_part_also_says_when_the_packs_own_tree_changed(monkeypatch):
    rows = [("referee", ["search finds the limit (op)", "1.0", "c", "yes"], "**stale** (measured by an earlier "
             "tree; changed since: a.py)"), ("referee", ["search finds the limit (op2)", "1.0", "c", "yes"], None)]
    monkeypatch.setattr(make_results, "_summary_rows", lambda pack: rows)
    for state, tail in (("fresh", ""), ("stale", "; and the code of the pack's own tree changed since (the section "
                                                  "names it)")):
        out = make_results.summary_rows({"referee": {"freshness": {"state": state}}})
        assert out[0][4] == "**stale** (measured by an earlier tree; changed since: a.py)" + tail
        assert out[1][4] == make_results.FRESH_MARK[state]


def test_a_referee_cost_from_two_device_calls_says_so():
    """--redo-search keeps the brute force of an earlier call: the two wall costs then come from two calls (two
    hosts, perhaps), and the row's note says which trees measured them."""
    op = {"part_trees": {"brute": "e70c2bfca22a" + "0" * 52, "probe": "a51841cff6a2" + "0" * 52,
                         "search": "a51841cff6a2" + "0" * 52}}
    assert make_results.cost_calls_note(op) == (
        "the two costs come from different device calls (brute force: tree e70c2bfca22a, kept; search: tree "
        "a51841cff6a2), so each call's host speed is in its side's seconds")
    assert make_results.cost_calls_note({"part_trees": {"brute": "x" * 64, "search": "x" * 64}}) is None
    assert make_results.cost_calls_note({"part_trees": {"brute": "x" * 64}}) is None  # search side not run yet


def test_batch_section_renders_status_mfu_bound_limit_and_flops_check(tmp_path):
    """Synthetic batch pack (test data): one operator measured with ncu counters, one timed out, calls listed."""
    settings = {"examples": "zoo,npukernelbench", "op_timeout_s": 300.0, "probe_args": "--budget-s 40",
                "search_args": "--top-n 4", "pmu": "ncu", "keep_prof": 0}
    mha = {"name": "zoo/5_MHABlock", "status": "ok", "wall_s": 171.2, "reason": None, "finished_by_call": 1,
           "maxima": {"mfu_ach": {"value": 0.564, "case": 11, "dtype": "float16"},
                      "mbu": {"value": 0.31, "case": 3, "dtype": "float16"}},
           "rows": [{"case": 11, "dtype": "float16", "mfu_ach": 0.564,
                     "bound": {"label": "latency-bound", "source": "pmu:ncu"},
                     "parts": [{"part": "qkv_proj", "mfu_ach": 0.70, "time_share": 0.41,
                                "bound": {"label": "tensor-bound", "source": "pmu:ncu",
                                          "evidence": {"tensor_pipe_pct": 81.6, "waves_per_sm": 1}}}]},
                    {"case": 3, "dtype": "float16", "mfu_ach": 0.2, "bound": None, "parts": []}],
           "search": {"best": {"case": 13, "scale": 4, "mfu": 0.612, "mfu_kind": "ach"}, "pool": 11, "scaled": 3,
                      "complete": True},
           "probe": {"candidates": 6, "passed": 3, "appended": 3, "complete": True, "stop_reason": "saturated"},
           "flops_check": {"verdict": "passed", "n_cases": 14, "ratio_min": 1.0, "ratio_max": 1.0}}
    ffn = {"name": "npukernelbench/level4/2_FFN", "status": "timeout", "wall_s": 300.1, "finished_by_call": 1,
           "reason": "timed out after 300 s (OP_TIMEOUT_S): the whole process tree was killed",
           "probe": {"candidates": 2, "passed": 0, "appended": 0, "complete": False, "interrupted": "running"}}
    _write(tmp_path, "batch", {**SYNTH, "stage": "batch", "complete": False, "result": {
        "settings": settings, "complete": False, "shared_data": True, "ops": [mha, ffn],
        "measure_keys": ["probe_args", "pmu"],
        "skipped": [{"name": "npukernelbench/level1/10_LayerNorm", "why": "case data absent"}],
        "calls": [{"created_at": "2026-12-01T12:00:00Z", "git_commit": "abc1234", "rc": 130, "wall_s": 498.0,
                   "ran": ["a", "b", "c"], "finished": ["a", "b"], "settings": settings}]}})
    text = make_results.render(str(tmp_path)).split("## Batch over")[1]
    assert "**Partial:**" in text and "2/2 operators" in text
    call = md_row(text, call="1", commit="abc1234")
    assert (call["rc"], call["wall s"], call["operators run"], call["finished"], call["op timeout s"]) == \
        ("130", "498.0", "3", "2", "300.0")
    assert (call["PROBE_ARGS"], call["SEARCH_ARGS"], call["PMU"], call["KEEP_PROF"]) == \
        ("`--budget-s 40`", "`--top-n 4`", "ncu", "0")
    mha = md_row(text, operator="zoo/5_MHABlock", status="ok")
    assert (mha["call"], mha["wall s"], mha["cases"], mha["bound"]) == ("1", "171.2", "2", "latency-bound")
    assert (mha["best MFU@ach"], mha["best MBU"]) == ("56.4% (case 11, float16)", "31.0% (case 3, float16)")
    assert mha["limit (search)"] == "61.2% MFU@ach (case 13, scale 4; pool 11, 3 scaled)"
    assert mha["probe"] == "3/6 passed, 3 appended (saturated)"
    assert mha["FLOPs check"] == "passed (14 cases, ratio 1..1)" and mha["reason"] == "-"
    assert "one setting (probe_args, pmu)" in text
    ffn = md_row(text, operator="npukernelbench/level4/2_FFN")
    assert (ffn["status"], ffn["wall s"], ffn["best MFU@ach"], ffn["probe"]) == \
        ("timeout", "300.1", "-", "0/2 passed, 0 appended (running)")
    part = md_row(text, operator="zoo/5_MHABlock", part="qkv_proj")
    assert (part["case"], part["MFU@ach"], part["time share"], part["bound"], part["source"]) == \
        ("11", "70.0%", "41.0%", "tensor-bound", "pmu:ncu")
    assert part["evidence"] == "tensor_pipe_pct 81.6, waves_per_sm 1"
    assert "* npukernelbench/level1/10_LayerNorm: case data absent" in text


def test_peaks_wide_section_states_its_grid_and_every_calibrated_dtype(tmp_path):
    """Synthetic peaks_wide pack (test data): the sweep's grid, the ratio per dtype and the calibration's other peaks."""
    _write(tmp_path, "peaks_wide", {**SYNTH, "stage": "peaks_wide", "command": "bench/bench_peak_calib.py",
                                    "peak_json": {"peak_tflops": {"bfloat16": 830.0, "tf32": 417.9},
                                                  "peak_tops": {"int8": 1032.5}, "bandwidth_gbps": 4262.4},
                                    "result": {"calibration_s": 16.5, "process_s_at_calibration_end": 24.0,
                                               "max_calibration_s": 30.0, "min_ratio": 0.98, "pass": True,
                                               "grid": {"mn": [2048, 4096], "k": [2048], "target_ms": 10.0},
                                               "rows": [{"mode": "bfloat16", "calib_tflops": 830.0,
                                                         "calib_shape": {"m": 8192, "n": 8192, "k": 8192},
                                                         "wide_tflops": 835.0,
                                                         "wide_shape": {"m": 4096, "n": 4096, "k": 2048},
                                                         "wide_shapes": 4, "ratio": 0.994}]}})
    text = make_results.render(str(tmp_path)).split("## Peaks: calibration vs a wide sweep")[1].split("\n## ")[0]
    assert "m, n in [2048, 4096]" in text and "k in [2048]" in text and "10.0 ms per shape" in text
    bf16 = md_row(text, dtype="bfloat16")
    assert (bf16["calibrated TFLOP/s"], bf16["shape"], bf16["sweep best"], bf16["sweep shape"]) == \
        ("830.0", "8192x8192x8192", "835.0", "4096x4096x2048")
    assert (bf16["shapes"], bf16["ratio"]) == ("4", "0.994")
    assert "tf32 417.9" in text and "int8 1,032.5 TOPS" in text and "bandwidth 4,262 GB/s" in text


def test_batch_is_complete_only_with_every_set_run_and_its_case_data_present():
    ok = [{"status": "ok"}, {"status": "timeout"}]
    both = [{"settings": {"examples": "zoo"}}, {"settings": {"examples": "npukernelbench"}}]
    assert validate_h200.batch_complete(ok, both, [])[0] is True
    assert validate_h200.batch_complete(ok + [{"status": "interrupted"}], both, [])[0] is False
    assert validate_h200.batch_complete(ok, both[:1], [])[0] is False  # npukernelbench never run
    assert validate_h200.batch_complete(ok, both, [("npukernelbench/level4/2_FFN", "case data absent: x")])[0] \
        is False


def test_at_a_glance_states_each_criterion_as_measured_and_omits_absent_stages(tmp_path):
    """Synthetic packs (test data): a kernel-time check with one kernel outside its tolerance reads NO, a batch
    with an interrupted operator reads NO, and stages without a pack give no row."""
    _write(tmp_path, "ncu", {**SYNTH, "stage": "ncu", "result": {"rows": [], "eligible": 6, "within": 5,
                                                                 "tolerance": 0.03, "min_us": 50.0}})
    _write(tmp_path, "batch", {**SYNTH, "stage": "batch", "complete": False, "result": {
        "complete": False, "ops": [{"name": "a", "status": "ok"}, {"name": "b", "status": "interrupted"}]}})
    text = make_results.render(str(tmp_path)).split("## At a glance")[1].split("\n## ")[0]
    ncu = md_row(text, claim="kernel time = Nsight Compute")
    assert (ncu["measured"], ncu["criterion"], ncu["met"]) == ("5/6 kernels within", "3% (>= 50.0 us)", "**NO**")
    batch = md_row(text, claim="batch over every bundled and real-case operator")
    assert (batch["measured"], batch["criterion"], batch["met"]) == ("1/2 ok", "all complete", "**NO**")
    assert "search = exhaustive" not in text and "peak = best" not in text


def test_a_stage_whose_measured_code_changed_is_marked_stale_and_a_limit_shows_its_retiming(tmp_path):
    """Synthetic packs (test data): a makeall whose recorded source hashes are today's tree is fresh; the same pack
    with one measured module's hash altered is stale, names that module and is marked in the at-a-glance row; a
    pack with only a commit this clone lacks says freshness unknown (never an error). A batch limit is shown beside
    the collection's re-timing of the same case."""
    import freshness
    now = freshness.tree_hashes()["modules"]
    run = {"op": "zoo/5_MHABlock", "mode": "warm", "rc": 0, "wall_s": 40.0, "cases": []}
    doc = {**SYNTH, "stage": "makeall", "result": {"runs": [run], "target_s": 60},
           "source": {"method": freshness.METHOD, "modules": dict(now)}}
    _write(tmp_path, "makeall", doc)
    text = make_results.render(str(tmp_path))
    glance = md_row(text.split("## At a glance")[1].split("\n## ")[0], claim="`make all` (warm Triton cache)")
    assert glance["code unchanged"] == "yes" and "> **Fresh:**" in text.split("## Tool wall time")[1]
    changed = "scripts/mfulib/collect/driver.py"
    doc["source"]["modules"][changed] = "0" * 64  # the pack measured another version of this module
    _write(tmp_path, "makeall", doc)
    text = make_results.render(str(tmp_path))
    glance = md_row(text.split("## At a glance")[1].split("\n## ")[0], claim="`make all` (warm Triton cache)")
    assert glance["code unchanged"] == "**stale**"
    assert "> **Stale:** 1 file(s)" in text and "`scripts/mfulib/collect/` (driver.py)" in text
    _write(tmp_path, "makeall", {**SYNTH, "git_commit": "f" * 40, "stage": "makeall",
                                 "result": {"runs": [run], "target_s": 60}})
    text = make_results.render(str(tmp_path))
    assert "> **Freshness unknown:**" in text and "unknown" in md_row(
        text.split("## At a glance")[1].split("\n## ")[0], claim="`make all` (warm Triton cache)")["code unchanged"]
    op = {"search": {"best": {"case": 7, "scale": 1.0, "mfu": 0.6405, "mfu_kind": "ach"}, "pool": 3, "scaled": 0},
          "rows": [{"case": 7, "mfu_ach": 0.6058}, {"case": 8, "mfu_ach": 0.6262}]}
    assert make_results._limit(op).endswith("; re-timed by the collection: 60.6%")
    probe = {"passed": 0, "candidates": 0, "appended": 0, "interrupted": "--budget-s 45 s reached",
             "cut": {"cut_in": "gate 2 (trace)", "source_case": 7, "scale": 2, "wall_s": 25.2}}
    cell = make_results._probe({"probe": probe})
    assert cell.startswith("0/0 passed, 0 appended") and "--budget-s 45 s reached" in cell
    assert "gate 2 (trace)" in cell and "case 7 x2" in cell and "25.2 s" in cell


def test_a_referee_row_from_an_earlier_tree_is_fresh_only_when_the_referee_code_is_the_same(monkeypatch):
    # TEST DATA: module hashes of three trees; "T0" is the pack's, "T1" the same referee code, "T2" another search
    import freshness
    mods = {"T1": {"scripts/a.py": "h1", "bench/other.py": "x"},  # bench/other.py: not referee code
            "T2": {"scripts/a.py": "h-old", "bench/other.py": "x"}}
    monkeypatch.setattr(freshness, "tree_modules", lambda tree, *a, **k: mods.get(tree))
    st = {"source": {"tree_sha256": "T0", "modules": {"scripts/a.py": "h1", "bench/other.py": "y"}}}
    assert make_results.referee_op_fresh(st, {"trees": ["T0"]}) is None
    assert make_results.referee_op_fresh(st, {"trees": ["T0", "T1"]}) is None
    assert make_results.referee_op_fresh(st, {"trees": ["T2"]}) == (
        "**stale** (measured by an earlier tree; changed since: scripts/a.py)")
    assert "code unknown" in make_results.referee_op_fresh(st, {"trees": ["T9"]})
    assert "before per-part tree stamps" in make_results.referee_op_fresh(st, {"trees": []})


def test_a_kept_brute_force_is_judged_by_its_own_code_and_the_search_side_by_the_referee_code(monkeypatch):
    # TEST DATA: "T0" the pack's tree; "T3" an earlier tree whose search code differs but whose brute-force code
    # (bench/referee_bruteforce.py, mfulib.core) is the same; "T4" one whose brute-force code differs too
    import freshness
    now = {"scripts/mfulib/search/grid.py": "g-new", "scripts/mfulib/core/cases.py": "c1",
           "bench/referee_bruteforce.py": "b1"}
    mods = {"T3": dict(now, **{"scripts/mfulib/search/grid.py": "g-old"}),
            "T4": dict(now, **{"bench/referee_bruteforce.py": "b-old"})}
    monkeypatch.setattr(freshness, "tree_modules", lambda tree, *a, **k: mods.get(tree))
    st = {"source": {"tree_sha256": "T0", "modules": now}}
    kept = {"probe": "T0", "search": "T0", "retime": "T0", "brute": "T3"}
    assert make_results.referee_op_fresh(st, {"trees": ["T0", "T3"], "part_trees": kept}) is None
    # the same tree as a search-side part is stale: the search code changed since
    assert make_results.referee_op_fresh(st, {"trees": ["T0", "T3"], "part_trees": dict(kept, probe="T3")}) == (
        "**stale** (measured by an earlier tree; changed since: scripts/mfulib/search/grid.py)")
    # without part_trees (older packs) every tree is judged by the whole referee's code
    assert "grid.py" in make_results.referee_op_fresh(st, {"trees": ["T0", "T3"]})
    assert make_results.referee_op_fresh(st, {"trees": ["T0", "T4"], "part_trees": dict(kept, brute="T4")}) == (
        "**stale** (measured by an earlier tree; changed since: bench/referee_bruteforce.py)")


def test_a_call_on_another_card_does_not_pack_into_this_cards_pack(tmp_path):
    _write(tmp_path, "env", {"result": {"versions": {"name": "NVIDIA H200"}}})
    assert validate_h200.card_mismatch(str(tmp_path), "NVIDIA H200") is None
    why = validate_h200.card_mismatch(str(tmp_path), "NVIDIA H100 80GB HBM3")
    assert "holds measurements of a NVIDIA H200" in why and "--pack-dir bench/validation/<card>" in why
    assert validate_h200.card_mismatch(str(tmp_path), None) is None  # no accelerator here: nothing to compare
    assert validate_h200.card_mismatch(str(tmp_path / "empty"), "NVIDIA H100 80GB HBM3") is None


def test_a_pack_whose_device_git_was_stale_names_the_commit_of_its_measured_tree():
    cache = make_results.freshness._cache().get("trees") or {}
    tree, commit = next(iter(sorted(cache.items())))
    st = {"created_at": "t", "git_commit": "0000000", "wall_s": 1.0, "source": {"tree_sha256": tree}}
    assert f"the sources of commit `{commit[:7]}`" in make_results.stamp(st)
    assert "Measured tree" not in make_results.stamp(dict(st, git_commit=commit[:7]))  # they agree: nothing to say
    assert "Measured tree" not in make_results.stamp(dict(st, source={"tree_sha256": "f" * 64}))  # not in the cache
