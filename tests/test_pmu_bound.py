"""PMU counters -> bound labels: msprof op_summary rows built from the exact headers of real exports
(docs/sources.md#msprof-pmu: real 910B2 rows, the --aic-metrics group headers), the recorded H200 ncu CSVs of
tests/fixtures/profiles/cuda, and ncu-shaped rows for the cases that recording does not hold (a Hopper GEMM on the
warpgroup MMA pipe, a small-grid attention kernel). Fixture rows here are HAND-MADE unless named "recorded"/"real".
"""
import os

import pytest

from mfulib.report import bound
from mfulib.flops import executed
from mfulib.profiles import msprof
from mfulib.profiles import ncu
from mfulib.profiles import pmu
from mfulib.backends.npu import NpuBackend, merge_group_counters, parse_groups
from mfulib.core.errors import UserError

HERE = os.path.dirname(os.path.abspath(__file__))
CUDA = os.path.join(HERE, "fixtures", "profiles", "cuda")

BASE = ("Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,Task Start Time(us),"
        "Task Duration(us),Task Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,Input Data Types,"
        "Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID")
PIPE = ("aicore_time(us),aic_total_cycles,aic_mac_time(us),aic_mac_ratio,aic_scalar_time(us),aic_scalar_ratio,"
        "aic_mte1_time(us),aic_mte1_ratio,aic_mte2_time(us),aic_mte2_ratio,aic_fixpipe_time(us),aic_fixpipe_ratio,"
        "aic_icache_miss_rate,aiv_time(us),aiv_total_cycles,aiv_vec_time(us),aiv_vec_ratio,aiv_scalar_time(us),"
        "aiv_scalar_ratio,aiv_mte2_time(us),aiv_mte2_ratio,aiv_mte3_time(us),aiv_mte3_ratio,aiv_icache_miss_rate,"
        "cube_utilization(%)")
REAL_ROW = ("0,4294967295,0,1756,main_kernel,main_kernel,dynamic,MIX_AIC,1780676244313289.000\t,87139.380,0,256,512,"
            "NO,N/A,N/A,N/A,N/A,N/A,N/A,0,12.716,532700,0.0,0.0,10.213,0.803,0.031,0.002,0.024,0.002,0.006,0.0,0.037,"
            "79569.043,6666439114,0.189,0.0,79457.736,0.999,0.012,0.0,0.012,0.0,0.0,0.014")  # a real 910B2 row
ARITH = ("aicore_time(us),aic_total_cycles,aic_mac_fp16_ratio,aic_mac_int8_ratio,aic_cube_fops,aiv_time(us),"
         "aiv_total_cycles,aiv_vec_fp32_ratio,aiv_vec_fp16_ratio,aiv_vec_int32_ratio,aiv_vec_misc_ratio,aiv_vector_fops")
MEMORY = ("aicore_time(us),aic_total_cycles,aic_l1_read_bw(GB/s),aic_l1_write_bw(GB/s),aic_main_mem_read_bw(GB/s),"
          "aic_main_mem_write_bw(GB/s),aic_l2_read_bw(GB/s),aic_l2_write_bw(GB/s),aiv_time(us),aiv_total_cycles,"
          "aiv_ub_read_bw(GB/s),aiv_ub_write_bw(GB/s),aiv_main_mem_read_bw(GB/s),aiv_main_mem_write_bw(GB/s),"
          "aiv_l2_read_bw(GB/s),aiv_l2_write_bw(GB/s)")
LEAD = "0,4294967295,{i},2,{name},{name},dynamic,AI_CORE,1780676244313289.000\t,100.000,0,24,0,NO,N/A,N/A,N/A,N/A,N/A,N/A,0"


def _csv(tmp_path, group_header, rows):
    path = tmp_path / "op_summary_20260605161737.csv"
    path.write_text(BASE + "," + group_header + "\n" + "".join(r + "\n" for r in rows))
    return msprof.parse_kernel_csv(str(path))


def _npu(tmp_path, name, **cells):
    """A PipeUtilization row of kernel ``name`` with the given ratios (others 0.0); HAND-MADE values."""
    cols = PIPE.split(",")
    vals = [str(cells.get(c, "0.0")) for c in cols]
    (r,) = _csv(tmp_path, PIPE, [LEAD.format(i=0, name=name) + "," + ",".join(vals)])
    return pmu.from_msprof(r["pmu"], r.get("block_dim"))


def test_the_real_910b2_row_parses_by_column_name_into_canonical_counters_and_is_scalar_latency_bound(tmp_path):
    (r,) = _csv(tmp_path, PIPE, [REAL_ROW])
    c = pmu.from_msprof(r["pmu"], r["block_dim"])
    assert c["aic_mac_ratio"] == 0.0 and c["aic_scalar_ratio"] == 0.803 and c["aiv_scalar_ratio"] == 0.999
    assert c["aicore_time_us"] == 12.716 and c["cube_utilization_pct"] == 0.014 and c["block_dim"] == 256
    b = bound.classify(c, "msprof:PipeUtilization")
    # the busiest pipe is the vector core's scalar unit at 99.9% >= 80%: no data pipe is the wall
    assert (b["label"], b["source"]) == ("latency-bound", "pmu:msprof")
    assert b["note"].startswith("aiv_scalar_ratio = 100%") and "scalar pipe" in b["note"]
    assert b["evidence"]["aiv_scalar_ratio"] == 0.999 and b["evidence"]["block_dim"] == 256


def test_arithmetic_and_memory_groups_give_executed_fops_and_main_memory_bandwidth_and_na_stays_none(tmp_path):
    (a,) = _csv(tmp_path, ARITH, [LEAD.format(i=0, name="mm") + ",50.0,90000,0.91,0.0,8.0e9,50.0,90000,0.1,0.0,0.0,"
                                                                   "0.0,N/A"])
    c = pmu.from_msprof(a["pmu"], a["block_dim"])
    assert c["aic_cube_fops"] == 8.0e9 and c["aic_mac_fp16_ratio"] == 0.91
    assert c.get("aiv_vector_fops") is None  # N/A: never 0
    # read and kept, but not executed FLOPs: no public source defines what aic_cube_fops counts
    assert executed.kernel_flops(c, "msprof") == (None, executed.NPU_WHY)
    (m,) = _csv(tmp_path, MEMORY, [LEAD.format(i=0, name="mm") + ",50.0,90000,10,10,600.5,200.0,N/A,N/A,50.0,90000,"
                                                                    "5,5,300.0,100.0,N/A,N/A"])
    c = pmu.from_msprof(m["pmu"], m["block_dim"])
    assert c["aic_main_mem_read_bw_gbps"] == 600.5 and c.get("aic_l2_read_bw_gbps") is None
    assert c["main_mem_bw_gbps"] == pytest.approx(600.5 + 200.0 + 300.0 + 100.0)


@pytest.mark.parametrize("cells, label, note", [
    ({"aic_mac_ratio": 0.91, "aic_mte2_ratio": 0.4}, "cube-bound", "aic_mac_ratio = 91%"),
    ({"aic_mac_ratio": 0.2, "aiv_mte2_ratio": 0.85}, "memory-bound", "aiv_mte2_ratio = 85%"),
    ({"aiv_vec_ratio": 0.82, "aiv_mte3_ratio": 0.5}, "vector-bound", "aiv_vec_ratio = 82%"),
    ({"aic_mac_ratio": 0.3, "aiv_vec_ratio": 0.5}, "latency-bound", "busiest aiv_vec_ratio = 50%"),
    ({"aic_mac_ratio": 0.795}, "latency-bound", "busiest aic_mac_ratio = 80%"),  # 0.795 < 0.8
])
def test_msprof_pipe_ratios_classify_with_the_msprof_analyze_80_percent_rule(tmp_path, cells, label, note):
    """``note``: the counter that decided and its value, the key phrase of the bound's note."""
    b = bound.classify(_npu(tmp_path, "k", **cells), "msprof")
    assert b["label"] == label and note in b["note"]


def test_the_recorded_h200_ncu_details_page_is_memory_bound_on_chip_as_ncu_itself_says():
    recs = ncu.parse_ncu_csv(open(os.path.join(CUDA, "ncu_details.csv")).read())
    bmm = pmu.from_ncu_record(recs[0])
    assert recs[0]["kernel_name"] == "bmm_tile_kernel"
    # recorded: Compute (SM) Throughput 15.65 %, Memory Throughput 84.91 % (L1/TEX 88.69 %), DRAM 8.21 %
    assert (bmm["sm_throughput_pct"], bmm["memory_throughput_pct"], bmm["dram_throughput_pct"]) == (15.65, 84.91, 8.21)
    assert bmm["duration_ns"] == 226944.0
    assert (bmm["grid_size"], bmm["block_size"]) == (512.0, 256.0)  # from the "(64, 8, 1)" / "(256, 1, 1)" columns
    b = bound.classify(bmm, "ncu")
    assert b["label"] == "memory-bound"
    assert "SM 16%" in b["note"] and "memory 85%" in b["note"] and "DRAM only 8%" in b["note"]
    fill = bound.classify(pmu.from_ncu_record(recs[1]), "ncu")  # at::FillFunctor: DRAM 84.6 % - the flush kernel
    assert fill["label"] == "memory-bound" and "DRAM only" not in fill["note"]


def test_dram_throughput_alone_never_calls_the_recorded_l1_bound_kernel_latency_bound():
    recs = ncu.parse_ncu_csv(open(os.path.join(CUDA, "ncu_raw.csv")).read())
    c = pmu.from_ncu_record(recs[0])  # raw page: sm 15.58 %, dram 8.15 %, no gpu__compute_memory_throughput
    assert c["grid_size"] == 512 and c["block_size"] == 256 and c["waves_per_sm"] == 1.94 and c["sm_count"] == 132
    b = bound.classify(c, "ncu")
    assert b["label"] == "unknown" and "cannot rule out an on-chip memory bound" in b["note"]


NCU_HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
            '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def _ncu_rows(kernel, grid, metrics):
    """ncu --csv details-page rows (the recorded layout) for one launch; HAND-MADE values."""
    lines = [NCU_HEAD]
    for name, (unit, value) in metrics.items():
        lines.append(f'"0","1","python3","127.0.0.1","{kernel}","1","7","(128, 1, 1)","{grid}","0","9.0",'
                     f'"Command line profiler metrics","{name}","{unit}","{value}"')
    (rec,) = ncu.parse_ncu_csv("==PROF== Connected\n" + "\n".join(lines) + "\n")
    return pmu.from_ncu_record(rec)


def test_a_hopper_gemm_on_the_warpgroup_mma_pipe_is_tensor_bound_and_a_small_attention_grid_latency_bound():
    gemm = _ncu_rows("matmul_kernel", "(132, 1, 1)", {
        "gpu__time_duration.sum": ("usecond", "1.25"), "sm__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "86.1"),
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": ("%", "41.0"),
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": ("%", "0"),
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active": ("%", "78.4"),
        "sm__inst_executed_pipe_tensor_op_gmma.sum": ("inst", "1,048,576"),
        "dram__bytes.sum": ("Mbyte", "25.17")})
    assert gemm["duration_ns"] == 1250.0 and gemm["dram_bytes"] == pytest.approx(25.17e6)
    assert gemm["tensor_pipe_pct"] == 78.4 and gemm["tensor_inst_executed"] == 1048576.0
    b = bound.classify(gemm, "ncu")
    assert b["label"] == "tensor-bound" and b["note"].endswith("tensor pipe 78% >= 60%")
    ex, why = executed.kernel_flops(gemm, "ncu", "9.0", "float16")
    assert ex is None and "wgmma" in why  # wgmma N is not in any counter
    attn = _ncu_rows("_attn_fwd", "(16, 1, 1)", {
        "sm__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "21.0"),
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": ("%", "17.5"),
        "launch__waves_per_multiprocessor": ("", "0.12"),
        "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", "11.9")})
    b = bound.classify(attn, "ncu")
    assert b["label"] == "latency-bound"
    assert b["evidence"]["waves_per_sm"] == 0.12
    assert "SM 21%" in b["note"] and "memory 18%" in b["note"]
    assert "small grid: 0.12 waves" in b["note"] and "occupancy 12%" in b["note"]


@pytest.mark.parametrize("sm, mem, tensor, label", [
    (70.0, 55.0, 65.0, "tensor-bound"),  # 60-80 band, gap 15 >= 10: compute side, tensor pipe high
    (70.0, 55.0, 20.0, "vector-bound"),  # same, tensor pipe low: FMA/ALU
    (62.0, 75.0, None, "memory-bound"),  # memory higher by 13 points
    (79.0, 59.0, 61.0, "tensor-bound"),
    (59.9, 59.9, 59.9, "latency-bound"),  # both just below 60
])
def test_the_ncu_bands_follow_the_solbottleneck_thresholds(sm, mem, tensor, label):
    c = {"sm_throughput_pct": sm, "memory_throughput_pct": mem, "tensor_pipe_pct": tensor}
    assert bound.classify(c, "ncu")["label"] == label


def test_mma_sync_instructions_give_executed_flops_and_the_metric_list_is_what_ncu_accepts():
    c = {"tensor_inst_executed": 1000.0, "tensor_inst_executed_gmma": None}
    ex, how = executed.kernel_flops(c, "ncu", "8.0", "float16")
    assert ex == 1000.0 * 4096 and "mma.sync" in how  # m16n8k16: 2 * 16 * 8 * 16 FLOPs per instruction
    assert executed.kernel_flops(c, "ncu", None, "float16")[0] is None  # capability unknown: never guessed
    assert executed.kernel_flops(c, "ncu", "9.0", "float16")[0] is None  # sm_90 without a gmma count: refused
    assert executed.kernel_flops({"tensor_inst_executed": 1.0, "vector_ops": 9.0}, "ncu", "8.0", "float64")[0] is None
    assert len(set(pmu.NCU_METRICS)) == len(pmu.NCU_METRICS) and all("__" in m for m in pmu.NCU_METRICS)
    assert "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed" in pmu.NCU_METRICS
    assert not set(pmu.GMMA_METRICS) & set(pmu.ncu_metrics(8)) and set(pmu.GMMA_METRICS) <= set(pmu.ncu_metrics(9))


def test_raw_counter_names_of_older_files_are_normalised():
    c = pmu.normalise({"sm__throughput.avg.pct_of_peak_sustained_elapsed": 70.0, "aicore_time(us)": 3.0,
                       "aic_mac_ratio": 0.9})
    assert c == {"sm_throughput_pct": 70.0, "aicore_time_us": 3.0, "aic_mac_ratio": 0.9}
    assert pmu.source_of({"k": {"aic_mac_ratio": 0.9}}) == "msprof" and pmu.source_of({"k": {"x": 1}}) is None


def _kb(label, note="k"):
    return {"label": label, "source": "pmu:ncu", "evidence": {"sm_throughput_pct": len(note)}, "note": note}


def test_a_part_takes_the_class_holding_more_than_half_its_time_else_mixed():
    # RESULTS' MHA case 7: GEMMs tensor-bound 600 ns, attention latency-bound 400 ns -> tensor-bound, 60% / 40%
    b = bound.majority_bound([(300.0, _kb("tensor-bound", "gemm1")), (300.0, _kb("tensor-bound", "gemm")),
                              (400.0, _kb("latency-bound", "attn"))])
    assert b["label"] == "tensor-bound" and b["shares"] == {"tensor-bound": 0.6, "latency-bound": 0.4}
    assert b["evidence"] == {"sm_throughput_pct": 5} and "60%" in b["note"] and b["source"] == "pmu:ncu"
    # 45% / 35% / 20%: no class above half -> mixed, shares quoted (not averaged counters)
    m = bound.majority_bound([(45.0, _kb("tensor-bound")), (35.0, _kb("memory-bound")), (20.0, _kb("latency-bound"))])
    assert m["label"] == "mixed" and m["evidence"] == {}
    assert m["shares"] == pytest.approx({"tensor-bound": 0.45, "memory-bound": 0.35, "latency-bound": 0.2})
    assert "tensor-bound 45%, memory-bound 35%, latency-bound 20%" in m["note"]
    # exactly half is not more than half; kernels without time count for nothing
    assert bound.majority_bound([(50.0, _kb("tensor-bound")), (50.0, _kb("memory-bound"))])["label"] == "mixed"
    assert bound.majority_bound([(0.0, _kb("tensor-bound")), (10.0, _kb("memory-bound"))])["label"] == "memory-bound"
    assert bound.majority_bound([(0.0, _kb("tensor-bound"))])["label"] == "unknown"


def test_the_fallback_never_says_compute_bound_far_below_the_roof():
    # the misreading guarded against: fp32 fell as far as the peak, MFU@ach 4% -> not compute-bound
    b = bound.fallback_bound(0.27, 0.271, 0.04)
    assert b["label"] == "unknown" and b["source"] == "fallback:fp32-vs-fp16" and "far below" in b["note"]
    assert bound.fallback_bound(0.27, 0.271, 0.61, "cube")["label"] == "cube-bound"
    assert bound.fallback_bound(0.84, 0.271, 0.9)["label"] == "unknown"  # the unit waits


def test_aic_metrics_lists_run_one_msprof_child_per_group_and_merge_counters_by_kernel(tmp_path):
    assert parse_groups("PipeUtilization, Memory,PipeUtilization") == ("PipeUtilization", "Memory")
    with pytest.raises(UserError, match="'Bogus': choose from"):
        parse_groups("PipeUtilization,Bogus")
    be = NpuBackend(aic_metrics="PipeUtilization,ArithmeticUtilization")
    cmd = be.command(["python3", "runner.py", "--spec", "s.json"], str(tmp_path), {})
    assert cmd[:2] == ["sh", "-c"]
    first, second = cmd[2].split(" && ")
    assert f"--output={tmp_path}/msprof " in first and "--aic-metrics=PipeUtilization" in first
    assert f"--output={tmp_path}/msprof_ArithmeticUtilization " in second and first.endswith("--spec s.json")
    assert NpuBackend().command(["x"], str(tmp_path), {})[-1] == "x"  # one group: msprof itself, no shell
    rows = [{"name": "mm", "iteration": 0, "pmu": {"aic_mac_ratio": 0.9}}, {"name": "add", "iteration": 0, "pmu": {}}]
    extra = [{"name": "mm", "iteration": 0, "pmu": {"aic_cube_fops": 4.0, "aic_mac_ratio": 0.1}},
             {"name": "mm", "iteration": 1, "pmu": {"aic_cube_fops": 6.0}},
             {"name": "mm", "iteration": None, "pmu": {"aic_cube_fops": 100.0}}]  # priming call: not counted
    assert merge_group_counters(rows, extra) == 1
    assert rows[0]["pmu"] == {"aic_mac_ratio": 0.9, "aic_cube_fops": 5.0} and rows[1]["pmu"] == {}


@pytest.mark.e2e
def test_the_msprof_double_writes_test_values_per_group_and_the_collector_merges_them(tmp_path, monkeypatch):
    """End to end through the msprof TEST DOUBLE: the values below are test inputs (FAKE_MSPROF_PMU_VALUES), the
    time columns the double derives from the measured CPU launch; nothing here is hardware output."""
    import json
    from test_msprof_fake_end_to_end import _apply, make_fake_cann, run_npu
    import tinyops
    _apply(monkeypatch, make_fake_cann(tmp_path))
    monkeypatch.setenv("FAKE_MSPROF_PMU", "derived")
    monkeypatch.setenv("FAKE_MSPROF_PMU_VALUES", json.dumps({
        "scale_kernel": {"aiv_vec_ratio": 0.85, "aiv_vector_fops": 4096},
        "add_one_kernel": {"aiv_mte2_ratio": 0.9, "aiv_vector_fops": 1024}}))
    work = tinyops.make_workdir(tmp_path)
    rep = run_npu(work, aic_metrics="PipeUtilization,ArithmeticUtilization")
    (c,) = rep["per_case"]
    assert c["asc_error"] is None and rep["aic_metrics"] == "PipeUtilization,ArithmeticUtilization"
    assert c["pmu_source"] == "msprof:PipeUtilization+ArithmeticUtilization" and c["pmu_unavailable"] is None
    scale, add = c["pmu"]["scale_kernel"], c["pmu"]["add_one_kernel"]
    assert scale["aiv_vec_ratio"] == 0.85 and scale["aiv_vector_fops"] == 4096  # from the second group's run
    assert add["aiv_mte2_ratio"] == 0.9 and add["aiv_vector_fops"] == 1024
    k = {x["name"]: x for x in c["kernels"]}
    assert scale["aiv_time_us"] * 1e3 == pytest.approx(k["scale_kernel"]["mean_ns"], rel=0.02)  # derived from it
    assert bound.classify(scale, c["pmu_source"])["label"] == "vector-bound"
    assert bound.classify(add, c["pmu_source"])["label"] == "memory-bound"
