"""The collector on a CUDA device (skipped without one): CUPTI kernel names, correlation-based iteration
attribution, nothing lost, the datasheet peak and the TF32 note for fp32 cases."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_msprof"))
import tinyops  # noqa: E402

from mfulib.collect.driver import Options, collect  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the GPU machine)")


def test_cuda_collection_reports_triton_kernels_by_name_with_positive_device_durations(tmp_path):
    work = tinyops.make_workdir(tmp_path, variant="first_call_extra")
    rep = collect(Options(op_dir=work, output_dir=work, impl="both", backend="cuda", cases=[2, 3], warmup=2,
                          repeats=5, mfu=True, keep_prof=work, flush_cache_mib=64, progress=False,
                          unverified_ok=True))  # the timing path only (tests/test_workdir_state.py: the gate)
    assert rep["backend"] == "cuda" and rep["timing_method"] == "torch.profiler.cupti.kernel_duration"
    fp32, bf16 = rep["per_case"]
    for c in (fp32, bf16):
        assert c["asc_error"] is None and c["ref_error"] is None, (c["asc_error"], c["ref_error"])
        assert c["sequence"] == ["scale_kernel", "add_one_kernel"]  # the first call's probe kernels stay out
        assert all(k["min_ns"] > 0 for k in c["kernels"]) and c["kernel_time_ns"] <= c["span_ns"]
        assert c["harness_launches_dropped"] == 7  # one flush before each of the 2 + 5 iterations: never counted
        assert c["speedup"] == pytest.approx(c["ref_us"] / c["asc_us"])
    assert fp32["tf32"] is (os.environ.get("TRITON_F32_DEFAULT", "tf32") != "ieee") and bf16["tf32"] is False
    name = rep["device"]["name"]
    if "H200" in name or "H100" in name:
        assert rep["peak"]["value_tflops"] in (989.5, 835.5, 756.5)
    assert bf16["mfu_nom"] is None or 0 < bf16["mfu_nom"] < 1
