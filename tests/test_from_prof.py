"""msprof_perf_summary.py --from-prof: kept and foreign profiles re-parsed without running anything.

msprof fixtures are built here from the exact headers of real exports (docs/sources.md#msprof-csv, #msprof-pmu:
op_summary 8.3.RC2 PipeUtilization, api_statistic / info.json, kernel_details Level0) with its quirks (trailing TAB on
start times, tripled quotes around shapes). The chrome-trace and ncu inputs below are SYNTHETIC STAND-INS derived from
the documented formats (torch.profiler export_chrome_trace events; ncu --csv details/raw layouts) until the H200
recordings of bench/record_profile_fixtures.py land in tests/fixtures/profiles/cuda/ (tests/test_from_prof_recorded.py
reads those). Durations are chosen so that every expected number can be worked out by hand.
"""
import gzip
import json
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_msprof"))
import tinyops  # noqa: E402

from mfulib.profiles import ncu  # noqa: E402
from mfulib.collect import from_prof as profiles
from mfulib.core.errors import UserError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "ops_profiling", "msprof_perf_summary.py")
DECOMPOSE = os.path.join(ROOT, "scripts", "mfu_decompose.py")
MIB = 1 << 20

# ------------------------------------------------------------------------------------------- msprof builders

OP_SUMMARY_HEADER = (
    "Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,Task Start Time(us),Task Duration(us),"
    "Task Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,Input Data Types,Input Formats,"
    "Output Shapes,Output Data Types,Output Formats,Context ID,aicore_time(us),aic_total_cycles,aic_mac_time(us),"
    "aic_mac_ratio,aic_scalar_time(us),aic_scalar_ratio,aic_mte1_time(us),aic_mte1_ratio,aic_mte2_time(us),"
    "aic_mte2_ratio,aic_fixpipe_time(us),aic_fixpipe_ratio,aic_icache_miss_rate,aiv_time(us),aiv_total_cycles,"
    "aiv_vec_time(us),aiv_vec_ratio,aiv_scalar_time(us),aiv_scalar_ratio,aiv_mte2_time(us),aiv_mte2_ratio,"
    "aiv_mte3_time(us),aiv_mte3_ratio,aiv_icache_miss_rate,cube_utilization(%)")
API_HEADER = "Device_id,Level,API Name,Time(us),Count,Avg(us),Min(us),Max(us),Variance"
KD_HEADER = "Device_id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim"
INFO = {"DeviceInfo": [{"id": 0, "ai_core_num": 24, "aic_frequency": "1800", "aiv_num": 48,
                        "aiv_frequency": "1800"}], "platform_version": "5"}
T0_US = 1780676244313289.000


def op_row(task_id, name, op_type, start_us, dur_us, block=24, in_shape="N/A", in_dtype="N/A", ttype="AI_CORE"):
    shape = f'"""{in_shape}"""' if in_shape != "N/A" else "N/A"
    pmu = ",".join(["1.0", "1000", "0.5", "0.81", "0.1", "0.05", "0.0", "0.0", "0.2", "0.3", "0.0", "0.0", "0.0"] +
                   ["0"] * 11 + ["10.0"])
    return (f"0,4294967295,{task_id},1756,{name},{op_type},dynamic,{ttype},{start_us:.3f}\t,{dur_us:.3f},0,{block},0,"
            f"NO,{shape},{in_dtype},ND,{shape},{in_dtype},ND,0,{pmu}")


def write_prof(root, rows, api_launches=None, name="PROF_000001_20260605161708478_FRJKORBPFMHQMGLA"):
    """A PROF_* dir with op_summary (header + ``rows``), api_statistic and device_0/info.json.0."""
    prof = os.path.join(str(root), name)
    out = os.path.join(prof, "mindstudio_profiler_output")
    os.makedirs(out, exist_ok=True)
    os.makedirs(os.path.join(prof, "device_0"), exist_ok=True)
    with open(os.path.join(out, "op_summary_20260605161737.csv"), "w", newline="") as f:
        f.write(OP_SUMMARY_HEADER + "\n" + "".join(r + "\n" for r in rows))
    if api_launches is not None:
        with open(os.path.join(out, "api_statistic_20260605161737.csv"), "w") as f:
            f.write(API_HEADER + f"\nhost,runtime,KernelLaunch,165.79,{api_launches},55.263,15.88,130.55,2836.059\n")
    with open(os.path.join(prof, "device_0", "info.json.0"), "w") as f:
        json.dump(INFO, f)
    return prof


def iterations_rows(seq, n_iters, t0=T0_US, gap_us=50.0, task0=0, head=()):
    """op_summary rows: ``head`` launches, then ``n_iters`` iterations of ``seq`` [(name, op_type, dur_us, kw)]."""
    rows, t, task = [], t0, task0
    for name, op_type, dur, kw in list(head):
        rows.append(op_row(task, name, op_type, t, dur, **kw))
        t, task = t + dur + gap_us, task + 1
    for _ in range(n_iters):
        for name, op_type, dur, kw in seq:
            rows.append(op_row(task, name, op_type, t, dur, **kw))
            t, task = t + dur + 2.0, task + 1
        t += gap_us
    return rows


def run_from_prof(tmp_path, paths, **kw):
    out = os.path.join(str(tmp_path), "out")
    opts = profiles.FromProfOptions(paths=[str(p) for p in (paths if isinstance(paths, list) else [paths])],
                                    output_dir=out, **kw)
    return profiles.from_prof(opts)


MM = ("matmul_kernel", "matmul_kernel", 100.0, {})
ADD = ("add_kernel", "add_kernel", 20.0, {"ttype": "AI_VECTOR_CORE"})


def test_foreign_prof_dir_without_markers_is_delimited_by_the_repeating_kernel_sequence(tmp_path):
    prof = write_prof(tmp_path, iterations_rows([MM, ADD], 5, head=[("randn_kernel", "randn_kernel", 7.0, {})]))
    rep = run_from_prof(tmp_path, prof, warmup=2, repeats=3)
    (c,) = rep["per_case"]
    assert c["asc_error"] is None and c["sequence"] == ["matmul_kernel", "add_kernel"]
    assert c["kernel_time_ns"] == 120000.0 and c["asc_us"] == 120.0  # 100 + 20 us, never "no device work"
    assert len(c["iter_kernel_time_ns"]) == 3 and c["launches_outside_iterations"] == 1  # the set-up launch
    assert c["pmu"]["matmul_kernel"]["aic_mac_ratio"] == pytest.approx(0.81)
    assert any("repeating launch sequence" in f and "5 complete iteration(s) of 2" in f for f in c["flags"])
    assert any("input set-up" in f and "randn_kernel" in f for f in c["flags"])
    assert c["flops"] is None and c["mfu_nom"] is None and rep["backend"] == "npu"
    assert rep["timing_method"] == "msprof.op_summary.Task_Duration" and rep["profiling_mode"] == "from-prof"
    assert rep["peak"]["value_tflops"] == pytest.approx(24 * 1800e6 * 8192 / 1e12)  # info.json.0 runtime
    assert any("no work directory" in f for f in rep["flags"])
    with open(os.path.join(str(tmp_path), "out", "performance.json")) as f:
        assert json.load(f)["per_case"][0]["kernel_time_ns"] == 120000.0


FLUSH = ("aclnnInplaceZero_ZerosLikeAiCore_ZerosLike", "ZerosLike", 540.0,
         {"in_shape": "67108864", "in_dtype": "FLOAT", "ttype": "AI_VECTOR_CORE"})  # 256 MiB >= 192 MiB L2


def test_l2_flush_kernels_inside_the_window_are_excluded_or_kept_by_flag(tmp_path):
    prof = write_prof(tmp_path, iterations_rows([FLUSH, MM, ADD], 4))
    excl = run_from_prof(tmp_path / "a", prof, warmup=1, repeats=3)["per_case"][0]
    keep = run_from_prof(tmp_path / "b", prof, warmup=1, repeats=3, l2_flush="keep")["per_case"][0]
    assert excl["kernel_time_ns"] == 120000.0 and excl["sequence"] == ["matmul_kernel", "add_kernel"]
    assert excl["harness_launches_dropped"] == 4
    assert any("L2-flush" in f and "excluded" in f and "192 MiB" in f and "256 MiB" in f for f in excl["flags"])
    assert keep["kernel_time_ns"] == 660000.0  # 540 + 100 + 20: the 5.5x overstatement the flag avoids
    assert keep["kernel_time_ns"] / excl["kernel_time_ns"] == pytest.approx(5.5)
    assert any("kept in the operator's time" in f for f in keep["flags"])
    # a small fill (1 MiB) is operator work, never a flush
    small = ("ZerosLike", "ZerosLike", 3.0, {"in_shape": "262144", "in_dtype": "FLOAT"})
    prof2 = write_prof(tmp_path / "c", iterations_rows([small, MM], 3))
    c = run_from_prof(tmp_path / "d", prof2, warmup=0, repeats=3)["per_case"][0]
    assert c["kernel_time_ns"] == 103000.0 and c["harness_launches_dropped"] == 0


def test_header_only_export_is_no_device_kernel_and_launches_without_records_are_not_drained(tmp_path):
    empty = write_prof(tmp_path / "a", [])
    c = run_from_prof(tmp_path / "o1", empty)["per_case"][0]
    assert c["asc_us"] is None and c["kernel_time_ns"] is None and "no device kernel" in c["asc_error"]
    lost = write_prof(tmp_path / "b", [], api_launches=12)
    c = run_from_prof(tmp_path / "o2", lost)["per_case"][0]
    assert c["asc_us"] is None and c["kernel_time_ns"] is None
    assert "12 kernel launch(es)" in c["asc_error"] and "buffer not drained" in c["asc_error"]
    assert "retry" in c["asc_error"] and c["impls"]["asc"]["status"] == "incomplete"


def test_launches_missing_at_the_head_are_reported_found_over_expected_and_measured_from_the_rest(tmp_path):
    rows = iterations_rows([MM, ADD], 4, head=[("add_kernel", "add_kernel", 20.0, {"ttype": "AI_VECTOR_CORE"})])
    prof = write_prof(tmp_path, rows)
    c = run_from_prof(tmp_path, prof, warmup=0, repeats=5)["per_case"][0]
    assert c["asc_error"] is None and c["kernel_time_ns"] == 120000.0 and len(c["iter_kernel_time_ns"]) == 4
    (first,) = [f for f in c["flags"] if "first iteration" in f]
    assert "1 of 2 launches" in first
    (found,) = [f for f in c["flags"] if "expected iterations" in f]
    assert "4 of 5" in found and "9 of 10 launches" in found
    assert any("measured from 4 of 5" in f for f in c["flags"])
    assert c["from_profile"]["asc"]["partial"] == 1 and c["from_profile"]["asc"]["found"] == 4


def test_autotuning_first_iteration_is_recognised_by_its_other_launch_configurations(tmp_path):
    tune = [("matmul_kernel", "matmul_kernel", d, {"block": b}) for d, b in ((400.0, 8), (250.0, 12), (180.0, 48))]
    prof = write_prof(tmp_path, iterations_rows([MM, ADD], 3, head=tune))
    c = run_from_prof(tmp_path, prof)["per_case"][0]
    assert c["kernel_time_ns"] == 120000.0 and len(c["iter_kernel_time_ns"]) == 3
    assert any("first call autotuned: 3 launches" in f and "3 launch configuration(s)" in f for f in c["flags"])
    assert c["from_profile"]["asc"]["autotune"] == {"launches": 3, "configs": 3, "kernels": ["matmul_kernel"],
                                                    "flush_launches": 0}
    (tuned,) = [e for e in c["from_profile"]["asc"]["excluded"] if e["what"] == "autotune"]
    assert tuned["launches"] == 3 and tuned["time_ns"] == (400.0 + 250.0 + 180.0) * 1e3


def test_torch_npu_ascend_pt_kernel_details_is_read(tmp_path):
    d = tmp_path / "host_1234_20260605161708478_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    d.mkdir(parents=True)
    lines, t = [], T0_US
    for _ in range(3):
        lines.append(f'0,matmul_kernel,matmul_kernel,AI_CORE,"{t:.3f}\t",100.000,0,24')
        t += 150.0
    (d / "kernel_details.csv").write_text(KD_HEADER + "\n" + "\n".join(lines) + "\n")
    rep = run_from_prof(tmp_path, tmp_path)
    (c,) = rep["per_case"]
    assert c["kernel_time_ns"] == 100000.0 and rep["timing_method"] == "torch_npu.kernel_details.Duration"


def test_several_profiles_are_named_by_cases_in_order_and_a_count_mismatch_is_refused(tmp_path):
    a = write_prof(tmp_path / "a", iterations_rows([MM], 3))
    b = write_prof(tmp_path / "b", iterations_rows([ADD], 3))
    rep = run_from_prof(tmp_path / "o", [a, b], cases=[7, 2])
    assert [c["case"] for c in rep["per_case"]] == [7, 2]
    assert [c["kernel_time_ns"] for c in rep["per_case"]] == [100000.0, 20000.0]
    with pytest.raises(UserError, match="2 case id"):
        run_from_prof(tmp_path / "o", [a], cases=[1, 2])
    with pytest.raises(UserError, match="two profiles for case 1"):
        run_from_prof(tmp_path / "o", [a, b], cases=[1, 1])
    assert profiles.parse_case_sequence("7,2,0-1") == [7, 2, 0, 1]


# ------------------------------------------------------------------------------------------- chrome traces


def chrome_trace(path, n_iters, seq, ranges=False, flush_bytes=None, shapes=True, head_cut=0, lost_tail=0,
                 tune=(), device="NVIDIA H200", gz=False):
    """SYNTHETIC STAND-IN of a torch.profiler CUDA chrome trace (event layout of export_chrome_trace: cpu_op /
    cuda_runtime cudaLaunchKernel with correlation / kernel with correlation, External id, grid, block).

    ``seq``: [(kernel name, dur_us)] per iteration; ``flush_bytes``: an aten::zero_ (FillFunctor kernel, 300 us)
    at the start of every iteration over that many bytes; ``head_cut``: kernel records (and their launches) missing
    at the start of the window; ``lost_tail``: launches at the end whose kernel record is missing; ``tune``:
    [(name, dur_us, block)] launched before the first iteration (an autotuner's configs)."""
    ev, t, corr, ext = [], 1_000_000.0, 1, 1

    def launch(name, dur, block=(128, 1, 1), op=None, keep=True, record=True, in_iter=None):
        nonlocal t, corr, ext
        if op is not None:
            args = {"External id": ext}
            if shapes:
                args.update({"Input Dims": [[op // 4], []], "Input type": ["int", "Scalar"]})
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::zero_", "ts": t - 1, "dur": 6, "pid": 1, "tid": 1,
                       "args": args})
        if keep:
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t, "dur": 4, "pid": 1,
                       "tid": 1, "args": {"correlation": corr, "External id": ext}})
            if record:
                ev.append({"ph": "X", "cat": "kernel", "name": name, "ts": t + 5, "dur": dur, "pid": 0, "tid": 7,
                           "args": {"correlation": corr, "External id": ext, "grid": [64, 1, 1], "block": list(block),
                                    "registers per thread": 32, "shared memory": 0, "stream": 7}})
        t, corr, ext = t + dur + 8, corr + 1, ext + 1

    for name, dur, block in tune:
        launch(name, dur, block=block)
    total = n_iters * (len(seq) + (1 if flush_bytes else 0))
    k = 0
    for i in range(n_iters):
        t0 = t
        if flush_bytes:
            launch("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, "
                   "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<int>, at::detail::Array<char*, 1>)",
                   300.0, op=flush_bytes, keep=k >= head_cut)
            k += 1
        for name, dur in seq:
            launch(name, dur, keep=k >= head_cut, record=k < total - lost_tail)
            k += 1
        if ranges:
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"mfu::iter::{i}", "ts": t0 - 2, "dur": t - t0 + 1,
                       "pid": 1, "tid": 1})
        t += 100.0
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": device, "totalGlobalMem": 150754820096,
                                                     "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
           "traceEvents": ev}
    path = str(path)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            json.dump(doc, f)
    else:
        with open(path, "w") as f:
            json.dump(doc, f)
    return path


SEQ = [("bmm_tile_kernel", 40.0), ("add_bias_kernel", 5.0)]


def test_plain_user_trace_without_the_tools_ranges_is_measured_not_called_no_device_work(tmp_path):
    plain = chrome_trace(tmp_path / "plain.json", 6, SEQ)
    ranged = chrome_trace(tmp_path / "ranged.json", 6, SEQ, ranges=True)
    p = run_from_prof(tmp_path / "a", plain, warmup=1, repeats=5)["per_case"][0]
    r = run_from_prof(tmp_path / "b", ranged, warmup=1, repeats=5)["per_case"][0]
    assert p["asc_error"] is None and p["kernel_time_ns"] == 45000.0 and p["sequence"] == [s for s, _ in SEQ]
    assert r["kernel_time_ns"] == p["kernel_time_ns"] and r["from_profile"]["asc"]["delimiter"].startswith("this tool")
    assert p["span_ns"] == 40000.0 + 8000.0 + 5000.0  # first start to last end: 40 + 8 gap + 5 us
    rep = run_from_prof(tmp_path / "c", chrome_trace(tmp_path / "g.json.gz", 4, SEQ, gz=True))
    assert rep["per_case"][0]["kernel_time_ns"] == 45000.0 and rep["device"]["name"] == "NVIDIA H200"
    assert rep["timing_method"] == "torch.profiler.cupti.kernel_duration"
    assert rep["peak"]["value_tflops"] == 989.5  # H200 datasheet (mfulib.core.nominal_peaks) from deviceProperties


def test_do_bench_style_zero_flush_in_each_iteration_is_excluded_with_or_without_recorded_shapes(tmp_path):
    for shapes in (True, False):
        tr = chrome_trace(tmp_path / f"flush{shapes}.json", 5, SEQ, flush_bytes=256 * MIB, shapes=shapes)
        ex = run_from_prof(tmp_path / f"e{shapes}", tr, warmup=1, repeats=4)["per_case"][0]
        kp = run_from_prof(tmp_path / f"k{shapes}", tr, warmup=1, repeats=4, l2_flush="keep")["per_case"][0]
        assert ex["kernel_time_ns"] == 45000.0 and ex["harness_launches_dropped"] == 5
        assert kp["kernel_time_ns"] == 345000.0
        text = " ".join(ex["flags"])
        assert "L2-flush" in text and "60 MiB" in text
        assert ("host op aten::zero_ Input Dims" in text) if shapes else ("estimated: duration x nominal 4800" in text)
    # the same fill kernel over 1 MiB (recorded shapes) is the operator's own work
    tr = chrome_trace(tmp_path / "small.json", 3, SEQ, flush_bytes=1 * MIB)
    c = run_from_prof(tmp_path / "s", tr)["per_case"][0]
    assert c["kernel_time_ns"] == 345000.0 and c["harness_launches_dropped"] == 0


def test_trace_with_kernel_records_missing_at_head_or_tail(tmp_path):
    head = chrome_trace(tmp_path / "head.json", 5, SEQ, head_cut=1)
    c = run_from_prof(tmp_path / "h", head, warmup=0, repeats=5)["per_case"][0]
    assert c["kernel_time_ns"] == 45000.0 and len(c["iter_kernel_time_ns"]) == 4
    assert any("1 of 2 launches" in f for f in c["flags"]) and any("found 4 of 5" in f for f in c["flags"])
    tail = chrome_trace(tmp_path / "tail.json", 5, SEQ, lost_tail=2)
    c = run_from_prof(tmp_path / "t", tail, warmup=0, repeats=5)["per_case"][0]
    assert c["kernel_time_ns"] is None and c["asc_us"] is None
    assert "2 kernel launch(es)" in c["asc_error"] and "no kernel record" in c["asc_error"]
    assert "buffer not drained" in c["asc_error"] and "retry" in c["asc_error"]
    ranged = chrome_trace(tmp_path / "r.json", 5, SEQ, ranges=True, lost_tail=1)
    c = run_from_prof(tmp_path / "r", ranged, warmup=1, repeats=4)["per_case"][0]
    assert c["kernel_time_ns"] is None and "buffer not drained" in c["asc_error"]
    none = chrome_trace(tmp_path / "n.json", 3, SEQ, lost_tail=6)
    c = run_from_prof(tmp_path / "n", none)["per_case"][0]
    assert c["kernel_time_ns"] is None
    assert "6 kernel launch(es)" in c["asc_error"] and "no kernel record" in c["asc_error"]


def test_autotuning_in_a_trace_and_in_a_ranged_first_iteration_is_left_out(tmp_path):
    tune = [("bmm_tile_kernel", 90.0, (256, 1, 1)), ("bmm_tile_kernel", 70.0, (64, 1, 1))]
    tr = chrome_trace(tmp_path / "tune.json", 4, SEQ, tune=tune)
    c = run_from_prof(tmp_path / "a", tr)["per_case"][0]
    assert c["kernel_time_ns"] == 45000.0 and len(c["iter_kernel_time_ns"]) == 4
    assert any("autotuning recognised" in f for f in c["flags"])
    # this tool's ranges with autotuning inside iteration 0 (no priming call)
    ev = json.load(open(chrome_trace(tmp_path / "rt.json", 4, SEQ, ranges=True, tune=tune)))
    first = next(e for e in ev["traceEvents"] if e.get("name") == "mfu::iter::0")
    first["dur"] += first["ts"] - 999_000.0
    first["ts"] = 999_000.0  # iteration 0's range now also holds the tuning launches
    with open(tmp_path / "rt.json", "w") as f:
        json.dump(ev, f)
    c = run_from_prof(tmp_path / "b", tmp_path / "rt.json", warmup=1, repeats=3)["per_case"][0]
    assert c["kernel_time_ns"] == 45000.0 and any("autotuning recognised - left out" in f for f in c["flags"])


# ------------------------------------------------------------------------------------------- ncu

NCU_DETAILS_HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
                      '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name",'
                      '"Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"')


def ncu_details(launches):
    """SYNTHETIC STAND-IN of ``ncu --csv --page details``: metric rows with 15 cells (no rule columns) under the
    20-column header, one rule row per launch, ==PROF== lines and program output interleaved."""
    out = ["==PROF== Connected to process 4242 (/usr/bin/python3.12)", "program output line",
           NCU_DETAILS_HEADER]
    for i, (name, grid, block, dur_ns, sm, dram) in enumerate(launches):
        base = f'"{i}","4242","python3.12","127.0.0.1","{name}","1","7","{block}","{grid}","0","9.0"'
        for metric, unit, val in (("gpu__time_duration.sum", "nsecond", f"{dur_ns:,}"),
                                  ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", f"{sm}"),
                                  ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", f"{dram}"),
                                  ("device__attribute_l2_cache_size", "byte", "62,914,560")):
            out.append(base + f',"GPU Speed Of Light Throughput","{metric}","{unit}","{val}"')
        out.append(base + ',"SpeedOfLight","","","","SOLBottleneck","OPT","This kernel grid is too small.",'
                          '"local","42.5"')
    out.append("==PROF== Disconnected from process 4242")
    return "\n".join(out) + "\n"


def test_ncu_details_metric_rows_shorter_than_the_header_are_parsed_with_units_and_rules():
    text = ncu_details([("bmm_tile_kernel", "(64, 1, 1)", "(128, 1, 1)", 41234, 71.5, 12.25)])
    (rec,) = ncu.parse_ncu_csv(text)
    assert rec["metrics"]["gpu__time_duration.sum"] == 41234.0 and rec["units"]["gpu__time_duration.sum"] == "nsecond"
    assert rec["metrics"]["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == 71.5
    assert rec["units"]["dram__throughput.avg.pct_of_peak_sustained_elapsed"] == "%"
    assert rec["sections"]["gpu__time_duration.sum"] == "GPU Speed Of Light Throughput"
    assert rec["rules"] == [{"section": "SpeedOfLight", "rule": "SOLBottleneck", "type": "OPT",
                             "description": "This kernel grid is too small.", "speedup_type": "local",
                             "speedup": 42.5}]
    assert ncu.duration_ns(rec) == 41234.0 and rec["grid"] == "(64, 1, 1)"


def test_ncu_profiles_raw_and_details_give_kernel_times_without_spans(tmp_path):
    launches = []
    for _ in range(4):
        launches += [("bmm_tile_kernel", "(64, 1, 1)", "(128, 1, 1)", 40000, 70.0, 10.0),
                     ("add_bias_kernel", "(8, 1, 1)", "(128, 1, 1)", 5000, 5.0, 60.0)]
    det = tmp_path / "ncu_details.csv"
    det.write_text(ncu_details(launches))
    c = run_from_prof(tmp_path / "d", det, warmup=1, repeats=3)["per_case"][0]
    assert c["kernel_time_ns"] == 45000.0 and c["span_ns"] is None and c["launch_overhead_ns"] is None
    assert c["pmu"]["bmm_tile_kernel"]["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == 70.0
    assert any("ncu records no timestamps" in f for f in c["flags"])
    raw = tmp_path / "ncu_raw.csv"
    hdr = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
           '"Device","CC","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed"')
    lines = [hdr, '"","","","","","","","","","","","nsecond","%"']
    for i, (name, grid, block, d, sm, _) in enumerate(launches):
        lines.append(f'"{i}","1","python3","h","{name}","1","7","{block}","{grid}","0","9.0","{d:,}","{sm}"')
    raw.write_text("\n".join(lines) + "\n")
    rep = run_from_prof(tmp_path / "r", raw, warmup=1, repeats=3)
    assert rep["per_case"][0]["kernel_time_ns"] == 45000.0 and rep["timing_method"] == "ncu.gpu__time_duration.sum"


# ------------------------------------------------------------------------------------------- kept profiles, work dir


def test_kept_profile_reparses_to_the_collectors_own_numbers(tmp_path):
    from mfulib.collect.driver import Options, collect
    work = tinyops.make_workdir(tmp_path)
    rep = collect(Options(op_dir=work, output_dir=work, impl="asc", backend="cpu", cases=[1], warmup=1, repeats=2,
                          keep_prof=work, progress=False, unverified_ok=True))
    again = run_from_prof(tmp_path / "re", os.path.join(work, "prof"), op_dir=work)
    a, b = rep["per_case"][0], again["per_case"][0]
    assert b["case"] == 1 and b["from_profile"]["asc"]["format"] == "kept chrome_trace_cpu"
    assert b["kernel_time_ns"] == a["kernel_time_ns"] and b["sequence"] == a["sequence"]
    assert b["iter_kernel_time_ns"] == a["iter_kernel_time_ns"] and b["flops"] == a["flops"] == 2 * 1024
    # check_flops' verdict on the numerator travels too, as the live collection records it
    assert a["numerator"] is not None and b["numerator"] == a["numerator"]
    assert b["numerator_reason"] == a["numerator_reason"]


PEAK_CUDA = {  # hand-made peak.json (a test double, not a measurement)
    "schema": 1, "tool": "peak_calib", "backend": "cuda", "accelerator": True, "label": "NVIDIA H200 [test double]",
    "device": {"backend": "cuda", "name": "NVIDIA H200"}, "nominal": {"tflops": {"float32": 67.0}, "source": "fixture"},
    "peak_tflops": {"float32": 50.0, "tf32": 400.0, "float16": 780.0}, "bandwidth_gbps": 4000.0}


def test_inside_a_work_dir_flops_and_mfu_are_attached_and_mfu_decompose_reads_the_result(tmp_path):
    work = tinyops.make_workdir(tmp_path)
    tr = chrome_trace(tmp_path / "user.json", 4, [("scale_kernel", 40.0), ("add_one_kernel", 10.0)])
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, SCRIPT, "--from-prof", tr, "--cases", "2", "--op-dir", work, "--mfu",
                        "--output-dir", str(out), "--warmup", "1", "--repeats", "3"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rep = json.load(open(out / "performance.json"))
    (c,) = rep["per_case"]
    assert c["case"] == 2 and c["flops"] == 2 * 16384 and c["kernel_time_ns"] == 50000.0
    assert c["actual_tflops"] == pytest.approx(2 * 16384 / 50000.0 / 1e3)
    assert c["mfu_nom"] == pytest.approx(c["actual_tflops"] / 989.5)
    (tmp_path / "peak.json").write_text(json.dumps(PEAK_CUDA))
    d = subprocess.run([sys.executable, DECOMPOSE, "--report", str(out / "performance.json"), "--no-current",
                        "--peak-json", str(tmp_path / "peak.json"), "-o", str(tmp_path / "dec.json")],
                       capture_output=True, text=True)
    assert d.returncode == 0, d.stderr
    row = json.load(open(tmp_path / "dec.json"))["reports"][0]["rows"][0]
    assert row["status"] == "ok" and row["kernel_time_ns"] == 50000.0
    assert {p["part"]: p["time_ns"] for p in row["parts"]}["scale"] == 40000.0
    # a foreign profile inside a work dir must say which case it is
    r = subprocess.run([sys.executable, SCRIPT, "--from-prof", tr, "--op-dir", work, "--output-dir", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "give --cases" in r.stderr


def test_without_a_work_dir_the_report_has_null_flops_and_decompose_says_so(tmp_path):
    tr = chrome_trace(tmp_path / "user.json", 3, SEQ)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, SCRIPT, "--from-prof", tr, "--output-dir", str(out), "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "case 0 asc" not in r.stderr  # --quiet
    assert re.search(r"^\s+0\s+asc\s+2\s+45\s+53\s", r.stdout, re.M), r.stdout  # kernel 45 us, span 53 us
    (tmp_path / "peak.json").write_text(json.dumps(PEAK_CUDA))
    d = subprocess.run([sys.executable, DECOMPOSE, "--report", str(out / "performance.json"), "--no-current",
                        "--peak-json", str(tmp_path / "peak.json"), "-o", str(tmp_path / "dec.json")],
                       capture_output=True, text=True)
    assert d.returncode == 2 and "no_flops" in d.stderr  # as for a collection without flops.py


def test_bad_from_prof_paths_exit_2_naming_the_file(tmp_path):
    r = subprocess.run([sys.executable, SCRIPT, "--from-prof", str(tmp_path / "nope"), "--output-dir", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "nope" in r.stderr and "not found" in r.stderr
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    r = subprocess.run([sys.executable, SCRIPT, "--from-prof", str(junk), "--output-dir", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "junk.txt" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = subprocess.run([sys.executable, SCRIPT, "--from-prof", str(bad), "--output-dir", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "bad.json" in r.stderr and "chrome trace" in r.stderr


def test_a_directory_scan_takes_traces_and_ncu_outputs_but_not_other_json(tmp_path):
    d = tmp_path / "mixed"
    d.mkdir()
    chrome_trace(d / "a_trace.json", 3, SEQ)
    (d / "manifest.json").write_text(json.dumps({"files": {}}))
    (d / "ncu_empty.txt").write_text("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n")
    found = profiles.discover(str(d))
    assert [os.path.basename(p) for _, p in found] == ["a_trace.json", "ncu_empty.txt"]
    rep = run_from_prof(tmp_path / "o", str(d))
    a, n = rep["per_case"]
    assert a["kernel_time_ns"] == 45000.0 and n["kernel_time_ns"] is None
    assert "no device kernel" in n["asc_error"] and "No kernels were profiled" in n["asc_error"]
    with pytest.raises(UserError, match="traceEvents"):
        run_from_prof(tmp_path / "o", str(d / "manifest.json"))


def test_kept_npu_profile_and_the_same_prof_dir_without_markers_give_the_collectors_numbers(tmp_path):
    """Through the msprof TEST DOUBLE (tests/fake_msprof): the kept PROF dir re-parses to the collector's numbers,
    and a copy with the marker rows deleted (a foreign profile) is delimited by its kernel sequence instead."""
    import shutil

    import test_msprof_fake_end_to_end as fake
    with pytest.MonkeyPatch.context() as mp:
        fake._apply(mp, fake.make_fake_cann(tmp_path))
        work = tinyops.make_workdir(tmp_path)
        c0 = fake.run_npu(work)["per_case"][0]
    kept = run_from_prof(tmp_path / "k", os.path.join(work, "prof"), op_dir=work)["per_case"][0]
    assert kept["from_profile"]["asc"]["delimiter"] == "this tool's marker kernels"
    assert kept["iter_kernel_time_ns"] == c0["iter_kernel_time_ns"] and kept["flops"] == c0["flops"]
    foreign = tmp_path / "foreign"
    (prof,) = [os.path.join(r, d) for r, ds, _ in os.walk(os.path.join(work, c0["asc_prof_dir"])) for d in ds
               if d.startswith("PROF_")]
    shutil.copytree(prof, foreign / os.path.basename(prof))
    for csv_path in (foreign / os.path.basename(prof) / "mindstudio_profiler_output").glob("op_summary_*.csv"):
        lines = csv_path.read_text().splitlines(keepends=True)
        csv_path.write_text("".join(ln for ln in lines if "mfu_harness_marker_kernel" not in ln))
    c = run_from_prof(tmp_path / "f", str(foreign), warmup=1, repeats=2)["per_case"][0]
    assert c["iter_kernel_time_ns"] == c0["iter_kernel_time_ns"] and c["sequence"] == c0["sequence"]
    assert any("repeating launch sequence" in f for f in c["flags"])


def test_an_iteration_repeating_one_kernel_is_split_at_the_device_idle_gaps(tmp_path):
    # 4 iterations of [matmul, matmul] (2 us apart) separated by 50 us of idle device: 4 iterations, not 8
    prof = write_prof(tmp_path, iterations_rows([MM, MM], 4))
    c = run_from_prof(tmp_path, prof)["per_case"][0]
    assert c["launches_per_iter"] == 2 and c["kernel_time_ns"] == 200000.0 and len(c["iter_kernel_time_ns"]) == 4
    assert any("split at the device-idle gaps" in f for f in c["flags"])


def test_a_sequence_that_never_repeats_is_flagged_never_guessed(tmp_path):
    prof = write_prof(tmp_path, iterations_rows([MM, ADD, ("softmax_kernel", "softmax_kernel", 9.0, {})], 1))
    c = run_from_prof(tmp_path, prof, warmup=0, repeats=3)["per_case"][0]
    assert c["kernel_time_ns"] is None and "does not repeat" in c["asc_error"]


def test_without_device_facts_a_zero_over_256_mib_is_a_flush_and_a_smaller_one_waits_for_l2_mib(tmp_path):
    prof = write_prof(tmp_path, iterations_rows([FLUSH, MM, ADD], 3))
    os.remove(os.path.join(prof, "device_0", "info.json.0"))  # no runtime info: no 910B variant, no L2 size
    c = run_from_prof(tmp_path / "a", prof)["per_case"][0]
    assert c["kernel_time_ns"] == 120000.0  # a 256 MiB zero_ at every head: a flush on any device
    assert any("256 MiB (device L2 unknown)" in f and "excluded" in f for f in c["flags"])
    c = run_from_prof(tmp_path / "c", prof, l2_mib=512)["per_case"][0]  # a 256 MiB buffer is below a 512 MiB L2
    assert c["kernel_time_ns"] == 660000.0
    small = ("aclnnInplaceZero_ZerosLikeAiCore_ZerosLike", "ZerosLike", 270.0,
             {"in_shape": "33554432", "in_dtype": "FLOAT", "ttype": "AI_VECTOR_CORE"})  # 128 MiB
    prof2 = write_prof(tmp_path / "s", iterations_rows([small, MM, ADD], 3))
    os.remove(os.path.join(prof2, "device_0", "info.json.0"))
    c = run_from_prof(tmp_path / "d", prof2)["per_case"][0]
    assert c["kernel_time_ns"] == 390000.0  # 270 + 100 + 20: undecided without the L2 size, kept
    assert any("flush-like" in f and "128 MiB" in f and "--l2-mib" in f for f in c["flags"])
    c = run_from_prof(tmp_path / "e", prof2, l2_mib=96)["per_case"][0]
    assert c["kernel_time_ns"] == 120000.0 and any("[--l2-mib]" in f for f in c["flags"])
    with pytest.raises(UserError, match="--l2-mib"):
        run_from_prof(tmp_path / "f", prof, l2_mib=-1)


CAST_256 = ("aclnnCast_CastAiCore_Cast", "Cast", 92.57, {"in_shape": "67108864", "in_dtype": "FLOAT",
                                                          "ttype": "AI_VECTOR_CORE"})
SUM_256 = ("aclnnReduceSum_ReduceSumAiCore_ReduceSum", "ReduceSum", 92.57,
           {"in_shape": "67108864", "in_dtype": "FLOAT", "ttype": "AI_VECTOR_CORE"})


@pytest.mark.parametrize("head,flush_us", [
    ([("aclnnInplaceFillScalar_FillsAiCore_Fills", "Fills", 400.0,
       {"in_shape": "67108864", "in_dtype": "INT32", "ttype": "AI_VECTOR_CORE"})], 400.0),  # fill_ of 256 MiB
    ([FLUSH], 540.0),  # zero_ (Triton-Ascend's clear_cache)
    ([CAST_256, SUM_256], 92.57 + 92.57)])  # buffer.float(); buffer.sum()
def test_each_harness_signature_at_the_head_over_an_l2_sized_buffer_is_a_flush(tmp_path, head, flush_us):
    prof = write_prof(tmp_path, iterations_rows(head + [MM], 3))
    c = run_from_prof(tmp_path, prof)["per_case"][0]
    assert c["kernel_time_ns"] == 100000.0 and c["harness_launches_dropped"] == 3 * len(head)
    assert c["sequence"] == [MM[0]]
    (fl,) = [e for e in c["from_profile"]["asc"]["excluded"] if e["what"] == "l2_flush"]
    assert fl["launches"] == 3 * len(head) and fl["time_ns"] == pytest.approx(3 * flush_us * 1e3)


@pytest.mark.parametrize("alone", [CAST_256, SUM_256])
def test_a_cast_or_a_sum_alone_is_no_harness_signature(tmp_path, alone):
    prof = write_prof(tmp_path, iterations_rows([alone, MM], 3))
    c = run_from_prof(tmp_path, prof)["per_case"][0]
    assert c["kernel_time_ns"] == pytest.approx(192570.0) and c["harness_launches_dropped"] == 0


def test_one_op_summary_file_given_directly_and_a_launch_count_above_the_rows_is_flagged(tmp_path):
    prof = write_prof(tmp_path, iterations_rows([MM, ADD], 3), api_launches=9)
    csv_path = os.path.join(prof, "mindstudio_profiler_output", "op_summary_20260605161737.csv")
    c = run_from_prof(tmp_path / "f", csv_path)["per_case"][0]
    assert c["kernel_time_ns"] == 120000.0 and c["from_profile"]["asc"]["format"] == "msprof_csv"
    c = run_from_prof(tmp_path / "d", prof)["per_case"][0]
    assert c["kernel_time_ns"] == 120000.0
    (flag,) = [f for f in c["flags"] if "KernelLaunch" in f]
    assert "9 KernelLaunch calls" in flag and "6 rows" in flag


def test_repeats_without_warmup_measures_the_last_iterations_found(tmp_path):
    prof = write_prof(tmp_path, iterations_rows([MM, ADD], 5))
    (c,) = run_from_prof(tmp_path, prof, repeats=3)["per_case"]  # no --warmup: it crashed with a TypeError before
    assert c["asc_error"] is None and len(c["iter_kernel_time_ns"]) == 3 and c["kernel_time_ns"] == 120000.0
    assert any("no --warmup: the last 3 of the 5 iterations" in f for f in c["flags"])


def test_the_cli_exits_1_when_no_case_got_a_time_and_refuses_live_only_flags(tmp_path):
    import subprocess
    import sys
    cli = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "ops_profiling",
                       "msprof_perf_summary.py")
    empty = write_prof(tmp_path / "a", [])
    r = subprocess.run([sys.executable, cli, "--from-prof", str(empty), "--output-dir", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "no case of the profile(s) has a kernel time" in r.stderr  # as --help says
    good = write_prof(tmp_path / "b", iterations_rows([MM, ADD], 5))
    r = subprocess.run([sys.executable, cli, "--from-prof", str(good), "--output-dir", str(tmp_path / "o2"),
                        "--pmu", "none", "--flush-cache-mib", "256"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--flush-cache-mib, --pmu" in r.stderr and "runs nothing" in r.stderr
    r = subprocess.run([sys.executable, cli, "--from-prof", str(good), "--output-dir", str(tmp_path / "o3"),
                        "--warmup", "2", "--repeats", "3"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
