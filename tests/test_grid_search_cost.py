"""The search's cost bounds: stage 1's time-bounded repeats (runner spec ``repeat_budget_s``) and the per-case
wall seconds of both stages (stage-1 rows from the worker call, stage-2 rows from the collector's progress lines)."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))


@pytest.fixture(scope="module")
def gemm_work(tmp_path_factory):
    import bench_gemm_mfu
    return bench_gemm_mfu.build_gemm_workdir(str(tmp_path_factory.mktemp("cost") / "work"), 16, 16, 16,
                                             dtype="float32")


def _run(work, tmp, repeats, budget_s, **extra):
    from mfulib.backends import get_backend
    from mfulib.backends.runner import close_workers, run_child
    from mfulib.search.stage1 import WallClockBackend
    backend = get_backend("cpu")
    spec = {"op_dir": work, "case_id": 0, "impl": "asc", "seed": 0, "warmup": 1, "repeats": repeats,
            "backend": "cpu", "device": backend.device_string(0), "markers": False, "profile": False,
            "flush_cache_mib": 0, "repeat_budget_s": budget_s, **extra}
    try:
        child = run_child(WallClockBackend(backend), spec, str(tmp), 300)
    finally:
        close_workers()
    assert child.status == "ok", child.log_tail
    return child.report


def _iterations(work, tmp, repeats, budget_s):
    return _run(work, tmp, repeats, budget_s)["iter_wall_ns"]


@pytest.mark.e2e
def test_stage1_repeats_stop_after_two_once_the_budget_is_spent_and_run_all_without_one(gemm_work, tmp_path):
    assert len(_iterations(gemm_work, tmp_path / "a", 6, 1e-9)) == 1 + 2  # warmup + the minimum of 2
    assert len(_iterations(gemm_work, tmp_path / "b", 4, None)) == 1 + 4
    assert len(_iterations(gemm_work, tmp_path / "c", 1, 1e-9)) == 1 + 1  # fewer repeats than the minimum


@pytest.mark.e2e
def test_stage1_iterations_after_the_first_are_back_to_back_calls_sized_by_the_first(gemm_work, tmp_path):
    """Spec burst_target_ms (what stage 1 sends): one synchronised call outside the iterations sizes them
    (mfulib.core.wallclock.calls_per_burst), so even --warmup 0 measures runs of back-to-back calls only;
    iter_wall_ns is per call. Without it, one call per iteration."""
    from mfulib.core.wallclock import calls_per_burst
    report = _run(gemm_work, tmp_path / "a", 2, None, burst_target_ms=1e6)  # a target no call reaches alone
    calls = report["calls_per_iteration"]
    assert calls == calls_per_burst(report["sizing_call_ns"] / 1e6, 1e6) and calls > 1
    assert len(report["iter_wall_ns"]) == 1 + 2
    assert "calls_per_iteration" not in _run(gemm_work, tmp_path / "b", 2, None)
    profiled = _run(gemm_work, tmp_path / "c", 2, None, burst_target_ms=1e6, profile=True)
    assert "calls_per_iteration" not in profiled  # a profiled run keeps one call per iteration range


FAKE_COLLECTOR = r'''
import json, os, sys, time
a = sys.argv
out = a[a.index("--output-dir") + 1]
ids = [int(x) for x in a[a.index("--cases") + 1].split(",")]
for k, c in enumerate(ids):
    time.sleep(0.2 * (k + 1))
    print(f"[{k + 1}/{len(ids)}] case {c} asc: 1 kernel launch(es)/iter, kernel 1.00 us", file=sys.stderr, flush=True)
os.makedirs(out, exist_ok=True)
json.dump({"argv": a}, open(os.path.join(out, "performance.json"), "w"))
'''


def test_stage2_per_case_wall_seconds_come_from_the_collectors_progress_lines(tmp_path, monkeypatch):
    from mfulib.search import grid as grid_search
    from mfulib.core.opdir import OpDir
    fake = tmp_path / "collector.py"
    fake.write_text(FAKE_COLLECTOR)
    from mfulib.search import collector_runs
    monkeypatch.setattr(collector_runs, "COLLECTOR", str(fake))
    walls = {}
    perf = grid_search.run_collector(OpDir(str(tmp_path)), [5, 2], str(tmp_path / "out"), "cuda",
                                     grid_search.SearchOptions(progress=False), lambda m: None, walls)
    assert set(walls) == {5, 2}
    assert walls[5] >= 0.2 and walls[2] >= 0.4 - 0.05  # the second case's own sleep, not the running total
    argv = json.load(open(perf))["argv"]
    assert argv[argv.index("--pmu") + 1] == "auto"
