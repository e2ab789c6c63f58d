"""Low-precision peaks: B-layout probe, fp8/int8 availability, trust rule, clocks and throttle reasons,
and the above-peak check judged against the dtype's own nominal figure (MFU@nom keeps the fp16/bf16 one)."""
import pytest

from mfulib.peaks import calib
from mfulib.report import decompose, peaks_match
from mfulib.backends import get_backend
from mfulib.core import device
from mfulib.peaks import gemm_search
from mfulib.peaks import gemm_timing
from mfulib.core import nominal_peaks as peaks
from mfulib.schemas import performance_json as performance

H200 = {"backend": "cuda", "name": "NVIDIA H200"}


def _timer_by_layout(rates, calls):
    """Test double for GEMM timing: throughput depends only on B's layout; a missing layout raises."""
    def timer(m, n, k, b_layout="row", **_kw):
        calls.append((m, n, k, b_layout))
        if b_layout not in rates:
            raise RuntimeError(f"layout {b_layout} rejected")
        tf = rates[b_layout]
        return {"m": m, "n": n, "k": k, "b_layout": b_layout, "tflops": tf, "median_ns": 2 * m * n * k / tf / 1e3,
                "spread": 0.01}
    return timer


def test_the_layout_probe_keeps_the_faster_b_layout_and_sweeps_with_it():
    calls = []
    sweep = gemm_search.Sweep(None, "int8", 10.0, 1 << 40, 1e16, timer=_timer_by_layout({"row": 110.0,
                                                                                         "col": 950.0}, calls))
    probe = gemm_search.probe_layouts(sweep, calib.LOWP_SEEDS, gemm_timing.b_layouts("int8"))
    assert probe["tflops"] == {"col": 950.0, "row": 110.0} and probe["chosen"] == "col" == sweep.b_layout
    assert probe["shape"] == list(calib.LOWP_SEEDS[0]) and tuple(probe["shape"]) in sweep.results
    sweep.measure((4096, 4096, 4096))
    assert calls[-1] == (4096, 4096, 4096, "col")
    best = gemm_search.confirm_best(sweep, top=2)
    assert best["b_layout"] == "col" and best["tflops"] == 950.0 and len(best["candidates"]) == 2


def test_a_layout_the_library_rejects_is_recorded_and_the_other_kept():
    sweep = gemm_search.Sweep(None, "int8", 10.0, 1 << 40, 1e16, timer=_timer_by_layout({"row": 120.0}, []))
    probe = gemm_search.probe_layouts(sweep, calib.LOWP_SEEDS, ("col", "row"))
    assert probe["chosen"] == "row" and "rejected" in probe["errors"]["col"] and probe["tflops"] == {"row": 120.0}


def test_fp8_is_not_available_on_cpu_and_int8_says_which_path_it_times():
    dev = gemm_timing.Bench(get_backend("cpu"))
    ok, why = gemm_timing.low_precision_support(dev, "float8_e4m3fn")
    assert ok is False and why.startswith("not available on cpu") and "capability >= 8.9" in why
    ok, why = gemm_timing.low_precision_support(dev, "int8")
    assert ok is True and "torch._int_mm" in why


def test_int8_operands_with_b_column_major_compute_the_same_product_on_cpu():
    dev = gemm_timing.Bench(get_backend("cpu"))
    a, b = gemm_timing._operands(dev, "int8", 32, 24, 16, "col")
    assert b.shape == (16, 24) and b.stride() == (1, 16)  # column-major [k, n]
    got = gemm_timing.gemm_call(dev, "int8", a, b)()
    assert (got == (a.int() @ b.int())).all()


def test_trust_needs_small_spread_and_drift_in_every_mode():
    lim = calib.TRUST_LIMITS["accelerator"]
    res = {"accelerator": True, "measured": {"bfloat16": {"spread": 0.02, "sweep_drift": 0.01},
                                             "int8": {"spread": lim["spread"] + 0.05, "sweep_drift": 0.0}},
           "bandwidth": {"spread": 0.01}}
    t = calib.trust_block(res)
    assert t["trusted"] is False and t["untrusted"] == [f"int8: spread {lim['spread'] + 0.05:.1%} > "
                                                        f"{lim['spread']:.0%}"]
    res["measured"]["int8"]["spread"] = 0.03
    assert calib.trust_block(res)["trusted"] is True
    res["measured"]["int8"]["sweep_drift"] = -(lim["drift"] + 0.1)  # confirmed far above its sweep figure
    assert calib.trust_block(res)["trusted"] is False
    assert calib.trust_block(dict(res, interrupted=True, measured={}))["trusted"] is False


def test_spread_is_the_decile_range_over_the_median():
    st = gemm_timing.spread_stats([100.0] * 8 + [200.0, 300.0])
    assert st["median_ns"] == 100.0 and st["p10_ns"] == 100.0 and st["p90_ns"] == pytest.approx(210.0)
    assert st["spread"] == pytest.approx(1.1)
    assert gemm_timing.spread_stats([5.0])["spread"] == 0.0


def test_throttle_reason_masks_decode_to_nvml_names():
    assert device.decode_throttle_reasons("0x0000000000000004") == ["sw_power_cap"]
    assert device.decode_throttle_reasons("0x0000000000000000") == []
    assert device.decode_throttle_reasons("0x41") == ["gpu_idle", "hw_thermal_slowdown"]
    assert device.decode_throttle_reasons(0x1000) == ["bit_0x1000"]
    with pytest.raises(ValueError):
        device.decode_throttle_reasons("Not Supported")


def test_clocks_fall_back_to_the_older_throttle_field_name(monkeypatch):
    asked = []

    def fake_query(index, fields):  # test double for nvidia-smi: this "driver" knows only the older name
        asked.append(fields)
        if "clocks_event_reasons.active" in fields:
            return {}
        return {"clocks.sm": "1755", "clocks_throttle_reasons.active": "0x0000000000000004", "power.draw": "690.1"}
    monkeypatch.setattr(device, "nvidia_smi_query", fake_query)
    monkeypatch.setattr(device, "_reason_field", {})
    got = device.nvidia_smi_clocks(0)
    assert got == {"clocks_sm_mhz": "1755", "clocks_throttle_reasons_active": "0x0000000000000004",
                   "throttle_reasons": ["sw_power_cap"], "power_draw_w": "690.1"}
    assert "clocks_event_reasons.active" in asked[0] and "clocks_throttle_reasons.active" in asked[1]
    device.nvidia_smi_clocks(0)
    assert len(asked) == 3 and "clocks_throttle_reasons.active" in asked[2]  # the working name is remembered


def test_the_clock_sampler_summarises_clocks_and_throttle_reasons_seen():
    readings = iter([{"clocks_sm_mhz": "1980", "throttle_reasons": []},
                     {"clocks_sm_mhz": "1650", "throttle_reasons": ["sw_power_cap"]},
                     {"clocks_sm_mhz": "1700", "throttle_reasons": ["sw_power_cap", "gpu_idle"]}])
    sampler = device.ClockSampler(lambda: next(readings, {}), interval_s=0.0)
    with sampler:
        while len(sampler.samples) < 3:
            pass
    s = sampler.summary()
    assert s["n_samples"] == 3 and s["sm_clock_mhz"] == {"min": 1650.0, "median": 1700.0, "max": 1980.0}
    assert s["throttle_reasons_seen"] == {"sw_power_cap": 2, "gpu_idle": 1}
    with device.ClockSampler(None) as cpu_sampler:  # a device without a vendor clock tool (cpu)
        pass
    assert cpu_sampler.summary()["n_samples"] == 0


def test_h200_nominal_table_has_int8_in_tops_and_fp8():
    nom = peaks.nominal_for_identity(H200)["tflops"]
    assert nom["int8"] == 1979.0 and nom["float8_e4m3fn"] == 1979.0 and nom["float16"] == 989.5
    assert peaks.dtype_nominal_tflops(nom, "int8") == 1979.0
    assert peaks.dtype_nominal_tflops(nom, "fp32", tf32=True) == 494.5
    assert peaks.dtype_nominal_tflops({}, "int8") is None and peaks.dtype_nominal_tflops(nom, None) is None
    a100 = peaks.nominal_for_identity({"backend": "cuda", "name": "NVIDIA A100-SXM4-80GB"})["tflops"]
    assert "float8_e4m3fn" not in a100  # no fp8 tensor cores: no figure


@pytest.mark.parametrize("tops, level", [(1800.0, None), (1990.0, "warning"), (2100.0, "error")])
def test_a_healthy_int8_kernel_near_2x_the_fp16_figure_is_no_error(tops, level):
    nom = peaks.nominal_for_identity(H200)["tflops"]
    flops, t_ns = tops * 1e3 * 1e6, 1e6  # tops TOPS for 1 ms
    tflops, mfu, flags = performance.mfu_fields(flops, t_ns, nom["float16"], nom["int8"], "int8")
    assert tflops == pytest.approx(tops) and mfu == pytest.approx(tops / 989.5)  # MFU@nom keeps its definition
    if level is None:
        assert flags == []
    else:
        assert len(flags) == 1 and flags[0].startswith(level) and "nominal int8 peak 1979" in flags[0]


def test_without_its_own_nominal_int8_above_the_fp16_figure_is_a_warning_and_fp16_still_an_error():
    _t, _m, flags = performance.mfu_fields(1.8e12, 1e6, 989.5, None, "int8")
    assert len(flags) == 1 and flags[0].startswith("warning: MFU@nom 181.9%")
    _t, _m, flags = performance.mfu_fields(1.1e12, 1e6, 989.5, None, "float16")
    assert len(flags) == 1 and flags[0].startswith("error: MFU@nom 111.2%")
    _t, _m, flags = performance.mfu_fields(1.1e12, 1e6, 989.5, 989.5, "float16")
    assert len(flags) == 1 and flags[0].startswith("error:") and "nominal float16 peak" in flags[0]


def _case(dtype, tops):
    return {"case": 0, "shape": "8192x8192x8192", "compute_dtype": dtype, "kernel_time_ns": 1e6,
            "flops": tops * 1e9, "kernels": [{"name": "gemm", "time_per_iter_ns": 1e6}]}


@pytest.mark.parametrize("tops, errors", [(1800.0, 0), (2100.0, 1)])
def test_decompose_judges_int8_against_its_own_nominal_not_the_fp16_figure(tops, errors):
    nom = peaks.nominal_for_identity(H200)["tflops"]
    pk = {"nominal_tflops": 989.5, "nominal_source": "test", "peak_tflops": {"int8": 2500.0},
          "bandwidth_gbps": None, "nominal_by_mode": nom}
    row = decompose.decompose_case(_case("int8", tops), {}, pk, "performance.json")
    assert row["mfu_nom"] == pytest.approx(tops / 989.5)
    errs = [f for f in row["flags"] if f["level"] == "error"]
    assert len(errs) == errors and all("nominal int8 peak" in f["message"] for f in errs)


def test_decompose_reads_the_per_dtype_nominal_from_the_report_or_peak_json():
    nom = peaks.nominal_for_identity(H200)["tflops"]
    from_report = peaks_match.peaks_for({"peak": {"nominal_tflops": nom, "value_tflops": 989.5}}, {"peak_tflops": {}})
    assert from_report["nominal_by_mode"]["int8"] == 1979.0 and from_report["nominal_tflops"] == 989.5
    override = {"peak": {"nominal_tflops": {"float16": 500.0, "bfloat16": 500.0}, "value_tflops": 500.0,
                         "override": True}}
    from_peak = peaks_match.peaks_for(override, {"peak_tflops": {}, "nominal": {"tflops": nom}})
    assert from_peak["nominal_tflops"] == 500.0 and from_peak["nominal_by_mode"]["int8"] == 1979.0


def test_the_fp8_call_the_gpu_times_computes_the_product_of_its_operands():
    # runs the same gemm_call / operands code as on an H200, on torch's CPU torch._scaled_mm (no peak is taken here)
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    dev = gemm_timing.Bench(get_backend("cpu"))
    a, b = gemm_timing._operands(dev, "float8_e4m3fn", 32, 48, 64, "col")
    assert b.shape == (64, 48) and b.stride() == (1, 64) and a.dtype == torch.float8_e4m3fn
    try:
        got = gemm_timing.gemm_call(dev, "float8_e4m3fn", a, b)()
    except RuntimeError as exc:  # a torch build without the CPU fp8 kernel
        pytest.skip(f"torch._scaled_mm does not run on this CPU build: {exc}")
    want = a.float() @ b.float()
    assert got.dtype == torch.bfloat16 and torch.allclose(got.float(), want, rtol=2e-2, atol=0.5)
