"""Steps 4-6 end to end on the CPU: the real collector, peak_calib and mfu_decompose on a one-GEMM operator.

This pins mfu_decompose to the performance.json the collector actually writes (not only to hand-made fixtures).
CPU numbers: they validate the pipeline; their values are not asserted beyond consistency.
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
COLLECTOR = os.path.join(ROOT, "scripts", "ops_profiling", "msprof_perf_summary.py")


@pytest.mark.skipif(not os.path.exists(COLLECTOR), reason="the collector (msprof_perf_summary.py) is not there yet")
def test_collector_peak_and_decompose_agree_on_a_one_gemm_operator_on_cpu(tmp_path):
    import bench_gemm_mfu
    work = bench_gemm_mfu.build_gemm_workdir(str(tmp_path / "work"), 128, 64, 256, dtype="float32")
    env = dict(os.environ, MFU_PEAK_CACHE_DIR=str(tmp_path / "cache"))
    steps = [[COLLECTOR, "--quick", "--mfu", "--impl", "asc", "--output-dir", ".", "--backend", "cpu", "--quiet"],
             [os.path.join(ROOT, "scripts", "peak_calib.py"), "-o", "peak.json", "--backend", "cpu", "--dtypes",
              "fp32", "--budget-s", "1", "-q"],
             [os.path.join(ROOT, "scripts", "mfu_decompose.py"), "--op-dir", "."]]
    for cmd in steps:
        r = subprocess.run([sys.executable] + cmd, cwd=work, capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, f"{cmd[0]}: {r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    perf = json.loads(open(os.path.join(work, "performance.json")).read())
    peak = json.loads(open(os.path.join(work, "peak.json")).read())
    dec = json.loads(open(os.path.join(work, "mfu_decompose.json")).read())
    row = dec["reports"][0]["rows"][0]
    case = next(c for c in perf["per_case"] if c["case"] == row["case"])
    assert row["status"] == "ok" and row["dtype"] == "float32"
    # flops.py: 2 * 1 * 128 * 64 * 256 = 4194304 FLOPs
    assert row["flops"] == 4194304.0 == case["flops"]
    assert row["kernel_time_ns"] == case["kernel_time_ns"]
    assert row["mfu_ach"] == pytest.approx(4194304.0 / case["kernel_time_ns"] / 1e3 / peak["peak_tflops"]["float32"])
    assert row["mfu_nom"] is None  # a CPU has no nominal peak
    gemm = row["parts"][0]
    assert gemm["part"] == "gemm" and gemm["time_share"] == pytest.approx(1.0) and gemm["flops_share"] == 1.0
    assert any("CPU-interpreter numbers" in n for n in dec["notes"])
