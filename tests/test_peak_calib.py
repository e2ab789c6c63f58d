"""peak_calib on the CPU (torch CPU GEMM, labelled as such), its cache, its search and its noise filter."""
import datetime as dt
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from mfulib.peaks import calib
from mfulib.core import definitions
from mfulib.core import fmt
from mfulib.backends import device_identity, get_backend
from mfulib.peaks import gemm_search
from mfulib.peaks import gemm_timing
from mfulib.schemas import peak_json
from mfulib.core.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "peak_calib.py")


def _run(args, cwd, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


@pytest.fixture(scope="module")
def cpu_peak(tmp_path_factory):
    """One quick CPU calibration shared by the tests below (about 6 s on a 2-core CI machine)."""
    d = tmp_path_factory.mktemp("peak")
    res = _run(["-o", "peak.json", "--backend", "cpu", "--budget-s", "2", "--dtypes", "fp32,bf16,int8,fp8",
                "--cache-dir", str(d / "cache")], cwd=d)
    assert res.returncode == 0, res.stderr
    return d, res, json.loads((d / "peak.json").read_text())


def test_cpu_calibration_is_labelled_as_cpu_numbers_with_provenance_and_method(cpu_peak):
    _d, res, peak = cpu_peak
    assert peak["tool"] == "peak_calib" and peak["schema"] == peak_json.SCHEMA and peak["command_line"]
    assert peak["backend"] == "cpu" and peak["accelerator"] is False
    assert "not an accelerator" in peak["label"] and "not an accelerator" in peak["device"]["note"]
    assert peak["nominal"]["tflops"] == {}  # no nominal peak on a CPU: absent, never 0
    assert set(peak["peak_tflops"]) == {"float32", "bfloat16", "int8"}
    for mode, m in peak["measured"].items():
        best = m["best_shape"]
        # the reported peak is 2*m*n*k / median of the confirmation run
        assert m["peak_tflops"] == pytest.approx(2 * best["m"] * best["n"] * best["k"] / m["confirm"]["median_ns"]
                                                 / 1e3)
        assert m["n_shapes"] >= 1 and m["shapes"][0]["tflops"] >= m["shapes"][-1]["tflops"]
        c = m["confirm"]
        assert m["spread"] == pytest.approx((c["p90_ns"] - c["p10_ns"]) / c["median_ns"])
        assert m["sweep_drift"] == pytest.approx((m["sweep_tflops"] - m["peak_tflops"]) / m["peak_tflops"])
    assert peak["bandwidth_gbps"] > 0 and peak["bandwidth"]["bytes_per_iter"] == 2 * peak["bandwidth"]["buffer_bytes"]
    assert "median" in peak["method"]["per_shape_statistic"] and "MiB" in peak["method"]["cache_flush"]
    assert peak["elapsed_s"] < 30
    assert "float32" in res.stdout and "copy bandwidth" in res.stdout and "not an accelerator" in res.stdout


def test_int8_is_reported_in_tops_with_its_b_layout_and_fp8_is_not_available_on_cpu(cpu_peak):
    _d, res, peak = cpu_peak
    m = peak["measured"]["int8"]
    assert m["unit"] == "TOPS" and m["peak_tops"] == m["peak_tflops"] == peak["peak_tops"]["int8"]
    probe = m["layout_probe"]
    assert set(probe["tflops"]) | set(probe["errors"]) == {"row", "col"}  # both layouts tried
    assert m["b_layout"] == probe["chosen"] == max(probe["tflops"], key=probe["tflops"].get)
    assert "torch._int_mm" in m["math_mode"]
    assert "float8_e4m3fn" not in peak["measured"]
    assert peak["errors"]["float8_e4m3fn"].startswith("not available on cpu") and "int8" in res.stdout


def test_peak_json_records_regime_clocks_and_trust(cpu_peak):
    _d, _res, peak = cpu_peak
    reg = peak["regime"]
    assert reg["kind"] == "sustained" and reg["requested"] == "burst"  # CPU: no idle time is inserted
    assert 0 < reg["duty_cycle_measured"] <= 1.0 and reg["busy_s"] > 0
    assert peak["clocks"]["n_samples"] == 0  # no vendor clock tool on a CPU: nothing invented
    trust = peak["trust"]
    lim = calib.TRUST_LIMITS["cpu"]
    over = [mode for mode, v in trust["spreads"].items() if v > lim["spread"]] + \
           [mode for mode, v in trust["drifts"].items() if abs(v) > lim["drift"]]
    assert trust["trusted"] is (not over)
    assert peak["cache"]["stored"] is trust["trusted"]
    assert os.path.exists(_d / "cache" / f"peak-{peak['device']['key']}.json") is trust["trusted"]


def test_without_a_terminal_nothing_is_printed_per_shape_and_the_result_table_comes_last(cpu_peak):
    """make's log: no sweep or per-mode line on stderr (only the few peak_calib: log lines), and the result table
    - each mode's confirmed figure beside its sweep figure - at the end of stdout, before the "wrote" line."""
    _d, res, peak = cpu_peak
    assert all(ln.startswith("peak_calib: ") for ln in res.stderr.splitlines() if ln.strip()), res.stderr
    assert len(res.stderr.splitlines()) <= 3
    out = res.stdout.splitlines()
    assert out[0].startswith("peaks of ") and out[-1].startswith("wrote ")
    head = out[1].split()
    assert head[:4] == ["mode", "confirmed", "unit", "sweep"]
    for mode, m in peak["measured"].items():
        row = next(ln for ln in out if ln.startswith(mode + " ")).split()
        assert row[1] == fmt.sig(m["peak_tflops"]) and row[3] == fmt.sig(m["sweep_tflops"])  # the same numbers


def test_on_a_terminal_one_bar_counts_the_steps_in_place():
    import io

    from mfulib.peaks.progress import console_progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert console_progress(io.StringIO()) is None  # a log or a pipe: nothing per point
    assert console_progress(Tty(), quiet=True) is None
    stream = Tty()
    bar = console_progress(stream)
    for i in range(3):
        bar(f"float32: sweep {i + 1} shapes, best 1.0 TFLOP/s")
    bar.close()
    text = stream.getvalue()
    assert "\n" not in text.rstrip("\n")  # redrawn in place (carriage returns), one line in the end
    assert "3 step" in text and "sweep 3 shapes" in text.split("\r")[-1]


def _calibrate(tmp_path, name, limits, monkeypatch, **kw):
    monkeypatch.setitem(calib.TRUST_LIMITS, "cpu", limits)
    logged = []
    out = calib.run_calibration(str(tmp_path / name), backend="cpu", modes=["float32"], budget_s=0.5,
                                bandwidth=False, cache_dir=str(tmp_path / "cache"), log=logged.append, **kw)
    return out, logged


def test_a_trusted_calibration_is_cached_reused_and_refreshed(tmp_path, monkeypatch):
    lax = {"spread": float("inf"), "drift": float("inf")}
    first, _ = _calibrate(tmp_path, "a.json", lax, monkeypatch)
    assert first["trust"]["trusted"] and first["cache"]["stored"] and first["cache"]["not_stored_why"] is None
    assert os.listdir(tmp_path / "cache") == [f"peak-{first['device']['key']}.json"]
    again, logged = _calibrate(tmp_path, "b.json", lax, monkeypatch)
    assert again["cache"]["hit"] is True and again["peak_tflops"] == first["peak_tflops"]
    assert any("reusing" in ln and "--cache refresh" in ln for ln in logged)
    fresh, _ = _calibrate(tmp_path, "c.json", lax, monkeypatch, cache="refresh")
    assert fresh["cache"]["hit"] is False
    other, _ = _calibrate(tmp_path, "d.json", lax, monkeypatch, regime="sustained")
    assert other["cache"]["hit"] is False and "regime" in other["cache"]["reason"]


def test_a_noisy_calibration_is_written_but_never_cached(tmp_path, monkeypatch):
    strict = {"spread": 0.0, "drift": -1.0}  # |drift| > -1 always: every run counts as noisy
    first, logged = _calibrate(tmp_path, "a.json", strict, monkeypatch)
    assert first["trust"]["trusted"] is False and first["trust"]["untrusted"]
    assert first["cache"]["stored"] is False and first["cache"]["not_stored_why"].startswith("untrusted: float32")
    assert json.loads((tmp_path / "a.json").read_text())["peak_tflops"] == first["peak_tflops"]
    assert not (tmp_path / "cache").exists() or os.listdir(tmp_path / "cache") == []
    assert any("not caching this calibration" in ln for ln in logged)
    again, _ = _calibrate(tmp_path, "b.json", strict, monkeypatch)
    assert again["cache"]["hit"] is False  # measured again, not reused


def test_a_stale_mismatched_or_untrusted_cache_is_not_reused(tmp_path, monkeypatch):
    first, _ = _calibrate(tmp_path, "a.json", {"spread": float("inf"), "drift": float("inf")}, monkeypatch)
    ident = first["device"]
    cached = json.loads((tmp_path / "cache" / f"peak-{ident['key']}.json").read_text())
    path = tmp_path / "c.json"
    old = dict(cached, created_at=(dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=30)).isoformat())
    path.write_text(json.dumps(old))
    got, why = peak_json.load_cached(str(path), ident, ["float32"], False, max_age_days=14)
    assert got is None and "30.0 days old" in why
    other = dict(cached, software=dict(cached["software"], torch="0.0.1"))
    path.write_text(json.dumps(other))
    assert peak_json.load_cached(str(path), ident, ["float32"], False, 14)[0] is None
    assert peak_json.load_cached(str(path.with_name("absent.json")), ident, ["float32"], False, 14)[1] == \
        "no cached calibration"
    noisy = dict(cached, trust=dict(cached["trust"], trusted=False, untrusted=["float32: spread 40.0% > 30%"]))
    path.write_text(json.dumps(noisy))
    got, why = peak_json.load_cached(str(path), ident, ["float32"], False, 14)
    assert got is None and "not trustworthy" in why and "spread 40.0%" in why
    path.write_text(json.dumps(cached))
    assert peak_json.load_cached(str(path), ident, ["float32"], False, 14)[0] is not None
    got, why = peak_json.load_cached(str(path), ident, ["float32", "int8"], False, 14)
    assert got is None and "int8" in why


def test_the_hill_climb_reaches_the_top_of_a_synthetic_throughput_surface():
    # A hand-made surface with one peak at (3072, 5120, 12288): tflops = 100 - distance/256 (test double for timing).
    top = (3072, 5120, 12288)

    def timer(m, n, k, **_kw):
        dist = sum(abs(a - b) for a, b in zip((m, n, k), top))
        tf = 100.0 - dist / 256
        return {"m": m, "n": n, "k": k, "tflops": tf, "median_ns": 2 * m * n * k / tf / 1e3, "iters": 5}

    sweep = gemm_search.Sweep(None, "bfloat16", 10.0, max_operand_bytes=1 << 40, max_flop=1e15, timer=timer)
    gemm_search.hill_climb(sweep, calib.ACCEL_SEEDS, calib.ACCEL_STEPS, lo=256, hi=32768)
    best = sweep.best()[0]
    assert (best["m"], best["n"], best["k"]) == top and best["tflops"] == 100.0
    assert len(sweep.results) < 150  # a walk, not a grid
    assert gemm_search.confirm_best(sweep, top=3)["tflops"] == 100.0


def test_shapes_too_large_for_memory_are_not_run():
    calls = []
    sweep = gemm_search.Sweep(None, "float32", 10.0, max_operand_bytes=3 * 1024 * 1024 * 4, max_flop=1e15,
                        timer=lambda m, n, k, **kw: calls.append((m, n, k)) or {"m": m, "n": n, "k": k, "tflops": 1.0,
                                                                                 "median_ns": 1.0})
    assert sweep.measure((1024, 1024, 1024)) is not None  # A, B, C: 3 x 4 MiB fits exactly
    assert sweep.measure((2048, 1024, 1024)) is None and calls == [(1024, 1024, 1024)]


def test_dtype_list_parses_aliases_and_rejects_unknown_names():
    assert calib.parse_modes("bf16,fp16,FP32,hf32,int8,bf16,fp8") == ["bfloat16", "float16", "float32", "tf32",
                                                                      "int8", "float8_e4m3fn"]
    with pytest.raises(UserError, match="unknown 'fp4'"):
        calib.parse_modes("fp4")


def test_fp32_run_with_tf32_reads_the_tf32_peak():
    peak = {"peak_tflops": {"float32": 50.0, "tf32": 300.0}}
    assert definitions.measured_peak_tflops(peak["peak_tflops"], "fp32", tf32=True) == (300.0, "tf32")
    assert definitions.measured_peak_tflops(peak["peak_tflops"], "float32") == (50.0, "float32")
    assert definitions.measured_peak_tflops(peak["peak_tflops"], "bf16") == (None, "bfloat16")


def test_cpu_timing_returns_one_positive_duration_per_iteration():
    dev = gemm_timing.Bench(get_backend("cpu"))
    dev.flush_bytes = 1 << 20
    times = gemm_timing.time_iterations(dev, lambda: sum(range(1000)), iters=4)
    assert len(times) == 4 and all(t > 0 for t in times)


def test_bad_budget_is_a_user_error_with_exit_2(tmp_path):
    res = _run(["--budget-s", "0", "--backend", "cpu", "--cache", "off"], cwd=tmp_path)
    assert res.returncode == 2 and "error: --budget-s 0.0: must be > 0" in res.stderr


def test_noise_filter_drops_cann_tiling_warnings_written_to_the_file_descriptors(tmp_path):
    # A child writes like native code (os.write on fds 1 and 2) inside the filter.
    prog = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.join(ROOT, 'scripts')!r})
        from mfulib.run import noise
        with noise.native_noise_filter() as f:
            os.write(1, b"[WARNING] TBE: tiling struct MatMulTilingData is conflict with one in file x.h\\n")
            os.write(2, b"result line kept\\n")
            os.write(1, b"[W] Tiling Struct foo IS CONFLICT\\n")
            print("python print kept", flush=True)
        print(f.summary()["lines_dropped"])
    """)
    res = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "MatMulTilingData" not in res.stdout + res.stderr and "Struct foo" not in res.stdout + res.stderr
    assert "result line kept" in res.stderr
    assert "python print kept" in res.stdout
    assert "{'tiling struct.*is conflict': 2}" in res.stdout


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_calibration_measures_bf16_close_to_but_below_the_nominal_peak(tmp_path):
    res = _run(["-o", "peak.json", "--backend", "cuda", "--dtypes", "bf16", "--budget-s", "3", "--cache", "off"],
               cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    peak = json.loads((tmp_path / "peak.json").read_text())
    frac = peak["measured"]["bfloat16"].get("fraction_of_nominal")
    assert frac is None or 0.3 < frac < 1.0


@pytest.mark.parametrize("budget", ["nan", "inf"])
def test_a_non_finite_budget_is_a_user_error_with_exit_2(tmp_path, budget):
    res = _run(["--budget-s", budget, "--backend", "cpu", "--cache", "off"], cwd=tmp_path)
    assert res.returncode == 2 and f"error: --budget-s {budget}: " in res.stderr and "finite" in res.stderr
    assert not (tmp_path / "peak.json").exists()


@pytest.mark.parametrize("where, says", [("dir", "is a directory"), ("file/peak.json", "is a file, not a directory")])
def test_an_output_that_cannot_be_written_is_refused_before_anything_is_measured(tmp_path, where, says):
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    logged = []
    with pytest.raises(UserError, match=says):
        calib.run_calibration(str(tmp_path / where), backend="cpu", modes=["float32"], budget_s=1.0,
                              bandwidth=False, cache="off", log=logged.append)
    assert logged == []  # refused before the backend was even resolved, let alone measured


def test_a_cache_that_is_valid_json_but_not_an_object_is_ignored_with_a_note(tmp_path):
    ident = device_identity("cpu")
    path = tmp_path / f"peak-{ident['key']}.json"
    for doc in ([1, 2], {"tool": "peak_calib", "peak_tflops": {}, "measured": {"float32": 5}}):
        path.write_text(json.dumps(doc))
        got, why = peak_json.load_cached(str(path), ident, ["float32"], False, 14)
        assert got is None and why.startswith("cache ignored:") and str(path) in why
