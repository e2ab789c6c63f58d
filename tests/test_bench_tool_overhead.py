"""bench/bench_tool_overhead.py: device-busy time per step from the step's own results, and a CPU smoke run."""
import json
import os
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)
import bench_tool_overhead as bto  # noqa: E402


def test_collect_busy_time_is_median_kernel_time_times_every_call_of_every_measured_impl():
    perf = {"warmup": 5, "repeats": 5, "per_case": [
        {"case": 0, "impls": {"asc": {"kernel_time_ns": 1000, "attempts": 1},
                              "ref": {"kernel_time_ns": 3000, "attempts": 2}}},
        {"case": 1, "impls": {"asc": {"kernel_time_ns": None, "status": "crashed"}}},
        {"case": 2, "skipped": "bf16"}]}
    busy, note = bto.collect_busy_ns(perf)
    assert busy == 1000 * 11 + 3000 * 11 * 2 and note.startswith("2 (case, impl) x 11 calls")
    low, note = bto.verify_busy_ns(perf)
    assert low == 4000 and "lower bound" in note


def test_peak_busy_time_sums_every_timed_shape_and_is_zero_for_a_cached_calibration():
    peak = {"cache": {"hit": False}, "measured": {"float16": {
        "confirm": {"median_ns": 10, "iters": 3},
        "shapes": [{"median_ns": 100, "iters": 4}, {"median_ns": 50, "iters": 2}]}},
        "bandwidth": {"median_ns": 7, "iters": 5}}
    assert bto.peak_busy_ns(peak)[0] == 30 + 400 + 100 + 35
    assert bto.peak_busy_ns(dict(peak, cache={"hit": True}))[0] == 0


def test_the_table_has_a_total_per_run_with_the_wall_to_busy_ratio():
    runs = [{"op": "x", "mode": "warm", "total_wall_s": 10.0, "steps": [
        {"step": "prepare", "wall_s": 1.0, "host_cpu_s": 0.5, "device_busy_s": 0, "wall_per_busy": None, "rc": 0},
        {"step": "collect", "wall_s": 9.0, "host_cpu_s": 4.0, "device_busy_s": 0.5, "wall_per_busy": 18.0,
         "rc": 0}]},
        {"op": "y", "mode": "cold", "skipped": "--budget-s 1 reached"}]
    runs.append({"op": "x", "mode": "warm", "all": {"step": "ALL (make all)", "wall_s": 7.0, "host_cpu_s": 5.0,
                                                    "device_busy_s": 0.5, "wall_per_busy": 14.0, "rc": 0}})
    rows = bto.table(runs)
    assert rows[2] == ["x", "warm", "TOTAL", 10.0, 4.5, 0.5, 20.0, ""]
    assert rows[3][2] == "skipped"
    assert rows[4] == ["x", "warm", "ALL (make all)", 7.0, 5.0, 0.5, 14.0, 0]


def test_the_bench_runs_on_cpu_and_writes_json_and_a_markdown_table(tmp_path):
    out = tmp_path / "o" / "tool_overhead.json"
    r = subprocess.run([sys.executable, os.path.join(BENCH, "bench_tool_overhead.py"), "--backend", "cpu",
                        "--ops", "zoo/2_Softmax", "--steps", "prepare", "--all-runs", "none", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    (run,) = doc["runs"]
    assert run["op"] == "zoo/2_Softmax" and run["mode"] == "warm" and doc["modes"] == ["warm"]
    (step,) = run["steps"]
    assert step["step"] == "prepare" and step["rc"] == 0 and step["wall_s"] > 0 and step["device_busy_s"] == 0
    assert 0 < step["host_cpu_s"] < 60
    assert "| zoo/2_Softmax" in r.stdout and (tmp_path / "o" / "tool_overhead.md").exists()
