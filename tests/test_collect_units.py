"""Collector building blocks without child processes: iteration statistics, the failure kinds of public reports
(multi-kernel, lost rows, zero timestamps, harness kernels), CUDA/CPU trace attribution, peaks, ncu CSV."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from mfulib.core import definitions
from mfulib.profiles import kernels
from mfulib.profiles import ncu
from mfulib.core import nominal_peaks as peaks
from mfulib.schemas import performance_json as performance
from mfulib.backends.base import lost_problems
from mfulib.backends.cuda import trace_launches as cuda_trace_launches

MK = kernels.MARKER_KERNEL


def launches(seq, n_iters, dur=None, start=1_000_000, gap=100):
    """Rows for ``n_iters`` iterations of kernel-name sequence ``seq``; duration of (iteration i, position p) is
    ``dur(i, p)`` ns (default 1000 + 10 * p)."""
    dur = dur or (lambda i, p: 1000 + 10 * p)
    rows, t = [], start
    for i in range(n_iters):
        for p, name in enumerate(seq):
            d = dur(i, p)
            rows.append({"name": name, "start_ns": t, "duration_ns": d, "iteration": i})
            t += d + gap
    return rows


def test_a_multi_kernel_operator_reports_launches_per_iteration_from_the_data():
    # QKV GEMM, attention, output GEMM: matmul_kernel twice per iteration (durations 1000, 1010, 1020 ns)
    s = kernels.summarize(launches(["matmul_kernel", "flash_attn_fwd_kernel", "matmul_kernel"], 5), 2, 3)
    assert s["status"] == "ok" and s["launches_per_iter"] == 3
    by = {k["name"]: k for k in s["kernels"]}
    assert by["matmul_kernel"]["launches_per_iter"] == 2 and by["flash_attn_fwd_kernel"]["launches_per_iter"] == 1
    assert by["matmul_kernel"]["time_per_iter_ns"] == 1000 + 1020 and by["matmul_kernel"]["mean_ns"] == 1010
    assert s["kernel_time_ns"] == 3030  # 1000 + 1010 + 1020, the same every iteration
    assert s["span_ns"] == 3030 + 2 * 100 and s["launch_overhead_ns"] == 200
    assert [p["median_ns"] for p in s["iteration_launches"]] == [1000, 1010, 1020]


def test_warmup_iterations_are_dropped_and_the_median_of_measured_iterations_is_reported():
    # per-iteration kernel sums 100, 100 (warmup), then 10, 12, 30 -> median 12, spread (30 - 10) / 12
    sums = [100, 100, 10, 12, 30]
    s = kernels.summarize(launches(["k"], 5, dur=lambda i, p: sums[i]), 2, 3)
    assert s["iter_kernel_time_ns"] == [10, 12, 30] and s["kernel_time_ns"] == 12
    assert s["repeat_spread"] == pytest.approx(20 / 12)
    assert any("repeat_spread" in f and "> 5%" in f for f in s["flags"])
    quiet = kernels.summarize(launches(["k"], 4, dur=lambda i, p: 1000 + i), 1, 3)
    assert quiet["repeat_spread"] == pytest.approx(2 / 1002) and not quiet["flags"]


def test_the_collectors_own_marker_and_flush_kernels_are_never_operator_time():
    rows = launches(["mfu_harness_flush_kernel", MK, "op_kernel"], 3, dur=lambda i, p: [5000, 7, 100][p])
    s = kernels.summarize(rows, 1, 2)
    assert [k["name"] for k in s["kernels"]] == ["op_kernel"] and s["kernel_time_ns"] == 100
    assert s["harness_launches_dropped"] == 6


def test_a_call_that_launched_no_kernel_is_an_error_not_zero_time():
    s = kernels.summarize([{"name": "k", "start_ns": 5, "duration_ns": 5, "iteration": None}], 1, 2)
    assert s["status"] == "no_kernels" and "no kernel was launched" in s["problems"][0]
    assert "kernel_time_ns" not in s


def test_lost_rows_in_a_measured_iteration_make_the_profile_incomplete():
    rows = launches(["a", "b", "c"], 4)
    del rows[-2]  # iteration 3 lost "b"
    s = kernels.summarize(rows, 1, 3)
    assert s["status"] == "incomplete" and "lost rows" in s["problems"][0] and "kernel_time_ns" not in s


def test_zero_timestamp_records_make_the_profile_incomplete_never_a_zero_duration():
    rows = launches(["a", "b"], 3)
    rows[-1]["start_ns"] = 0
    s = kernels.summarize(rows, 1, 2)
    assert s["status"] == "incomplete" and "zero or missing timestamp" in s["problems"][0]
    rows = launches(["a", "b"], 3)
    rows[3]["duration_ns"] = 0
    assert kernels.summarize(rows, 1, 2)["status"] == "incomplete"


def test_rows_lost_in_warmup_only_are_noted_but_do_not_spoil_the_measurement():
    rows = launches(["a", "b"], 3)
    del rows[0]
    s = kernels.summarize(rows, 1, 2)
    assert s["status"] == "ok" and any("warmup iterations [0] lost" in f for f in s["flags"])


def test_a_different_kernel_sequence_in_one_iteration_is_flagged_not_averaged_away():
    rows = launches(["a", "b"], 4)
    rows[-1]["name"] = "c"
    s = kernels.summarize(rows, 1, 3)
    assert s["status"] == "ok" and any(f.startswith("sequence_mismatch: iterations [3]") for f in s["flags"])
    assert s["sequence"] == ["a", "b"]


def test_marker_kernels_delimit_iterations_and_rows_before_the_first_marker_are_not_measured():
    prime = [{"name": "autotune_probe", "start_ns": 10, "duration_ns": 900}, {"name": "a", "start_ns": 20,
                                                                                "duration_ns": 900}]
    body = []
    for i in range(3):
        body += [{"name": MK}, {"name": "a"}, {"name": "b"}]
    rows = prime + body + [{"name": MK}]
    for j, r in enumerate(rows):
        r.setdefault("start_ns", 1000 + 10 * j)
        r.setdefault("duration_ns", 5)
    tagged, info = kernels.assign_by_markers(rows, 3)
    assert info["problems"] == [] and [r["iteration"] for r in tagged[:2]] == [None, None]
    s = kernels.summarize(tagged, 1, 2)
    assert s["sequence"] == ["a", "b"] and s["launches_outside_iterations"] == 2
    _, lost = kernels.assign_by_markers(rows[3:], 3)  # first marker dropped at session start
    assert "found 3 of 4 iteration markers" in lost["problems"][0]


def test_without_markers_a_periodic_sequence_is_split_and_a_non_periodic_one_is_refused():
    rows = [{"name": n, "start_ns": 10 * j + 1, "duration_ns": 3} for j, n in enumerate("xab" + "ab" * 4)]
    tagged, info = kernels.assign_by_period(rows, 4)
    assert info["period"] == 2 and [r["iteration"] for r in tagged] == [None, None, None, 0, 0, 1, 1, 2, 2, 3, 3]
    _, bad = kernels.assign_by_period(rows[:-1], 4)
    assert bad["problems"] and "does not repeat 5 times" in bad["problems"][0]  # a lost last row: refused


# ---------------------------------------------------------------------------------------------- CUDA trace


def _ev(cat, name, ts_us, dur_us, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts_us, "dur": dur_us, "args": args}


def cuda_trace(tmp_path, drop_corr=(), zero_corr=()):
    """A chrome trace shaped like torch.profiler's CUDA export: per iteration a user_annotation range, a
    cuLaunchKernelEx per kernel (correlation ids), the kernels on the device; a cache flush launched *before*
    iteration 1's range that runs on the device inside it."""
    ev, corr = [], 100
    t = 1000.0
    for i in range(3):
        if i == 1:  # harness-style flush: launched outside the range, executes during it
            ev.append(_ev("cuda_runtime", "cudaLaunchKernel", t - 5, 2, correlation=999, **{"External id": 1}))
            ev.append(_ev("kernel", "flush_buffer_kernel", t + 1, 3.0, correlation=999, stream=7))
        ev.append(_ev("user_annotation", f"mfu::iter::{i}", t, 50, **{"External id": 10 + i}))
        ev.append(_ev("gpu_user_annotation", f"mfu::iter::{i}", t + 1, 48))
        for k, (name, d) in enumerate((("matmul_kernel", 10.5), ("flash_attn_fwd_kernel", 20.25))):
            corr += 1
            ev.append(_ev("cuda_driver", "cuLaunchKernelEx", t + 2 + k, 1, correlation=corr,
                          **{"External id": 10 + i}))
            if corr in drop_corr:
                continue
            ts = 0 if corr in zero_corr else t + 5 + 15 * k
            ev.append(_ev("kernel", name, ts, d, correlation=corr, stream=7, **{"External id": 10 + i}))
        t += 100
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    return str(path)


def test_cuda_kernels_are_attributed_through_the_launch_call_so_a_flush_before_the_range_is_not_counted(tmp_path):
    rows, info = cuda_trace_launches(cuda_trace(tmp_path))
    flush = [r for r in rows if r["name"] == "flush_buffer_kernel"]
    assert flush and flush[0]["iteration"] is None  # runs inside iteration 1 on the device, launched before it
    s = kernels.summarize(rows, 1, 2)
    assert s["sequence"] == ["matmul_kernel", "flash_attn_fwd_kernel"]
    assert s["kernel_time_ns"] == 10500 + 20250 and info["attribution"]["correlation"] == 7
    assert info["lost_by_iter"] == {}


def test_cuda_launches_without_kernel_records_are_detected_per_measured_iteration(tmp_path):
    rows, info = cuda_trace_launches(cuda_trace(tmp_path, drop_corr={106}))  # iteration 2, second kernel
    assert info["lost_by_iter"] == {2: 1}
    assert lost_problems(info, 1, 3) and not lost_problems(info, 3, 3)
    s = kernels.summarize(rows, 1, 2, extra_problems=lost_problems(info, 1, 3))
    assert s["status"] == "incomplete"
    rows, _ = cuda_trace_launches(cuda_trace(tmp_path, zero_corr={105}))  # a zero-timestamp record
    assert kernels.summarize(rows, 1, 2)["status"] == "incomplete"


# ---------------------------------------------------------------------------------------------- CPU trace


def test_cpu_launch_hook_times_each_interpreted_launch_and_top_level_torch_ops(tmp_path):
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs the Triton interpreter (CPU machines)")
    import torch
    import triton
    import triton.language as tl
    from torch.autograd.profiler import profile, record_function

    from mfulib.backends.cpu import install_launch_hook, trace_launches

    @triton.jit
    def double_kernel(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(y_ptr + offs, v * factor.to(tl.float16), mask=offs < n)  # float arg used as fp32 scalar

    install_launch_hook()
    x = torch.randn(256, dtype=torch.float16)
    y = torch.empty_like(x)
    with profile(use_kineto=True, use_cpu=True) as prof:
        for i in range(2):
            with record_function(f"mfu::iter::{i}"):
                double_kernel[(1,)](x, y, 256, 2.0, BLOCK=256)
                z = (y.view(16, 16) @ y.view(16, 16).t()).contiguous()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    assert torch.equal(y, x * 2)
    rows, _ = trace_launches(str(tmp_path / "t.json"))
    per_iter = [[r["name"] for r in rows if r["iteration"] == i] for i in range(2)]
    assert per_iter[0] == per_iter[1] == ["double_kernel", "aten::matmul"]  # views / contiguous-no-copy left out
    assert z.shape == (16, 16)


# ---------------------------------------------------------------------------------------------- peaks, ncu


def test_cuda_peaks_are_dense_datasheet_figures_and_fp32_is_not_tf32():
    h200 = {"backend": "cuda", "name": "NVIDIA H200"}
    bf16, src = peaks.nominal_peak_tflops(h200, "bf16")
    assert bf16 == 989.5 and "sparse tensor figures halved" in src  # 1,979 TFLOPS with sparsity / 2
    fp32, src32 = peaks.nominal_peak_tflops(h200, "float32")
    tf32, _ = peaks.nominal_peak_tflops(h200, "tf32")
    assert (fp32, tf32) == (67.0, 494.5) and "not the TF32 figure" in src32
    assert peaks.nominal_peak_tflops({"backend": "cuda", "name": "NVIDIA H200 NVL"}, "fp16")[0] == 835.5
    assert peaks.nominal_peak_tflops({"backend": "cuda", "name": "NVIDIA A100-SXM4-80GB"}, "fp16")[0] == 312.0
    nom = peaks.nominal_for_identity(h200)
    assert nom["bandwidth_gbps"] == 4800.0 and set(nom["tflops"]) == set(definitions.MATH_MODES)


def test_cpu_has_no_nominal_peak_and_mfu_is_absent_not_zero():
    v, src = peaks.nominal_peak_tflops({"backend": "cpu"}, "float16")
    assert v is None and "no nominal peak" in src
    tflops, mfu, _ = performance.mfu_fields(2e9, 1e6, None)
    assert tflops == pytest.approx(2.0) and mfu is None  # 2 GFLOP in 1 ms = 2 TFLOP/s
    assert performance.mfu_fields(2e9, 0, 100.0) == (None, None, [])


def test_npu_peak_from_the_platform_ini_table_matches_soc_names_exactly():
    v, src = peaks.nominal_peak_tflops({"backend": "npu", "soc_name": "Ascend910B2"}, "float16")
    assert v == pytest.approx(24 * 1800e6 * 8192 / 1e12)  # 353.89 TFLOP/s (docs/sources.md#nominal-peaks-910b)
    assert peaks.nominal_peak_tflops({"backend": "npu", "soc_name": "Ascend910B"}, "float16")[0] is None


def test_ncu_csv_details_page_with_thousands_separators_and_interleaved_output():
    text = "\n".join([
        "==PROF== Connected to process 1234 (/usr/bin/python3.12)",
        "some application output",
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"',
        '"0","1234","python3","127.0.0.1","matmul_kernel","1","7","(128, 1, 1)","(132, 1, 1)","0","9.0",'
        '"Command line profiler metrics","gpu__time_duration.sum","usecond","1,209.34"',
        '"0","1234","python3","127.0.0.1","matmul_kernel","1","7","(128, 1, 1)","(132, 1, 1)","0","9.0",'
        '"Command line profiler metrics","sm__inst_executed_pipe_tensor_op_hmma.sum","inst","2,097,152"',
        "==PROF== Disconnected from process 1234",
        '"1","1234","python3","127.0.0.1","void at::native::vectorized_elementwise_kernel<4, at::native::Fill>'
        '(int, T1, T2)","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics",'
        '"gpu__time_duration.sum","nsecond","2,464"'])
    recs = ncu.parse_ncu_csv(text)
    assert [r["id"] for r in recs] == [0, 1]
    assert ncu.duration_ns(recs[0]) == pytest.approx(1209340.0) and ncu.duration_ns(recs[1]) == 2464.0
    assert recs[0]["metrics"]["sm__inst_executed_pipe_tensor_op_hmma.sum"] == 2097152.0
    assert ncu.short_kernel_name(recs[1]["kernel_name"]) == "vectorized_elementwise_kernel"


def test_ncu_csv_raw_page_with_a_units_row():
    text = ('"ID","Kernel Name","gpu__time_duration.sum","dram__bytes.sum"\n'
            '"","","msecond","byte"\n"0","k1","1.5","1,048,576"\n"1","k2","n/a","0"\n')
    r0, r1 = ncu.parse_ncu_csv(text)
    assert ncu.duration_ns(r0) == 1.5e6 and r0["metrics"]["dram__bytes.sum"] == 1048576.0
    assert ncu.duration_ns(r1) is None


def test_ncu_launches_are_aligned_to_the_collectors_iterations_by_position(repo_root, monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(repo_root, "bench"))
    from ncu_vs_profiler import align

    def rec(name, ns):
        return {"kernel_name": name, "metrics": {"gpu__time_duration.sum": float(ns)},
                "units": {"gpu__time_duration.sum": "nsecond"}}
    seq = ["matmul_kernel", "flash_attn_fwd_kernel", "matmul_kernel"]
    recs = [rec("void at::native::normal_kernel<float>(int)", 5)]  # input creation before the priming call
    for it in range(5):  # priming call + 4 iterations; position p of iteration it lasts 1000 * (p + 1) + it ns
        recs += [rec(n, 1000 * (p + 1) + it) for p, n in enumerate(seq)]
    per_pos = align(recs, seq, n_iters=4, repeats=2)
    assert per_pos == [[1003, 1004], [2003, 2004], [3003, 3004]]
    with pytest.raises(ValueError, match="do not repeat"):
        align(recs[:-1], seq, n_iters=4, repeats=2)


# ------------------------------------------------------------------------------------------------ bad options

def _collect_refuses(tmp_path, says, **kw):
    """collect() with ``kw`` must raise UserError containing ``says`` and leave the old performance.json alone."""
    from mfulib.collect.driver import Options, collect
    from mfulib.core.errors import UserError
    old = tmp_path / "performance.json"
    if not old.exists():
        old.write_text('{"previous": "good result"}')
    opts = dict(op_dir=str(tmp_path), output_dir=str(tmp_path), backend="cpu", progress=False)
    opts.update(kw)
    with pytest.raises(UserError) as err:
        collect(Options(**opts), log=lambda _msg: None)
    assert says in str(err.value)
    assert old.read_text() == '{"previous": "good result"}'


@pytest.mark.parametrize("kw, says", [
    ({"retry": -1}, "--retry -1: must be an integer >= 0"),
    ({"case_timeout_s": 0.0}, "--case-timeout-s 0.0: must be a finite number of seconds > 0"),
    ({"case_timeout_s": float("nan")}, "--case-timeout-s nan"),
    ({"cases": []}, "--cases selects no case"),
    ({"mfu_peak": 0.0}, "--mfu-peak 0.0: must be a finite TFLOP/s figure > 0"),
    ({"flush_cache_mib": -1.0}, "--flush-cache-mib -1.0"),
])
def test_bad_collector_options_are_refused_before_anything_runs(tmp_path, kw, says):
    _collect_refuses(tmp_path, says, **kw)


def test_an_output_or_keep_dir_that_is_a_file_is_refused_with_the_flag_named(tmp_path):
    (tmp_path / "afile").write_text("x")
    _collect_refuses(tmp_path, "--output-dir", output_dir=str(tmp_path / "afile"))
    _collect_refuses(tmp_path, "is a file, not a directory", keep_prof=str(tmp_path / "afile" / "sub"))


def test_a_selection_with_nothing_to_measure_keeps_the_previous_performance_json(tmp_path):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_msprof"))
    import tinyops
    work = pathlib.Path(tinyops.make_workdir(tmp_path))  # case 3 is bf16: the cpu backend skips it
    (work / "performance.json").write_text('{"previous": "good result"}')
    _collect_refuses(work, "no case to measure on cpu", cases=[3])


def test_the_collector_cli_turns_an_empty_case_range_into_exit_2_without_a_traceback(tmp_path):
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "ops_profiling",
                          "msprof_perf_summary.py")
    for cases in ("5-3", ""):
        r = subprocess.run([sys.executable, script, "--backend", "cpu", "--output-dir", str(tmp_path), "--cases",
                            cases], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and r.stderr.startswith("error: --cases") and "Traceback" not in r.stderr


# --------------------------------------------- moved from test_flops_check: MFU above the peak from a measured time

def test_mfu_above_the_peak_from_the_measured_kernel_time_is_an_error():
    # 1e12 FLOPs at 100 TFLOP/s take 10 ms; a kernel measured at 5 ms would be at 200% of the peak
    tflops, mfu, flags = performance.mfu_fields(1e12, 5e6, 100.0)
    assert tflops == pytest.approx(200.0) and mfu == pytest.approx(2.0)
    assert len(flags) == 1 and flags[0].startswith("error:") and "200.0%" in flags[0]
    tflops, mfu, flags = performance.mfu_fields(1e12, 20e6, 100.0)
    assert mfu == pytest.approx(0.5) and flags == []


@pytest.mark.parametrize("doc, says", [
    ([1, 2], "no \"per_case\" list"),
    ({"peak": 5, "per_case": []}, "peak is int 5, not an object"),
    ({"per_case": [3]}, "per_case[0] is int 3"),
])
def test_a_performance_json_of_the_wrong_structure_is_a_user_error_naming_file_and_field(tmp_path, doc, says):
    from mfulib.core.errors import UserError
    path = tmp_path / "performance.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError) as err:
        performance.load_report(str(path))
    assert str(path) in str(err.value) and says in str(err.value)


def test_without_an_ncu_pass_cuda_cases_get_their_compiled_variants_from_cupti(monkeypatch):
    """performance.json ``mma_shapes`` of a timing-only cuda run: the launch configuration CUPTI recorded matched in
    the child's Triton cache (here the sm_90 fixture cache: the zoo flash kernel, 8 warps, 48 KiB)."""
    import os
    from mfulib.backends.cuda import CudaBackend
    from mfulib.collect import assemble
    cache = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "triton_cache")
    monkeypatch.setenv("TRITON_CACHE_DIR", cache)
    recs = assemble._cupti_shapes(CudaBackend(), {"flash_attn_fwd_kernel": (256, 49152)})
    rec = recs["flash_attn_fwd_kernel"]
    assert rec["status"] == "found" and rec["launch_source"] == "cupti" and rec["cache_dir"] == cache
    assert sorted(w["shape"] for w in rec["variants"][0]["wgmma"]) == ["m64n128k16", "m64n64k16"]
    assert assemble._cupti_shapes(CudaBackend(), None) is None


def test_a_cuda_case_records_the_launch_configs_of_its_measured_iterations_only(tmp_path, monkeypatch):
    """run_case_impl keeps each kernel's CUPTI block threads and shared memory from the measured iterations (the
    warm-up launched another config: an autotuner trying one) for ``mma_shapes``; a backend without a documented
    matrix counter (cpu) records none."""
    from mfulib.backends.runner import ChildResult
    from mfulib.collect import run_case
    from mfulib.collect.options import Options
    from mfulib.core.opdir import OpDir

    class FakeCuda:  # test double of the cuda backend's collector side: the rows its trace parser would give
        name, timing_method, markers = "cuda", "cupti", True
        matrix_counter_documented, pmu_in_profile = True, False

        def device_string(self, device_id):
            return "cuda:0"

        def launches(self, attempt_dir, report, n):
            rows = [{"name": "k", "iteration": i, "kind": "kernel", "start_ns": 1000 * (i + 1), "duration_ns": 100,
                     "block": [128 if i == 0 else 256, 1, 1], "shared_memory": 1024 if i == 0 else 49152}
                    for i in range(n)]
            return rows, {"lost_by_iter": {}, "problems": [], "flags": []}

    monkeypatch.setattr(run_case, "run_child", lambda *a, **kw: ChildResult("ok", {"device": {}}))
    opts = Options(warmup=1, repeats=2, retry=0)
    res = run_case.run_case_impl(FakeCuda(), OpDir(str(tmp_path)), 0, "asc", opts, str(tmp_path / "w"))
    assert res["status"] == "ok" and res["launch_configs"] == {"k": (256, 49152)}
    FakeCuda.matrix_counter_documented = False
    res = run_case.run_case_impl(FakeCuda(), OpDir(str(tmp_path)), 0, "asc", opts, str(tmp_path / "w"))
    assert "launch_configs" not in res
