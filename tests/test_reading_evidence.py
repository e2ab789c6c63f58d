"""The reading aid reads only comparable evidence, and figures above a peak are marked by the noise band.

HAND-MADE FIXTURES, NOT MEASUREMENTS: a performance.json per test (one GEMM part "gemm" per case) and an H200-like
peak.json (bf16 800, fp32 50 TFLOP/s measured; fp16/bf16 nominal 989.5). Every expected figure is worked out by hand
in the test's docstring.

The fp32-vs-fp16 rule (mfulib/report/reading.py) compares one part at the same shape or within
COMPARABLE_FLOPS_FACTOR (2x) of its FLOPs; the issue's counter-example was a [2, 64, 128] fp32 case read against a
[1, 8192, 4096] bf16 case ("its fp32 path is less efficient").
"""
import json

import pytest

from mfulib.core.definitions import above_peak
from mfulib.core.fmt import sig, times
from mfulib.report import cells, decompose, reading
from mfulib.report import tables

PEAK = {"schema": 1, "tool": "peak_calib", "backend": "cuda", "label": "H200-like [hand-made fixture]",
        "device": {"backend": "cuda", "name": "NVIDIA H200"},
        "nominal": {"tflops": {"float16": 989.5, "bfloat16": 989.5}, "source": "fixture"},
        "peak_tflops": {"bfloat16": 800.0, "float32": 50.0}, "bandwidth_gbps": 4000.0}
FLOPS_PY = 'KERNEL_PARTS = {"gemm": ["*matmul*"]}\n\ndef flops(case):\n    return 0.0\n'


def _case(cid, shape, dtype, flops, t_ns, **extra):
    k = {"name": "matmul_kernel", "launches_per_iter": 1, "mean_ns": t_ns, "median_ns": t_ns, "min_ns": t_ns,
         "max_ns": t_ns, "std_ns": 0.0, "time_per_iter_ns": t_ns}
    return {"case": cid, "shape": shape, "compute_dtype": dtype, "tf32": False, "flops": flops,
            "flops_parts": {"gemm": flops}, "input_bytes": 1e6, "output_bytes": 1e6, "numerator": "checked",
            "kernels": [k], "kernel_time_ns": t_ns, **extra}


def _decompose(tmp_path, cases, backend="cuda"):
    perf = {"schema": 1, "tool": "msprof_perf_summary", "backend": backend, "device": {"name": "NVIDIA H200"},
            "warmup": 5, "repeats": 5, "peak": {"nominal_tflops": {"bfloat16": 989.5}, "source": "fixture"},
            "per_case": cases}
    (tmp_path / "performance.json").write_text(json.dumps(perf))
    (tmp_path / "peak.json").write_text(json.dumps(dict(PEAK, backend=backend)))
    (tmp_path / "flops.py").write_text(FLOPS_PY)
    return decompose.decompose(str(tmp_path), str(tmp_path / "peak.json"))


def _dtype_item(res):
    return [s for s in res["reading_aid"] if "gemm:" in s or "fp32 vs fp16" in s]


def _rows(res):
    return {r["case"]: r for rep in res["reports"] for r in rep["rows"]}


# ------------------------------------------------------------------------------------------ comparable evidence


def test_the_issues_pair_of_a_tiny_fp32_case_and_a_large_bf16_case_is_not_compared(tmp_path):
    """fp32 [2, 64, 128] x [128]-wide GEMM: 2 * 2*64 * 128 * 128 = 4,194,304 FLOPs in 10,000 ns = 0.419 TFLOP/s;
    bf16 [1, 8192, 4096] with K = 4096: 2 * 8192 * 4096 * 4096 = 274,877,906,944 FLOPs in 500,000 ns = 549.8
    TFLOP/s. FLOPs 65,536x apart: no comparable pair - no ratio, no verdict, no fallback bound."""
    res = _decompose(tmp_path, [_case(0, "[2, 64, 128]", "float32", 4194304, 10000),
                                _case(1, "[1, 8192, 4096]", "bfloat16", 274877906944, 500000)])
    (line,) = _dtype_item(res)
    assert "no comparable fp32 / fp16-bf16 pair" in line and "[0]" in line and "[1]" in line
    assert "65,536x apart" in line and "more than 2x" in line
    for word in ("less efficient", "waiting", "compute-bound", "expected ~"):
        assert word not in line
    for r in _rows(res).values():  # nor a bound drawn from that pair
        assert (r["parts"][0]["bound"] or {}).get("source") is None


def test_a_pair_within_twice_the_flops_is_compared_and_says_why(tmp_path):
    """fp32 [1, 1024, 1024]: 2e9 FLOPs in 100,000 ns = 20 TFLOP/s; bf16 [1, 1024, 1536]: 3e9 FLOPs in 10,000 ns =
    300 TFLOP/s. FLOPs 1.5x apart (<= 2x): compared, 20 / 300 = 0.067 against the measured 50 / 800 = 0.0625."""
    res = _decompose(tmp_path, [_case(0, "[1, 1024, 1024]", "float32", 2e9, 100000),
                                _case(1, "[1, 1024, 1536]", "bfloat16", 3e9, 10000)])
    (line,) = _dtype_item(res)
    assert "20.0 TFLOP/s in fp32 (case 0) vs 300 in bfloat16 (case 1; FLOPs within 2x (1.50x)) = 0.07" in line
    assert "expected ~0.06 (measured float32/bfloat16 peak ratio)" in line


def test_the_same_shape_is_preferred_to_a_faster_run_of_another_size(tmp_path):
    """fp32 case 0 [4, 1024, 1024] 2e9 FLOPs in 100,000 ns (20 TFLOP/s); bf16 case 1 of the same shape in 10,000
    ns (200 TFLOP/s) and bf16 case 2 [4, 1024, 1536] 3e9 FLOPs in 7,500 ns (400 TFLOP/s, faster, 1.5x FLOPs):
    the pair is (0, 1), ratio 20 / 200 = 0.10."""
    res = _decompose(tmp_path, [_case(0, "[4, 1024, 1024]", "float32", 2e9, 100000),
                                _case(1, "[4, 1024, 1024]", "bfloat16", 2e9, 10000),
                                _case(2, "[4, 1024, 1536]", "bfloat16", 3e9, 7500)])
    (line,) = _dtype_item(res)
    assert "vs 200 in bfloat16 (case 1; same shape) = 0.10" in line


@pytest.mark.parametrize("f16_flops, comparable", [(4e9, True), (4.02e9, False), (1e9, True), (0.99e9, False)])
def test_the_flops_factor_is_two_either_way(f16_flops, comparable):
    """2e9 fp32 FLOPs against 4e9 (2.00x) and 1e9 (2.00x): comparable; 4.02e9 (2.01x), 0.99e9 (2.02x): not."""
    r32, r16 = {"shape": "[1, 1024, 1024]"}, {"shape": "[2, 1024, 1024]"}
    why = reading.comparable(r32, {"flops": 2e9}, r16, {"flops": f16_flops})
    assert (why is not None) is comparable
    if comparable:
        assert why == "FLOPs within 2x (2.00x)"
    assert reading.comparable(r32, {"flops": 2e9}, {"shape": "[1,1024,1024]"}, {"flops": 9e9}) == "same shape"


# ------------------------------------------------------------------------------------------ noise band, caveats


@pytest.mark.parametrize("value, level, cell", [(0.5, None, "50.0%"), (1.0, None, "100.0%"),
                                                (1.015, "warning", "101.5% (warning)"),
                                                (1.03, "warning", "103.0% (warning)"),
                                                (1.0301, "error", "103.0% (ERROR)"),
                                                (1.111, "error", "111.1% (ERROR)"), (None, None, "-")])
def test_above_100_percent_is_a_warning_up_to_103_and_an_error_beyond(value, level, cell):
    assert above_peak(value) == level and cells.util(value, 1) == cell


@pytest.mark.parametrize("dtype, value, cell", [("bfloat16", 1.2, "120.00% (ERROR)"),
                                                ("float16", 1.01, "101.00% (warning)"),
                                                ("float32", 0.0758, "7.58% [vs fp16 peak]"),
                                                ("int8", 1.8, "180.00% [vs fp16 peak]"),
                                                ("float8_e4m3fn", 1.5, "150.00% [vs fp16 peak]")])
def test_mfu_nom_above_100_percent_shows_only_with_its_dtype_caveat(dtype, value, cell):
    """fp16/bf16 MFU@nom divides by its own dtype's nominal peak: the band applies; other dtypes divide by the
    fp16 figure - int8 / fp8 legitimately exceed it - and carry the caveat on the row instead."""
    assert cells.mfu_nom({"dtype": dtype, "mfu_nom": value}, 2) == cell


def test_an_mfu_above_the_band_is_no_maximum_and_the_reading_aid_says_error_first(tmp_path):
    """bf16 case 0: 2e9 FLOPs in 2,250 ns = 888.9 TFLOP/s = 111.1% of 800 (an error); case 1: 2e9 in 2,463 ns =
    812.0 TFLOP/s = 101.5% (a warning); case 2: 2e9 in 5,000 ns = 400 TFLOP/s = 50.0%. The maximum is case 1
    (the warning is read as the peak), case 0 is left out; the table prints neither as a plain value."""
    res = _decompose(tmp_path, [_case(0, "[1, 1024, 1024]", "bfloat16", 2e9, 2250),
                                _case(1, "[1, 1024, 1024]", "bfloat16", 2e9, 2463),
                                _case(2, "[1, 1024, 1024]", "bfloat16", 2e9, 5000)])
    rows = _rows(res)
    assert rows[0]["mfu_ach"] == pytest.approx(2e9 / 2250 / 1e3 / 800)
    assert res["maxima"]["mfu_ach"]["case"] == 1
    first = res["reading_aid"][0]
    assert first.startswith("1. above the peak: case 0 MFU@ach 111.1%") and "ERROR" in first
    assert "case 1 MFU@ach 101.5% - warning" in first and "case 2" not in first
    assert not any("fixing" in s and "case 0" in s for s in res["reading_aid"])  # no payoff from an error
    text = tables.decompose_table(res)
    row0 = next(ln for ln in text.splitlines() if ln.split()[:1] == ["0"])
    assert "111.1% (ERROR)" in row0 and "(ERROR) above the peak by more than the 3% noise margin" in text
    assert "(warning) 100-103% of the peak" in text


def test_an_fp32_row_carries_the_nominal_caveat_on_the_row_and_its_npu_wording(tmp_path):
    """fp32 case 0: 2e9 FLOPs in 100,000 ns = 20 TFLOP/s, MFU@nom 20 / 989.5 = 2.02%, MFU@ach 20 / 50 = 40.0%."""
    res = _decompose(tmp_path, [_case(0, "[1, 1024, 1024]", "float32", 2e9, 100000)], backend="npu")
    text = tables.decompose_table(res)
    row = next(ln for ln in text.splitlines() if ln.split()[:1] == ["0"])
    assert "2.02% [vs fp16 peak]" in row and "40.0%" in row
    legend = next(ln for ln in text.splitlines() if ln.startswith("[vs fp16 peak]"))
    assert "float32" in legend and "fp16/bf16 nominal peak" in legend
    assert "on the NPU the nominal table lists the fp16 cube rate under float32" in text.replace("\n    ", " ")


# ------------------------------------------------------------------------------------------ the formatters


@pytest.mark.parametrize("x, digits, want", [(21881.29, 4, "21,881"), (271.8, 4, "271.8"), (58.131, 3, "58.1"),
                                             (0.012345, 4, "0.01235"), (9.9996, 4, "10.00"), (1234567.0, 3,
                                                                                               "1,234,567"),
                                             (0.0, 4, "0"), (None, 4, "-"), (float("nan"), 4, "-")])
def test_one_fixed_point_format_for_every_magnitude(x, digits, want):
    assert sig(x, digits) == want and "e" not in sig(x, digits)


@pytest.mark.parametrize("x, want", [(21881.29, "21,881x"), (2.188, "2.19x"), (0.5, "0.500x"), (None, "-")])
def test_headroom_and_speed_up_read_alike(x, want):
    assert times(x) == want
