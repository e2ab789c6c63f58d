"""The search's re-timing of its leaders across collector runs (mfulib/search/retime.py), without running an operator:
the interleaved run order, the median and spread, the tie rule, the re-ranked stage-2 rows and the limit, the
timing-only collector command. Expected figures are computed here from the definition MFU = FLOPs / time / peak."""
import json

import pytest

from mfulib.core.errors import UserError
from mfulib.search import grid as grid_search
from mfulib.search import retime as rt

FLOPS = 1.0e12  # numerator of every row
PEAK_ACH = 200.0  # TFLOP/s


def mfu(kt_ns):
    """MFU@ach by hand: FLOPs / seconds / 1e12 / peak."""
    return FLOPS / (kt_ns * 1e-9) / 1e12 / PEAK_ACH


def row(case, kt_ns):
    return {"case": case, "status": "ok" if kt_ns else "error", "kernel_time_ns": kt_ns, "numerator": FLOPS,
            "bytes_moved": 1000, "peak_nom_tflops": 400.0, "peak_ach_tflops": PEAK_ACH, "bandwidth_gbps": 1000.0,
            "mfu_ach": mfu(kt_ns) if kt_ns else None, "mfu_nom": mfu(kt_ns) / 2 if kt_ns else None,
            "actual_tflops": FLOPS / kt_ns / 1e3 if kt_ns else None, "mbu": None, "achieved_gbps": None,
            "metric_value": mfu(kt_ns) if kt_ns else None}


def perf(path, kts):
    per_case = [{"case": c, "kernel_time_ns": kt, "asc_error": None if kt else "oom: out of memory"}
                for c, kt in kts.items()]
    path.write_text(json.dumps({"schema": 1, "tool": "msprof_perf_summary", "backend": "cuda", "per_case": per_case,
                                "complete": True, "missing": []}))
    return str(path)


def test_run_r_measures_the_cases_in_stage_2s_order_rotated_by_r():
    assert rt.run_order([7, 9, 4], 0) == [7, 9, 4]
    assert rt.run_order([7, 9, 4], 1) == [9, 4, 7]
    assert rt.run_order([7, 9, 4], 2) == [4, 7, 9]
    assert rt.run_order([7, 9, 4], 3) == [7, 9, 4]
    assert rt.run_order([5], 2) == [5] and rt.run_order([], 1) == []


def test_summary_median_range_and_relative_spread():
    s = rt.summarize([0.60, None, 0.64, 0.62], [1.0, None, 2.0, 3.0])
    assert s["runs"] == 3 and s["values"] == [0.60, 0.64, 0.62] and s["kernel_time_ns"] == [1.0, None, 2.0, 3.0]
    assert s["median"] == pytest.approx(0.62) and (s["min"], s["max"]) == (0.60, 0.64)
    assert s["spread"] == pytest.approx(0.04 / 0.62)
    assert rt.summarize([0.5, 0.7], [1, 2])["median"] == pytest.approx(0.6)  # even count: the mean of the middle two
    empty = rt.summarize([None], [None])
    assert empty["runs"] == 0 and empty["median"] is None and empty["spread"] is None


@pytest.mark.parametrize("a,b,tie", [
    ([0.640, 0.606, 0.620], [0.600, 0.610, 0.605], True),   # gap 0.015 < ranges 0.034 + 0.010
    ([0.640, 0.606, 0.620], [0.500, 0.510, 0.505], False),  # gap 0.115 > 0.044
    ([0.600, 0.610, 0.620], [0.580, 0.585, 0.590], True),   # gap 0.025 < 0.020 + 0.010 = 0.030
    ([0.600, 0.610, 0.620], [0.570, 0.575, 0.580], False),  # gap 0.035 > 0.030
    ([0.5, 0.5], [0.5, 0.5], True),                         # equal medians, no spread: the runs cannot order them
    ([0.5, 0.5], [0.4, 0.4], False),
])
def test_a_gap_smaller_than_the_sum_of_the_two_ranges_is_a_tie(a, b, tie):
    sa, sb = rt.summarize(a, a), rt.summarize(b, b)
    assert rt.is_tie(sa, sb) is tie and rt.is_tie(sb, sa) is tie
    assert rt.tie_of([(1, sa), (2, sb)]) == ([1, 2] if tie else None)


def test_every_candidate_is_compared_with_the_leader_and_a_missing_median_never_ties():
    lead, second, third = rt.summarize([0.7, 0.7], [1, 1]), rt.summarize([0.5, 0.5], [1, 1]), \
        rt.summarize([0.69, 0.71], [1, 1])
    # the runner-up is far below, but the third's median equals the leader's: a tie the top two alone would miss
    assert rt.tie_of([(1, lead), (2, second), (3, third)]) == [1, 3]
    close = rt.summarize([0.68, 0.72], [1, 1])  # median 0.70, range 0.04: ties with the leader too
    assert rt.tie_of([(1, lead), (3, third), (4, close), (2, second)]) == [1, 3, 4]
    assert rt.tie_of([(1, lead), (2, second)]) is None
    assert rt.tie_of([(1, lead)]) is None
    assert not rt.is_tie(lead, rt.summarize([None], [None]))


def test_leaders_are_retimed_in_interleaved_runs_reranked_by_median_and_a_failed_run_is_recorded(tmp_path):
    # stage 2, best first: 7 (1.00e7 ns), 9 (1.05e7 ns), 4 (2e7 ns), 2 (4e7 ns, not re-timed: top 3 only), 5 failed
    rows = [row(7, 1.0e7), row(9, 1.05e7), row(4, 2.0e7), row(2, 4.0e7), row(5, None)]
    runs = {1: {7: 1.10e7, 9: 1.0e7, 4: 2.0e7}, 2: {7: 1.25e7, 9: 1.0e7, 4: None}}  # run 3: the collector fails
    seen = []

    def collect(ids, r):
        seen.append((r, list(ids)))
        if r == 3:
            raise UserError("re-timing 3/3: the collector wrote no performance.json (exit status 1)")
        return perf(tmp_path / f"perf{r}.json", runs[r])

    cost, logged = {}, []
    block = rt.retime(rows, "mfu", 3, 3, collect, logged.append, cost)
    assert seen == [(1, [9, 4, 7]), (2, [4, 7, 9]), (3, [7, 9, 4])]
    assert cost["retime"] >= 0 and "exit status 1" in logged[0]
    assert block["figure"] == "mfu_ach" and block["top_k"] == 3 and block["runs"] == 3
    assert [d["order"] for d in block["runs_done"]] == [[9, 4, 7], [4, 7, 9], [7, 9, 4]]
    assert block["runs_done"][2]["error"].startswith("re-timing 3/3") and block["runs_done"][2]["performance_json"] \
        is None and block["runs_done"][0]["error"] is None
    by = {r["case"]: r for r in rows}
    assert by[7]["retimed"]["values"] == pytest.approx([mfu(1.0e7), mfu(1.10e7), mfu(1.25e7)])
    assert by[7]["retimed"]["kernel_time_ns"] == [1.0e7, 1.10e7, 1.25e7, None]
    assert by[7]["retimed"]["median"] == pytest.approx(mfu(1.10e7)) and by[7]["retimed"]["runs"] == 3
    assert by[9]["retimed"]["median"] == pytest.approx(0.5) and by[9]["retimed"]["min"] == pytest.approx(mfu(1.05e7))
    assert by[4]["retimed"]["values"] == pytest.approx([0.25, 0.25]) and by[4]["retimed"]["spread"] == 0.0
    assert "retimed" not in by[2] and "retimed" not in by[5]
    # 9's median (0.5) beats 7's (0.4545) - stage 2 had 7 first; the gap 0.045 < ranges 0.1 + 0.024: a tie
    assert [r["case"] for r in rows] == [9, 7, 4, 2, 5] and block["ranked"] == [9, 7, 4]
    assert block["tie"] == [9, 7]
    best = rt.retimed_limit({"case": 9, "metric": "mfu", "mfu": mfu(1.05e7), "mfu_kind": "ach",
                             "kernel_time_ns": 1.05e7}, rows, block)
    assert best["mfu"] == pytest.approx(0.5) and best["kernel_time_ns"] == pytest.approx(1.0e7)
    assert best["retimed"]["tie"] == [9, 7] and best["retimed"]["figure"] == "mfu_ach"
    assert best["retimed"]["values"] == by[9]["retimed"]["values"]


def test_no_peak_leaves_mfu_none_and_the_medians_in_tflops(tmp_path):
    rows = [dict(row(1, 1.0e7), mfu_ach=None, mfu_nom=None), dict(row(2, 2.0e7), mfu_ach=None, mfu_nom=None)]
    block = rt.retime(rows, "mfu", 2, 1, lambda ids, r: perf(tmp_path / "p.json", {1: 2.0e7, 2: 2.0e7}),
                      lambda m: None, {})
    assert block["figure"] == "actual_tflops" and block["tie"] == [1, 2]  # 75 vs 50 TF/s, ranges 50 and 0
    best = rt.retimed_limit({"case": 1, "metric": "mfu", "mfu": None, "kernel_time_ns": 1.0e7}, rows, block)
    assert best["mfu"] is None and best["retimed"]["median"] == pytest.approx((100.0 + 50.0) / 2)


def test_retiming_off_or_nothing_measured_gives_no_block():
    def never(ids, r):
        raise AssertionError("no collector run expected")
    assert rt.retime([row(1, 1.0e7)], "mfu", 0, 3, never, print, {}) is None
    assert rt.retime([row(1, 1.0e7)], "mfu", 3, 0, never, print, {}) is None
    assert rt.retime([row(1, None)], "mfu", 3, 3, never, print, {}) is None


def test_the_retiming_collector_runs_without_the_pmu_pass_whatever_collect_args_say():
    opts = grid_search.SearchOptions(collect_args=["--pmu", "ncu", "--flush-cache-mib", "256"])
    stage2 = grid_search.collector_command("w", [3, 1], "out", "cuda", opts)
    retime = grid_search.collector_command("w", [3, 1], "out", "cuda", opts, timing_only=True)
    assert stage2[-4:] == ["--pmu", "ncu", "--flush-cache-mib", "256"]
    assert retime[retime.index("--pmu") + 1] == "none" and retime.count("--pmu") == 1 and "ncu" not in retime
    assert "--flush-cache-mib" in retime and retime[retime.index("--cases") + 1] == "3,1"
    opts = grid_search.SearchOptions(collect_args=["--pmu=auto"])
    cmd = grid_search.collector_command("w", [0], "o", "cpu", opts, timing_only=True)
    assert cmd[-2:] == ["--pmu", "none"] and "--pmu=auto" not in cmd


@pytest.mark.parametrize("change", [{"retime_top": -1}, {"retime_runs": -2}, {"retime_runs": 1.5}])
def test_negative_retime_options_are_refused(change):
    flag = "--" + next(iter(change)).replace("_", "-")
    with pytest.raises(UserError, match=flag):
        grid_search.check_options(grid_search.SearchOptions(warmup=1, repeats=1, **change))


def test_only_a_probe_its_budget_cut_makes_the_search_incomplete():
    from mfulib.schemas.probe_json import budget_cut
    assert budget_cut({"complete": False, "interrupted": "--budget-s 150 s reached"}) == "--budget-s 150 s reached"
    why = "--budget-s 60 s reached while tracing the source cases at scale 1 (the ranking trace, 3 s left for it)"
    assert budget_cut({"complete": False, "interrupted": why}) == why
    for doc in ({"complete": True, "interrupted": None}, {"complete": False, "interrupted": "running"},
                {"complete": False, "interrupted": "KeyboardInterrupt: a re-run resumes"}, {}, None):
        assert budget_cut(doc) is None


def test_the_summary_prints_the_median_spread_tie_and_an_incomplete_search(capsys):
    import mfu_grid_search
    pool = [{"case": c, "source_case": c, "factors": {}} for c in (7, 9)]
    s = {7: rt.summarize([0.61, 0.64, 0.62], [1, 1, 1]), 9: rt.summarize([0.60, 0.62, 0.61], [1, 1, 1])}
    stage2 = [dict(row(c, 1.0e7), retimed=s[c], wall_s=1.0, num_src="tracer") for c in (7, 9)]
    block = {"top_k": 2, "runs": 2, "figure": "mfu_ach", "ranked": [7, 9], "tie": [7, 9],
             "runs_done": [{"run": 1, "order": [9, 7], "error": None},
                           {"run": 2, "order": [7, 9], "error": "re-timing 2/2: the collector wrote no file"}]}
    best = {"case": 7, "source_case": 7, "metric": "mfu", "mfu": 0.62, "mfu_kind": "ach", "num_src": "tracer",
            "num_src_why": "no executed count", "retimed": dict(s[7], figure="mfu_ach", tie=[7, 9])}
    doc = {"pool": pool, "stage1": [], "stage2": stage2, "retime": block, "best": best, "metric": "mfu",
           "cost_s": {"flops": 0, "verify": 0, "stage1": 0, "stage2": 1.0, "retime": 2.0}, "chosen_cases": [7, 9],
           "probe_cut": "--budget-s 150 s reached", "notes": []}
    mfu_grid_search.print_summary(doc)
    out = capsys.readouterr().out
    assert "limit MFU (search incomplete: the probe was cut by its budget - see the note): 62.00% (ach), median of 3 " \
           "run(s), 61.00%..64.00%, spread 4.8%, at case 7" in out
    assert "tie: case 7 (62.00%) and case 9 (61.00%)" in out and "re-timing 2.0 s" in out
    assert "re-timing run 2 failed: re-timing 2/2: the collector wrote no file" in out


def test_a_stop_during_the_re_timing_keeps_the_runs_that_finished(tmp_path):
    rows = [row(7, 10_000.0), row(9, 10_500.0)]
    got = {}

    def collect(ids, r):  # run 1 finishes, run 2 is stopped (Ctrl-C / SIGTERM while its collector runs)
        if r == 2:
            raise KeyboardInterrupt
        return perf(tmp_path / f"p{r}.json", {7: 10_200.0, 9: 9_000.0})
    with pytest.raises(KeyboardInterrupt):
        rt.retime(rows, "mfu", 2, 3, collect, lambda m: None, {}, on_stop=got.update)
    assert [e["error"] for e in got["runs_done"]] == [None, "interrupted"] and got["runs"] == 3
    by = {r["case"]: r["retimed"] for r in rows}
    assert by[9]["values"] == pytest.approx([mfu(10_500.0), mfu(9_000.0)]) and by[9]["runs"] == 2
    assert got["ranked"] == [9, 7] and [r["case"] for r in rows] == [9, 7]  # 9's median over the two is higher
    stopped_first = []
    with pytest.raises(KeyboardInterrupt):  # stopped before any run finished: nothing to hand on
        rt.retime([row(7, 10_000.0)], "mfu", 1, 2, lambda ids, r: (_ for _ in ()).throw(KeyboardInterrupt),
                  lambda m: None, {}, on_stop=stopped_first.append)
    assert stopped_first == []
