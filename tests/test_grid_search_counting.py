"""The counting pass on the leaders (mfulib/search/counting.py): which candidates are counted, where it stops, the
figures recomputed from min(traced, executed), when the search uses it (counts_later) and the one-case counting run.
Expected figures are computed here by hand from MFU = FLOPs / time / peak."""
import json

import pytest

from mfulib.core.errors import UserError
from mfulib.search import counting
from mfulib.search import grid as grid_search
from mfulib.search import retime as rt

PEAK_ACH = 500.0  # TFLOP/s
TRACED = 1.0e12


def mfu(flops, kt_ns):
    return flops / (kt_ns * 1e-9) / 1e12 / PEAK_ACH


def row(case, kts_ns, traced=TRACED):
    """A re-timed stage-2 row whose numerator is the traced count (counters off in stage 2): kernel time per run."""
    vals = [mfu(traced, k) for k in kts_ns]
    return {"case": case, "status": "ok", "kernel_time_ns": kts_ns[0], "numerator": traced, "numerator_traced": traced,
            "numerator_executed": None, "num_src": "tracer", "num_src_why": "counters off in stage 2",
            "bytes_moved": 1000, "peak_nom_tflops": 2 * PEAK_ACH, "peak_ach_tflops": PEAK_ACH,
            "bandwidth_gbps": 4000.0, "mfu_ach": vals[0], "mfu_nom": vals[0] / 2, "actual_tflops": None,
            "metric_value": vals[0], "retimed": rt.summarize(vals, list(kts_ns))}


def test_counts_leaders_until_the_best_counted_figure_beats_the_next_upper_bound():
    # traced figures (medians): case 7 0.70, case 9 0.65, case 4 0.50 (kernel times chosen for those MFUs)
    kt = lambda m: TRACED / (m * PEAK_ACH * 1e12) * 1e9  # noqa: E731 - ns for MFU m
    rows = [row(7, [kt(0.70)] * 3), row(9, [kt(0.66), kt(0.65), kt(0.64)]), row(4, [kt(0.50)] * 3)]
    executed = {7: (0.8 * TRACED, "hardware:tensor_inst_executed", None),  # 7 drops to 0.56 < 9's bound 0.65
                9: (None, None, "wgmma of several shapes")}                   # 9 stays 0.65: exact, > 4's 0.50
    calls = []

    def count(case):
        calls.append(case)
        return executed[case]

    block = {"ranked": [7, 9, 4], "tie": None}
    cost = {}
    out = counting.count_leaders(rows, "mfu", count, lambda m: None, cost, block)
    assert calls == [7, 9] and out["order"] == [7, 9] and "case 9" in out["stopped"] and "case 4" in out["stopped"]
    by = {r["case"]: r for r in rows}
    assert by[7]["numerator"] == 0.8 * TRACED and by[7]["num_src"] == "hardware:tensor_inst_executed"
    assert by[7]["retimed"]["median"] == pytest.approx(0.56) and by[7]["mfu_ach"] == pytest.approx(0.56)
    assert by[9]["numerator"] == TRACED and by[9]["retimed"]["median"] == pytest.approx(0.65)
    assert by[9]["counted"] and by[7]["counted"] and not by[4]["counted"]
    assert by[4]["num_src_why"].startswith("not counted") and by[4]["numerator"] == TRACED
    assert [r["case"] for r in rows] == [9, 7, 4] and block["ranked"] == [9, 7, 4]
    assert block["tie"] is None and cost["counts"] >= 0  # 0.65 vs 0.56: gap 0.09 > ranges 0.02 + 0
    best = grid_search.best_of(rows, [{"case": c, "source_case": c, "factors": {}, "scale": 1.0} for c in (7, 9, 4)],
                               "mfu")
    assert best["case"] == 9 and "wgmma of several shapes" in best["num_src_why"]


def test_no_executed_count_on_the_leader_settles_it_with_one_run():
    kt = lambda m: TRACED / (m * PEAK_ACH * 1e12) * 1e9  # noqa: E731
    rows = [row(1, [kt(0.6)] * 3), row(2, [kt(0.59)] * 3), row(3, [kt(0.4)] * 3)]
    calls = []
    out = counting.count_leaders(rows, "mfu", lambda c: calls.append(c) or (None, None, "refused"), lambda m: None, {})
    assert calls == [1] and out["order"] == [1] and [r["case"] for r in rows] == [1, 2, 3]
    assert rows[0]["retimed"]["median"] == pytest.approx(0.6) and rows[0]["counted"]


def test_every_candidate_counted_when_each_count_drops_below_the_next():
    kt = lambda m: TRACED / (m * PEAK_ACH * 1e12) * 1e9  # noqa: E731
    rows = [row(1, [kt(0.6)] * 3), row(2, [kt(0.5)] * 3), row(3, [kt(0.4)] * 3)]
    # executed halves each one: 0.30, 0.25, 0.20 - each below the next's bound until none is left
    out = counting.count_leaders(rows, "mfu", lambda c: (0.5 * TRACED, "hardware:x", None), lambda m: None, {})
    assert out["order"] == [1, 2, 3] and out["stopped"].startswith("every candidate")
    assert [r["case"] for r in rows] == [1, 2, 3]
    assert [r["retimed"]["median"] for r in rows] == pytest.approx([0.30, 0.25, 0.20])


def test_a_failed_counting_run_keeps_the_traced_count_with_its_reason():
    kt = lambda m: TRACED / (m * PEAK_ACH * 1e12) * 1e9  # noqa: E731
    rows = [row(1, [kt(0.6)] * 3), row(2, [kt(0.5)] * 3)]

    def count(case):
        raise UserError("counting 1: the collector wrote no performance.json (exit status 1): ncu: ERR_NVGPUCTRPERM")
    out = counting.count_leaders(rows, "mfu", count, lambda m: None, {})
    assert out["order"] == [1] and "ERR_NVGPUCTRPERM" in out["runs"][0]["error"]
    assert rows[0]["numerator"] == TRACED and "counting run failed" in rows[0]["num_src_why"]


def test_without_retiming_stage_2s_figure_ranks_and_rows_outside_the_group_are_never_counted():
    rows = [row(1, [2.0e6]), row(2, [3.0e6])]
    for r in rows:
        r.pop("retimed")
    rows.append(dict(row(3, [1.0e6]), status="error", metric_value=None, retimed=None))
    calls = []
    counting.count_leaders(rows, "mfu", lambda c: calls.append(c) or (None, None, "none"), lambda m: None, {})
    assert calls == [1] and [r["case"] for r in rows] == [1, 2, 3] and not rows[2]["counted"]


@pytest.mark.parametrize("backend,opts,metric,later", [
    ("cuda", {}, "mfu", True),
    ("cuda", {"counts_on": "all"}, "mfu", False),
    ("cuda", {"stage2_pmu": "none"}, "mfu", False),
    ("cuda", {"collect_args": ["--pmu", "ncu"]}, "mfu", False),
    ("cuda", {}, "mbu", False),
    ("cpu", {}, "mfu", False),
    ("npu", {}, "mfu", False),  # msprof's counters come in the profile itself; none counts matrix work here
])
def test_the_counting_pass_applies_on_cuda_with_counters_asked_for(backend, opts, metric, later):
    assert grid_search.counts_later(backend, grid_search.SearchOptions(**opts), metric) is later


def test_stage2_without_counters_runs_the_collector_timing_only_and_counting_one_case_with_them(tmp_path,
                                                                                                 monkeypatch):
    from mfulib.core import cases
    from mfulib.core.opdir import OpDir
    from mfulib.search import pool as search_pool
    line = {"inputs": [{"name": "A", "type": "tensor", "dtype": "float16", "shape": [1, 16, 16]},
                       {"name": "B", "type": "tensor", "dtype": "float16", "shape": [1, 16, 16]}]}
    work = tmp_path / "w"
    work.mkdir()
    (work / "model.json").write_text((json.dumps(line) + "\n") * 2)
    pool = [search_pool.pool_entry(cases.describe_case(line, i), i, {}, 0, "t") for i in range(2)]
    for p in pool:
        p["flops_traced"] = 2.0e9
    per_inst = 2 * 16 * 8 * 16  # FLOPs of one fp16 mma.sync m16n8k16 (compute capability 8.0)
    calls = []

    def fake_collector(opdir, ids, out_dir, backend_name, opts, log, case_wall_s=None, label="", timing_only=False):
        calls.append({"ids": ids, "timing_only": timing_only, "out_dir": out_dir})
        pmu = None if timing_only else {"mm": {"tensor_inst_executed": 1.5e9 / per_inst}}
        per_case = [{"case": c, "kernel_time_ns": 1.0e4, "compute_dtype": "float16", "tf32": False,
                     "input_bytes": 1024, "output_bytes": 512, "repeat_spread": 0.01, "asc_error": None, "pmu": pmu,
                     "kernels": [{"name": "mm", "launches_per_iter": 1}]} for c in ids]
        path = tmp_path / f"perf{len(calls)}.json"
        path.write_text(json.dumps({"schema": 1, "tool": "msprof_perf_summary", "backend": "cuda",
                                    "device": {"name": "x", "capability": "8.0"},
                                    "peak": {"value_tflops": 100.0}, "per_case": per_case, "complete": True,
                                    "missing": []}))
        return str(path)

    monkeypatch.setattr(grid_search, "run_collector", fake_collector)
    opdir, opts = OpDir(str(work)), grid_search.SearchOptions()
    rows, _ = grid_search.stage2(opdir, [0, 1], pool, "cuda", opts, {}, "mfu", lambda m: None, {}, timing_only=True)
    assert calls[0]["timing_only"] is True
    assert all(r["numerator"] == 2.0e9 and r["num_src"] == "tracer" and "counters off" in r["num_src_why"]
               for r in rows)
    executed, src, why, perf = grid_search.count_one(opdir, 1, pool, "cuda", opts, lambda m: None)
    assert perf == str(tmp_path / "perf2.json")  # the report the counting run wrote
    assert calls[1]["ids"] == [1] and calls[1]["timing_only"] is False and calls[1]["out_dir"].endswith("counts1")
    assert executed == pytest.approx(1.5e9) and src == "hardware:tensor_inst_executed" and why is None


def test_bad_counts_on_is_refused():
    with pytest.raises(UserError, match="--counts-on"):
        grid_search.check_options(grid_search.SearchOptions(counts_on="some", warmup=1, repeats=10))


def test_a_case_the_compiled_kernels_settle_is_not_counted_and_the_pass_stops_as_a_count_would_stop_it():
    kt = lambda m: TRACED / (m * PEAK_ACH * 1e12) * 1e9  # noqa: E731
    rows = [row(1, [kt(0.6)] * 3), row(2, [kt(0.59)] * 3), row(3, [kt(0.4)] * 3)]
    calls, logged = [], []
    why = "kernel 'k': compute capability 9.0: the PTX names several wgmma shapes (m64n64k16, m64n128k16)"
    rows[0]["count_settled"], rows[2]["count_settled"] = why, "never reached"
    out = counting.count_leaders(rows, "mfu", lambda c: calls.append(c) or (None, None, "refused"), logged.append, {})
    assert calls == [] and out["order"] == [1] and out["runs"] == [
        {"case": 1, "performance_json": None, "error": None, "settled_by": "compiled kernels"}]
    assert "case 1's counted figure" in out["stopped"] and "case 2's upper bound" in out["stopped"]
    assert rows[0]["counted"] and rows[0]["num_src"] == "tracer" and why in rows[0]["num_src_why"]
    assert rows[0]["retimed"]["median"] == pytest.approx(0.6) and any("settled without a counting run" in m
                                                                         for m in logged)
    # a settled case that a count drops out of the lead does not stop the next one from being counted
    rows = [row(1, [kt(0.6)] * 3), dict(row(2, [kt(0.59)] * 3), count_settled=why)]
    out = counting.count_leaders(rows, "mfu", lambda c: calls.append(c) or (0.5 * TRACED, "hardware:x", None, "p.json"),
                                 lambda m: None, {})
    assert calls == [1] and out["order"] == [1, 2] and [r["settled_by"] for r in out["runs"]] == [None,
                                                                                                  "compiled kernels"]
    assert [r["performance_json"] for r in out["runs"]] == ["p.json", None]
    assert [r["case"] for r in rows] == [2, 1]  # 0.59 (exact) over 0.30 (counted)


def test_stage2_rows_carry_what_the_compiled_kernels_settle(tmp_path, monkeypatch):
    """The collector's timing-only entry with mma_shapes from CUPTI (fixture ZISZ7F...: the zoo flash kernel at head
    dim 128, QK m64n64k16 + PV m64n128k16): on 9.0 stage 2 marks the case settled, on 8.0 (mma.sync) it does not."""
    import os
    from mfulib.core import cases
    from mfulib.core.opdir import OpDir
    from mfulib.profiles import triton_ptx
    from mfulib.search import pool as search_pool
    cache = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "triton_cache")
    line = {"inputs": [{"name": "Q", "type": "tensor", "dtype": "float16", "shape": [1, 4, 128, 128]}]}
    work = tmp_path / "w"
    work.mkdir()
    (work / "model.json").write_text(json.dumps(line) + "\n")
    pool = [dict(search_pool.pool_entry(cases.describe_case(line, 0), 0, {}, 0, "t"), flops_traced=2.0e9)]
    shapes = triton_ptx.cupti_kernel_records({"flash_attn_fwd_kernel": (256, 49152)}, cache)

    def collector(capability):
        def fake(opdir, ids, out_dir, backend_name, opts, log, case_wall_s=None, label="", timing_only=False):
            path = tmp_path / f"perf{capability}.json"
            path.write_text(json.dumps({
                "schema": 1, "tool": "msprof_perf_summary", "backend": "cuda",
                "device": {"name": "x", "capability": capability}, "peak": {"value_tflops": 100.0},
                "per_case": [{"case": 0, "kernel_time_ns": 1.0e4, "compute_dtype": "float16", "tf32": False,
                              "input_bytes": 1024, "output_bytes": 512, "repeat_spread": 0.01, "asc_error": None,
                              "pmu": None, "pmu_unavailable": "--pmu none: no PMU counters collected",
                              "mma_shapes": shapes, "kernels": [{"name": "flash_attn_fwd_kernel",
                                                                 "launches_per_iter": 1}]}],
                "complete": True, "missing": []}))
            return str(path)
        return fake
    for capability, settled in (("9.0", True), ("8.0", False)):
        monkeypatch.setattr(grid_search, "run_collector", collector(capability))
        rows, _ = grid_search.stage2(OpDir(str(work)), [0], pool, "cuda", grid_search.SearchOptions(), {}, "mfu",
                                     lambda m: None, {}, timing_only=True)
        assert bool(rows[0]["count_settled"]) is settled
        if settled:
            assert "several wgmma shapes (m64n64k16.f32.f16.f16, m64n128k16.f32.f16.f16;" in rows[0]["count_settled"]
