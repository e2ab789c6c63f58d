"""The collector's Nsight Compute PMU pass (mfulib/backends/ncu_pmu.py NcuPmu): parsing the recorded ncu pages into
canonical counters, the probe's verdicts, and the pass end to end with the ncu TEST DOUBLE (tests/fake_ncu/ncu),
which runs the collector's child on the cpu backend and prints the recorded raw-page layout with made-up values.
A last test runs the real ncu on a GPU and is skipped without one."""
import json
import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "fake_msprof"))
import tinyops  # noqa: E402

from mfulib.profiles import ncu as ncu_parse  # noqa: E402
from mfulib.backends import ncu_pmu  # noqa: E402
from mfulib.collect.driver import Options, collect  # noqa: E402
from mfulib.core.errors import UserError  # noqa: E402

FAKE_NCU = os.path.join(HERE, "fake_ncu", "ncu")
FIXTURES = os.path.join(HERE, "fixtures", "profiles", "cuda")


def recorded(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return ncu_parse.parse_ncu_csv(f.read())


def test_recorded_raw_page_gives_canonical_counters_and_none_where_not_measured():
    recs = recorded("ncu_raw.csv")
    c = ncu_pmu.ncu_counters(recs[0])
    assert c["duration_ns"] == 228192.0  # "228,192" ns in the recorded file
    assert c["sm_throughput_pct"] == 15.58 and c["dram_throughput_pct"] == 8.15
    assert (c["grid_size"], c["block_size"]) == (512.0, 256.0)
    # the recording asked for no tensor-pipe, occupancy or dram__bytes.sum metric: None, never 0
    assert c["tensor_pipe_pct"] is None and c["achieved_occupancy_pct"] is None and c["dram_bytes"] is None


def test_recorded_details_page_reads_the_same_counters():
    c = ncu_pmu.ncu_counters(recorded("ncu_details.csv")[0])
    assert c["duration_ns"] == 226944.0 and c["sm_throughput_pct"] == 15.65 and c["dram_throughput_pct"] == 8.21


def test_tensor_pipe_is_the_busier_mma_pipe_and_the_instruction_count_the_larger():
    # sm_90: the hmma instruction count includes the warpgroup MMAs (the H200 pack has hmma == gmma on six
    # pure-wgmma kernels), so the larger count is the total; a sum would count each wgmma twice
    rec = {"metrics": {"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": 0.4,
                       "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active": 71.5,
                       "sm__inst_executed_pipe_tensor_op_hmma.sum": 10.0,
                       "sm__inst_executed_pipe_tensor_op_gmma.sum": 4096.0,
                       "dram__bytes.sum": 2.0, "gpu__time_duration.sum": 3.0},
           "units": {"dram__bytes.sum": "Mbyte", "gpu__time_duration.sum": "usecond"}}
    c = ncu_pmu.ncu_counters(rec)
    assert c["tensor_pipe_pct"] == 71.5 and c["tensor_inst_executed"] == 4096.0
    assert c["dram_bytes"] == 2e6 and c["duration_ns"] == 3000.0


def test_average_by_kernel_matches_cupti_names_and_counts_launches():
    recs = recorded("ncu_raw.csv")  # 7 launches of bmm_tile_kernel
    cupti = ["void bmm_tile_kernel<64>(float*)", "other_kernel"]
    pmu, unmatched = ncu_pmu.average_by_kernel(recs, cupti)
    want = sum(ncu_pmu.ncu_counters(r)["duration_ns"] for r in recs) / len(recs)
    assert pmu[cupti[0]]["launches"] == 7 and pmu[cupti[0]]["duration_ns"] == pytest.approx(want)
    assert pmu["other_kernel"]["launches"] == 0 and pmu["other_kernel"]["sm_throughput_pct"] is None
    assert unmatched == []


def test_name_fallback_keeps_the_last_iterations_only_when_they_repeat_the_sequence():
    recs = [{"kernel_name": n} for n in ["a", "a", "b", "a", "b", "a", "b"]]  # priming/autotune launches first
    tail, why = ncu_pmu.last_iterations(recs, ["a", "b"], 2)
    assert why is None and [r["kernel_name"] for r in tail] == ["a", "b", "a", "b"]
    assert ncu_pmu.last_iterations(recs[:3], ["a", "b"], 2)[1].startswith("profiled 3 launch(es)")
    assert "do not repeat" in ncu_pmu.last_iterations(recs + [{"kernel_name": "c"}], ["a", "b"], 2)[1]


def test_failure_reasons_name_the_cause():
    perm = ncu_pmu.ncu_failure("==PROF== x\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", 1)
    assert perm.startswith("ncu: ERR_NVGPUCTRPERM") and "performance counters" in perm
    lib = ncu_pmu.ncu_failure("==ERROR== Failed to load the profiler library\n", 1)
    assert lib.startswith("ncu: ") and "Failed to load the profiler library" in lib  # ncu's own words, kept
    assert "exit status 0" in ncu_pmu.ncu_failure("==WARNING== No kernels were profiled.\n", 0)


@pytest.mark.parametrize("mode, reason", [
    ("perm", "ncu: ERR_NVGPUCTRPERM"),
    ("nolib", "ncu: Failed to load the profiler library"),
])
def test_probe_says_why_counters_cannot_be_read(monkeypatch, mode, reason):
    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    v = ncu_pmu.NcuPmu(FAKE_NCU).probe()
    assert v["available"] is False and v["reason"].startswith(reason)


def test_probe_without_ncu_and_the_verdict_is_cached(tmp_path, monkeypatch):
    assert ncu_pmu.NcuPmu(str(tmp_path / "no-ncu")).probe()["reason"].startswith("ncu not found")
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_NCU_LOG", str(log))
    p = ncu_pmu.NcuPmu(FAKE_NCU)
    assert p.probe()["available"] and p.probe()["available"]
    calls = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert len(calls) == 1  # one probe per run (plus the --version call, not logged)
    assert calls[0][calls[0].index("--clock-control") + 1] == "none" and "--csv" in calls[0]


def test_probe_drops_metrics_this_ncu_does_not_know(monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "unknown_metric")
    p = ncu_pmu.NcuPmu(FAKE_NCU)
    assert p.probe()["available"]
    assert "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active" in p.dropped
    assert p.metrics["tensor_pipe_pct"] == ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",)


def test_plan_follows_the_backend_and_the_flush_regime():
    assert ncu_pmu.pmu_plan("cuda", "auto", FAKE_NCU, flush_cache_mib=256).cache_control == "all"
    assert ncu_pmu.pmu_plan("cuda", "ncu", FAKE_NCU).cache_control == "none"
    assert ncu_pmu.pmu_plan("cpu", "auto").probe()["reason"].startswith("cpu backend: no hardware counters")
    assert ncu_pmu.pmu_plan("cuda", "none").probe()["reason"].startswith("--pmu none")
    with pytest.raises(UserError, match="--pmu ncu: .*CUDA"):
        ncu_pmu.pmu_plan("cpu", "ncu")
    with pytest.raises(UserError, match="--ncu-cache-control"):
        ncu_pmu.pmu_plan("cuda", "ncu", FAKE_NCU, cache_control="some")


def _collect_under_fake(tmp_path, monkeypatch, **kw):
    # the double runs the child on the cpu: let the cpu backend take the ncu path for this test only
    monkeypatch.setattr(ncu_pmu, "PMU_BACKENDS", ("cuda", "cpu"))
    work = tinyops.make_workdir(tmp_path)
    opts = dict(op_dir=work, output_dir=work, impl="asc", backend="cpu", cases=[1], warmup=0, repeats=2,
                progress=False, unverified_ok=True, pmu="ncu", ncu=FAKE_NCU, keep_prof=work)
    opts.update(kw)
    return work, collect(Options(**opts))


@pytest.mark.e2e
def test_collector_fills_pmu_per_kernel_from_the_ncu_pass(tmp_path, monkeypatch):
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_NCU_LOG", str(log))
    work, rep = _collect_under_fake(tmp_path, monkeypatch)
    (c,) = rep["per_case"]
    assert c["pmu_source"] == "ncu" and c["pmu_unavailable"] is None
    assert set(c["pmu"]) == {"scale_kernel", "add_one_kernel"}
    k = c["pmu"]["scale_kernel"]
    # the double's values: 40 % then 60 % on the second launch -> mean 50 over the 2 profiled iterations
    assert k["launches"] == 2 and k["sm_throughput_pct"] == pytest.approx(50.0)
    assert k["tensor_pipe_pct"] == pytest.approx(75.0) and k["dram_bytes"] == pytest.approx(2097152 * 1.25)
    assert c["asc_us"] and c["kernel_time_ns"] > 0  # times stay the profiler's
    coll = rep["pmu_collection"]
    assert coll["available"] and coll["tool"] == "ncu" and coll["cache_control"] == "none"
    run = json.loads(log.read_text().splitlines()[-1])
    assert run[run.index("--nvtx-include") + 1] == "mfu_pmu_iter/" and run[run.index("--launch-count") + 1] == "4"
    assert run[run.index("--page") + 1] == "raw" and run[run.index("--cache-control") + 1] == "none"
    kept = os.path.join(work, c["asc_prof_dir"], "ncu", "ncu.csv")
    assert ncu_parse.parse_ncu_csv(open(kept).read())[0]["kernel_name"] == "scale_kernel"


@pytest.mark.e2e
def test_no_permission_leaves_a_reason_and_the_times(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    _, rep = _collect_under_fake(tmp_path, monkeypatch)
    (c,) = rep["per_case"]
    assert c["pmu_unavailable"].startswith("ncu: ERR_NVGPUCTRPERM") and c["pmu"] is None and c["pmu_source"] is None
    assert c["asc_us"] and rep["n_cases_valid"] == 1 and rep["pmu_collection"]["available"] is False


@pytest.mark.e2e
def test_nvtx_filter_that_profiles_nothing_falls_back_to_the_last_launches_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "nvtx_empty")
    _, rep = _collect_under_fake(tmp_path, monkeypatch, ncu_cache_control="all")
    (c,) = rep["per_case"]
    assert c["pmu_source"] == "ncu" and c["pmu"]["add_one_kernel"]["launches"] == 2
    assert any("NVTX filter profiled no launch" in f for f in c["flags"])
    assert rep["pmu_collection"]["cache_control"] == "all"


@pytest.mark.e2e
def test_cpu_auto_records_that_there_are_no_counters(tmp_path):
    work = tinyops.make_workdir(tmp_path)
    rep = collect(Options(op_dir=work, output_dir=work, impl="asc", backend="cpu", cases=[1], warmup=0, repeats=1,
                          progress=False, unverified_ok=True))
    (c,) = rep["per_case"]
    assert c["pmu_source"] is None and c["pmu_unavailable"].startswith("cpu backend")
    assert rep["pmu_collection"] == {"requested": "auto", "tool": None, "available": False,
                                     "reason": c["pmu_unavailable"]}


def _gpu():
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.skipif(not _gpu() or shutil.which("ncu") is None, reason="needs a CUDA GPU and Nsight Compute (ncu)")
def test_real_ncu_probe_on_the_gpu():
    v = ncu_pmu.NcuPmu().probe()
    # either counters are readable, or the reason names the cause (permission / library), never an empty verdict
    assert v["available"] or v["reason"].startswith("ncu")


@pytest.mark.skipif(not _gpu() or ncu_pmu.find_ncu() is None, reason="needs a CUDA GPU and Nsight Compute (ncu)")
@pytest.mark.e2e
def test_real_ncu_pass_on_the_gpu_counts_the_iterations_launches(tmp_path):
    work = tinyops.make_workdir(tmp_path)
    rep = collect(Options(op_dir=work, output_dir=work, impl="asc", backend="cuda", cases=[2], warmup=1, repeats=3,
                          progress=False, unverified_ok=True, pmu="ncu", keep_prof=work))
    (c,) = rep["per_case"]
    assert c["asc_us"] and c["sequence"] == ["scale_kernel", "add_one_kernel"]
    if not rep["pmu_collection"]["available"]:  # a GPU without counter permission: the reason, and the times
        assert c["pmu_unavailable"].startswith("ncu") and c["pmu"] is None
        return
    assert c["pmu_source"] == "ncu" and c["pmu_unavailable"] is None
    for name in c["sequence"]:  # 2 profiled iterations x one launch each; the priming call stays out
        k = c["pmu"][name]
        assert k["launches"] == 2 and k["duration_ns"] > 0 and k["grid_size"] >= 1
        assert k["sm_throughput_pct"] is not None and 0 <= k["sm_throughput_pct"] <= 100
