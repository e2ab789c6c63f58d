"""--from-prof on foreign profiles: iterations from the profile's own ranges, harness flushes only by evidence,
autotuned and cut first iterations (issue cases a-f).

msprof inputs are built with test_from_prof's builders from the exact headers of real exports (docs/sources.md
#msprof-csv). The chrome traces are SYNTHETIC STAND-INS in torch.profiler's export_chrome_trace event layout
(cpu_op / user_annotation ranges on the host, cuda_runtime cudaLaunchKernel and kernel events linked by
correlation, kernel pid = device), not recordings. Every expected number is worked out by hand from the durations.
"""
import json
import os

import pytest

from mfulib.collect import from_prof as profiles
from mfulib.collect.from_prof.command import _own_kernels
from mfulib.core.errors import UserError
from mfulib.core.opdir import OpDir
from test_from_prof import MIB, MM, iterations_rows, run_from_prof, tinyops, write_prof

FILL_CUDA = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, "
             "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<int>, at::detail::Array<char*, 1>)")


class Trace:
    """A torch.profiler-style chrome trace built launch by launch (SYNTHETIC STAND-IN, see the module docstring)."""

    def __init__(self):
        self.ev, self.t, self.corr = [], 1_000_000.0, 1

    def launch(self, name, dur_us, block=128, host_op=None, nbytes=None, device=0, stream=7, record=True, gap=8.0,
               host_ts=None, types=("int", "Scalar")):
        t = self.t if host_ts is None else host_ts
        if host_op:
            args = {"External id": self.corr}
            if nbytes is not None:  # record_shapes: the first input holds nbytes of 4-byte elements
                args.update({"Input Dims": [[nbytes // 4]] + [[]] * (len(types) - 1), "Input type": list(types)})
            self.ev.append({"ph": "X", "cat": "cpu_op", "name": host_op, "ts": t - 1, "dur": 6, "pid": 1, "tid": 1,
                            "args": args})
        self.ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t, "dur": 4, "pid": 1,
                        "tid": 1, "args": {"correlation": self.corr, "External id": self.corr}})
        if record:
            self.ev.append({"ph": "X", "cat": "kernel", "name": name, "ts": t + 5, "dur": dur_us, "pid": device,
                            "tid": stream, "args": {"correlation": self.corr, "External id": self.corr,
                                                    "grid": [64, 1, 1], "block": [block, 1, 1],
                                                    "registers per thread": 32, "shared memory": 0, "stream": stream}})
        self.corr += 1
        if host_ts is None:
            self.t += dur_us + gap

    def range(self, name, t0, cat="user_annotation"):
        self.ev.append({"ph": "X", "cat": cat, "name": name, "ts": t0 - 2, "dur": self.t - t0 + 1, "pid": 1,
                        "tid": 1})

    def write(self, path, device="NVIDIA H200"):
        doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": device, "totalGlobalMem": 150754820096,
                                                         "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
               "traceEvents": self.ev}
        with open(path, "w") as f:
            json.dump(doc, f)
        return str(path)


def iterations(trace, n, body, name="iter"):
    """``n`` iterations, each a range ``name.format(i=i)`` around ``body(trace, i)``."""
    for i in range(n):
        t0 = trace.t
        body(trace, i)
        trace.range(name.format(i=i), t0)
        trace.t += 100.0


def case(rep):
    (c,) = rep["per_case"]
    return c


# ------------------------------------------------------------------------------------------- item 1: iterations


def test_record_function_ranges_delimit_iterations_and_are_named(tmp_path):
    tr = Trace()
    iterations(tr, 4, lambda t, i: (t.launch("bmm_tile_kernel", 40.0), t.launch("add_bias_kernel", 5.0)),
               name="step_{i}")
    c = case(run_from_prof(tmp_path, tr.write(tmp_path / "t.json")))
    assert c["kernel_time_ns"] == 45000.0 and len(c["iter_kernel_time_ns"]) == 4
    assert c["from_profile"]["asc"]["iterations_from"] == "range:step#"
    assert c["flags"][0] == "iterations from: range:step#"
    assert any("record_function 'step#'" in f and "4 instance(s)" in f for f in c["flags"])


def test_profiler_step_ranges_win_over_user_ranges_and_the_sequence(tmp_path):
    # the kernel sequence alone would give period 1 (one kernel repeated); the steps say 2 launches per iteration
    tr = Trace()
    iterations(tr, 3, lambda t, i: (t.launch("k", 10.0), t.launch("k", 10.0)), name="ProfilerStep#{i}")
    c = case(run_from_prof(tmp_path, tr.write(tmp_path / "t.json")))
    assert c["from_profile"]["asc"]["iterations_from"] == "profiler_step"
    assert c["launches_per_iter"] == 2 and c["kernel_time_ns"] == 20000.0 and len(c["iter_kernel_time_ns"]) == 3


def test_nested_ranges_take_the_finest_that_covers_all_kernels_and_range_picks_another(tmp_path):
    tr = Trace()
    t_all = tr.t

    def body(t, i):
        t0 = t.t
        t.launch("bmm_tile_kernel", 40.0)
        t.range("matmul", t0)  # an inner range around one kernel of each iteration
        t.launch("add_bias_kernel", 5.0)
    iterations(tr, 4, body, name="iter")
    tr.range("benchmark", t_all)  # one range around everything: splits nothing
    path = tr.write(tmp_path / "t.json")
    c = case(run_from_prof(tmp_path / "a", path))
    assert c["from_profile"]["asc"]["iterations_from"] == "range:iter"
    assert c["kernel_time_ns"] == 45000.0
    assert any("other ranges holding kernels: record_function 'matmul'" in f and "--range NAME" in f
               for f in c["flags"])
    c = case(run_from_prof(tmp_path / "b", path, range_name="matmul"))
    assert c["from_profile"]["asc"]["iterations_from"] == "range:matmul" and c["kernel_time_ns"] == 40000.0
    assert c["launches_outside_iterations"] == 4  # the bias adds lie outside every 'matmul' range
    with pytest.raises(UserError, match="--range nosuch.*record_function 'iter'"):
        run_from_prof(tmp_path / "c", path, range_name="nosuch")


def test_a_multi_device_trace_reads_the_device_with_the_operators_kernels_or_the_one_given(tmp_path):
    tr = Trace()

    def body(t, i):
        t.launch("scale_kernel", 40.0, device=0)
        t.launch("add_one_kernel", 10.0, device=0)
        t.launch("nccl_allreduce_kernel", 70.0, device=1)
    iterations(tr, 3, body)
    path = tr.write(tmp_path / "t.json")
    work = tinyops.make_workdir(tmp_path)  # model_new.py: scale_kernel, add_one_kernel
    rep = run_from_prof(tmp_path / "a", path, op_dir=work, cases=[1])
    c = case(rep)
    assert c["kernel_time_ns"] == 50000.0 and c["from_profile"]["asc"]["device"] == 0
    assert c["from_profile"]["asc"]["device_chosen_by"] == "the implementation's kernels"
    assert any("kernels of 2 devices" in f and "device 0 is read" in f for f in c["flags"])
    c = case(run_from_prof(tmp_path / "b", path, device=1))
    assert c["kernel_time_ns"] == 70000.0 and c["sequence"] == ["nccl_allreduce_kernel"]
    c = case(run_from_prof(tmp_path / "c", path, device=5))
    assert c["kernel_time_ns"] is None and "--device 5" in c["asc_error"]


def test_kernels_overlapping_on_two_streams_are_noted(tmp_path):
    tr = Trace()

    def body(t, i):
        t0 = t.t
        t.launch("gemm_a", 40.0, stream=7, host_ts=t0)
        t.launch("gemm_b", 30.0, stream=8, host_ts=t0 + 10)  # runs 10..40 us while gemm_a runs 0..40 us
        t.t = t0 + 60
    iterations(tr, 3, body)
    c = case(run_from_prof(tmp_path, tr.write(tmp_path / "t.json")))
    assert c["kernel_time_ns"] == 70000.0  # durations summed, as always
    assert any("multi-stream overlap: in 3 of 3" in f and "up to 30.0 us" in f for f in c["flags"])


def test_kernel_details_step_id_delimits_npu_iterations(tmp_path):
    d = tmp_path / "host_1_20260605161708478_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    d.mkdir(parents=True)
    header = "Step Id,Device_id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim"
    lines, t = [], 1780676244313289.0
    for step in (4, 5, 6):
        for _ in range(2):  # the same kernel twice per step: a period of 1 to the sequence heuristic
            lines.append(f'{step},0,mm_kernel,mm_kernel,AI_CORE,"{t:.3f}\t",100.000,0,24')
            t += 102.0
    (d / "kernel_details.csv").write_text(header + "\n" + "\n".join(lines) + "\n")
    c = case(run_from_prof(tmp_path / "o", tmp_path))
    assert c["from_profile"]["asc"]["iterations_from"] == "profiler_step"
    assert c["launches_per_iter"] == 2 and c["kernel_time_ns"] == 200000.0 and len(c["iter_kernel_time_ns"]) == 3


# ------------------------------------------------------------------------------------------- item 2: flushes


def test_a_triton_kernel_named_reduce_sum_keeps_every_launch(tmp_path):
    """(a): the operator's own reduce_sum_kernel over 256 MiB at the tail of each iteration is no harness flush."""
    own = ("reduce_sum_kernel", "reduce_sum_kernel", 150.0, {"in_shape": "67108864", "in_dtype": "FLOAT"})
    c = case(run_from_prof(tmp_path / "n", write_prof(tmp_path / "p", iterations_rows([MM, own], 4))))
    assert c["kernel_time_ns"] == 250000.0 and c["sequence"] == ["matmul_kernel", "reduce_sum_kernel"]
    assert c["harness_launches_dropped"] == 0 and len(c["iter_kernel_time_ns"]) == 4
    tr = Trace()  # the same on CUDA, no shapes: 150 us x 4.8 TB/s would be "above the L2" by the upper bound
    iterations(tr, 4, lambda t, i: (t.launch("matmul_kernel", 100.0), t.launch("reduce_sum_kernel", 150.0)))
    c = case(run_from_prof(tmp_path / "c", tr.write(tmp_path / "t.json")))
    assert c["kernel_time_ns"] == 250000.0 and c["harness_launches_dropped"] == 0


def test_an_operator_with_its_own_fill_and_sum_reads_its_whole_time(tmp_path):
    """(b): fill 40 + matmul 100 + sum 50 = 190 us; the name rule gave 100 us (MFU 1.9x high)."""
    tr = Trace()
    iterations(tr, 4, lambda t, i: (t.launch("fill_kernel", 40.0), t.launch("matmul_kernel", 100.0),
                                    t.launch("sum_kernel", 50.0)))
    c = case(run_from_prof(tmp_path / "a", tr.write(tmp_path / "t.json")))
    assert c["kernel_time_ns"] == 190000.0 and c["harness_launches_dropped"] == 0
    tr = Trace()  # torch's own zero_ of a 256 MiB buffer in the middle of an iteration is the operator's too
    iterations(tr, 4, lambda t, i: (t.launch("matmul_kernel", 100.0),
                                    t.launch(FILL_CUDA, 40.0, host_op="aten::zero_", nbytes=256 * MIB),
                                    t.launch("sum_kernel", 50.0)))
    c = case(run_from_prof(tmp_path / "b", tr.write(tmp_path / "t2.json")))
    assert c["kernel_time_ns"] == 190000.0 and c["harness_launches_dropped"] == 0


FILL_FLOAT = FILL_CUDA.replace("FillFunctor<int>", "FillFunctor<float>")
# CAST_HALF and SUM_FLOAT: torch's CUDA kernels as the H200 recording own_fill_sum_ranges.json.gz names them
# (tests/fixtures/profiles/cuda); COPY: a stand-in for torch's direct_copy_kernel_cuda (its type read from the host op)
CAST_HALF = ("void at::native::vectorized_elementwise_kernel<8, at::native::float16_copy_kernel_cuda(at::TensorIterator"
             "Base&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::float16_copy_kernel_cuda(at::Tensor"
             "IteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul>)")
SUM_FLOAT = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::"
             "native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, uns"
             "igned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_"
             "functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, "
             "float, 4, 4>)")
COPY = "void at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>"


@pytest.mark.parametrize("what, head, tail, expected_ns, dropped, why", [
    # torch's fill_ of a float buffer at the head: not do_bench's torch.int cache - the operator's 60 + 100 us
    ("fill float", [(FILL_FLOAT, 60.0, "aten::fill_", ("float", "Scalar"))], [], 160000.0, 0, "fills a float buffer"),
    # the type from the host op alone (a kernel name cut before its template argument)
    ("fill float, host type", [(FILL_FLOAT[:60], 60.0, "aten::fill_", ("float", "Scalar"))], [], 160000.0, 0,
     "fills a float buffer"),
    ("fill int", [(FILL_CUDA, 60.0, "aten::zero_", ("int",))], [], 100000.0, 4, None),
    # .to(float16) then a sum of the float buffer at the tail (the recorded own_fill_sum case): 100 + 95 + 73 us
    ("cast half + sum", [], [(CAST_HALF, 95.0, "aten::copy_", ("c10::Half", "float", "Scalar")),
                             (SUM_FLOAT, 73.0, "aten::sum", ("float", "ScalarList", "Scalar", ""))], 268000.0, 0,
     "the cast writes c10::Half"),
    # buffer.float() of an int buffer, then buffer.sum() of what it wrote: harness, 100 us left
    ("float() + sum", [], [(COPY, 95.0, "aten::copy_", ("float", "int", "Scalar")),
                           (SUM_FLOAT, 73.0, "aten::sum", ("float", "ScalarList", "Scalar", ""))], 100000.0, 8, None),
])
def test_cuda_element_types_tell_a_harness_flush_from_the_operators_own(tmp_path, what, head, tail, expected_ns,
                                                                       dropped, why):
    """A 256 MiB signature at the head / tail of each of 4 iterations around a 100 us matmul on an H200 (L2 60 MiB):
    excluded only when its types are do_bench's (torch.int cache; buffer.float() writes float32, buffer.sum()
    reads it)."""
    tr = Trace()

    def body(t, i):
        for name, dur, op, types in head:
            t.launch(name, dur, host_op=op, nbytes=256 * MIB, types=types)
        t.launch("matmul_kernel", 100.0)
        for name, dur, op, types in tail:
            t.launch(name, dur, host_op=op, nbytes=256 * MIB, types=types)
    iterations(tr, 4, body)
    c = case(run_from_prof(tmp_path / "o", tr.write(tmp_path / "t.json")))
    assert c["kernel_time_ns"] == pytest.approx(expected_ns) and c["harness_launches_dropped"] == dropped
    kept = [f for f in c["flags"] if "the operator's own work, kept in its time" in f]
    assert (len(kept) == 1 and why in kept[0]) if why else not kept


def test_an_npu_output_cast_of_256_mib_is_the_operators(tmp_path):
    """(c): a Cast at the tail of each iteration, alone (no sum of the buffer after it): output work."""
    cast = ("aclnnCast_CastAiCore_Cast", "Cast", 180.0, {"in_shape": "134217728", "in_dtype": "FLOAT16"})
    c = case(run_from_prof(tmp_path / "o", write_prof(tmp_path / "p", iterations_rows([MM, cast], 3))))
    assert c["kernel_time_ns"] == 280000.0 and c["sequence"] == ["matmul_kernel", "aclnnCast_CastAiCore_Cast"]


def test_a_harness_float_sum_over_256_mib_without_device_facts_gives_the_operators_time(tmp_path):
    """(d): Cast + ReduceSum of a 256 MiB buffer ahead of each 41.15 us iteration; no info.json (no L2): the
    buffer's shape decides, 41 150 ns, not 226 290 ns."""
    cast = ("aclnnCast_CastAiCore_Cast", "Cast", 92.57, {"in_shape": "67108864", "in_dtype": "FLOAT"})
    rsum = ("aclnnReduceSum_ReduceSumAiCore_ReduceSum", "ReduceSum", 92.57,
            {"in_shape": "67108864", "in_dtype": "FLOAT"})
    op = ("my_op_kernel", "my_op_kernel", 41.15, {})
    prof = write_prof(tmp_path / "p", iterations_rows([cast, rsum, op], 5))
    os.remove(os.path.join(prof, "device_0", "info.json.0"))
    c = case(run_from_prof(tmp_path / "a", prof, warmup=1, repeats=4))
    assert c["kernel_time_ns"] == 41150.0 and c["sequence"] == ["my_op_kernel"]
    assert c["harness_launches_dropped"] == 10
    (fl,) = [e for e in c["from_profile"]["asc"]["excluded"] if e["what"] == "l2_flush"]
    assert fl["time_ns"] == pytest.approx(5 * 185140.0)
    assert any("buffer.float(); buffer.sum()" in f and "256 MiB (device L2 unknown)" in f for f in c["flags"])
    keep = case(run_from_prof(tmp_path / "k", prof, warmup=1, repeats=4, l2_flush="keep"))
    assert keep["kernel_time_ns"] == 226290.0


def test_the_implementations_kernels_are_never_flush_and_are_read_from_model_new(tmp_path):
    # a Triton kernel named zeros_like at the head of each iteration has the OP Type of torch_npu's zero_
    zl = ("zeros_like", "zeros_like", 300.0, {"in_shape": "67108864", "in_dtype": "FLOAT"})
    prof = write_prof(tmp_path / "p", iterations_rows([zl, MM], 3))
    loaded = profiles.load("msprof", prof)
    assert profiles.analyse(loaded)["summary"]["kernel_time_ns"] == 100000.0  # no --op-dir: a harness signature
    loaded = profiles.load("msprof", prof)
    res = profiles.analyse(loaded, own_kernels=("zeros_like",))
    assert res["summary"]["kernel_time_ns"] == 400000.0 and res["summary"]["harness_launches_dropped"] == 0
    work = tinyops.make_workdir(tmp_path)
    assert "scale_kernel" in _own_kernels(OpDir(work)) and "add_one_kernel" in _own_kernels(OpDir(work))


def test_inside_this_tools_own_ranges_no_name_rule_applies(tmp_path):
    from test_from_prof import SEQ, chrome_trace
    tr = chrome_trace(tmp_path / "own.json", 4, SEQ, ranges=True, flush_bytes=256 * MIB)
    c = case(run_from_prof(tmp_path / "o", tr, warmup=1, repeats=3))
    assert c["from_profile"]["asc"]["iterations_from"] == "mfu_iter"
    assert c["kernel_time_ns"] == 345000.0 and c["harness_launches_dropped"] == 0  # 300 + 40 + 5: the operator's


def test_a_flush_signature_missing_from_some_iterations_is_kept(tmp_path):
    tr = Trace()
    iterations(tr, 4, lambda t, i: ((t.launch(FILL_CUDA, 300.0, host_op="aten::zero_", nbytes=256 * MIB)
                                     if i % 2 else None), t.launch("matmul_kernel", 100.0)))
    c = case(run_from_prof(tmp_path / "o", tr.write(tmp_path / "t.json")))
    assert c["harness_launches_dropped"] == 0 and not any("L2-flush" in f for f in c["flags"])


# ------------------------------------------------------------------------------------------- items 3-4


def test_an_autotuned_first_record_function_iteration_is_left_out_and_reported(tmp_path):
    """(e): iteration 0 holds 40 tuning launches in 8 configs with a do_bench zero_ before each; 3 steady ones hold
    one 183.584 us launch: 183 584 ns over 3 iterations."""
    tr = Trace()

    def body(t, i):
        if i == 0:
            for j in range(40):
                t.launch(FILL_CUDA, 55.0, host_op="aten::zero_", nbytes=256 * MIB)
                t.launch("matmul_kernel", 150.0 + j, block=32 * (1 + j % 8))
        t.launch("matmul_kernel", 183.584, block=128)
    iterations(tr, 4, body, name="bench")
    c = case(run_from_prof(tmp_path / "o", tr.write(tmp_path / "t.json")))
    assert c["kernel_time_ns"] == 183584.0 and len(c["iter_kernel_time_ns"]) == 3
    assert c["from_profile"]["asc"]["iterations_from"] == "range:bench"
    (flag,) = [f for f in c["flags"] if "first call autotuned" in f]
    assert "41 launches" in flag and "+ 40 flush kernels" in flag
    (tuned,) = [e for e in c["from_profile"]["asc"]["excluded"] if e["what"] == "autotune"]
    assert tuned["launches"] == 80 + 1
    assert tuned["time_ns"] == pytest.approx((40 * 55.0 + sum(150.0 + j for j in range(40)) + 183.584) * 1e3)


def test_a_profile_cut_at_its_start_measures_the_complete_iterations_and_names_the_cut_one(tmp_path):
    """(f): the first iteration's first kernel record is missing (its host launch is there): not "buffer not
    drained" - iteration 0 is named, left out, and a longer warm-up advised."""
    for ranged in (True, False):
        tr = Trace()
        iterations(tr, 5, lambda t, i: (t.launch("bmm_tile_kernel", 40.0, record=i > 0),
                                        t.launch("add_bias_kernel", 5.0)), name="iter" if ranged else "x")
        if not ranged:
            tr.ev = [e for e in tr.ev if e["cat"] != "user_annotation"]
        c = case(run_from_prof(tmp_path / f"o{ranged}", tr.write(tmp_path / f"t{ranged}.json")))
        assert c["asc_error"] is None and c["kernel_time_ns"] == 45000.0 and len(c["iter_kernel_time_ns"]) == 4
        text = " ".join(c["flags"])
        assert "profile cut at its start" in text and "longer warm-up" in text and "not drained" not in text
        if ranged:
            assert "iteration 0 has 1 of 2 launches" in text
            (cut,) = [e for e in c["from_profile"]["asc"]["excluded"] if e["what"] == "cut_iteration"]
            assert cut["launches"] == 1 and cut["time_ns"] == 5000.0
    # records lost at the tail are still a profiler buffer not drained
    tr = Trace()
    iterations(tr, 5, lambda t, i: (t.launch("bmm_tile_kernel", 40.0), t.launch("add_bias_kernel", 5.0,
                                                                               record=i < 4)))
    c = case(run_from_prof(tmp_path / "tail", tr.write(tmp_path / "tail.json")))
    assert c["kernel_time_ns"] is None and "buffer not drained" in c["asc_error"]


def test_an_msprof_profile_cut_at_its_start_names_the_cut_iteration(tmp_path):
    add = ("add_kernel", "add_kernel", 20.0, {"ttype": "AI_VECTOR_CORE"})
    prof = write_prof(tmp_path / "p", iterations_rows([MM, add], 4, head=[add]))
    c = case(run_from_prof(tmp_path / "o", prof, warmup=1, repeats=4))
    assert c["kernel_time_ns"] == 120000.0
    (flag,) = [f for f in c["flags"] if "cut at its start" in f]
    assert "iteration 0 (the first iteration in the window) has 1 of 2 launches" in flag and "warm-up" in flag


def test_the_cli_passes_range_and_device_with_from_prof(tmp_path, capsys):
    import importlib.util
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "ops_profiling",
                          "msprof_perf_summary.py")
    spec = importlib.util.spec_from_file_location("msprof_perf_summary_cli", script)
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    tr = Trace()

    def body(t, i):
        t0 = t.t
        t.launch("bmm_tile_kernel", 40.0, device=1)
        t.range("matmul", t0)
        t.launch("add_bias_kernel", 5.0, device=1)
    iterations(tr, 3, body)
    out = tmp_path / "o"
    assert cli.main(["--from-prof", tr.write(tmp_path / "t.json"), "--range", "matmul", "--device", "1",
                     "--output-dir", str(out), "--quiet"]) == 0
    c = case(json.load(open(out / "performance.json")))
    assert c["kernel_time_ns"] == 40000.0 and c["from_profile"]["asc"]["iterations_from"] == "range:matmul"
    assert "iterations from: range:matmul" in capsys.readouterr().out  # said on screen too
