"""max_shape_probe.py: each of the five gates rejects a crafted candidate; binary refinement; the gates' order."""
import json
import os
import resource
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_ops  # noqa: E402

from mfulib.search import probe  # noqa: E402
from mfulib.schemas import probe_json as pj  # noqa: E402

PROBE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "max_shape_probe.py")


def run_probe(work, *extra, env=None, preexec=None, timeout=300):
    r = subprocess.run([sys.executable, PROBE, "--dir", work, "--backend", "cpu", *extra], capture_output=True,
                       text=True, timeout=timeout, env=dict(os.environ, **(env or {})), preexec_fn=preexec)
    doc = pj.read_probe_json(os.path.join(work, "probe.json")) if os.path.exists(os.path.join(work, "probe.json")) \
        else None
    return r, doc


def _gate(cand, n):
    return next(g for g in cand["gates"] if g["gate"] == n)


def test_binary_refinement_finds_the_largest_passing_factor():
    tried = probe.search_factor(lambda s: s <= 11, 64, refine_steps=3)
    assert tried == [(2, True), (4, True), (8, True), (16, False), (12, False), (10, True), (11, True)]
    tried = probe.search_factor(lambda s: s <= 37, 64, refine_steps=10)
    assert max(s for s, ok in tried if ok) == 37 and (38, False) in tried
    assert probe.search_factor(lambda s: False, 64) == [(2, False)]  # nothing passes: the original stays s = 1
    assert probe.ladder(48) == [2, 4, 8, 16, 32, 48]


def test_gate1_refuses_by_max_bytes_without_running_anything(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    r, doc = run_probe(work, "--cases", "0", "--max-bytes", "4000", "--max-scale", "2",
                       env={"PROBE_OP_MARKS": str(marks)})
    assert r.returncode == 0, r.stderr
    (cand,) = doc["candidates"]
    assert cand["failed_gate"] == 1 and len(cand["gates"]) == 1
    assert _gate(cand, 1)["value"] == cand["input_bytes"] > 4000
    # the candidate (A [2, 32, 32], B [2, 32, 8]) was never built; only the original case was, by the tracer that
    # counts its scale-1 FLOPs
    assert {p.name for p in marks.iterdir()} <= {"built_A_512", "built_B_256"}


def test_gate1_refuses_a_case_whose_host_build_exceeds_host_memory(tmp_path):
    # 64 GiB of fp32 inputs described; the probe runs under a 6 GiB address-space limit
    work = probe_ops.make_workdir(tmp_path, lines=[probe_ops.case_line(64, 65536, 4096, 1)])
    marks = tmp_path / "marks"
    marks.mkdir()
    limit = 6 << 30
    r, doc = run_probe(work, "--cases", "0", "--max-bytes", "1e15", "--max-scale", "2",
                       env={"PROBE_OP_MARKS": str(marks)},
                       preexec=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert r.returncode == 0, r.stderr
    (cand,) = doc["candidates"]
    g1 = _gate(cand, 1)
    assert cand["failed_gate"] == 1 and "host memory" in g1["detail"] and "RLIMIT_AS" in g1["detail"]
    assert g1["limit"] <= limit < g1["value"]
    assert doc["limits"]["host_bytes"] <= limit
    assert list(marks.iterdir()) == []  # nothing was built: the reference was never called
    assert doc["appended"] == {}


def test_gate2_reference_rejection_and_refinement_end_to_end(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    r, doc = run_probe(work, "--cases", "0", "--max-scale", "4", env={"PROBE_OP_MODE": "reject_m",
                                                                        "PROBE_OP_LIMIT": "40"})
    assert r.returncode == 0, r.stderr
    scales = [(c["scale"], c["verdict"], c["failed_gate"]) for c in doc["candidates"]]
    assert scales == [(2, "pass", None), (4, "fail", 2), (3, "fail", 2)]  # m 32 ok, 64 and 48 > 40
    assert "m 64 > 40" in _gate(doc["candidates"][1], 2)["detail"]
    assert _gate(doc["candidates"][0], 2)["value"] == 2 * 2 * 32 * 32 * 8  # traced bmm FLOPs of [2,32,32]@[2,32,8]


@pytest.mark.parametrize("mode,extra,status", [("wrong", [], "fail"), ("oom", [], "oom")])
def test_gate3_modelnew_mismatch_and_oom_are_recorded_not_fatal(tmp_path, mode, extra, status):
    work = probe_ops.make_workdir(tmp_path)
    r, doc = run_probe(work, "--cases", "0,1", "--max-scale", "2", *extra,
                       env={"PROBE_OP_MODE": mode, "PROBE_OP_LIMIT": "16"})
    assert r.returncode == 0, r.stderr
    c0, c1 = doc["candidates"]  # case 0: m 16 -> 32 > 16 misbehaves; case 1: m 8 -> 16 is fine
    assert c0["failed_gate"] == 3 and _gate(c0, 3)["detail"].startswith(f"verify {status}")
    assert c1["verdict"] == "pass"  # the probe went on after the failure


def test_gate4_refuses_a_run_slower_than_max_ms(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    r, doc = run_probe(work, "--cases", "0", "--max-scale", "2", "--max-ms", "100",
                       env={"PROBE_OP_MODE": "slow", "PROBE_OP_LIMIT": "16"})
    assert r.returncode == 0, r.stderr
    (cand,) = doc["candidates"]
    g4 = _gate(cand, 4)
    assert cand["failed_gate"] == 4 and g4["value"] >= 300 > g4["limit"] == 100


def test_gate4_floor_decides_only_when_the_roofline_alone_exceeds_max_ms():
    from mfulib.search.probe_gates import gate4_floor
    bw = {"peak_tflops_max": 1000.0, "bandwidth_gbps": 4000.0, "l2_bytes": 50e6}
    # 2.6e15 FLOPs at 1.3 x 1000 TFLOP/s = 2000 ms exactly: not above 2000 ms, so the candidate is timed
    assert gate4_floor(2.6e15, 1e6, bw, 2000.0) is None
    g = gate4_floor(5.2e15, 1e6, bw, 2000.0)
    assert g["ok"] is False and g["gate"] == 4 and g["value"] == pytest.approx(4000.0) and "predicted" in g["detail"]
    # bytes: 52 GB at 1.3 x 4000 GB/s = 10 ms; inputs within L2 never decide
    assert gate4_floor(0, 52e9, bw, 5.0)["value"] == pytest.approx(10.0)
    assert gate4_floor(0, 52e9, bw, 10.5) is None
    assert gate4_floor(0, 49e6, dict(bw, bandwidth_gbps=1e-6), 1.0) is None
    assert gate4_floor(1e18, 1e12, {}, 1.0) is None  # no peak.json: nothing is predicted


def test_gate4_fails_on_the_roofline_floor_without_running_the_candidate(tmp_path):
    # test-double peak.json stating 1.26e-7 TFLOP/s: case 0's 8192 FLOPs have a 50 ms floor (timed first, fast),
    # its x2 candidate's 32768 traced FLOPs a 200 ms floor > --max-ms 100: decided without running ModelNew
    work = probe_ops.make_workdir(tmp_path, peak_gbps=1000.0)
    _peak(work, 1.26e-7)
    r, doc = run_probe(work, "--cases", "0", "--max-scale", "2", "--max-ms", "100",
                       env={"PROBE_OP_MODE": "slow", "PROBE_OP_LIMIT": "16"})
    assert r.returncode == 0, r.stderr
    (cand,) = doc["candidates"]
    g3, g4 = _gate(cand, 3), _gate(cand, 4)
    assert cand["failed_gate"] == 4 and g3["ok"] is None and "predicted" in g4["detail"]
    assert g4["value"] > g4["limit"] == 100
    assert cand["time_ms"] is None  # the slow ModelNew (>= 300 ms) never ran
    assert doc["limits"]["peak_tflops_max"] == 1.26e-7  # what the floor divided by, recorded
    assert g4["value"] == pytest.approx(32768 / (1.3 * 1.26e5) * 1e3)


def _peak(work, tflops):
    peak = json.load(open(os.path.join(work, "peak.json")))
    peak["peak_tflops"] = {"float32": tflops}
    json.dump(peak, open(os.path.join(work, "peak.json"), "w"))


def test_a_source_already_slower_than_max_ms_is_replaced_by_the_next_case(tmp_path):
    # case 0 (m 64 > 48) sleeps 0.3 s in ModelNew at scale 1 itself; case 1 (m 16, 32 at x2) is fast. Test-double
    # peak.json of 5.04e-7 TFLOP/s: case 0's roofline floor (32768 FLOPs: 50 ms) is within 1/8 of --max-ms 100, so
    # it is timed first, found over the limit and replaced by case 1 (--top 1), whose ladder then runs
    lines = [probe_ops.case_line(1, 64, 32, 8), probe_ops.case_line(1, 16, 32, 8)]
    work = probe_ops.make_workdir(tmp_path, lines=lines, peak_gbps=1000.0)
    _peak(work, 5.04e-7)
    r, doc = run_probe(work, "--top", "1", "--max-scale", "2", "--max-ms", "100",
                       env={"PROBE_OP_MODE": "slow", "PROBE_OP_LIMIT": "48"})
    assert r.returncode == 0, r.stderr
    assert "its own run at scale 1 takes" in doc["skipped_sources"]["0"] and doc["sources"] == [1]
    assert doc["baselines"]["0"]["time_ms"] >= 300
    assert [(c["source_case"], c["scale"], c["verdict"]) for c in doc["candidates"]] == [(1, 2, "pass")]
    assert doc["complete"] is True


def test_sources_whose_roofline_floor_exceeds_max_ms_are_skipped_without_running(tmp_path):
    work = probe_ops.make_workdir(tmp_path, peak_gbps=1000.0)
    _peak(work, 1e-12)  # 1 FLOP/s: every case's floor is hours
    r, doc = run_probe(work, "--top", "1", "--max-scale", "2", "--max-ms", "100", env={"PROBE_OP_MODE": "slow"})
    assert r.returncode == 0, r.stderr
    assert doc["sources"] == [] and doc["candidates"] == [] and doc["baselines"] == {}
    assert all("at scale 1 already predicted" in doc["skipped_sources"][k] for k in ("0", "1"))


def test_gate5_catches_a_reference_that_ignores_the_scaled_axis(tmp_path):
    # A [1, 32768, 256] fp32 (32 MiB, 64 MiB at x2); a stated bandwidth of 1 GB/s and L2 of 64 KiB (test-double
    # peak.json): the lazy run would have to take > 50 ms to pass, the honest one sleeps its bytes at 0.5 GB/s
    line = probe_ops.case_line(1, 32768, 256, 8)
    results = {}
    for mode in ("membound", "lazy"):
        work = probe_ops.make_workdir(tmp_path / mode, lines=[line], peak_gbps=1.0)
        peak = json.load(open(os.path.join(work, "peak.json")))
        peak["device"] = {"l2_cache_bytes": 65536}
        json.dump(peak, open(os.path.join(work, "peak.json"), "w"))
        r, doc = run_probe(work, "--cases", "0", "--max-scale", "2", "--scale-dims", "seq",
                           env={"PROBE_OP_MODE": mode})
        assert r.returncode == 0, r.stderr
        (results[mode],) = doc["candidates"]
    honest, lazy = results["membound"], results["lazy"]
    assert honest["verdict"] == "pass" and _gate(honest, 5)["ok"] is True
    assert _gate(honest, 5)["value"] < 1.3  # ~0.5 GB/s: what a memory-bound kernel at that speed gives
    assert lazy["failed_gate"] == 5 and _gate(lazy, 5)["value"] > _gate(lazy, 5)["limit"] == pytest.approx(1.3)
    assert all(_gate(lazy, n)["ok"] for n in (1, 2, 3, 4))  # only the bandwidth gate sees it
    assert "did nothing" in _gate(lazy, 5)["detail"]


def test_saturation_stops_a_ladder_whose_wall_tflops_no_longer_rises_and_one_child_serves_all(tmp_path):
    # "flat": ModelNew runs at a constant 0.25 MFLOP/s (sleeps FLOPs / 2.5e5 s: 33 ms at scale 1, 131 ms at x2,
    # 524 ms at x4), so doubling raises the wall figure by ~0%: the ladder ends at x2; without the stop it climbs on
    work = probe_ops.make_workdir(tmp_path, lines=[probe_ops.case_line(1, 16, 32, 8)])
    pids = tmp_path / "pids"
    pids.mkdir()
    r, doc = run_probe(work, "--cases", "0", "--max-scale", "4",
                       env={"PROBE_OP_MODE": "flat", "PROBE_OP_PIDS": str(pids)})
    assert r.returncode == 0, r.stderr
    (cand,) = doc["candidates"]
    assert cand["scale"] == 2 and cand["verdict"] == "pass" and "not tried" in cand["saturated"]
    base = doc["baselines"]["0"]
    assert base["time_ms"] >= 32.0 and base["figure"] > 0  # 8192 FLOPs / 33 ms, timed at scale 1 first
    assert cand["wall_figure"] < 1.05 * base["figure"]
    assert cand["wall_s"] > 0 and all(g["wall_s"] is not None for g in cand["gates"])
    assert len(list(pids.iterdir())) == 1  # the baseline and the candidate ran in one persistent child

    work2 = probe_ops.make_workdir(tmp_path / "nostop", lines=[probe_ops.case_line(1, 16, 32, 8)])
    r, doc = run_probe(work2, "--cases", "0", "--max-scale", "4", "--no-saturation-stop",
                       env={"PROBE_OP_MODE": "flat"})
    assert r.returncode == 0, r.stderr
    assert [(c["scale"], c["verdict"], c["saturated"]) for c in doc["candidates"]] == \
        [(2, "pass", None), (4, "pass", None)]
    assert doc["baselines"] == {}


def test_budget_bounds_the_run_inside_a_candidate(tmp_path):
    # sleep1 at 2 s: every ModelNew call takes 2 s, so one candidate (verify + warm-up + 3 timed runs) needs > 10 s;
    # a 10 s budget ends the run inside it: that candidate gets no verdict, and the probe stops within the budget
    work = probe_ops.make_workdir(tmp_path)
    r, doc = run_probe(work, "--cases", "0,1", "--max-scale", "4", "--budget-s", "10",
                       env={"PROBE_OP_MODE": "sleep1", "PROBE_OP_SLEEP_S": "2"})
    assert r.returncode == 0, r.stderr
    assert doc["complete"] is False and "--budget-s" in doc["interrupted"]
    assert all(c["verdict"] in ("pass", "fail") for c in doc["candidates"])  # the cut one is not recorded
    assert not [c for c in doc["candidates"] if c["source_case"] == 1]  # never started
    assert doc["wall_s"] <= 10 + 5  # the budget plus the kill and clean-up, not another candidate's 10 s
    # where the cut candidate's seconds went. Its trace (gate 2, a CPU re-run) usually passes inside the budget and
    # the 2 s calls of verify/timing are cut; on a loaded machine the trace's subprocess (a torch import) can take
    # the whole budget - a CI run cut it there. Either way cut_in names the first gate not done.
    cut = doc["cut_candidate"]
    assert cut["source_case"] == 0 and cut["gates_done"] in ([1], [1, 2])
    assert cut["cut_in"].startswith("gate 2" if cut["gates_done"] == [1] else "gates 3-4")
    assert 0 < cut["wall_s"] <= 10 and "--budget-s" in cut["why"]


def test_a_budget_that_ends_in_the_ranking_trace_is_an_interruption_and_a_hang_is_an_error(tmp_path):
    # slowref: tracing the reference takes 30 s. Cut by --budget-s (the batch's lean settings on the H200 hit
    # this): nothing is wrong with the operator, so the probe exits 0 with probe.json incomplete and no candidate,
    # and the pipeline goes on with the original cases. Cut by --timeout-s: a reference that hangs, a clear error.
    work = probe_ops.make_workdir(tmp_path)
    r, doc = run_probe(work, "--budget-s", "4", env={"PROBE_OP_MODE": "slowref"}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert doc["complete"] is False and doc["candidates"] == [] and doc["appended"] == {}
    assert "ranking trace" in doc["interrupted"] and "raise --budget-s" in doc["interrupted"]
    assert "ranking trace" in r.stdout
    r, _doc = run_probe(work, "--timeout-s", "4", env={"PROBE_OP_MODE": "slowref"}, timeout=120)
    assert r.returncode == 2 and "a reference that hangs" in r.stderr, r.stderr


def test_traces_started_ahead_give_the_same_verdicts_and_leave_nothing_running(tmp_path):
    # two source cases, ladder 2, 4: with --trace-jobs 2 the tracer of the next factor / the next source runs while
    # the child runs the current candidate; the verdicts and traced FLOPs are those of the sequential run
    runs = {}
    for jobs in ("0", "2"):
        work = probe_ops.make_workdir(tmp_path / f"j{jobs}")
        r, doc = run_probe(work, "--cases", "0,1", "--max-scale", "4", "--no-saturation-stop", "--trace-jobs", jobs,
                           env={"TMPDIR": str(tmp_path / f"j{jobs}")})
        assert r.returncode == 0, r.stderr
        runs[jobs] = doc
        assert not list((tmp_path / f"j{jobs}").glob("mfu_probe_*")), "a staged candidate was left behind"
    key = lambda d: [(c["candidate_id"], c["verdict"], c["flops"]) for c in d["candidates"]]  # noqa: E731
    assert key(runs["0"]) == key(runs["2"]) and len(key(runs["0"])) == 4
    waited = [next(g for g in c["gates"] if g["gate"] == 2) for c in runs["2"]["candidates"]]
    assert any(g["waited_s"] < g["wall_s"] for g in waited)  # at least one trace had started ahead
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in ps  # no tracer or gate child of either run is still alive


def test_probe_refuses_a_zero_budget_and_negative_trace_jobs(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    for extra in (["--budget-s", "0"], ["--trace-jobs", "-1"], ["--timeout-s", "0"]):
        r, _doc = run_probe(work, "--cases", "0", *extra)
        assert r.returncode == 2 and "--budget-s and --timeout-s must be > 0" in r.stderr, (extra, r.stderr)


def test_dry_run_with_sequence_lengths_that_are_not_integers_reports_a_refusal_not_a_traceback(tmp_path):
    # [B, S, H] activations and an actual_seq_lengths list with a null in it: scaling the sequence raised
    # TypeError from int(None) in the probe (dry run included); it is a refusal that gate 2 reports
    def line(b, s, lens):
        return json.dumps({"inputs": [{"name": "x", "type": "tensor", "dtype": "float32", "shape": [b, s, 16]},
                                      {"name": "actual_seq_lengths", "type": "attr", "dtype": "list",
                                       "value": lens}]})
    work = probe_ops.make_workdir(tmp_path, lines=[line(2, 8, [8, None]), line(3, 4, [4, 1, 2])])
    r, _doc = run_probe(work, "--dry-run", "--max-scale", "2", timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "actual_seq_lengths holds None, not an in" in r.stdout, r.stdout


def _load_probe_cli():
    import importlib.util
    spec = importlib.util.spec_from_file_location("max_shape_probe_cli", PROBE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("warmup_s, budget_s", [(3.0, 5.0), (4.0, 3.0)])
def test_the_ranking_trace_counts_the_trace_start_against_the_budget_and_kills_a_fresh_child(
        tmp_path, monkeypatch, warmup_s, budget_s):
    # the ranking trace starts through the trace zygote, whose warm-up (torch import, seconds on a loaded host)
    # happened before the budget's wait began: a 5 s budget ran 3 s + 5 s. With the warm-up past the budget the
    # trace is killed the moment it is forked, before its setsid: killpg found no group, the child ran on and the
    # probe waited 10 s for it. Warm-up simulated by a start_tool that sleeps first; the tracer: slowref (30 s).
    import time
    from types import SimpleNamespace
    from mfulib.run import trace_zygote
    from mfulib.core.opdir import OpDir
    cli_mod = _load_probe_cli()
    work = probe_ops.make_workdir(tmp_path)
    monkeypatch.setenv("PROBE_OP_MODE", "slowref")
    real_start, started = trace_zygote.start_tool, []

    def slow_start(argv, log):
        time.sleep(warmup_s)
        job = real_start(argv, log)
        started.append(job)
        return job
    monkeypatch.setattr(trace_zygote, "start_tool", slow_start)
    od = OpDir(work)
    args = SimpleNamespace(budget_s=budget_s, timeout_s=600.0, flops_tool=os.path.join(os.path.dirname(PROBE),
                                                                                     "check_flops.py"), seed=0)
    try:
        trace_zygote.shared()  # warm already: only the simulated warm-up counts
        t0 = time.monotonic()
        with pytest.raises(probe.OutOfBudget, match="ranking trace"):
            cli_mod.rank_sources(od, args, od.describe_all(), None, t0)
        elapsed = time.monotonic() - t0
        assert elapsed < max(budget_s, warmup_s) + 2.0, elapsed
        (job,) = started
        assert job.poll() is not None  # killed and reaped, not still tracing
    finally:
        trace_zygote.close_shared()
