"""msprof / torch_npu CSV parsing (mfulib.profiles.msprof_csv, the one parser; mfulib.profiles.msprof finds the
exports): every header variant and value quirk, read through both cell readers (csv module, pandas C reader).

Fixture rows are copied from real 910B2 CANN 8.3.RC2 files and msprof-analyze test data (docs/sources.md#msprof-csv);
``<TAB>`` there is a literal tab byte here.
"""
import json
import os

import pytest

from mfulib.profiles import msprof
from mfulib.profiles import msprof_csv
from mfulib.core import nominal_peaks as peaks
from mfulib.core.errors import UserError

T = "\t"
PIPE_PMU = ("aicore_time(us),aic_total_cycles,aic_mac_time(us),aic_mac_ratio,aic_scalar_time(us),aic_scalar_ratio,"
            "aic_mte1_time(us),aic_mte1_ratio,aic_mte2_time(us),aic_mte2_ratio,aic_fixpipe_time(us),aic_fixpipe_ratio,"
            "aic_icache_miss_rate,aiv_time(us),aiv_total_cycles,aiv_vec_time(us),aiv_vec_ratio,aiv_scalar_time(us),"
            "aiv_scalar_ratio,aiv_mte2_time(us),aiv_mte2_ratio,aiv_mte3_time(us),aiv_mte3_ratio,aiv_icache_miss_rate,"
            "cube_utilization(%)")
OP_SUMMARY_83 = (
    "Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,Task Start Time(us),Task Duration(us),"
    "Task Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,Input Data Types,Input Formats,"
    "Output Shapes,Output Data Types,Output Formats,Context ID," + PIPE_PMU + "\n"
    f"0,4294967295,0,1756,main_kernel,main_kernel,dynamic,MIX_AIC,1780676244313289.000{T},87139.380,0,256,512,NO,N/A,"
    "N/A,N/A,N/A,N/A,N/A,0,12.716,532700,0.0,0.0,10.213,0.803,0.031,0.002,0.024,0.002,0.006,0.0,0.037,79569.043,"
    "6666439114,0.189,0.0,79457.736,0.999,0.012,0.0,0.012,0.0,0.0,0.014\n"
    f"0,4294967295,1,1756,main_kernel,main_kernel,dynamic,MIX_AIC,1780676244407387.120{T},86808.420,6958.620000,256,"
    "512,NO,N/A,N/A,N/A,N/A,N/A,N/A,0,8.867,371433,0.0,0.0,8.374,0.944,0.031,0.003,0.024,0.003,0.006,0.001,0.0,"
    "79565.613,6666151685,0.189,0.0,79457.727,0.999,0.012,0.0,0.012,0.0,0.0,0.010\n")
TASK_TIME = (
    "Device_id,kernel_name,kernel_type,stream_id,task_id,task_time(us),task_start(us),task_stop(us)\n"
    f"0,N/A,PROFILING_ENABLE,1754,4,0.020,1780676228921483.380{T},1780676228921483.400{T}\n"
    f"0,N/A,TASK_TIMEOUT_SET,1754,5,93.980,1780676228931378.960{T},1780676228931472.940{T}\n"
    f"0,N/A,EVENT_RECORD,1754,6,0.000,1780676228931472.960{T},1780676228931472.960{T}\n"
    f"0,main_kernel,MIX_AIC,1756,0,87141.960,1780676244313287.420{T},1780676244400429.380{T}\n"
    f"0,main_kernel,MIX_AIC,1756,1,86810.080,1780676244407386.260{T},1780676244494196.340{T}\n"
    f"0,N/A,PROFILING_DISABLE,1754,7,0.000,1780676244861088.580{T},1780676244861088.580{T}\n")
KERNEL_DETAILS_2025 = (
    "Step Id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),Duration(us),"
    "Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,Input Data Types,Input Formats,Output Shapes,"
    "Output Data Types,Output Formats,Context ID," + PIPE_PMU + "\n"
    f'19,4294967295,61653,2,aclnnMatmul_MatMulCommon_MatMulV2,MatMulV2,dynamic,AI_CORE,"1736413971558972.912{T}",'
    '185.504,1.087,16,0,NO,"""81920,4096;8192,512""",DT_BF16;DT_BF16,ND;ND,"""4096,512""",DT_BF16,ND,N/A,183.87,'
    "5295467,151.425,0.824,88.03,0.479,119.148,0.648,177.314,0.964,5.736,0.031,0.001,0,0,0,0,0,0,0,0,0,0,0,79.295\n")
KERNEL_DETAILS_2023 = (
    "Step Id,Model ID,Task ID,Stream ID,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),"
    "Block Dim,Mix Block Dim,Input Shapes,Input Data Types,Input Formats,Output Shapes,Output Data Types,"
    "Output Formats,Context ID,aicore_time(us),aic_total_cycles,aic_mac_fp16_ratio,aic_mac_int8_ratio,aic_cube_fops,"
    "aic_vector_fops,aiv_time(us),aiv_total_cycles,aiv_vec_fp32_ratio,aiv_vec_fp16_ratio,aiv_vec_int32_ratio,"
    "aiv_vec_misc_ratio,aiv_cube_fops,aiv_vector_fops\n"
    '1,4294967295,1259,16,ZerosLike46,ZerosLike,AI_VECTOR_CORE,1699529622790614.8,607.98,0,48,0,"""544404480""",'
    'FLOAT16,FORMAT_ND,"""544404480""",FLOAT16,FORMAT_ND,N/A,0,0,0,0,0,0,587.05,52130051,0,0,0.0822,0,0,137176320\n')
INFO_JSON_FIXTURE = {  # msprof-analyze fixture (25 cores, 1850 MHz; docs/sources.md#ascend-cube-peak)
    "DeviceInfo": [{"id": 7, "env_type": 3, "ctrl_cpu_id": "ARMv8_Cortex_A55", "ctrl_cpu_core_num": 1,
                    "ctrl_cpu_endian_little": 1, "ts_cpu_core_num": 0, "ai_cpu_core_num": 6, "ai_core_num": 25,
                    "ai_cpu_core_id": 2, "ai_core_id": 0, "aicpu_occupy_bitmap": 252, "ctrl_cpu": "0",
                    "ai_cpu": "2,3,4,5,6", "aiv_num": 50, "hwts_frequency": "49.999001", "aic_frequency": "1850",
                    "aiv_frequency": "1850"}], "platform_version": "5", "devices": "0", "pid": "1"}
PROF = "PROF_000001_20260605161708478_FRJKORBPFMHQMGLA"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        f.write(text)
    return str(path)


READERS = pytest.mark.parametrize("fast", [False, True], ids=["csv_reader", "pandas_reader"])


@READERS
def test_real_op_summary_row_parses_to_exact_nanoseconds_with_the_trailing_tab_stripped(tmp_path, fast):
    rows = msprof_csv.parse_kernel_csv(write(tmp_path / "op_summary_20260605161737.csv", OP_SUMMARY_83), fast=fast)
    a, b = rows
    assert a["name"] == "main_kernel" and a["op_type"] == "main_kernel" and a["task_type"] == "MIX_AIC"
    assert a["start_ns"] == 1780676244313289000 and b["start_ns"] == 1780676244407387120  # 19 digits: exact
    assert a["duration_ns"] == 87139380 and b["duration_ns"] == 86808420
    assert a["wait_ns"] == 0 and b["wait_ns"] == 6958620  # "0" then the 6-decimal std::to_string form
    assert a["model_id"] == 4294967295 and isinstance(a["model_id"], int)  # UINT32_MAX stays an exact int
    assert (a["block_dim"], a["mix_block_dim"], a["stream_id"], a["task_id"]) == (256, 512, 1756, 0)
    assert a["hf32_eligible"] == "NO" and a["input_shapes"] is None  # N/A -> None
    assert a["pmu"]["aiv_scalar_ratio"] == 0.999 and a["pmu"]["aiv_vec_ratio"] == 0.0  # scalar-bound MIX kernel
    assert a["pmu"]["aic_total_cycles"] == 532700 and a["pmu"]["aiv_total_cycles"] == 6666439114
    assert a["pmu"]["cube_utilization(%)"] == 0.014


def test_float_parsing_would_lose_the_nanoseconds_that_us_to_ns_keeps():
    cell = "1780676244407387.120\t"
    assert msprof_csv.us_to_ns(cell) == 1780676244407387120
    assert int(float(cell) * 1000) != 1780676244407387120  # why the parser does not use float()
    assert msprof_csv.us_to_ns("83095.640625") == 83095641  # msprof-op 6-decimal durations round half up to ns
    assert msprof_csv.us_to_ns("N/A") is None and msprof_csv.us_to_ns("") is None


def test_cann9_block_num_header_maps_to_the_same_columns_as_cann8_block_dim(tmp_path):
    text9 = OP_SUMMARY_83.replace("Block Dim,Mix Block Dim", "Block Num,Mix Block Num")
    r8 = msprof_csv.parse_kernel_csv(write(tmp_path / "a" / "op_summary_1.csv", OP_SUMMARY_83))
    r9 = msprof_csv.parse_kernel_csv(write(tmp_path / "b" / "op_summary_1.csv", text9))
    assert [(r["block_dim"], r["mix_block_dim"]) for r in r9] == [(256, 512), (256, 512)]
    strip = [{k: v for k, v in r.items() if k != "source"} for r in r8]
    assert strip == [{k: v for k, v in r.items() if k != "source"} for r in r9]


def test_column_order_is_never_assumed(tmp_path):
    lines = OP_SUMMARY_83.splitlines()
    cols = [ln.split(",") for ln in lines]
    order = list(reversed(range(len(cols[0]))))
    shuffled = "\n".join(",".join(c[i] for i in order) for c in cols) + "\n"
    a = msprof_csv.parse_kernel_csv(write(tmp_path / "x" / "op_summary_1.csv", OP_SUMMARY_83))
    b = msprof_csv.parse_kernel_csv(write(tmp_path / "y" / "op_summary_1.csv", shuffled))
    assert [(r["name"], r["start_ns"], r["duration_ns"]) for r in a] == [(r["name"], r["start_ns"], r["duration_ns"])
                                                                         for r in b]


def test_task_time_marker_rows_are_dropped_and_durations_come_from_task_time(tmp_path):
    prof = tmp_path / "out" / PROF
    write(prof / "mindstudio_profiler_output" / "task_time_20260605161737.csv", TASK_TIME)
    rows, meta = msprof.load_kernel_rows(tmp_path / "out")
    assert meta["kind"] == "task_time" and meta["marker_rows_dropped"] == 4
    assert [(r["name"], r["duration_ns"], r["start_ns"]) for r in rows] == [
        ("main_kernel", 87141960, 1780676244313287420), ("main_kernel", 86810080, 1780676244407386260)]
    assert rows[0]["stop_ns"] == 1780676244400429380


def test_old_task_time_header_without_device_id_parses(tmp_path):
    text = "\n".join(ln.split(",", 1)[1] for ln in TASK_TIME.splitlines()) + "\n"
    assert text.startswith("kernel_name,kernel_type,stream_id")
    rows = [r for r in msprof_csv.parse_kernel_csv(write(tmp_path / "task_time_1.csv", text))
            if not msprof.is_marker_row(r)]
    assert [r["duration_ns"] for r in rows] == [87141960, 86810080] and rows[0].get("device_id") is None


@READERS
def test_torch_npu_kernel_details_with_quoted_start_and_tripled_quote_shapes(tmp_path, fast, monkeypatch):
    if fast:  # load_kernel_rows reads by size: every file through the pandas reader
        monkeypatch.setattr(msprof_csv, "FAST_PATH_MIN_BYTES", 0)
    pt = tmp_path / "host_1_20250109_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    write(pt, KERNEL_DETAILS_2025)
    rows, meta = msprof.load_kernel_rows(tmp_path)
    (r,) = rows
    assert meta["kind"] == "kernel_details" and meta["timing_column"] == "Duration(us)"
    assert r["name"] == "aclnnMatmul_MatMulCommon_MatMulV2" and r["op_type"] == "MatMulV2"
    assert r["task_type"] == "AI_CORE" and r["step_id"] == 19 and r["mix_block_dim"] == 0
    assert r["start_ns"] == 1736413971558972912 and r["duration_ns"] == 185504 and r["wait_ns"] == 1087
    assert r["input_shapes"] == "81920,4096;8192,512"  # msprof doubled the quotes; csv + strip undo both
    assert msprof_csv.parse_shapes(r["input_shapes"]) == [[81920, 4096], [8192, 512]]
    assert r["input_dtypes"] == "DT_BF16;DT_BF16" and r["pmu"]["aic_mac_ratio"] == 0.824


@READERS
def test_kernel_details_2023_arithmetic_utilization_variant(tmp_path, fast):
    (r,) = msprof_csv.parse_kernel_csv(write(tmp_path / "kernel_details.csv", KERNEL_DETAILS_2023), fast=fast)
    assert r["task_type"] == "AI_VECTOR_CORE" and r["start_ns"] == 1699529622790614800
    assert r["duration_ns"] == 607980 and r["input_formats"] == "FORMAT_ND" and r["input_shapes"] == "544404480"
    assert r["pmu"]["aiv_vector_fops"] == 137176320 and r["pmu"]["aiv_vec_int32_ratio"] == 0.0822


@pytest.mark.parametrize("header", [
    "Device_id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim",   # torch_npu 7.1-7.3
    "Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim",             # <= 7.0.0
    "Device_id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Num",   # 26.x (CANN 9.x)
])
def test_level0_kernel_details_headers_of_every_torch_npu_generation(tmp_path, header):
    vals = {"Device_id": "0", "Name": "triton_poi_fused_add_0", "Type": "triton_poi_fused_add_0",
            "Accelerator Core": "AI_VECTOR_CORE", "Start Time(us)": f'"1736413971558972.912{T}"',
            "Duration(us)": "12.340", "Wait Time(us)": "0", "Block Dim": "40", "Block Num": "40"}
    line = ",".join(vals[h] for h in header.split(","))
    (r,) = msprof_csv.parse_kernel_csv(write(tmp_path / "kernel_details.csv", header + "\n" + line + "\n"))
    assert (r["name"], r["duration_ns"], r["block_dim"], r["start_ns"]) == (
        "triton_poi_fused_add_0", 12340, 40, 1736413971558972912)


def test_old_cann_layout_with_task_start_time_without_unit_is_found_and_parsed(tmp_path):
    text = (OP_SUMMARY_83.replace("Device_id,", "", 1).replace("Task Start Time(us)", "Task Start Time")
            .replace("\n0,4294967295", "\n4294967295"))
    write(tmp_path / PROF / "device_0" / "summary" / "op_summary_0_1_1.csv", text)
    rows, meta = msprof.load_kernel_rows(tmp_path)
    assert meta["kind"] == "old_op_summary"
    assert [(r["start_ns"], r["duration_ns"]) for r in rows] == [(1780676244313289000, 87139380),
                                                                  (1780676244407387120, 86808420)]


@READERS
def test_msprof_op_basic_info_with_trailing_commas_and_na_spellings(tmp_path, fast):
    text = ("Op Name,Op Type,Task Duration(us),Block Dim,Mix Block Dim,Device Id,Pid,Current Freq,Rated Freq,\n"
            "main_kernel_mix_aic,mix,83095.640625,256,512,0,2648560,1800,1800,\n")
    (r,) = msprof_csv.parse_kernel_csv(write(tmp_path / "OpBasicInfo.csv", text), fast=fast)
    assert (r["name"], r["op_type"], r["duration_ns"], r["device_id"]) == ("main_kernel_mix_aic", "mix", 83095641, 0)
    assert r["pmu"] == {"Pid": 2648560, "Current Freq": 1800, "Rated Freq": 1800}
    for na in ("N/A", "NA", "", "-", ' "N/A" '):
        assert msprof_csv.clean(na) is None


@READERS
def test_non_a2_pmu_columns_without_prefix_and_headers_ending_at_context_id(tmp_path, fast):
    base = OP_SUMMARY_83.splitlines()[0].split(",")[:21]
    row = OP_SUMMARY_83.splitlines()[1].split(",")[:21]
    text = ",".join(base + ["total_cycles", "mac_ratio", "vec_ratio"]) + "\n" + ",".join(row + ["1000", "0.5", "NA"])
    (r,) = msprof_csv.parse_kernel_csv(write(tmp_path / "a.csv", text + "\n"), fast=fast)
    assert r["pmu"] == {"total_cycles": 1000, "mac_ratio": 0.5}
    (r,) = msprof_csv.parse_kernel_csv(write(tmp_path / "b.csv", ",".join(base) + "\n" + ",".join(row) + "\n"),
                                       fast=fast)
    assert r["pmu"] == {} and r["duration_ns"] == 87139380  # --ai-core off / sample-based: no PMU columns


@READERS
def test_a_file_without_a_duration_column_is_refused_with_the_file_named(tmp_path, fast):
    path = write(tmp_path / "op_statistic_1.csv", "Device_id,OP Type,Core Type,Count,Total Time(us)\n0,x,AI_CORE,1,2\n")
    with pytest.raises(UserError, match="op_statistic_1.csv: no duration column"):
        msprof_csv.parse_kernel_csv(path, fast=fast)


def test_slices_are_merged_in_slice_order_and_stale_or_partial_exports_are_passed_over(tmp_path):
    out = tmp_path / PROF / "mindstudio_profiler_output"
    header, r0, r1 = OP_SUMMARY_83.splitlines()
    write(out / "op_summary_slice_1_20260605161737.csv", header + "\n" + r1 + "\n")
    write(out / "op_summary_slice_0_20260605161737.csv", header + "\n" + r0 + "\n")
    stale = r0.replace("87139.380", "999999.000")
    write(out / "op_summary_20260605161500.csv", header + "\n" + stale + "\n")          # older export
    write(out / "op_summary_slice_1_20260605161900.csv", header + "\n" + stale + "\n")  # newer, slice 0 missing
    write(out / "op_summary_slice_0_20260605162000.csv", "")                           # newest, empty (in write)
    rows, meta = msprof.load_kernel_rows(tmp_path)
    assert [r["duration_ns"] for r in rows] == [87139380, 86808420]
    assert meta["ts"] == "20260605161737" and [os.path.basename(f) for f in meta["files"]] == [
        "op_summary_slice_0_20260605161737.csv", "op_summary_slice_1_20260605161737.csv"]
    why = " ".join(meta["ignored"])
    assert "20260605162000 incomplete" in why and "20260605161900 incomplete" in why and "161500 is older" in why


def test_the_newest_prof_directory_wins_over_a_stale_one(tmp_path):
    header, r0, _ = OP_SUMMARY_83.splitlines()
    old = "PROF_000001_20250101000000000_AAAAAAAAAAAAAAAA"
    write(tmp_path / old / "mindstudio_profiler_output" / "op_summary_20250101000000.csv",
          header + "\n" + r0.replace("87139.380", "1.000") + "\n")
    write(tmp_path / PROF / "mindstudio_profiler_output" / "op_summary_20260605161737.csv", header + "\n" + r0 + "\n")
    rows, meta = msprof.load_kernel_rows(tmp_path)
    assert meta["prof_dir"].endswith(PROF) and rows[0]["duration_ns"] == 87139380


def test_no_export_at_all_says_how_to_export(tmp_path):
    os.makedirs(tmp_path / PROF / "device_0" / "data")
    with pytest.raises(UserError, match="msprof --export=on"):
        msprof.load_kernel_rows(tmp_path)


def test_info_json_runtime_cores_and_frequency_give_the_msprof_analyze_peak(tmp_path):
    write(tmp_path / PROF / "device_7" / "info.json.7", json.dumps(INFO_JSON_FIXTURE))
    write(tmp_path / PROF / "device_7" / "info.json.7.done", "")
    info = msprof.read_info_json(tmp_path)
    assert (info["ai_core_num"], info["aic_frequency_mhz"], info["aiv_num"]) == (25, 1850.0, 50)
    assert info["info_json_path"] == f"{PROF}/device_7/info.json.7"
    v, src = peaks.nominal_peak_tflops(dict(info, backend="npu"), "bfloat16")
    assert v == pytest.approx(25 * 1850e6 * 8192 / 1e12)  # 378.88 TFLOP/s (docs/sources.md#ascend-cube-peak)
    assert "ai_core_num=25" in src and "8192" in src
    v8, _ = peaks.nominal_peak_tflops(dict(info, backend="npu"), "int8")
    assert v8 == pytest.approx(2 * v)  # 16384 vs 8192 FLOP/cycle


# ---- quirks beyond the real rows, through both cell readers of the one parser

ODD_ROWS = (  # N/A PMU and text cells, 6-decimal half-up ns rounding, a marker row, a short row, leading spaces, a
    # negative wait, an exponent start cell
    f"0,4294967295,2,1756,softmax_kernel,softmax,dynamic,AI_VECTOR_CORE,1780676244500000.0005{T},1.9995,"
    "6958.620500,48,0,NO,N/A,N/A,N/A,N/A,N/A,N/A,0," + ",".join(["N/A"] * 25) + "\n"
    f"0,4294967295,3,1754,N/A,N/A,N/A,PROFILING_ENABLE,1780676244600000.000{T},0.000,-1.5,0,0,N/A,N/A,N/A,N/A,"
    "N/A,N/A,N/A,N/A," + ",".join(["N/A"] * 25) + "\n"
    f"0,4294967295,4,1756, main_kernel ,main_kernel,dynamic,MIX_AIC,1.7806762447e15,5.000\n")


@READERS
def test_odd_rows_keep_exact_ns_half_up_rounding_na_cells_short_rows_and_exponent_cells(tmp_path, fast):
    path = write(tmp_path / "op_summary_20260605161737.csv", OP_SUMMARY_83 + ODD_ROWS)
    rows = msprof_csv.parse_kernel_csv(path, fast=fast)
    assert len(rows) == 5 and rows[1]["start_ns"] == 1780676244407387120
    assert rows[1]["pmu"]["aiv_total_cycles"] == 6666151685
    soft, marker, short = rows[2:]
    assert soft["start_ns"] == 1780676244500000001 and soft["duration_ns"] == 2000  # half up at the ns digit
    assert soft["wait_ns"] == 6958621 and soft["pmu"] == {} and soft["input_shapes"] is None
    assert marker["name"] is None and marker["wait_ns"] == -1500 and msprof.is_marker_row(marker)
    assert short["name"] == "main_kernel" and short["start_ns"] == 1780676244700000000  # exponent: via float
    assert short["wait_ns"] is None and short["block_dim"] is None and short["pmu"] == {}
    assert all(isinstance(r["task_id"], int) and r["source"] == "op_summary_20260605161737.csv" for r in rows)


def test_the_typed_frame_has_exact_int64_ns_and_categorical_text(tmp_path):
    path = write(tmp_path / "kernel_details.csv", KERNEL_DETAILS_2025)
    df = msprof_csv.read_kernel_frame(path)
    assert str(df["start_ns"].dtype) == "Int64" and int(df["start_ns"][0]) == 1736413971558972912
    assert str(df["name"].dtype) == "category" and df["input_shapes"][0] == "81920,4096;8192,512"
    assert df["pmu:aic_total_cycles"][0] == 5295467.0 and df["block_dim"][0] == 16.0


@READERS
def test_a_bad_line_is_named_by_file_and_line(tmp_path, fast):
    bad = OP_SUMMARY_83 + f"0,4294967295,9,1756,k,k,dynamic,MIX_AIC,12x.5{T},1.000,0,1,0,NO\n"
    path = write(tmp_path / "op_summary_1.csv", bad)
    with pytest.raises(UserError, match=r"op_summary_1.csv:4: column 'Task Start Time\(us\)'"):
        msprof_csv.parse_kernel_csv(path, fast=fast)
    bad_id = OP_SUMMARY_83 + "\n" + OP_SUMMARY_83.splitlines()[1].replace(",1756,", ",s1756,", 1) + "\n"
    path = write(tmp_path / "op_summary_2.csv", bad_id)  # a blank line 4: the text id is on line 5
    with pytest.raises(UserError, match=r"op_summary_2.csv:5: column 'Stream ID'"):
        msprof_csv.parse_kernel_csv(path, fast=fast)


@READERS
def test_a_text_cell_in_a_pmu_column_is_dropped_and_the_rest_of_the_row_kept(tmp_path, fast):
    path = write(tmp_path / "op_summary_2.csv", OP_SUMMARY_83.replace(",0.014\n", ",busy\n", 1))
    a, b = msprof_csv.parse_kernel_csv(path, fast=fast)
    assert "cube_utilization(%)" not in a["pmu"] and a["pmu"]["aic_total_cycles"] == 532700
    assert b["pmu"]["cube_utilization(%)"] == 0.010 and a["duration_ns"] == 87139380


def test_large_files_are_split_across_reader_processes_at_line_ends(tmp_path, monkeypatch):
    body = OP_SUMMARY_83.split("\n", 1)[1]
    path = write(tmp_path / "op_summary_1.csv", OP_SUMMARY_83 + body * 200)
    ranges = msprof_csv._byte_ranges(path, 7)
    with open(path, "rb") as f:
        data = f.read()
    assert len(ranges) == 7 and ranges[0][0] == data.index(b"\n") + 1 and ranges[-1][1] == len(data)
    assert all(data[a - 1:a] == b"\n" for a, _b in ranges) and all(b == a2 for (_a, b), (a2, _b2) in
                                                                  zip(ranges, ranges[1:]))
    monkeypatch.setattr(msprof_csv, "_PARALLEL_MIN_BYTES", 0)
    par = msprof_csv.parse_kernel_csv(path, source="x", fast=True, workers=3)
    assert len(par) == 402 and [r["start_ns"] for r in par] == [1780676244313289000, 1780676244407387120] * 201
    assert [r["pmu"]["aiv_total_cycles"] for r in par] == [6666439114, 6666151685] * 201
    assert {r["name"] for r in par} == {"main_kernel"} and {r["source"] for r in par} == {"x"}
