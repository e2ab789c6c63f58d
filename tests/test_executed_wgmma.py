"""Executed FLOPs of Hopper warpgroup-MMA kernels: the wgmma shape read from the compiled kernel the launch ran.

Fixtures: tests/fixtures/triton_cache/ is the layout of Triton's cache (``<key>/<name>.json`` + ``<name>.ptx``) as
Triton 3.8.0 wrote it on a CPU host compiling for target sm_90 (bench/executed_flops_h200.py --compile-only;
manifest.json says which kernel and config each folder is) - compiler output, no GPU involved. The hand-written
PTX lines below are instruction text per the PTX ISA (wgmma / mma.sync "Matrix shape"). Expected FLOPs are 2*m*n*k
per instruction over the 4 warps ncu counts per wgmma, computed here by hand. tests/fixtures/h200_triton_cache/
(the variants the H200 bench launched, Triton 3.6) is used when present.
"""
import glob
import json
import os

import pytest

from mfulib.flops import executed
from mfulib.profiles import ncu, pmu, triton_ptx
from mfulib.search.numerator import numerator

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, "fixtures", "triton_cache")
H200_CACHE = os.path.join(HERE, "fixtures", "h200_triton_cache")


def test_ptx_shapes_from_instruction_text():
    ptx = "\n".join([
        "\twgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%r1}, %rd1, %rd2, p, 1, 1, 0, 1;",
        "\twgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%r1}, %rd3, %rd4, p, 1, 1, 0, 1;",
        "\twgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8.satfinite {%r2}, %rd5, %rd6, p;",
        "\twgmma.mma_async.sp.sync.aligned.m64n64k32.f32.f16.f16 {%r3}, %rd7, %rd8, %r9, 0, p;",
        "\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1}, {%r1}, {%r2}, {%f2};",
        "\twgmma.fence.sync.aligned;"])
    s = triton_ptx.ptx_mma_shapes(ptx)
    assert [(w["shape"], w["types"], w["sparse"], w["static_count"]) for w in s["wgmma"]] == [
        ("m64n64k32", "f32.f16.f16", True, 1), ("m64n64k32", "s32.s8.s8", False, 1),
        ("m64n128k16", "f32.f16.f16", False, 2)]  # ordered by m, n, k, then types
    assert [(w["shape"], w["types"]) for w in s["mma_sync"]] == [("m16n8k16", "f32.bf16.bf16.f32")]


def test_compiled_variants_read_triton_cache_layout():
    vs = triton_ptx.compiled_variants(CACHE, "matmul_kernel")
    got = {(v["num_warps"], v["shared"], w["shape"], w["types"]) for v in vs for w in v["wgmma"]}
    # manifest.json: the fp16, bf16 and fp32 configs of the zoo GEMM, one wgmma form each
    assert len(vs) == 3 and got == {(8, 49152, "m64n256k16", "f32.f16.f16"), (8, 49152, "m64n256k16", "f32.bf16.bf16"),
                                    (8, 98304, "m64n128k8", "f32.tf32.tf32")}
    assert all(len(v["ptx_sha256"]) == 64 and v["arch"] == 90 for v in vs)
    assert triton_ptx.compiled_variants(CACHE, "no_such_kernel") == []


def test_the_launch_picks_its_variant_by_threads_and_dynamic_shared_memory():
    rec = triton_ptx.launched_variant(CACHE, "matmul_kernel", 256.0, 98304.0)
    assert rec["status"] == "found" and rec["candidates"] == 3 and len(rec["variants"]) == 1
    assert rec["variants"][0]["wgmma"][0]["n"] == 128
    none = triton_ptx.launched_variant(CACHE, "matmul_kernel", 128.0, 98304.0)  # 4 warps: no such variant
    assert none["status"] == "none" and "matches the launch" in none["why"]
    assert triton_ptx.launched_variant(CACHE, "matmul_kernel", 256.0, None)["status"] == "none"
    assert "no Triton cache" in triton_ptx.launched_variant(os.path.join(CACHE, "absent"), "x", 1, 1)["why"]
    amb = triton_ptx.launched_variant(CACHE, "mm_tile_kernel", 128.0, 24576.0)  # 128x64 and 64x128: same launch
    assert amb["status"] == "ambiguous" and "m64n64k16" in amb["why"] and "m64n128k16" in amb["why"]


def _wgmma_counters(gmma, inst=None):
    return {"tensor_inst_executed": float(gmma if inst is None else inst), "tensor_inst_executed_gmma": float(gmma)}


def test_wgmma_flops_from_the_compiled_shape():
    f16 = triton_ptx.launched_variant(CACHE, "matmul_kernel", 256, 49152)
    v, how = executed.kernel_flops(_wgmma_counters(4000), "cuda", "9.0", "float16", f16)
    assert v == 4000 * (2 * 64 * 256 * 16 // 4) == 524_288_000 and "m64n256k16" in how
    tf32 = triton_ptx.launched_variant(CACHE, "matmul_kernel", 256, 98304)
    v, _ = executed.kernel_flops(_wgmma_counters(1000), "ncu", "9.0", "tf32", tf32)
    assert v == 1000 * (2 * 64 * 128 * 8 // 4) == 32_768_000


def test_variants_of_another_math_mode_cannot_be_the_one_that_ran():
    """The H200 search's case: the cache holds a bf16 and an fp16 compile of matmul_kernel (8 warps, 48 KiB each,
    m64n256k16): the launch matches both; the case's math mode picks one. 4000 gmma x 2*64*256*16/4 by hand."""
    rec = triton_ptx.launched_variant(CACHE, "matmul_kernel", 256, 49152)
    assert rec["status"] == "ambiguous" and "m64n256k16.f32.bf16.bf16; m64n256k16.f32.f16.f16" in rec["why"]
    v, why = executed.kernel_flops(_wgmma_counters(4000), "cuda", "9.0", None, rec)  # no mode: still unknown
    assert v is None and "which one ran is unknown" in why
    for mode, kept, out in (("float16", "f32.f16.f16", "bf16.bf16"), ("bfloat16", "f32.bf16.bf16", "f32.f16.f16)")):
        v, how = executed.kernel_flops(_wgmma_counters(4000), "cuda", "9.0", mode, rec)
        assert v == 4000 * 2 * 64 * 256 * 16 / 4 == 524_288_000, how
        assert f"m64n256k16.{kept} (PTX sha256" in how and f"1 of the 2 matching variants ruled out by the case's " \
            f"math mode {mode}" in how and out in how.split("ruled out")[1]
    v, why = executed.kernel_flops(_wgmma_counters(4000), "cuda", "9.0", "tf32", rec)  # neither takes tf32
    assert v is None and "none of them takes the case's math mode tf32" in why
    entry = {"pmu": {"matmul_kernel": dict(_wgmma_counters(4000), launches=1)},
             "kernels": [{"name": "matmul_kernel", "launches_per_iter": 3}],
             executed.SHAPES_FIELD: {"matmul_kernel": rec}}
    assert executed.executed_flops(entry, "cuda", "9.0", "bfloat16")[0] == 3 * 524_288_000
    # variants of one input type with different N stay ambiguous whatever the mode (mm_tile 128x64 vs 64x128)
    amb = triton_ptx.launched_variant(CACHE, "mm_tile_kernel", 128, 24576)
    assert executed.variants_for_mode(amb["variants"], "float16") == (amb["variants"], [])
    assert [executed.ptx_input_mode(t) for t in ("f32.f16.f16", "f32.bf16.bf16", "f32.tf32.tf32", "s32.s8.s8",
                                                 "f32.e4m3.e4m3", "")] == ["float16", "bfloat16", "tf32", "int8",
                                                                           "float8_e4m3fn", None]


def test_wgmma_refusals_say_why():
    attn = triton_ptx.launched_variant(CACHE, "flash_attn_fwd_kernel", 256, 49152)
    assert attn["status"] == "found"
    v, why = executed.kernel_flops(_wgmma_counters(100), "cuda", "9.0", "float16", attn)
    assert v is None and "several wgmma shapes" in why and "not apportioned" in why
    amb = triton_ptx.launched_variant(CACHE, "mm_tile_kernel", 128, 24576)
    v, why = executed.kernel_flops(_wgmma_counters(100), "cuda", "9.0", "float16", amb)
    assert v is None and "which one ran is unknown" in why
    f16 = triton_ptx.launched_variant(CACHE, "matmul_kernel", 256, 49152)
    v, why = executed.kernel_flops(_wgmma_counters(100, inst=120), "cuda", "9.0", "float16", f16)
    assert v is None and "other tensor instructions" in why
    v, why = executed.kernel_flops(_wgmma_counters(100), "cuda", "9.0", "float16", None)
    assert v is None and "no compiled-kernel record" in why
    sparse = {"status": "found", "variants": [{"ptx_sha256": "0" * 64, "wgmma": [
        {"m": 64, "n": 64, "k": 32, "types": "f32.f16.f16", "sparse": True, "static_count": 1}]}]}
    assert executed.kernel_flops(_wgmma_counters(1), "cuda", "9.0", "float16", sparse)[0] is None
    # mma.sync kernels keep the 8.x table (no compiled record needed): 2*16*8*16 per instruction
    assert executed.kernel_flops(_wgmma_counters(0, inst=10), "cuda", "9.0", "float16")[0] == 10 * 4096


def test_executed_per_iteration_and_the_numerator_take_the_compiled_shapes():
    rec = triton_ptx.launched_variant(CACHE, "matmul_kernel", 256, 49152)
    entry = {"pmu": {"matmul_kernel": dict(_wgmma_counters(4000), launches=1)},
             "kernels": [{"name": "matmul_kernel", "launches_per_iter": 2}],
             executed.SHAPES_FIELD: {"matmul_kernel": rec}}
    ex, src, why = executed.executed_flops(entry, "cuda", "9.0", "float16")
    assert ex == 2 * 524_288_000 and src == "hardware:tensor_inst_executed" and why is None
    dense = 2 * 524_288_000 * 1.6  # a reference that counts masked work the kernel skipped
    n = numerator(dense, ex, src, why)
    assert n["numerator"] == ex and n["num_src"] == "hardware:tensor_inst_executed"
    assert numerator(ex / 2, ex, src, why)["num_src"] == "tracer"  # padding over-counts: the tracer's is smaller


def test_npu_executed_flops_stay_unused():
    entry = {"pmu": {"k": {"aic_cube_fops": 1e9}}, "kernels": [{"name": "k", "launches_per_iter": 1}]}
    ex, src, why = executed.executed_flops(entry, "npu", None, "float16")
    assert ex is None and src is None and "aic_cube_fops" in why
    assert numerator(1e9, ex, src, why)["num_src"] == "tracer"


def test_ncu_dynamic_shared_memory_from_the_recorded_h200_csv():
    with open(os.path.join(HERE, "fixtures", "profiles", "cuda", "ncu_raw.csv"), encoding="utf-8") as f:
        recs = ncu.parse_ncu_csv(f.read())
    c = pmu.from_ncu_record(recs[0])  # bmm_tile_kernel: "byte/block" unit, static shared memory 0
    assert c["shared_mem_dynamic_bytes"] == 98304.0 and c["block_size"] == 256.0
    assert "launch__shared_mem_per_block_dynamic" in pmu.ncu_metrics(9) + pmu.ncu_metrics(8)


def test_kernel_records_match_every_profiled_kernel():
    counters = {"matmul_kernel": {"launches": 2, "block_size": 256.0, "shared_mem_dynamic_bytes": 49152.0},
                "void at::native::elementwise_kernel<4>(int)": {"launches": 0}}
    recs = triton_ptx.kernel_records(counters, CACHE)
    # the fp16 and the bf16 compile share 8 warps and 48 KiB: the record keeps both (the math mode tells them apart)
    assert list(recs) == ["matmul_kernel"] and recs["matmul_kernel"]["status"] == "ambiguous"
    assert sorted(v["wgmma"][0]["types"] for v in recs["matmul_kernel"]["variants"]) == ["f32.bf16.bf16",
                                                                                         "f32.f16.f16"]


@pytest.mark.skipif(not os.path.isdir(H200_CACHE), reason="no H200-recorded Triton cache (bench/executed_flops_h200.py)")
def test_h200_recorded_variants_parse():
    metas = glob.glob(os.path.join(H200_CACHE, "*", "*.json"))
    assert metas
    for meta in metas:
        with open(meta, encoding="utf-8") as f:
            name = json.load(f)["name"]
        vs = triton_ptx.compiled_variants(H200_CACHE, name)
        assert vs and all(v["wgmma"] or v["mma_sync"] for v in vs), name
    # what the H200 compiled for the zoo MHA cases of bench/executed_flops_h200.py (Triton 3.6): the GEMM's
    # 128 x 256 fp16 tile issues m64n256k16, the attention at head dim 64 (and 40, padded) m64n64k16
    shapes = {n: {f"m{w['m']}n{w['n']}k{w['k']}" for v in triton_ptx.compiled_variants(H200_CACHE, n)
                  for w in v["wgmma"]} for n in ("matmul_kernel", "flash_attn_fwd_kernel")}
    assert shapes == {"matmul_kernel": {"m64n256k16"}, "flash_attn_fwd_kernel": {"m64n64k16"}}


# ------------------------------------------------------------------ the launched variant from CUPTI, and what it settles

RECORDED = os.path.join(HERE, "fixtures", "profiles", "cuda")


def _d128_flash_rows(threads=256, shared=49152, iterations=(0, 1)):
    """CUPTI launch rows (the shape :func:`mfulib.backends.cuda.trace_launches` gives) of the zoo flash kernel at head
    dim 128 (fixture ZISZ7F...: 8 warps, 48 KiB, QK m64n64k16 + PV m64n128k16)."""
    return [{"name": "flash_attn_fwd_kernel", "iteration": i, "kind": "kernel", "block": [threads, 1, 1],
             "shared_memory": shared} for i in iterations]


def test_cupti_launch_config_equals_ncus_launch_metrics_on_the_recorded_h200_profile(tmp_path):
    """The same H200 run recorded both ways (bench/record_profile_fixtures.py): CUPTI's block and shared memory of
    bmm_tile_kernel are ncu's launch__block_size and launch__shared_mem_per_block_dynamic (static 0)."""
    import gzip
    from mfulib.backends.cuda import trace_launches
    trace = tmp_path / "trace.json"
    trace.write_bytes(gzip.open(os.path.join(RECORDED, "tool_ranges.json.gz")).read())
    rows, _info = trace_launches(str(trace))
    with open(os.path.join(RECORDED, "ncu_raw.csv"), encoding="utf-8") as f:
        c = pmu.from_ncu_record(ncu.parse_ncu_csv(f.read())[0])
    assert triton_ptx.cupti_launch_configs(rows, range(2, 6)) == {
        "bmm_tile_kernel": (int(c["block_size"]), int(c["shared_mem_dynamic_bytes"]))}


def test_cupti_launch_configs_take_the_measured_iterations_and_refuse_mixed_configs():
    rows = _d128_flash_rows(iterations=(1, 2)) + _d128_flash_rows(threads=128, iterations=(0,))  # warm-up differs
    assert triton_ptx.cupti_launch_configs(rows, [1, 2]) == {"flash_attn_fwd_kernel": (256, 49152)}
    assert triton_ptx.cupti_launch_configs(rows, [0, 1]) == {"flash_attn_fwd_kernel": (None, None)}
    recs = triton_ptx.cupti_kernel_records(triton_ptx.cupti_launch_configs(rows, [0, 1]), CACHE)
    assert recs["flash_attn_fwd_kernel"]["status"] == "none" and "cupti gave no single" in \
        recs["flash_attn_fwd_kernel"]["why"]


def _entry(rows, cache=CACHE):
    recs = triton_ptx.cupti_kernel_records(triton_ptx.cupti_launch_configs(rows, [0, 1]), cache)
    return {"kernels": [{"name": n, "launches_per_iter": 1} for n in recs], executed.SHAPES_FIELD: recs}


def test_a_kernel_of_several_wgmma_shapes_is_settled_before_any_count_as_the_count_would_say():
    entry = _entry(_d128_flash_rows())
    assert entry[executed.SHAPES_FIELD]["flash_attn_fwd_kernel"]["launch_source"] == "cupti"
    why = executed.settled_without_counts(entry, "cuda", "9.0", "float16")
    assert why and "several wgmma shapes (m64n64k16.f32.f16.f16, m64n128k16.f32.f16.f16;" in why
    # what the count itself says for any non-zero gmma count (the module's rule, the same compiled record)
    for gmma in (1.0, 4.0e6, 3.3e9):
        counted = dict(entry, pmu={"flash_attn_fwd_kernel": dict(_wgmma_counters(gmma), launches=1)})
        ex, src, refusal = executed.executed_flops(counted, "cuda", "9.0", "float16")
        assert ex is None and src is None
        assert refusal.split("per counted instruction); ", 1)[1] in why  # the same refusal, word for word


def test_only_a_count_can_tell_one_shape_an_older_gpu_or_an_unidentified_variant():
    one_shape = [{"name": "matmul_kernel", "iteration": i, "kind": "kernel", "block": [256, 1, 1],
                  "shared_memory": 98304} for i in (0, 1)]  # tf32 128x128x32: m64n128k8 only
    assert executed.settled_without_counts(_entry(one_shape), "cuda", "9.0", "tf32") is None
    assert executed.settled_without_counts(_entry(_d128_flash_rows()), "cuda", "8.0", "float16") is None
    assert executed.settled_without_counts(_entry(_d128_flash_rows(threads=128)), "cuda", "9.0", "float16") is None
    assert executed.settled_without_counts(_entry(_d128_flash_rows()), "npu", "9.0", "float16") is None


def _rec(*variants, status="found"):
    """A hand-made compiled-variant record (the shape of :func:`triton_ptx.launched_variant`), wgmma forms per PTX ISA
    instruction text: (m, n, k, types, sparse)."""
    vs = [{"key": f"v{i}", "ptx_sha256": f"sha{i}", "mma_sync": list(ms),
           "wgmma": [{"shape": f"m{m}n{n}k{k}", "m": m, "n": n, "k": k, "types": t, "sparse": sp, "static_count": 4}
                     for m, n, k, t, sp in ws]} for i, (ws, ms) in enumerate(variants)]
    return {"status": status, "why": "two variants" if status == "ambiguous" else None, "variants": vs}


F16_64, F16_128 = (64, 64, 16, "f32.f16.f16", False), (64, 128, 16, "f32.f16.f16", False)
BF16_64, BF16_128 = (64, 64, 16, "f32.bf16.bf16", False), (64, 128, 16, "f32.bf16.bf16", False)
MMA_SYNC = {"shape": "m16n8k16", "m": 16, "n": 8, "k": 16, "types": "f32.f16.f16.f32", "static_count": 2}


def test_a_zero_gmma_count_against_a_wgmma_variant_is_refused_not_counted_as_mma_sync():
    rec = _rec(([F16_64, F16_128], []))
    for inst in (0.0, 1000.0):
        v, why = executed.kernel_flops(_wgmma_counters(0, inst), "cuda", "9.0", "float16", rec)
        assert v is None and "counted no tensor_inst_executed_gmma instruction" in why
    # a variant with no wgmma (mma.sync only) and gmma 0 is still an mma.sync count
    v, _ = executed.kernel_flops(_wgmma_counters(0, 1000), "cuda", "9.0", "float16", _rec(([], [MMA_SYNC])))
    assert v == 1000 * 2 * 16 * 8 * 16


SETTLED = {  # record -> settled (a count can only refuse) for a float16 case on 9.0
    "two shapes": (_rec(([F16_64, F16_128], [])), True),
    "two shapes beside mma.sync": (_rec(([F16_64, F16_128], [MMA_SYNC])), True),
    "sparse": (_rec(([(64, 64, 32, "f32.f16.f16", True)], [])), True),
    "off the table (m 128)": (_rec(([(128, 64, 16, "f32.f16.f16", False)], [])), True),
    "one shape": (_rec(([F16_128], [])), False),
    "ambiguous, narrowed by the mode to two shapes": (_rec(([F16_64, F16_128], []), ([BF16_64], []),
                                                           status="ambiguous"), True),
    "ambiguous, narrowed by the mode to one shape": (_rec(([F16_128], []), ([BF16_64, BF16_128], []),
                                                          status="ambiguous"), False),
    "ambiguous, not narrowed": (_rec(([F16_64, F16_128], []), ([F16_64], []), status="ambiguous"), False),
    "not identified": ({"status": "none", "why": "no match", "variants": []}, False),
}


@pytest.mark.parametrize("label", sorted(SETTLED))
def test_settled_exactly_where_every_counter_value_is_refused(label):
    rec, settled = SETTLED[label]
    single = {"name": "matmul_kernel", "launches_per_iter": 2}
    entry = {"kernels": [single, {"name": "k", "launches_per_iter": 1}],  # the deciding kernel comes second
             executed.SHAPES_FIELD: {"matmul_kernel": _rec(([F16_128], [])), "k": rec}}
    assert bool(executed.settled_without_counts(entry, "cuda", "9.0", "float16")) is settled
    outcomes = set()
    for gmma in (0.0, 1.0, 3.0e6, None, float("nan")):
        for extra in (0.0, 7.0):
            inst = None if gmma is None else gmma + extra
            pmu = {n: {"tensor_inst_executed": inst, "tensor_inst_executed_gmma": gmma, "launches": 1}
                   for n in ("matmul_kernel", "k")}
            outcomes.add(executed.executed_flops(dict(entry, pmu=pmu), "cuda", "9.0", "float16")[0] is None)
    if settled:
        assert outcomes == {True}  # no counter value gives an executed count
    elif "one shape" in label:
        assert False in outcomes  # some counter value does: only a count can tell
    # an unidentified variant is never settled: refused by every value here too, but the PTX is not the evidence


def test_cupti_configs_multiply_the_block_and_skip_other_rows_and_templated_names_match():
    rows = [{"name": "void flash_attn_fwd_kernel<4>(float*)", "iteration": 0, "kind": "kernel", "block": [64, 4, 1],
             "shared_memory": 49152},
            {"name": "Memcpy HtoD", "iteration": 0, "kind": "memcpy", "block": None, "shared_memory": None}]
    configs = triton_ptx.cupti_launch_configs(rows, [0])
    assert configs == {"void flash_attn_fwd_kernel<4>(float*)": (256, 49152)}
    rec = triton_ptx.cupti_kernel_records(configs, CACHE)["void flash_attn_fwd_kernel<4>(float*)"]
    assert rec["status"] == "found" and rec["block_size"] == 256
