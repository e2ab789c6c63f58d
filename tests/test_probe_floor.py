"""max_shape_probe.py: gate 4's roofline floor and the replacement of sources already over --max-ms at scale 1,
under inputs the rules' first tests did not cover (every source too slow, the budget ending in the scale-1 timing,
partial peak.json, resumed runs). The operator is the test double of tests/probe_ops.py; every peak.json here is a
test double stating figures, not a measurement."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_ops  # noqa: E402

from mfulib.schemas import probe_json as pj  # noqa: E402
import pytest

pytestmark = pytest.mark.e2e  # runs the probe / search / make in subprocesses

PROBE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "max_shape_probe.py")


def run_probe(work, *extra, env=None, timeout=120):
    r = subprocess.run([sys.executable, PROBE, "--dir", work, "--backend", "cpu", *extra], capture_output=True,
                       text=True, timeout=timeout, env=dict(os.environ, **(env or {})))
    path = os.path.join(work, "probe.json")
    return r, (pj.read_probe_json(path) if os.path.exists(path) else None)


def set_peak(work, **fields):
    """Overwrite fields of the test-double peak.json (figures stated, not measured)."""
    path = os.path.join(work, "peak.json")
    peak = json.load(open(path))
    peak.update(fields)
    peak["note"] = "test double: stated figures, not a measurement"
    json.dump(peak, open(path, "w"))


def test_every_source_over_the_limit_ends_the_run_cleanly(tmp_path):
    # 3 cases, --top 1, a test-double peak of 1 FLOP/s: each case's floor is hours. The replacement used to pick
    # an already skipped reserve case again (case 1 <-> case 2 for ever); now each reserve case is tried once
    lines = [probe_ops.case_line(1, 16, 32, 8), probe_ops.case_line(2, 8, 16, 4), probe_ops.case_line(1, 8, 8, 8)]
    work = probe_ops.make_workdir(tmp_path, lines=lines, peak_gbps=1000.0)
    set_peak(work, peak_tflops={"float32": 1e-12})
    r, doc = run_probe(work, "--top", "1", "--max-scale", "2", "--max-ms", "100", timeout=90)
    assert r.returncode == 0, r.stderr
    assert doc["sources"] == [] and doc["candidates"] == [] and doc["appended"] == {}
    assert sorted(doc["skipped_sources"]) == ["0", "1", "2"]
    assert doc["complete"] is True and doc["interrupted"] is None  # nothing left to try: a re-run changes nothing
    (left,) = [ln for ln in r.stdout.splitlines() if "no source case left" in ln]
    assert "case(s) 0, 1, 2" in left
    assert r.stdout.count("not a source") == 3  # each case judged once


def test_the_budget_ending_in_the_scale1_timing_leaves_the_probe_incomplete(tmp_path):
    # case 0's floor (50 ms, test-double peak 1.26e-7 TFLOP/s) is within 1/8 of --max-ms 100, so it is timed at
    # scale 1 first; ModelNew sleeps 60 s there and --budget-s 15 cuts that timing. It was recorded complete: true
    # (make took the probe as done and the search ran on it); now it is incomplete and a re-run resumes
    work = probe_ops.make_workdir(tmp_path, peak_gbps=1000.0)
    set_peak(work, peak_tflops={"float32": 1.26e-7})
    r, doc = run_probe(work, "--top", "1", "--max-scale", "2", "--max-ms", "100", "--budget-s", "15",
                       env={"PROBE_OP_MODE": "sleep1", "PROBE_OP_SLEEP_S": "60"})
    assert r.returncode == 0, r.stderr
    assert "cut at --budget-s" in r.stdout
    assert doc["complete"] is False and "--budget-s 15 s reached" in doc["interrupted"]
    assert doc["baselines"] == {} and doc["candidates"] == []  # no verdict, no timing recorded from the cut run


def test_a_calibration_of_slow_dtypes_only_does_not_inflate_the_floor(tmp_path):
    # test-double peak.json measured fp32 only, at 1e-12 TFLOP/s (a `peak_calib.py --dtypes fp32` of a slow unit),
    # with a nominal (datasheet) fp16 figure of 1 TFLOP/s: no run beats the datasheet, so the floor divides by it.
    # With the measured figures alone, case 0 (a fast bmm) was dropped as a source at an hours-long floor
    work = probe_ops.make_workdir(tmp_path, peak_gbps=1000.0)
    set_peak(work, peak_tflops={"float32": 1e-12},
             nominal={"tflops": {"float16": 1.0, "float32": 1e-12}, "source": "test double"})
    r, doc = run_probe(work, "--cases", "0", "--max-scale", "2", "--max-ms", "100", "--scale-dims", "seq")
    assert r.returncode == 0, r.stderr
    assert doc["limits"]["peak_tflops_max"] == 1.0 and doc["skipped_sources"] == {}
    assert [(c["scale"], c["verdict"]) for c in doc["candidates"]] == [(2, "pass")]


def test_a_source_its_floor_rules_out_is_not_traced_ahead(tmp_path):
    # case 0: A [1, 64, 256] (131 KB of inputs, within the test double's 200 KB L2) ranks first by FLOPs; case 1:
    # A [1, 16, 4096] (278 KB > L2) at a stated 0.002 GB/s has a 107 ms byte floor at scale 1 > --max-ms 100: not a
    # source. While case 0's batch x2 ran, case 1's batch x2 (A [2, 16, 4096]) used to be traced ahead all the same
    # (a reference at 2^k the work, on the host, for a source about to be skipped); its build mark proves it was not
    lines = [probe_ops.case_line(1, 64, 256, 64), probe_ops.case_line(1, 16, 4096, 1)]
    work = probe_ops.make_workdir(tmp_path, lines=lines, peak_gbps=0.002)
    set_peak(work, peak_tflops={"float32": 1000.0}, device={"l2_cache_bytes": 200_000})
    marks = tmp_path / "marks"
    marks.mkdir()
    r, doc = run_probe(work, "--top", "2", "--max-scale", "2", "--max-ms", "100", "--trace-jobs", "1",
                       "--scale-dims", "batch", env={"PROBE_OP_MARKS": str(marks)})
    assert r.returncode == 0, r.stderr
    assert doc["sources"] == [0] and "GB of inputs" in doc["skipped_sources"]["1"]
    (cand,) = doc["candidates"]  # case 0 batch x2: 262 KB > L2, its byte floor (101 ms) fails gate 4 without a run
    assert cand["failed_gate"] == 4 and "predicted" in cand["gates"][-1]["detail"]
    built = {p.name for p in marks.iterdir()}
    assert "built_B_32768" in built  # case 0's x2 (B [2, 256, 64]) was traced
    assert "built_B_8192" not in built and "built_A_131072" not in built  # case 1's x2 was never built


def test_a_peak_json_option_naming_no_file_is_an_error(tmp_path):
    # it was ignored silently: no roofline floor and gate 5 "not checked", while the user meant to give both
    work = probe_ops.make_workdir(tmp_path)
    r, doc = run_probe(work, "--peak-json", str(tmp_path / "nope.json"), "--cases", "0", "--max-scale", "2")
    assert r.returncode == 2 and "--peak-json" in r.stderr and "not found" in r.stderr
    assert doc is None  # refused before anything ran


def test_a_replacement_reports_the_size_capped_cases_ranked_above_it(tmp_path):
    # by traced FLOPs: case 0 (8.4 MFLOP, a 645 ms floor at the test double's 1e-5 TFLOP/s > --max-ms 100), case 1
    # (1.1 MB of inputs: over the CPU's 1 MB cap), case 2 (fast). --top 1: case 0 is skipped, case 2 takes its
    # place, and case 1 - now ranked above the last source - is reported as skipped too (it was left out)
    lines = [probe_ops.case_line(1, 64, 1024, 64), probe_ops.case_line(1, 512, 512, 8),
             probe_ops.case_line(1, 16, 32, 8)]
    work = probe_ops.make_workdir(tmp_path, lines=lines, peak_gbps=1000.0)
    set_peak(work, peak_tflops={"float32": 1e-5})
    r, doc = run_probe(work, "--top", "1", "--max-scale", "2", "--max-ms", "100", "--scale-dims", "seq")
    assert r.returncode == 0, r.stderr
    assert doc["sources"] == [2] and sorted(doc["skipped_sources"]) == ["0", "1"]
    assert "predicted" in doc["skipped_sources"]["0"] and "max-input-mb" in doc["skipped_sources"]["1"]
    assert [(c["source_case"], c["verdict"]) for c in doc["candidates"]] == [(2, "pass")]


def test_a_skipped_source_frees_its_trace_ahead_slot(tmp_path):
    # batch only; --trace-jobs 1, --max-bytes 400 KB (case 0's x4, 524 KB, needs no trace). While case 0's x2 runs,
    # case 1's x2 (264 KB) is traced ahead; case 1 (132 KB > the test double's 100 KB L2 at a stated 0.004 GB/s: a
    # 25 ms floor, within 1/8 of --max-ms 100) is then timed at scale 1 (ModelNew sleeps 0.3 s: m 128 > 64) and
    # skipped. Its trace held the only slot to the end of the run, so case 2 (its replacement) got no trace ahead
    # for x4; now the skip ends it
    lines = [probe_ops.case_line(1, 64, 256, 64), probe_ops.case_line(1, 128, 256, 1),
             probe_ops.case_line(1, 8, 32, 8)]
    work = probe_ops.make_workdir(tmp_path, lines=lines, peak_gbps=0.004)
    set_peak(work, peak_tflops={"float32": 1000.0}, device={"l2_cache_bytes": 100_000})
    r, doc = run_probe(work, "--top", "2", "--max-scale", "4", "--max-ms", "100", "--max-bytes", "4e5",
                       "--trace-jobs", "1", "--no-saturation-stop", "--refine-steps", "0", "--scale-dims", "batch",
                       env={"PROBE_OP_MODE": "slow"})
    assert r.returncode == 0, r.stderr
    assert doc["sources"] == [0, 2] and "its own run at scale 1 takes" in doc["skipped_sources"]["1"]
    cands = {(c["source_case"], c["scale"]): c for c in doc["candidates"]}
    assert cands[(2, 2)]["verdict"] == cands[(2, 4)]["verdict"] == "pass"
    g2 = next(g for g in cands[(2, 4)]["gates"] if g["gate"] == 2)
    # traced ahead (beside x2's own trace), it was done or nearly when x4's turn came; traced on demand, the probe
    # waits for all of it (waited_s = wall_s)
    assert g2["waited_s"] < 0.5 * g2["wall_s"]
