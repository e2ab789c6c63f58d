"""The executed-FLOPs CUDA rule (mfulib.flops.executed) against real H200 Nsight Compute counters.

Data: tests/fixtures/h200/pmu_mha_128x128.json, recorded H200 output (the validation pack bench/validation/h200/pmu.json
as committed at 7af7359: the collector with --pmu ncu on the MHA block,
examples/ops/gen/zoo/5_MHABlock_triton_optimized.py when its GEMM still used 128 x 128 tiles, cases 7, 8 and 11 of
examples/ops/bench/zoo/5_MHABlock.json). Kept as a fixture because the example's GEMM tiles changed afterwards;
tests/fixtures/h200/pmu_mha_128x256.json is the same pack recorded after the change (commit b028d53).
Per kernel the counters are means over ``launches`` profiled launches (2 iterations: matmul_kernel runs twice per
iteration - the QKV GEMM and the output GEMM - flash_attn_fwd_kernel once).
"""
import json
import os

import pytest

from mfulib.flops import executed as ex
from mfulib.search import numerator as sn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACK = os.path.join(ROOT, "tests", "fixtures", "h200", "pmu_mha_128x128.json")
CASES = os.path.join(ROOT, "examples", "ops", "bench", "zoo", "5_MHABlock.json")


PACK_256 = os.path.join(ROOT, "tests", "fixtures", "h200", "pmu_mha_128x256.json")  # the same, 128 x 256 tiles


def _cases(pack=PACK):
    with open(pack) as f:
        pack = json.load(f)["result"]["cases"]
    with open(CASES) as f:
        lines = [json.loads(x) for x in f if x.strip()]
    out = []
    for c in pack:
        inputs = {i["name"]: i for i in lines[c["case"]]["inputs"]}
        b, s, hidden = inputs["x"]["shape"]
        out.append(dict(c, b=b, s=s, hidden=hidden, heads=inputs["head_num"]["value"],
                        causal=inputs["causal"]["value"]))
    assert len(out) == 3
    return out


def test_one_counted_gmma_instruction_of_the_mha_projection_gemm_is_512_times_its_n():
    # matmul_kernel: 128x128 tile, BLOCK_K 64, 8 warps = 2 warpgroups of 64 rows: wgmma m64n128k16 (N = 128)
    for c in _cases():
        mm = c["pmu"]["matmul_kernel"]
        m = c["b"] * c["s"]
        traced = 2 * m * 3 * c["hidden"] * c["hidden"] + 2 * m * c["hidden"] * c["hidden"]  # QKV + out, exact
        per_launch = traced / 2  # the counters are the mean of the two launches of one iteration
        per_inst = per_launch / mm["tensor_inst_executed_gmma"]
        assert per_inst == ex.wgmma_flops_per_counted_inst(128, c["dtype"]) == 512 * 128, c["case"]
        # the hmma count includes the gmma one on sm_90: the summed counter is exactly twice the gmma count
        assert mm["tensor_inst_executed"] == 2 * mm["tensor_inst_executed_gmma"]


def test_with_128x256_tiles_one_counted_gmma_instruction_is_512_times_256():
    # the example after its GEMM moved to 128 x 256 tiles (recorded H200 pack, commit b028d53): 2 warpgroups of 64
    # rows, each wgmma m64n256k16 -> N = 256; a second N value for the 512 * N rule, on all three cases
    for c in _cases(PACK_256):
        mm = c["pmu"]["matmul_kernel"]
        m = c["b"] * c["s"]
        traced = 2 * m * 3 * c["hidden"] * c["hidden"] + 2 * m * c["hidden"] * c["hidden"]
        assert traced / 2 / mm["tensor_inst_executed_gmma"] == ex.wgmma_flops_per_counted_inst(256, c["dtype"]) \
            == 512 * 256, c["case"]


def test_the_flash_kernel_mixes_two_wgmma_n_so_no_single_factor_exists():
    # flash_attn_fwd_kernel, fp16/bf16, head dim 128: BLOCK_M 128 (2 warpgroups), BLOCK_N 64, 8 warps;
    # q k^T per warpgroup: m64 n64 (BLOCK_N) over k = 128 (8 wgmma k16); p v: m64 n128 (head dim) over k = 64 (4 wgmma)
    for c in _cases():
        fa = c["pmu"]["flash_attn_fwd_kernel"]
        d = c["hidden"] // c["heads"]
        assert d == 128
        blocks_m, blocks_n = c["s"] // 128, c["s"] // 64
        kv_blocks = sum(2 * (j + 1) for j in range(blocks_m)) if c["causal"] else blocks_m * blocks_n
        pairs = c["b"] * c["heads"] * kv_blocks  # (query block, key block) tile pairs computed
        qk, pv = 2 * (d // 16), 2 * (64 // 16)  # wgmma per pair (2 warpgroups)
        assert fa["tensor_inst_executed_gmma"] == pairs * (qk + pv) * ex.WARPS_PER_WARPGROUP, c["case"]
        executed = pairs * (qk * 4 * ex.wgmma_flops_per_counted_inst(64, c["dtype"])
                            + pv * 4 * ex.wgmma_flops_per_counted_inst(128, c["dtype"]))
        assert executed == pairs * 2 * (2 * 128 * 64 * d)  # q k^T and p v of every computed tile pair
        per_inst = executed / fa["tensor_inst_executed_gmma"]
        assert ex.wgmma_flops_per_counted_inst(64, c["dtype"]) < per_inst < ex.wgmma_flops_per_counted_inst(128,
                                                                                                        c["dtype"])


def test_hopper_counters_with_warpgroup_mma_give_no_executed_count_and_say_why():
    c = _cases()[0]
    e = {"pmu": c["pmu"], "kernels": [{"name": "matmul_kernel", "launches_per_iter": 2},
                                      {"name": "flash_attn_fwd_kernel", "launches_per_iter": 1}]}
    executed, src, why = ex.executed_flops(e, "cuda", "9.0", c["dtype"])
    assert executed is None and src is None
    assert "512*N" in why and "wgmma" in why and "matmul_kernel" in why
    n = sn.numerator(2.0e12, executed, src, why)
    assert n["num_src"] == "tracer" and "512*N" in n["num_src_why"] and n["numerator_executed"] is None


def test_hopper_kernels_without_warpgroup_mma_count_as_mma_sync():
    e = {"pmu": {"k": {"tensor_inst_executed": 1000.0, "tensor_inst_executed_gmma": 0.0}},
         "kernels": [{"name": "k", "launches_per_iter": 3}]}
    executed, src, why = ex.executed_flops(e, "cuda", "9.0", "float16")
    assert executed == 3 * 1000.0 * 2 * 16 * 8 * 16 and src == "hardware:tensor_inst_executed" and why is None
    no_gmma = {"pmu": {"k": {"tensor_inst_executed": 1000.0}}, "kernels": [{"name": "k", "launches_per_iter": 1}]}
    assert "no tensor_inst_executed_gmma" in ex.executed_flops(no_gmma, "cuda", "9.0", "float16")[2]
    assert ex.wgmma_flops_per_counted_inst(8, "tf32") == 2 * 64 * 8 * 8 // 4
    assert ex.wgmma_flops_per_counted_inst(8, "float64") is None


@pytest.mark.parametrize("collect_args,expect", [([], ["--pmu", "auto"]), (["--pmu", "none"], ["--pmu", "none"])])
def test_stage2_collector_command_asks_for_counters_on_cuda(collect_args, expect):
    from mfulib.search.grid import SearchOptions, collector_command
    opts = SearchOptions(collect_args=collect_args)
    cmd = collector_command("/w", [3, 1], "/w/search/stage2", "cuda", opts)
    i = cmd.index("--pmu")
    assert cmd[i:i + 2] == expect and cmd.count("--pmu") == 1
    assert "--pmu" not in collector_command("/w", [3], "/o", "cpu", SearchOptions())
    assert "--aic-metrics" not in collector_command("/w", [3], "/o", "npu", SearchOptions())  # no NPU counter used
    ncu = collector_command("/w", [3], "/o", "cuda", SearchOptions(stage2_pmu="ncu"))
    assert ncu[ncu.index("--pmu") + 1] == "ncu"
