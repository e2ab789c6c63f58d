"""Roofline, headroom, payoff, the official-vs-PMU view, the cache regime, median-iteration parts and the terminal
table rules - on the HAND-MADE fixture of test_decompose_fixture.py (numbers worked out by hand below).

Fixture case 46 (float16, 910B2 peak 314 TFLOP/s, 1600 GB/s): 15.8e9 FLOPs in 271800 ns (attn 166900 ns for
0.8e9 FLOPs = 4.7933 TFLOP/s, proj 104900 ns for 15e9 = 142.993 TFLOP/s), 60e6 compulsory bytes.
  ai = 15.8e9 / 60e6 = 263.33 FLOP/B; memory roof 263.33 x 1600 / 1e3 = 421.3 > 314 -> attainable 314 (compute)
  achieved 58.131 TFLOP/s -> headroom 314 / 58.131 = 5.4016
  attn fixed to proj's 142.993: T' = 104900 + 0.8e9 / 142.993 / 1e3 = 104900 + 5594.6 = 110494.6 ns
    -> 15.8e9 / 110494.6 / 1e3 / 314 = 45.540 %   (payoff 45.540 - 18.513 = 27.03 points)
  proj (already the best part) has no PMU bytes and is not the whole case: its roofline is unknown (no headroom, no
    target - not the compute roof by default)
"""
import copy
import json

import pytest

from mfulib.report import decompose
from mfulib.profiles import kernels
from mfulib.report import tables as report
from mfulib.report import roofline
from test_decompose_fixture import PEAK, PERF, _rows, _write_op


def test_the_case_roofline_follows_the_hand_derived_numbers():
    r = roofline.roofline(2e9, 1e7, 100_000, 100.0, 1000.0)  # the docstring example of roofline.roofline
    assert r["ai_flop_per_byte"] == 200.0 and r["attainable_tflops"] == 100.0 and r["roof"] == "compute"
    assert r["achieved_tflops"] == pytest.approx(20.0) and r["headroom"] == pytest.approx(5.0)
    assert r["mfu_if_fixed"] == 1.0
    m = roofline.roofline(2e9, 1e8, 100_000, 100.0, 1000.0)  # ai 20 -> memory roof 20 x 1000 / 1e3 = 20 TFLOP/s
    assert m["roof"] == "memory" and m["attainable_tflops"] == pytest.approx(20.0) and m["headroom"] == pytest.approx(1.0)
    assert roofline.roofline(2e9, 1e8, 100_000, 100.0, 1000.0, dram_bytes=4e8)["dram_ai_flop_per_byte"] == 5.0


def test_parts_are_ranked_by_what_fixing_them_buys_the_case(tmp_path):
    d = _write_op(tmp_path)
    r = _rows(decompose.decompose(str(d), str(d / "peak.json")))[46]
    assert r["roofline"]["ai_flop_per_byte"] == pytest.approx(263.333, rel=1e-5)
    assert r["roofline"]["attainable_tflops"] == 314.0 and r["roofline"]["headroom"] == pytest.approx(5.4016, rel=1e-4)
    parts = {p["part"]: p["roofline"] for p in r["parts"]}
    assert parts["attn"]["target_source"] == "best sibling part"
    assert parts["attn"]["mfu_if_fixed"] == pytest.approx(0.45540, rel=1e-4)
    assert parts["attn"]["payoff"] == pytest.approx(0.45540 - 0.18513, rel=1e-3)
    assert parts["proj"]["roof"] == "unknown" and parts["proj"]["target_source"] is None
    assert parts["proj"]["headroom"] is None and parts["proj"]["mfu_if_fixed"] is None
    assert r["payoff_order"] == ["attn", "proj"]


def test_a_part_that_is_the_whole_case_gets_exactly_the_case_roofline():
    # 2e9 FLOPs, 1e8 compulsory bytes, 1e6 ns, peak 100 TFLOP/s, 1000 GB/s: ai 20 FLOP/B, memory roof 20 TFLOP/s,
    # achieved 2e9 / 1e6 / 1e3 = 2 TFLOP/s -> headroom 10, mfu_if_fixed 20 / 100 = 0.2, payoff 0.2 - 0.02 = 0.18
    case = roofline.roofline(2e9, 1e8, 1_000_000, 100.0, 1000.0)
    parts = [{"part": "mm", "kernels": ["matmul_relu_kernel"], "flops": 2e9, "time_ns": 1_000_000.0, "tflops": 2.0},
             {"part": "unused", "kernels": [], "flops": 0.0, "time_ns": 0.0}]  # a declared part no kernel matched
    roofline.part_rooflines(parts, 2e9, 1_000_000, 100.0, 1000.0, case_bytes=1e8)
    rf = parts[0]["roofline"]
    assert {k: rf[k] for k in case} == case
    assert rf["roof"] == "memory" and rf["attainable_tflops"] == pytest.approx(20.0) and rf["headroom"] == 10.0
    assert rf["mfu_if_fixed"] == pytest.approx(0.2) and rf["payoff"] == pytest.approx(0.18)
    assert rf["bytes_source"] == "case compulsory bytes"
    assert rf["target_source"] == "own attainable (case compulsory bytes)"


def test_a_part_with_unknown_bytes_is_labelled_unknown_not_the_compute_roof():
    # case 2e9 FLOPs in 1.5e6 ns (base MFU 2e9 / 1.5e6 / 1e3 / 100 = 1.333%), peak 100, 1000 GB/s:
    # a: 1e9 FLOPs in 5e5 ns (2 TFLOP/s), PMU 2e7 bytes -> ai 50, memory roof 50 -> headroom 25;
    #    fixed: T' = 1.5e6 - 5e5 + 1e9 / 50 / 1e3 = 1.02e6 ns -> 2e9 / 1.02e6 / 1e3 / 100 = 1.96078%
    # b: 1e9 FLOPs in 1e6 ns (1 TFLOP/s), no bytes -> roof unknown, no headroom; target a's 2 TFLOP/s:
    #    T' = 1.5e6 - 1e6 + 1e9 / 2 / 1e3 = 1e6 ns -> 2%
    parts = [{"part": "a", "kernels": ["ka"], "flops": 1e9, "time_ns": 5e5, "tflops": 2.0, "dram_bytes": 2e7},
             {"part": "b", "kernels": ["kb"], "flops": 1e9, "time_ns": 1e6, "tflops": 1.0, "dram_bytes": None}]
    roofline.part_rooflines(parts, 2e9, 1.5e6, 100.0, 1000.0, case_bytes=1e8)
    a, b = parts[0]["roofline"], parts[1]["roofline"]
    assert a["roof"] == "memory" and a["bytes_source"] == "PMU dram_bytes" and a["compulsory_bytes"] is None
    assert a["ai_flop_per_byte"] == 50.0 and a["headroom"] == pytest.approx(25.0)
    assert a["mfu_if_fixed"] == pytest.approx(0.0196078, rel=1e-5)
    assert b["roof"] == "unknown" and b["bytes_source"] is None
    assert b["ai_flop_per_byte"] is None and b["attainable_tflops"] is None and b["headroom"] is None
    assert b["target_source"] == "best sibling part" and b["mfu_if_fixed"] == pytest.approx(0.02)
    # a lone part whose case has no bytes either: unknown, and no target at all
    lone = [{"part": "mm", "kernels": ["k"], "flops": 2e9, "time_ns": 1e6, "tflops": 2.0}]
    roofline.part_rooflines(lone, 2e9, 1e6, 100.0, 1000.0, case_bytes=None)
    assert lone[0]["roofline"]["roof"] == "unknown" and lone[0]["roofline"]["headroom"] is None
    assert lone[0]["roofline"]["mfu_if_fixed"] is None and lone[0]["roofline"]["target_source"] is None


def test_an_unmatched_part_holding_all_the_time_has_no_if_fixed_figure():
    # a new user's report: KERNEL_PARTS matched no kernel, "other" held 100% of the time, and removing it divided by
    # a 1e-9 ns remainder: "MFU@ach if fixed 980269921875000%". Nothing measured is left: no figure
    parts = [{"part": "matmul", "kernels": [], "flops": 2e9, "time_ns": 0.0, "tflops": None},
             {"part": "other", "kernels": ["aten::mm"], "flops": None, "time_ns": 1e6, "tflops": None}]
    roofline.part_rooflines(parts, 2e9, 1e6, 100.0, 1000.0, case_bytes=1e8)
    assert parts[1]["roofline"]["mfu_if_fixed"] is None and parts[1]["roofline"]["payoff"] is None
    half = [{"part": "matmul", "kernels": ["k"], "flops": 2e9, "time_ns": 5e5, "tflops": 4.0},
            {"part": "other", "kernels": ["copy"], "flops": None, "time_ns": 5e5, "tflops": None}]
    roofline.part_rooflines(half, 2e9, 1e6, 100.0, 1000.0, case_bytes=1e8)
    assert half[1]["roofline"]["mfu_if_fixed"] == pytest.approx(2e9 / 5e5 / 1e3 / 100.0)  # its time removed


def test_the_parts_table_prints_unknown_bytes_not_a_headroom(tmp_path):
    d = _write_op(tmp_path)
    text = report.parts_table(decompose.decompose(str(d), str(d / "peak.json")))
    proj = next(line for line in text.splitlines() if " proj " in f" {line} ")
    assert "unknown (bytes)" in proj and "compute roof" not in proj


def test_official_mfu_beside_the_pmu_view_and_npu_cube_fops_are_not_executed_flops(tmp_path):
    perf = copy.deepcopy(PERF)
    perf["device"] = {"name": "Ascend910B2", "runtime": {"ai_core_num": 24}}
    perf["per_case"][0]["pmu_source"] = "msprof:ArithmeticUtilization"
    perf["per_case"][0]["pmu"] = {"_attn_fwd_kernel": {"aic_cube_fops": 1.0e9, "block_dim": 24},
                                  "matmul_kernel": {"aic_cube_fops": 4.0e9, "block_dim": 12}}  # per launch, 4/iter
    d = _write_op(tmp_path, perf=perf)
    res = decompose.decompose(str(d), str(d / "peak.json"))
    v = _rows(res)[46]["pmu_view"]
    # aic_cube_fops has no public definition (mfulib.flops.executed): no executed FLOPs, no redundancy
    assert v["executed_flops"] is None and v["redundancy"] is None and v["pmu_mfu"] is None
    assert any("aic_cube_fops is not used" in h for h in v["executed_how"])
    frac = (166900 * 1.0 + 104900 * 0.5) / 271800  # active cores (166900 x 24/24 + 104900 x 12/24) / 271800
    assert v["active_core_fraction"] == pytest.approx(frac)
    assert v["official_mfu"] == pytest.approx(0.18513, rel=1e-4)
    assert "vs PMU view" not in report.decompose_table(res)


def test_the_regime_says_the_operator_ran_warm_against_a_flushed_peak(tmp_path):
    perf, peak = copy.deepcopy(PERF), copy.deepcopy(PEAK)
    perf["flush_cache_mib"] = 0.0
    peak["method"] = {"cache_flush": "zero a 256 MiB buffer before every timed iteration (untimed)", "flush_cache_mib": 256}
    d = _write_op(tmp_path, perf=perf, peak=peak)
    res = decompose.decompose(str(d), str(d / "peak.json"))
    reg = res["regime"]
    assert reg["flush_cache_mib_collect"] == 0.0 and reg["flush_cache_mib_peak"] == 256.0
    assert reg["note"].startswith("operator warm") and "peak cold (256 MiB" in reg["note"]
    assert "--flush-cache-mib 256" in reg["note"]
    assert "cache regime: operator warm" in report.decompose_table(res)
    perf["flush_cache_mib"] = 256
    (d / "performance.json").write_text(json.dumps(perf))
    assert decompose.decompose(str(d), str(d / "peak.json"))["regime"]["note"].startswith("both cold")


def _iters(per_iter):
    """Launch rows of kernels A and B, one iteration each entry of ``per_iter`` [(a_ns, b_ns)]; SYNTHETIC."""
    rows, t = [], 1_000_000
    for i, (a, b) in enumerate(per_iter):
        for name, dur in (("A", a), ("B", b)):
            rows.append({"name": name, "start_ns": t, "duration_ns": dur, "iteration": i})
            t += dur + 100
    return rows


def test_parts_come_from_the_median_iteration_so_they_add_up_to_the_total():
    # iteration sums 40, 40, 52 ns -> median 40 (the second 40: iteration 1, A 30 + B 10); separate per-kernel
    # medians would give A median(10, 30, 22) = 22 + B median(30, 10, 30) = 30 = 52 ns, not 40
    s = kernels.summarize(_iters([(10, 30), (30, 10), (22, 30)]), 0, 3)
    assert s["kernel_time_ns"] == 40.0 and s["median_iterations"] == [1]
    by = {k["name"]: k["time_per_iter_ns"] for k in s["kernels"]}
    assert by == {"A": 30.0, "B": 10.0} and sum(by.values()) == s["kernel_time_ns"]
    # even count: the mean of the two middle iterations (sums 40, 44, 50, 60 -> 44 and 50)
    s = kernels.summarize(_iters([(30, 30), (20, 20), (24, 20), (25, 25)]), 0, 4)
    assert s["kernel_time_ns"] == 47.0 and s["median_iterations"] == [2, 3]
    by = {k["name"]: k["time_per_iter_ns"] for k in s["kernels"]}
    assert by == {"A": 24.5, "B": 22.5} and sum(by.values()) == s["kernel_time_ns"]


def test_the_table_counts_never_measured_cases_in_one_line_and_wraps_long_text(tmp_path):
    perf = copy.deepcopy(PERF)
    perf["per_case"][0]["numerator"] = "unverified"
    perf["per_case"][0]["numerator_reason"] = "the tracer saw an op it cannot cost: " + "aten.weird_op " * 20 + "END"
    d = _write_op(tmp_path, perf=perf)
    text = report.decompose_table(decompose.decompose(str(d), str(d / "peak.json")))
    lines = text.splitlines()
    assert not any(ln.split()[:1] == ["50"] for ln in lines)  # the skipped case is no row
    (i,) = [i for i, ln in enumerate(lines) if "never measured" in ln]
    assert "1 case(s)" in lines[i]  # then one line per reason: the case, who left it out, the recorded reason
    assert lines[i + 1].startswith("  case 50 - not run by the collector: ") and "interpreter" in lines[i + 1]
    note = [ln for ln in lines if "numerator: unverified" in ln or "aten.weird_op" in ln]
    assert len(note) > 1 and all(len(ln) <= report.WRAP for ln in note)
    assert "END" in " ".join(note)  # wrapped, never cut off
    head = next(ln for ln in lines if ln.startswith("case "))
    assert "TFLOPS" not in text and head.split()[:6] == ["case", "shape", "dtype", "total", "us", "TFLOP/s"]


def test_cpu_interpreter_numbers_get_no_optimisation_advice(tmp_path):
    perf, peak = copy.deepcopy(PERF), copy.deepcopy(PEAK)
    perf["backend"] = peak["backend"] = "cpu"
    peak["device"] = {"backend": "cpu", "name": "cpu"}
    perf["device"] = {"name": "cpu"}
    d = _write_op(tmp_path, perf=perf, peak=peak)
    aid = decompose.decompose(str(d), str(d / "peak.json"))["reading_aid"]
    text = "\n".join(aid)
    assert "optimise it first" not in text and "no optimisation advice" in text
    assert not any(s.startswith(("4.", "5.")) for s in aid)  # no bound or payoff lines from interpreter times


def test_single_part_operators_plot_mbu_and_mfu_not_a_100_percent_bar(tmp_path, monkeypatch):
    one = {"status": "ok", "case": 1, "dtype": "float16", "mbu": 0.42, "mfu_ach": None,
           "parts": [{"part": "other", "time_share": 1.0, "flops_share": None}]}
    result = {"reports": [{"label": "op", "kernel_parts": {}, "rows": [one]}], "peak_label": "fixture"}
    called = []
    real = report._plot_utilisation
    monkeypatch.setattr(report, "_plot_utilisation", lambda *a: called.append(a) or real(*a))
    png = report.plot_decompose(result, str(tmp_path / "p.png"))
    assert called and png and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_the_collector_table_lists_measured_cases_only_and_wraps_flags(capsys):
    from mfulib.collect import console as mod
    flag = "sequence_mismatch: iterations [3] launch a different kernel sequence " + "x" * 80 + " TAIL"
    per_case = [{"case": 0, "dtype": "float16", "shape": "[4, 1024]", "measured_impl": "asc", "launches_per_iter": 2,
                 "kernel_time_ns": 45000.0, "span_ns": 53000.0, "actual_tflops": 1.5, "mfu_nom": 0.01,
                 "repeat_spread": 0.02, "flags": [flag]}]
    per_case += [{"case": i, "dtype": "bfloat16", "shape": "[4, 1024]", "skipped": "bf16 cannot run on the cpu"}
                 for i in (1, 2, 3)]
    mod.print_table({"per_case": per_case, "backend": "cpu", "device": {"name": "cpu"}, "n_cases_valid": 1,
                     "n_cases_total": 4, "peak": {}})
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if "bfloat16" in ln]
    assert rows == []  # never-measured cases are no rows
    (i,) = [i for i, ln in enumerate(out.splitlines()) if "never measured" in ln]
    unmeasured = out.splitlines()[i:i + 2]
    assert "3 case(s)" in unmeasured[0] and unmeasured[1].startswith("  case 1, 2, 3 - not run by the collector: ")
    assert "bf16" in unmeasured[1]
    assert "valid cases 1/1 measured" in out and "TAIL" in out  # wrapped, not cut at 60 characters


def _numbers(aid):
    return [int(s.split(".", 1)[0]) for s in aid]


def test_the_reading_aid_is_numbered_consecutively_when_an_item_is_left_out(tmp_path):
    # an H200 log read "1, 2, 3, 5": no PMU bound line (item 4) and the payoff line kept its 5
    d = _write_op(tmp_path)
    aid = decompose.decompose(str(d), str(d / "peak.json"))["reading_aid"]
    assert not any("bound per part from PMU" in s for s in aid)
    nums = _numbers(aid)
    assert sorted(set(nums)) == list(range(1, max(nums) + 1)) and nums == sorted(nums), aid
    assert any(s.startswith("4. largest payoff: ") for s in aid), aid  # was "5." here
    assert sum(s.startswith("3. ") for s in aid) == 2  # one fp32-vs-fp16 line per part, one number


def _vector_rows(parts):
    """Rows of an operator without matrix work (zoo/3_RMSNorm: flops 0, MBU the headline) in two dtypes."""
    return [{"status": "ok", "case": c, "dtype": dt, "backend": "cuda", "matrix_work": False, "flops": 0.0,
             "mfu_ach": None, "mfu_nom": None, "mbu": mbu, "parts": copy.deepcopy(parts)}
            for c, dt, mbu in ((0, "float32", 0.41), (1, "float16", 0.63))]


def test_an_operator_without_matrix_work_is_compared_on_mbu_and_its_zero_flops_parts_are_not_called_absent():
    from mfulib.report.reading import reading_aid
    # zoo/3_RMSNorm: KERNEL_PARTS {"norm": ...} and flops_parts {"norm": 0.0} - the decomposition gives the part
    # flops 0.0 and no FLOPs share (the case's flops are 0)
    aid = reading_aid(_vector_rows([{"part": "norm", "flops": 0.0, "flops_share": None, "time_share": 1.0}]), {})
    assert aid[0].startswith("1. dtype: no case does matrix work") and "compare the cases on MBU" in aid[0]
    assert "MFU@ach" not in aid[0] and "best MBU 63.00% (case 1, float16)" in aid[0]
    assert aid[1].startswith("2. the parts (norm)") and "no matrix work" in aid[1]
    assert "absent" not in aid[1] and "add flops_parts" not in aid[1]
    assert " - time share" not in aid[1]  # one part takes 100% of the time: nothing to list
    two = reading_aid(_vector_rows([{"part": "norm", "flops": 0.0, "flops_share": None, "time_share": 0.7},
                                    {"part": "scale", "flops": 0.0, "flops_share": None, "time_share": 0.3}]), {})
    shares = two[1].split(" - time share ")[1]
    assert "case 0: norm 70%, scale 30%" in shares and "case 1: norm 70%, scale 30%" in shares, two[1]
    assert _numbers(aid) == sorted(_numbers(aid)) and sorted(set(_numbers(aid))) == [1, 2, 3]

    # KERNEL_PARTS without flops_parts: the part's flops are None - then (only then) flops_parts is asked for
    absent = reading_aid(_vector_rows([{"part": "norm", "flops": None, "flops_share": None, "time_share": 1.0}]), {})
    assert absent[1].startswith("2. no per-part FLOPs") and "add flops_parts" in absent[1]
    # no KERNEL_PARTS: every kernel is 'other' - not a part that "drags", and KERNEL_PARTS is what is missing
    none = reading_aid(_vector_rows([{"part": "other", "flops": None, "flops_share": None, "time_share": 1.0}]), {})
    assert none[1].startswith("2. one part only") and "no KERNEL_PARTS" in none[1] and "unmatched" not in none[1]
