"""GPU validation of the basic bundled operators: every case line, compiled Triton (3.6 on the H200), bf16 included.

Run on the GPU machine from the repository root:
    python3 -m pytest -q tests/gpu/test_zoo_basic_cuda.py tests/test_zoo_basic.py
(the second file's small-case tests run compiled there too). Every line of the zoo files 1_BatchMatmul, 2_Softmax,
3_RMSNorm, 4_FFN and of the real files level3/1_BatchMatmul, level1/10_LayerNorm, level4/2_FFN goes through
prepare_explicit -> OpDir -> mfulib.verify.correctness.verify_case on "cuda", with its tolerances on the normalised max error:
float16 1e-2, bfloat16 2e-2, float32 1e-2 (tl.dot on fp32 is TF32 unless TRITON_F32_DEFAULT=ieee). Expected
rejections: zoo 4_FFN line 11 (planted) and the 21 gated lines of the real 2_FFN file. The largest lines need
~3 GiB of inputs (fp32 softmax [16384, 16384] in and out, FFN bf16 [8192, 4096] x [4096, 11008]).
"""
import os
import sys

import pytest
import torch

from mfulib.core import cases

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for zoo_support
from zoo_support import REPO, install_compat_or_skip, verify_cases, work_dir  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (compiled Triton kernels)")

GLU = ("swiglu", "geglu", "reglu")
OPERATORS = {  # op -> (reference, implementation, case file under ../shared/data or None for the sibling .json)
    "1_BatchMatmul": ("bench/zoo/1_BatchMatmul.py", "gen/zoo/1_BatchMatmul_triton_optimized.py", None),
    "2_Softmax": ("bench/zoo/2_Softmax.py", "gen/zoo/2_Softmax_generated.py", None),
    "3_RMSNorm": ("bench/zoo/3_RMSNorm.py", "gen/zoo/3_RMSNorm_generated_code.py", None),
    "4_FFN": ("bench/zoo/4_FFN.py", "gen/zoo/4_FFN_triton_ascend_impl.py", None),
    "level3/1_BatchMatmul": ("bench/npukernelbench/level3/1_BatchMatmul.py",
                             "gen/npukernelbench/level3/1_BatchMatmul_generated.py",
                             "npukernelbench/level3/1_BatchMatmul.json"),
    "level1/10_LayerNorm": ("bench/npukernelbench/level1/10_LayerNorm.py",
                            "gen/npukernelbench/level1/10_LayerNorm_generated.py",
                            "npukernelbench/level1/10_LayerNorm.json"),
    "level4/2_FFN": ("bench/npukernelbench/level4/2_FFN.py", "gen/npukernelbench/level4/2_FFN_triton_optimized.py",
                     "npukernelbench/level4/2_FFN.json"),
}


@pytest.fixture(scope="module")
def op_dirs(tmp_path_factory):
    install_compat_or_skip("cuda")  # 4_FFN's ModelNew is Triton-Ascend style
    data = os.path.join(os.environ.get("MFU_SHARED_DIR", os.path.join(os.path.dirname(REPO), "shared")), "data")
    root = tmp_path_factory.mktemp("basic_cuda")
    prepared = {}
    for op, (ref, impl, real) in OPERATORS.items():
        cases_at = os.path.join(data, real) if real else os.path.join(REPO, "examples", "ops",
                                                                      os.path.splitext(ref)[0] + ".json")
        if os.path.isfile(cases_at):
            prepared[op] = work_dir(root, op, ref, impl, cases_at)
    return prepared


def expected_rejection(op, case):
    """The reason fragment a line must be rejected with, or None when it must pass."""
    if op == "4_FFN" and cases.case_value(case, "activation") in GLU[:2]:
        w1, w2 = cases.case_value(case, "weight1"), cases.case_value(case, "weight2")
        return None if w2.shape[0] == w1.shape[1] // 2 else "weight2 must be ["
    if op == "level4/2_FFN" and cases.case_value(case, "activation") in GLU:
        return "weight2 needs"
    return None


@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_every_line_passes_on_the_gpu_or_is_rejected_with_its_reason(op_dirs, op):
    if op not in op_dirs:
        pytest.skip(f"{OPERATORS[op][2]} is absent from ../shared/data")
    op_dir = op_dirs[op]
    bad = []
    rows = verify_cases(op_dir, range(len(op_dir.read_cases())), "cuda")
    for row, case in zip(rows.values(), op_dir.read_cases()):
        want = expected_rejection(op, case)
        ok = row["status"] == "pass" if want is None else (row["status"] == "rejected" and want in row["reason"])
        if not ok:
            bad.append(row)
    assert not bad, bad


def test_the_largest_batch_matmul_line_runs_at_least_a_millisecond_below_the_h200_peak(op_dirs):
    """Line 7, fp16 [16, 4096, 4096] x [16, 4096, 4096]: 2 * 16 * 4096^3 = 2.2e12 FLOPs, so >= 2.7 ms at the
    ~808 TFLOP/s fp16/bf16 ceiling peak_calib.py measured on the project's H200 and far from launch overhead."""
    built = op_dirs["1_BatchMatmul"].build_case(7, impl="asc", device="cuda")
    try:
        flops = 2 * 16 * 4096 ** 3
        for _ in range(3):
            built.run()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times_ms = []
        for _ in range(10):
            start.record()
            built.run()
            end.record()
            torch.cuda.synchronize()
            times_ms.append(start.elapsed_time(end))
        median_ms = sorted(times_ms)[len(times_ms) // 2]
        tflops = flops / (median_ms * 1e-3) / 1e12
        print(f"1_BatchMatmul line 7 on {torch.cuda.get_device_name()}: {median_ms:.3f} ms, {tflops:.0f} TFLOP/s")
        assert median_ms >= 1.0
        assert tflops < 989 * 1.03  # H200 dense fp16 spec; above it the timing (not the kernel) is wrong
    finally:
        built.close()
