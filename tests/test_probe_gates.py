"""max_shape_probe: each of the five gates rejects a crafted candidate; binary refinement; the gates' order; budget,
hang and saturation rules. The probe runs in-process on a fake clock with a fake tracer and gate runner
(tests/probe_fakes.py: no sleep, no subprocess); one end-to-end test runs the real command with its real child."""
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
from types import SimpleNamespace

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_ops  # noqa: E402
from probe_fakes import FakeClock, FakeGateRunner, FakeTracer, Op  # noqa: E402

from mfulib.core.errors import SettingsRefused, UserError  # noqa: E402
from mfulib.schemas import probe_json as pj  # noqa: E402
from mfulib.search import ladder, probe_run  # noqa: E402
from mfulib.search import probe_gates  # noqa: E402
from mfulib.search.probe_gates import OutOfBudget, gate1, gate4_floor  # noqa: E402

PROBE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "max_shape_probe.py")


def _load_probe_cli():
    spec = importlib.util.spec_from_file_location("max_shape_probe_cli", PROBE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CLI = _load_probe_cli()


def run_probe(work, *extra, env=None, preexec=None, timeout=300):
    """The real command in a subprocess (end-to-end tests): (CompletedProcess, probe.json or None)."""
    r = subprocess.run([sys.executable, PROBE, "--dir", work, "--backend", "cpu", *extra], capture_output=True,
                       text=True, timeout=timeout, env=dict(os.environ, **(env or {})), preexec_fn=preexec)
    doc = pj.read_probe_json(os.path.join(work, "probe.json")) if os.path.exists(os.path.join(work, "probe.json")) \
        else None
    return r, doc


def fake_probe(work, *extra, op=None, durations=()):
    """The probe in-process on fakes: SimpleNamespace(rc, doc, clock, tracer, runner)."""
    clock, op = FakeClock(), op or Op()
    tracer, runner = FakeTracer(clock, op, durations), FakeGateRunner(clock, op)
    args = CLI.build_parser().parse_args(["--dir", work, "--backend", "cpu", *extra])
    rc = probe_run.run(args, t_start=clock(), clock=clock, gate_runner=runner, tracer=tracer)
    path = os.path.join(work, "probe.json")
    return SimpleNamespace(rc=rc, doc=pj.read_probe_json(path) if os.path.exists(path) else None, clock=clock,
                           tracer=tracer, runner=runner)


def _gate(cand, n):
    return next(g for g in cand["gates"] if g["gate"] == n)


def _peak(work, tflops):
    peak = json.load(open(os.path.join(work, "peak.json")))
    peak["peak_tflops"] = {"float32": tflops}
    json.dump(peak, open(os.path.join(work, "peak.json"), "w"))


def test_binary_refinement_finds_the_largest_passing_factor():
    tried, why = ladder.search_factor(lambda s: s <= 11, 64, refine_steps=3)
    assert tried == [(2, True), (4, True), (8, True), (16, False), (12, False), (10, True), (11, True)]
    assert why == "x16 failed; largest passing x11 (x12 failed)"
    tried, _why = ladder.search_factor(lambda s: s <= 37, 64, refine_steps=10)
    assert max(s for s, ok in tried if ok) == 37 and (38, False) in tried
    assert ladder.search_factor(lambda s: False, 64) == ([(2, False)], "nothing passed: x2 failed")
    assert ladder.ladder(48) == [2, 4, 8, 16, 32, 48]
    assert ladder.search_factor(lambda s: True, 8)[1] == "every factor up to --max-scale 8 passed"


def test_a_saturated_pass_in_the_bisection_ends_it_as_the_message_says():
    # x8 fails, x6 passes but saturated: "larger factors are not tried" - and x7 is not tried (it used to be)
    tried, why = ladder.search_factor(lambda s: ladder.STOP if s == 6 else s < 8, 64)
    assert tried == [(2, True), (4, True), (8, False), (6, True)]
    assert why == "x8 failed; bisection saturated at x6: larger factors are not tried"


def test_gate1_refuses_by_max_bytes_without_running_anything(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    p = fake_probe(work, "--cases", "0", "--max-bytes", "4000", "--max-scale", "2", "--scale-dims", "batch")
    (cand,) = p.doc["candidates"]
    assert cand["failed_gate"] == 1 and len(cand["gates"]) == 1
    assert _gate(cand, 1)["value"] == cand["input_bytes"] == 6144 > 4000
    # the candidate (A [2, 16, 32], B [2, 32, 8]) was never built; only the original case was, by the tracer that
    # counts its scale-1 FLOPs
    assert p.tracer.traced == [(1, 16, 32, 8)] and p.runner.requests == []


def test_gate1_refuses_a_case_whose_host_build_exceeds_host_memory(tmp_path, monkeypatch):
    # 64 GiB of fp32 inputs described; the probe sees a 6 GiB address-space limit (RLIMIT_AS)
    work = probe_ops.make_workdir(tmp_path, lines=[probe_ops.case_line(64, 65536, 4096, 1)])
    limit, real = 6 << 30, resource.getrlimit
    monkeypatch.setattr(resource, "getrlimit", lambda r: (limit, limit) if r == resource.RLIMIT_AS else real(r))
    p = fake_probe(work, "--cases", "0", "--max-bytes", "1e15", "--max-scale", "2", "--scale-dims", "batch")
    (cand,) = p.doc["candidates"]
    g1 = _gate(cand, 1)
    assert cand["failed_gate"] == 1 and "host memory" in g1["detail"] and "RLIMIT_AS" in g1["detail"]
    assert g1["limit"] <= limit < g1["value"]
    assert p.doc["limits"]["host_bytes"] <= limit
    assert p.tracer.traced == [] and p.runner.requests == []  # nothing was built: the reference was never called
    assert p.doc["appended"] == {}


def test_gate2_reference_rejection_and_refinement(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    p = fake_probe(work, "--cases", "0", "--max-scale", "4", "--scale-dims", "seq", op=Op("reject_m", limit=40))
    scales = [(c["scale"], c["verdict"], c["failed_gate"]) for c in p.doc["candidates"]]
    assert scales == [(2, "pass", None), (4, "fail", 2), (3, "fail", 2)]  # m 32 ok, 64 and 48 > 40
    assert "m 64 > 40" in _gate(p.doc["candidates"][1], 2)["detail"]
    assert _gate(p.doc["candidates"][0], 2)["value"] == 2 * 1 * 32 * 32 * 8  # traced bmm FLOPs of [1,32,32]@[1,32,8]
    (lad,) = p.doc["ladders"]
    assert lad["symbols"] == ["seq"] and lad["stopped"] == "x4 failed; largest passing x2 (x3 failed)"


def test_a_case_the_reference_refuses_at_scale_1_is_no_source_and_leaves_the_symbols_alone(tmp_path, capsys):
    # case 0 (m 16 > 12): the reference refuses it as given - each of its candidates would fail gate 2; it is
    # skipped with its case-file line and the reference's words, and the symbols come from the other cases
    lines = [probe_ops.case_line(1, 16, 32, 8), probe_ops.case_line(2, 8, 16, 4), probe_ops.case_line(1, 4, 8, 4)]
    work = probe_ops.make_workdir(tmp_path, lines=lines)
    p = fake_probe(work, "--max-scale", "2", "--scale-dims", "batch", op=Op("reject_m", limit=12))
    assert p.rc == 0 and 0 not in p.doc["sources"] and sorted(p.doc["sources"]) == [1, 2]
    why = p.doc["skipped_sources"]["0"]
    assert "reference raises on it at scale 1 (Op_perf_cases.jsonl line 1)" in why and "m 16 > 12" in why, why
    assert {c["source_case"] for c in p.doc["candidates"]} == {1, 2}
    out = capsys.readouterr().out
    assert "symbol analysis without case(s) [0]" in out and "cases [1, 2]" in out


def test_a_rerun_with_a_smaller_max_scale_refuses_to_keep_larger_appended_cases(tmp_path):
    # a new user's report: --max-scale 4, then 2 "resumed" and kept the x4 cases for the search
    work = probe_ops.make_workdir(tmp_path)
    p = fake_probe(work, "--cases", "0", "--max-scale", "4", "--scale-dims", "seq")
    assert p.rc == 0 and any(max(a["factors"].values()) == 4 for a in p.doc["appended"].values())
    files = {n: (os.path.getmtime(os.path.join(work, n)), open(os.path.join(work, n)).read())
             for n in ("model.json", "Op_perf_cases.jsonl", "probe.json")}
    with pytest.raises(SettingsRefused, match=r"scale beyond --max-scale 2 .*--restore first"):
        fake_probe(work, "--cases", "0", "--max-scale", "2", "--scale-dims", "seq")
    # refused before anything was written (exit status 4: make keeps the earlier probe's stamp)
    assert files == {n: (os.path.getmtime(os.path.join(work, n)), open(os.path.join(work, n)).read()) for n in files}
    p = fake_probe(work, "--cases", "0", "--max-scale", "8", "--scale-dims", "seq")  # a larger one resumes
    assert p.rc == 0 and p.doc["resumed"]


@pytest.mark.parametrize("mode,status", [("wrong", "fail"), ("oom", "oom")])
def test_gate3_modelnew_mismatch_and_oom_are_recorded_not_fatal(tmp_path, mode, status):
    work = probe_ops.make_workdir(tmp_path)
    p = fake_probe(work, "--cases", "0,1", "--max-scale", "2", "--scale-dims", "seq", op=Op(mode, limit=16))
    c0, c1 = p.doc["candidates"]  # case 0: m 16 -> 32 > 16 misbehaves; case 1: m 8 -> 16 is fine
    assert c0["failed_gate"] == 3 and _gate(c0, 3)["detail"].startswith(f"verify {status}")
    assert c1["verdict"] == "pass"  # the probe went on after the failure


def test_a_child_that_dies_in_gate3_is_named_with_its_exit_status_and_last_output(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    p = fake_probe(work, "--cases", "0", "--max-scale", "2", "--scale-dims", "seq", op=Op("die", limit=16))
    (cand,) = p.doc["candidates"]
    detail = _gate(cand, 3)["detail"]
    assert cand["failed_gate"] == 3 and detail.startswith("verify: the child died (exit 1): ")
    assert "RuntimeError: shape too large (test double)" in detail and "probe child started" in detail


def test_gate4_refuses_a_run_slower_than_max_ms(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    p = fake_probe(work, "--cases", "0", "--max-scale", "2", "--max-ms", "100", "--scale-dims", "seq",
                   op=Op("slow", limit=16))
    (cand,) = p.doc["candidates"]
    g4 = _gate(cand, 4)
    assert cand["failed_gate"] == 4 and g4["value"] >= 300 > g4["limit"] == 100


def test_gate4_floor_decides_only_when_the_roofline_alone_exceeds_max_ms():
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
    # test-double peak.json stating 8.4e-8 TFLOP/s: case 0's 8192 FLOPs have a 75 ms floor (timed first, fast),
    # its seq x2 candidate's 16384 traced FLOPs a 150 ms floor > --max-ms 100: decided without running ModelNew
    work = probe_ops.make_workdir(tmp_path, peak_gbps=1000.0)
    _peak(work, 8.4e-8)
    p = fake_probe(work, "--cases", "0", "--max-scale", "2", "--max-ms", "100", "--scale-dims", "seq",
                   op=Op("slow", limit=16))
    (cand,) = p.doc["candidates"]
    g3, g4 = _gate(cand, 3), _gate(cand, 4)
    assert cand["failed_gate"] == 4 and g3["ok"] is None and "predicted" in g4["detail"]
    assert g4["value"] > g4["limit"] == 100
    assert cand["time_ms"] is None  # the slow ModelNew (>= 300 ms) never ran
    assert p.runner.requests == [((1, 16, 32, 8), True)]  # only the source, timed at scale 1
    assert p.doc["limits"]["peak_tflops_max"] == 8.4e-8  # what the floor divided by, recorded
    assert g4["value"] == pytest.approx(16384 / (1.3 * 8.4e4) * 1e3)


def test_a_source_already_slower_than_max_ms_is_replaced_by_the_next_case(tmp_path):
    # case 0 (m 64 > 48) takes 0.3 s in ModelNew at scale 1 itself; case 1 (m 16, 32 at x2) is fast. Test-double
    # peak.json of 5.04e-7 TFLOP/s: case 0's roofline floor (32768 FLOPs: 50 ms) is within 1/8 of --max-ms 100, so
    # it is timed first, found over the limit and replaced by case 1 (--top 1), whose ladder then runs
    lines = [probe_ops.case_line(1, 64, 32, 8), probe_ops.case_line(1, 16, 32, 8)]
    work = probe_ops.make_workdir(tmp_path, lines=lines, peak_gbps=1000.0)
    _peak(work, 5.04e-7)
    p = fake_probe(work, "--top", "1", "--max-scale", "2", "--max-ms", "100", "--scale-dims", "seq",
                   op=Op("slow", limit=48))
    doc = p.doc
    assert "its own run at scale 1 takes" in doc["skipped_sources"]["0"] and doc["sources"] == [1]
    assert doc["baselines"]["0"]["time_ms"] >= 300
    assert [(c["source_case"], c["scale"], c["verdict"]) for c in doc["candidates"]] == [(1, 2, "pass")]
    assert doc["complete"] is True


def test_sources_whose_roofline_floor_exceeds_max_ms_are_skipped_without_running(tmp_path):
    work = probe_ops.make_workdir(tmp_path, peak_gbps=1000.0)
    _peak(work, 1e-12)  # 1 FLOP/s: every case's floor is hours
    p = fake_probe(work, "--top", "1", "--max-scale", "2", "--max-ms", "100", op=Op("slow"))
    assert p.doc["sources"] == [] and p.doc["candidates"] == [] and p.doc["baselines"] == {}
    assert all("at scale 1 already predicted" in p.doc["skipped_sources"][k] for k in ("0", "1"))
    assert p.runner.requests == []


def test_gate5_catches_a_reference_that_ignores_the_scaled_axis(tmp_path):
    # A [1, 448, 256] fp32 (448 KiB, 896 KiB at x2: within the CPU's 1 MB verify cap); a stated bandwidth of 1 GB/s
    # and L2 of 64 KiB (test-double peak.json): the lazy run would have to take > 0.7 ms to pass, the honest one
    # runs its bytes at 0.5 GB/s
    line = probe_ops.case_line(1, 448, 256, 8)
    results = {}
    for mode in ("membound", "lazy"):
        work = probe_ops.make_workdir(tmp_path / mode, lines=[line], peak_gbps=1.0)
        peak = json.load(open(os.path.join(work, "peak.json")))
        peak["device"] = {"l2_cache_bytes": 65536}
        json.dump(peak, open(os.path.join(work, "peak.json"), "w"))
        p = fake_probe(work, "--cases", "0", "--max-scale", "2", "--scale-dims", "seq", op=Op(mode))
        (results[mode],) = p.doc["candidates"]
    honest, lazy = results["membound"], results["lazy"]
    assert honest["verdict"] == "pass" and _gate(honest, 5)["ok"] is True
    assert _gate(honest, 5)["value"] < 1.3  # ~0.5 GB/s: what a memory-bound kernel at that speed gives
    assert lazy["failed_gate"] == 5 and _gate(lazy, 5)["value"] > _gate(lazy, 5)["limit"] == pytest.approx(1.3)
    assert all(_gate(lazy, n)["ok"] for n in (1, 2, 3, 4))  # only the bandwidth gate sees it
    assert "did nothing" in _gate(lazy, 5)["detail"]


def test_saturation_stops_a_ladder_whose_wall_tflops_no_longer_rises_and_one_runner_serves_all(tmp_path):
    # "flat": ModelNew runs at a constant 0.25 MFLOP/s (FLOPs / 2.5e5 s: 33 ms at scale 1, 66 ms at seq x2, 131 ms
    # at x4), so doubling raises the wall figure by ~0%: the ladder ends at x2; without the stop it climbs on
    work = probe_ops.make_workdir(tmp_path, lines=[probe_ops.case_line(1, 16, 32, 8)])
    p = fake_probe(work, "--cases", "0", "--max-scale", "4", "--scale-dims", "seq", op=Op("flat"))
    (cand,) = p.doc["candidates"]
    assert cand["scale"] == 2 and cand["verdict"] == "pass" and "not tried" in cand["saturated"]
    base = p.doc["baselines"]["0"]
    assert base["time_ms"] >= 32.0 and base["figure"] > 0  # 8192 FLOPs / 33 ms, timed at scale 1
    assert cand["wall_figure"] < 1.05 * base["figure"]
    assert cand["wall_s"] > 0 and all(g["wall_s"] is not None for g in cand["gates"])
    # the candidate, then its source at scale 1 (time only), by the one gate runner, which the probe then closed
    assert p.runner.requests == [((1, 32, 32, 8), False), ((1, 16, 32, 8), True)] and p.runner.closed
    assert p.doc["ladders"][0]["stopped"] == "saturated at x2: larger factors are not tried"

    work2 = probe_ops.make_workdir(tmp_path / "nostop", lines=[probe_ops.case_line(1, 16, 32, 8)])
    p = fake_probe(work2, "--cases", "0", "--max-scale", "4", "--no-saturation-stop", "--scale-dims", "seq",
                   op=Op("flat"))
    assert [(c["scale"], c["verdict"], c["saturated"]) for c in p.doc["candidates"]] == \
        [(2, "pass", None), (4, "pass", None)]
    assert p.doc["baselines"] == {}


@pytest.mark.parametrize("durations, gates_done, cut_in", [((1.0, 1.0), [1, 2], "gates 3-4"),
                                                           ((1.0, 30.0), [1], "gate 2")])
def test_budget_bounds_the_run_inside_a_candidate(tmp_path, durations, gates_done, cut_in):
    # sleep1 at 2 s: every ModelNew call takes 2 s, so one candidate (verify + warm-up + 3 timed runs) needs 10 s
    # after its trace; a 10 s budget ends the run inside it - in gates 3-4 after a 1 s trace, in gate 2 when its
    # trace takes 30 s. That candidate gets no verdict, and the probe stops within the budget
    work = probe_ops.make_workdir(tmp_path)
    p = fake_probe(work, "--cases", "0,1", "--max-scale", "4", "--budget-s", "10", "--trace-jobs", "0",
                   op=Op("sleep1", sleep_s=2.0), durations=durations)
    doc = p.doc
    assert p.rc == 0 and doc["complete"] is False and "--budget-s" in doc["interrupted"]
    assert doc["candidates"] == []  # the cut one is not recorded, case 1 never started
    assert doc["wall_s"] <= 10
    cut = doc["cut_candidate"]  # where the cut candidate's seconds went
    assert cut["source_case"] == 0 and cut["gates_done"] == gates_done and cut["cut_in"].startswith(cut_in)
    assert 0 < cut["wall_s"] <= 10 and "--budget-s" in cut["why"]
    assert p.tracer.running() == []


def test_a_budget_that_ends_in_the_ranking_trace_is_an_interruption_and_a_hang_is_an_error(tmp_path, capsys):
    # slowref: tracing the reference takes 30 s. Cut by --budget-s (the batch's lean settings on the H200 hit
    # this): nothing is wrong with the operator, so the probe exits 0 with probe.json incomplete and no candidate,
    # and the pipeline goes on with the original cases. Cut by --timeout-s: a reference that hangs, a clear error.
    work = probe_ops.make_workdir(tmp_path)
    p = fake_probe(work, "--budget-s", "4", op=Op("slowref"))
    assert p.rc == 0 and p.doc["complete"] is False and p.doc["candidates"] == [] and p.doc["appended"] == {}
    assert "ranking trace" in p.doc["interrupted"] and "raise --budget-s" in p.doc["interrupted"]
    assert "ranking trace" in capsys.readouterr().out
    assert p.tracer.running() == []
    with pytest.raises(UserError, match="a reference that hangs"):
        fake_probe(work, "--timeout-s", "4", op=Op("slowref"))


def test_traces_started_ahead_give_the_same_verdicts_and_leave_nothing_running(tmp_path, monkeypatch):
    # two source cases, ladder 2, 4: with --trace-jobs 2 the tracer of the next factor / the next source runs while
    # the runner runs the current candidate; the verdicts and traced FLOPs are those of the sequential run
    # the threads each trace is given: torch's default alone, 16 cpus // (2 ahead + the current trace or the gate
    # child) with --trace-jobs 2; the ranking trace (the first start, alone) always the default
    runs, threads = {}, {}
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    for jobs in ("0", "2"):
        tmp = tmp_path / f"j{jobs}"
        work = probe_ops.make_workdir(tmp)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        p = fake_probe(work, "--cases", "0,1", "--max-scale", "4", "--no-saturation-stop", "--trace-jobs", jobs)
        runs[jobs], threads[jobs] = p.doc, p.tracer.threads
        assert not list(tmp.glob("mfu_probe_*")), "a staged candidate was left behind"
        assert p.tracer.running() == [] and p.tracer.closed  # no trace left running
    key = lambda d: [(c["candidate_id"], c["verdict"], c["flops"]) for c in d["candidates"]]  # noqa: E731
    # per source: batch, seq, gemm_k, gemm_n alone (x2, x4 each), then the joint ladders of two, three and four of
    # them (x2, x4 each: a constant-time kernel gains with every symbol, so the greedy selection takes them all)
    assert key(runs["0"]) == key(runs["2"]) and len(key(runs["0"])) == 2 * (4 * 2 + 2 + 2 + 2)
    waited = [next(g for g in c["gates"] if g["gate"] == 2) for c in runs["2"]["candidates"]]
    assert any(g["waited_s"] < g["wall_s"] for g in waited)  # at least one trace had started ahead
    assert all(g["waited_s"] == g["wall_s"] for c in runs["0"]["candidates"] for g in c["gates"] if g["gate"] == 2)
    assert threads["0"] and set(threads["0"]) == {None}
    assert threads["2"][0] is None and set(threads["2"][1:]) == {5} and len(threads["2"]) > 1


def test_each_single_ladders_start_is_traced_ahead_and_no_candidate_twice(tmp_path, monkeypatch):
    # one source, four scaled symbols, ladder x2, x4: with --trace-jobs 2 the x2 start of every single ladder after
    # the first is traced while an earlier candidate runs (before, only the ladder's next factor and the next
    # sources' first candidate were: each ladder start waited for its whole trace), the verdicts are those of the
    # sequential run, and no candidate is traced twice
    runs = {}
    for jobs in ("0", "2"):
        tmp = tmp_path / f"j{jobs}"
        work = probe_ops.make_workdir(tmp)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        p = fake_probe(work, "--cases", "0", "--max-scale", "4", "--no-saturation-stop", "--trace-jobs", jobs)
        runs[jobs] = p
        assert p.tracer.running() == []
    key = lambda d: [(c["candidate_id"], c["verdict"], c["flops"]) for c in d["candidates"]]  # noqa: E731
    assert key(runs["0"].doc) == key(runs["2"].doc)
    cands = {c["candidate_id"]: c for c in runs["2"].doc["candidates"]}
    starts = [cid for cid in cands if cid.count("x") == 1 and cid.endswith("x2")]  # c0:<symbol>x2
    assert len(starts) == 4
    for cid in starts[1:]:
        g2 = _gate(cands[cid], 2)
        assert g2["waited_s"] < g2["wall_s"], (cid, g2)  # started ahead
    # one trace per candidate that reached gate 2, plus the ranking trace: none started twice, none wasted here
    traced_here = sum(1 for c in cands.values() if any(g["gate"] == 2 for g in c["gates"]))
    assert len(runs["2"].tracer.procs) == traced_here + 1
    waited = lambda d: sum(_gate(c, 2)["waited_s"] for c in d["candidates"])  # noqa: E731
    assert waited(runs["2"].doc) < 0.5 * waited(runs["0"].doc)


def test_trace_threads_share_the_cpus_among_the_traces_that_run_at_once():
    assert probe_gates.trace_threads(16, 0) is None  # one trace at a time: torch's default
    assert probe_gates.trace_threads(16, 4) == 3 and probe_gates.trace_threads(16, 2) == 5
    assert probe_gates.trace_threads(2, 1) == 1 and probe_gates.trace_threads(2, 4) == 1
    assert probe_gates.trace_threads(None, 3) == 1


def test_probe_refuses_a_zero_budget_and_negative_trace_jobs(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    for extra in (["--budget-s", "0"], ["--trace-jobs", "-1"], ["--timeout-s", "0"]):
        with pytest.raises(UserError, match="--budget-s and --timeout-s must be > 0"):
            fake_probe(work, "--cases", "0", *extra)


def test_dry_run_with_sequence_lengths_that_are_not_integers_reports_a_refusal_not_a_traceback(tmp_path, capsys):
    # [B, S, H] activations and an actual_seq_lengths list with a null in it: scaling the sequence raised
    # TypeError from int(None) in the probe (dry run included); it is a refusal that gate 2 reports
    def line(b, s, lens):
        return json.dumps({"inputs": [{"name": "x", "type": "tensor", "dtype": "float32", "shape": [b, s, 16]},
                                      {"name": "actual_seq_lengths", "type": "attr", "dtype": "list",
                                       "value": lens}]})
    work = probe_ops.make_workdir(tmp_path, lines=[line(2, 8, [8, None]), line(3, 4, [4, 1, 2])])
    p = fake_probe(work, "--dry-run", "--max-scale", "2")
    assert p.rc == 0 and p.doc is None and p.tracer.procs == []
    out = capsys.readouterr().out
    assert any("actual_seq_lengths holds None" in ln for ln in out.splitlines())  # the attribute and its value


@pytest.mark.parametrize("warmup_s, budget_s", [(3.0, 5.0), (4.0, 3.0)])
def test_the_ranking_trace_counts_the_trace_start_against_the_budget_and_kills_a_fresh_child(
        tmp_path, warmup_s, budget_s):
    # the ranking trace starts through the trace zygote, whose warm-up (torch import, seconds on a loaded host)
    # happened before the budget's wait began: a 5 s budget ran 3 s + 5 s. With the warm-up past the budget the
    # trace is killed the moment it is forked (it used to run on, and the probe waited for it). The tracer:
    # slowref (30 s), started after warmup_s
    from mfulib.core.opdir import OpDir
    work = probe_ops.make_workdir(tmp_path)
    clock = FakeClock()
    tracer = FakeTracer(clock, Op("slowref", warmup_s=warmup_s))
    od = OpDir(work)
    args = SimpleNamespace(budget_s=budget_s, timeout_s=600.0, flops_tool=os.path.join(os.path.dirname(PROBE),
                                                                                     "check_flops.py"), seed=0)
    t0 = clock()
    with pytest.raises(OutOfBudget, match="ranking trace"):
        probe_run.rank_sources(od, args, od.describe_all(), None, t0, clock=clock, tracer=tracer)
    assert clock() - t0 == pytest.approx(max(budget_s, warmup_s))
    (job,) = tracer.procs
    assert job.killed and tracer.running() == []  # killed, not still tracing


def test_gate1_on_cpu_refuses_a_case_verify_would_skip(tmp_path):
    # A [1, 256, 512] @ B [1, 512, 8] fp32: 540672 B; seq x2 1064960 B > verify's 1 MB cap on the CPU interpreter:
    # verify would skip it, so gate 1 refuses it (it used to be appended and then never verified or timed)
    work = probe_ops.make_workdir(tmp_path, lines=[probe_ops.case_line(1, 256, 512, 8)])
    p = fake_probe(work, "--cases", "0", "--max-scale", "2", "--scale-dims", "seq")
    (cand,) = p.doc["candidates"]
    g1 = _gate(cand, 1)
    assert cand["failed_gate"] == 1 and "--max-input-mb 1" in g1["detail"] and "verify's input cap" in g1["detail"]
    assert g1["value"] == 1064960 and g1["limit"] == 1e6 and p.doc["limits"]["verify_max_input_mb"] == 1.0
    assert p.doc["appended"] == {} and p.runner.requests == []


def test_gate1_alone_on_a_case_description():
    info = SimpleNamespace(input_bytes=3000)
    assert gate1(info, {"max_bytes": 4000})["ok"] is True
    g = gate1(info, {"max_bytes": 4000, "device_free_bytes": 5000})
    assert g["ok"] is False and "free device memory" in g["detail"] and g["value"] == 6000  # 2 copies on the device


@pytest.mark.e2e
def test_end_to_end_a_real_child_retires_after_an_oom_and_the_next_one_serves_a_candidate_and_its_baseline(
        tmp_path):
    # the real command, tracer and persistent child on the CPU: case 0 seq x2 (m 32 > 16) runs out of memory in
    # verify (recorded, the child retires); case 1 seq x2 passes in a fresh child, which then times case 1 at scale 1
    work = probe_ops.make_workdir(tmp_path)
    pids = tmp_path / "pids"
    pids.mkdir()
    r, doc = run_probe(work, "--cases", "0,1", "--max-scale", "2", "--trace-jobs", "1", "--scale-dims", "seq",
                       env={"PROBE_OP_MODE": "oom", "PROBE_OP_LIMIT": "16", "PROBE_OP_PIDS": str(pids),
                            "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    c0, c1 = doc["candidates"]
    assert c0["failed_gate"] == 3 and _gate(c0, 3)["detail"].startswith("verify oom")
    assert c1["verdict"] == "pass" and doc["baselines"]["1"]["time_ms"] > 0 and doc["complete"] is True
    assert _gate(c1, 2)["value"] == 2 * 2 * 16 * 16 * 4  # the real tracer's bmm FLOPs of [2,16,16]@[2,16,4]
    assert len(list(pids.iterdir())) == 2  # one child per OOM, one for the rest
    assert not list(tmp_path.glob("mfu_probe_*")), "a staged candidate was left behind"
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in ps  # no tracer or gate child is still alive


def test_two_ladders_that_reach_one_shape_gate_it_once_and_append_it_once(tmp_path):
    # a new user's report: scaled cases that repeat a line already appended (case 0 batch x2 = case 1 seq x2) were
    # gated, verified, appended and counted twice. The second ladder takes the first candidate's verdict
    work = probe_ops.make_workdir(tmp_path, lines=[probe_ops.case_line(1, 16, 32, 8), probe_ops.case_line(2, 8, 32, 8)])
    p = fake_probe(work, "--cases", "0,1", "--max-scale", "2", "--scale-dims", "batch,seq", "--no-saturation-stop")
    shape = lambda c: json.loads(p.doc["appended"][str(c)]["line"])["inputs"][0]["shape"]  # noqa: E731
    lines = [shape(c) for c in p.doc["appended"]]
    assert sorted(lines) == sorted(map(list, {tuple(x) for x in lines})), lines  # no line twice
    assert [2, 16, 32] in lines
    twice = [c for c in p.doc["candidates"] if c.get("same_as_case") is not None]
    assert len(twice) == 1 and twice[0]["verdict"] == "pass" and shape(twice[0]["same_as_case"]) == [2, 16, 32]
    first = next(c for c in p.doc["candidates"] if c["new_case_id"] == twice[0]["same_as_case"]
                 and c is not twice[0])
    assert first["candidate_id"] != twice[0]["candidate_id"] and twice[0]["gates"] == first["gates"]
    assert [r for r in p.runner.requests if r[0] == (2, 16, 32, 8) and not r[1]] == [((2, 16, 32, 8), False)]
    n_cases = sum(1 for ln in open(os.path.join(work, "model.json")) if ln.strip())
    assert n_cases == 2 + len(p.doc["appended"])
