"""Steps 4-6 end to end on the CPU: the real collector, peak_calib and mfu_decompose on a one-GEMM operator.

This pins mfu_decompose to the performance.json the collector actually writes (not only to hand-made fixtures).
The work directory is the session's one-GEMM pipeline (tests/pipelines.py: verify_op, check_flops, the collector,
peak_calib, mfu_decompose), copied. CPU numbers: they validate the pipeline; their values are not asserted beyond
consistency.
"""
import json
import os

import pytest

from pipelines import GEMM_FLOPS, copy_work

pytestmark = pytest.mark.e2e


def test_collector_peak_and_decompose_agree_on_a_one_gemm_operator_on_cpu(gemm_work, tmp_path):
    work = copy_work(gemm_work, tmp_path / "work")
    perf = json.loads(open(os.path.join(work, "performance.json")).read())
    peak = json.loads(open(os.path.join(work, "peak.json")).read())
    dec = json.loads(open(os.path.join(work, "mfu_decompose.json")).read())
    row = dec["reports"][0]["rows"][0]
    case = next(c for c in perf["per_case"] if c["case"] == row["case"])
    assert row["status"] == "ok" and row["dtype"] == "float32"
    assert row["flops"] == float(GEMM_FLOPS) == case["flops"]  # flops.py: 2 * 1 * M * N * K
    assert row["kernel_time_ns"] == case["kernel_time_ns"]
    assert row["mfu_ach"] == pytest.approx(GEMM_FLOPS / case["kernel_time_ns"] / 1e3 / peak["peak_tflops"]["float32"])
    assert row["mfu_nom"] is None  # a CPU has no nominal peak
    gemm = row["parts"][0]
    assert gemm["part"] == "gemm" and gemm["time_share"] == pytest.approx(1.0) and gemm["flops_share"] == 1.0
    assert any("CPU-interpreter numbers" in n for n in dec["notes"])
