"""The collector end to end on the cpu backend (Triton interpreter, one child process per case), with a tiny
two-kernel operator of the tests' own (tests/fake_msprof/tinyops.py)."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_msprof"))
import tinyops  # noqa: E402

from mfulib.collect.driver import Options, collect, select_cases  # noqa: E402
from mfulib.core.opdir import OpDir  # noqa: E402

UPSTREAM_TOP = ("task", "task_dir", "n_cases_total", "n_cases_valid", "geomean_speedup", "mean_speedup",
                "median_speedup", "min_speedup", "max_speedup", "mean_ref_us", "median_ref_us", "geomean_ref_us",
                "total_ref_us", "mean_asc_us", "median_asc_us", "geomean_asc_us", "total_asc_us", "total_speedup",
                "warmup", "repeats", "seed", "device_id", "device_select_source", "timing_method", "profiling_mode",
                "per_case")
UPSTREAM_CASE = ("case", "shape", "dtype", "ref_us", "asc_us", "speedup", "ref_error", "asc_error", "ref_prof_dir",
                 "asc_prof_dir")


def by_case(report):
    return {c["case"]: c for c in report["per_case"]}


@pytest.mark.e2e
def test_crash_and_no_kernel_cases_are_recorded_while_first_call_work_never_enters_the_measurement(tmp_path):
    work = tinyops.make_workdir(tmp_path, variant="first_call_extra,crash1024,view8192")
    # unverified_ok: the collector's own handling of a crashing case is under test (verify would exclude it first)
    rep = collect(Options(op_dir=work, output_dir=work, impl="asc", warmup=0, repeats=2, backend="cpu",
                          cases=[0, 1, 4], mfu=True, mfu_peak=0.001, keep_prof=work, progress=False,
                          unverified_ok=True))
    assert set(UPSTREAM_TOP) <= set(rep) and rep["backend"] == "cpu"
    assert (rep["n_cases_total"], rep["n_cases_valid"]) == (3, 1)
    c = by_case(rep)
    ok = c[0]
    assert set(UPSTREAM_CASE) <= set(ok) and ok["asc_error"] is None
    # warmup 0: the priming call (which launched autotune_probe_kernel 3x and slept) is not a measured iteration
    assert ok["sequence"] == ["scale_kernel", "add_one_kernel"] and ok["launches_per_iter"] == 2
    assert ok["launches_outside_iterations"] >= 5  # 3 probes + 2 kernels of the priming call
    assert len(ok["iter_kernel_time_ns"]) == 2 and ok["kernel_time_ns"] > 0
    assert ok["flops"] == 2 * 4096 and ok["flops_parts"] == {"scale": 4096.0, "add": 4096.0}
    assert ok["actual_tflops"] == pytest.approx(ok["flops"] / ok["kernel_time_ns"] / 1e3)
    assert ok["mfu_nom"] == pytest.approx(ok["actual_tflops"] / 0.001)
    assert ok["asc_us"] == pytest.approx(ok["kernel_time_ns"] / 1e3)
    assert os.path.exists(os.path.join(work, ok["asc_prof_dir"], "trace.json"))
    assert rep["peak"]["source"].startswith("--mfu-peak") and rep["kernel_parts"] == {"scale": ["scale_kernel"],
                                                                                      "add": ["add_one_kernel"]}
    crash, view = c[1], c[4]
    assert "crashed" in crash["asc_error"] and "SIGABRT" in crash["asc_error"] and crash["asc_us"] is None
    assert "no kernel was launched" in view["asc_error"] and view["asc_us"] is None and view["mfu_nom"] is None
    with open(os.path.join(work, "performance.json")) as f:
        assert json.load(f)["per_case"][0]["case"] == 0


@pytest.mark.e2e
def test_both_implementations_give_a_speedup_and_the_cache_flush_is_not_operator_time(tmp_path):
    work = tinyops.make_workdir(tmp_path)
    rep = collect(Options(op_dir=work, output_dir=work, impl="both", backend="cpu", cases=[1], flush_cache_mib=1,
                          progress=False, unverified_ok=True))
    (c,) = rep["per_case"]
    assert (rep["warmup"], rep["repeats"]) == (1, 2)  # cpu defaults
    assert c["measured_impl"] == "asc" and c["speedup"] == pytest.approx(c["ref_us"] / c["asc_us"])
    assert [k["name"] for k in c["impls"]["ref"]["kernels"]] == ["aten::mul", "aten::add"]
    assert [k["name"] for k in c["kernels"]] == ["scale_kernel", "add_one_kernel"]
    assert c["harness_launches_dropped"] == 3  # one flush before each of the 3 iterations, never counted
    assert rep["geomean_speedup"] == pytest.approx(c["speedup"]) and rep["total_ref_us"] == pytest.approx(c["ref_us"])


# a hanging case's timeout: tests/test_worker.py (the same collector timeout, and the next case's fresh worker)


@pytest.mark.e2e
def test_the_spec_invocation_runs_from_the_work_directory(tmp_path, repo_root):
    work = tinyops.make_workdir(tmp_path)
    cmd = [sys.executable, os.path.join(repo_root, "scripts", "ops_profiling", "msprof_perf_summary.py"), "--quick",
           "--mfu", "--impl", "asc", "--output-dir", ".", "--warmup", "5", "--repeats", "5", "--keep-prof", "."]
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run(cmd + ["--backend", "cpu"], cwd=work, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "smallest-3 by theoretical FLOPs" in out.stderr and "[3/3] case 4 asc" in out.stderr
    with open(os.path.join(work, "performance.json")) as f:
        rep = json.load(f)
    c = by_case(rep)
    assert [e["case"] for e in rep["per_case"]] == [3, 1, 0, 4]  # bf16 case 3 skipped, then smallest FLOPs first
    assert "bfloat16" in c[3]["skipped"] and rep["repeats"] == 5 and len(c[1]["iter_kernel_time_ns"]) == 5
    assert c[1]["mfu_nom"] is None and "no nominal peak" in rep["peak"]["source"]  # CPU: absent, never 0
    assert os.path.isdir(os.path.join(work, "prof", "case4_asc"))


def test_case_selection_takes_the_largest_flops_on_accelerators_and_the_smallest_eligible_on_cpu(tmp_path):
    work = tinyops.make_workdir(tmp_path)
    od = OpDir(work)
    from mfulib.flops.contract import load_flops
    ff = load_flops(od.flops_py)
    infos = od.describe_all()
    sel, skipped, info = select_cases(infos, ff, od, Options(), "cuda")
    assert [i.case_id for i in sel] == [2, 4, 0] and not skipped and "theoretical FLOPs" in info["rule"]
    sel, skipped, _ = select_cases(infos, ff, od, Options(), "cpu")
    assert [i.case_id for i in sel] == [1, 0, 4] and [i.case_id for i, *_ in skipped] == [3]
    sel, _, _ = select_cases(infos, ff, od, Options(max_cases=99), "cuda")
    assert [i.case_id for i in sel] == [2, 4, 0, 3, 1]
    sel, _, info = select_cases(infos, None, od, Options(top_k=2), "npu")
    assert [i.case_id for i in sel] == [2, 4] and "input bytes (no flops.py" in info["rule"]
    sel, skipped, _ = select_cases(infos, ff, od, Options(cases=[3, 0]), "cpu")
    assert [i.case_id for i in sel] == [0] and [i.case_id for i, *_ in skipped] == [3]


def test_the_tracer_count_of_check_flops_is_recorded_beside_the_flops_py_value(tmp_path):
    from mfulib.collect.driver import case_flops, load_flops, tracer_flops
    work = tinyops.make_workdir(tmp_path)
    od = OpDir(work)
    with open(os.path.join(work, "flops_check.json"), "w") as f:
        json.dump({"per_case": [{"case": 0, "tracer": {"status": "ok", "total_flops": 8000.0}},
                                {"case": 1, "tracer": {"status": "rejected", "total_flops": None}}]}, f)
    assert tracer_flops(od) == {0: 8000.0}
    ent = case_flops(load_flops(od), od, od.describe(0), seed=0)
    assert ent["flops"] == 8192.0 and ent["compute_dtype"] == "float32" and ent["flops_source"] == "flops.py"


@pytest.mark.e2e
def test_without_cases_a_rejected_case_hands_its_slot_to_the_next_one_by_the_same_ranking(tmp_path):
    # cpu ranks smallest FLOPs first, bf16 skipped: case 1 (1024) < 0 (4096) < 4 (8192) < 2 (16384)
    work = tinyops.make_workdir(tmp_path, variant="reject1024")
    # unverified_ok: the rejection at run time is under test (verify would exclude the case before)
    rep = collect(Options(op_dir=work, output_dir=work, impl="asc", warmup=0, repeats=1, backend="cpu",
                          mfu=True, mfu_peak=0.001, progress=False, unverified_ok=True))
    c = by_case(rep)
    assert "case rejected: this test operator refuses 1024 elements" in c[1]["asc_error"]
    assert {0, 4, 2} <= set(c) and rep["n_cases_valid"] == 3
