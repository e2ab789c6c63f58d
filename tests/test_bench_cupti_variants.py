"""bench/cupti_variants_h200.py: how it judges the CUPTI-identified variant against ncu's and the settled outcome
against the count (on documents built from the sm_90 fixture cache: the zoo flash kernel at head dim 128, two wgmma
shapes, and the tf32 matmul, one), including planted disagreements it must report."""
import copy
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import cupti_variants_h200 as cv  # noqa: E402

from mfulib.profiles import triton_ptx  # noqa: E402

CACHE = os.path.join(ROOT, "tests", "fixtures", "triton_cache")
CONFIGS = {"flash_attn_fwd_kernel": (256, 49152), "matmul_kernel": (256, 98304)}


def docs(gmma=4.0e6):
    """(--pmu none report, --pmu ncu report) of one tf32 case launching both kernels."""
    kernels = [{"name": n, "launches_per_iter": 1} for n in CONFIGS]
    base = {"case": 0, "compute_dtype": "float32", "tf32": True, "kernels": kernels}
    none = dict(base, pmu=None, mma_shapes=triton_ptx.cupti_kernel_records(CONFIGS, CACHE))
    ncu = dict(base, mma_shapes={n: triton_ptx.launched_variant(CACHE, n, t, s) for n, (t, s) in CONFIGS.items()},
               pmu={n: {"tensor_inst_executed": gmma, "tensor_inst_executed_gmma": gmma, "launches": 1}
                    for n in CONFIGS})
    dev = {"capability": "9.0"}
    return {"device": dev, "per_case": [none]}, {"device": dev, "per_case": [ncu]}


def test_the_same_launch_told_by_cupti_and_by_ncu_agrees_and_the_settled_case_counts_to_none():
    rows = cv.compare(*docs())
    assert len(rows) == 1 and all(k["same"] for k in rows[0]["kernels"])
    r = rows[0]
    assert r["settled"] and "several wgmma shapes" in r["settled"]
    assert r["counted"]["executed"] is None and r["agree"]


def test_a_variant_told_apart_differently_or_a_count_that_disagrees_is_reported():
    none, ncu = docs()
    bad = copy.deepcopy(ncu)
    bad["per_case"][0]["mma_shapes"]["matmul_kernel"] = triton_ptx.launched_variant(CACHE, "matmul_kernel", 256, 49152)
    assert [k["same"] for k in cv.compare(none, bad)[0]["kernels"]] == [True, False]
    # a count that gives a number where the compiled kernels said none can: disagree
    counted = copy.deepcopy(ncu)
    counted["per_case"][0]["mma_shapes"]["flash_attn_fwd_kernel"]["variants"][0]["wgmma"] = \
        counted["per_case"][0]["mma_shapes"]["flash_attn_fwd_kernel"]["variants"][0]["wgmma"][:1]
    r = cv.compare(none, counted)[0]
    assert r["counted"]["executed"] is not None and r["settled"] and not r["agree"]
    # an ncu pass that failed leaves the CUPTI record on the ncu side too: CUPTI against CUPTI is never "same"
    failed = copy.deepcopy(none)
    assert not any(k["same"] for k in cv.compare(none, failed)[0]["kernels"])
    # no cupti record at all (a collector that did not read it) is never "same"
    empty = copy.deepcopy(none)
    empty["per_case"][0]["mma_shapes"] = None
    assert not any(k["same"] for k in cv.compare(empty, ncu)[0]["kernels"])


def test_the_results_section_and_criteria_say_what_the_stage_measured():
    import make_results as mr
    import validate_h200 as vh
    assert "cupti" in vh.STAGES and "cupti" in mr.ORDER and vh.bench_stage("cupti")[1] == "result.json"
    none, ncu = docs()
    bad = copy.deepcopy(ncu)
    bad["per_case"][0]["mma_shapes"]["matmul_kernel"] = triton_ptx.launched_variant(CACHE, "matmul_kernel", 256, 49152)
    for pair, kernels_met in ((docs(), "yes"), ((none, bad), "**NO**")):
        st = {"result": {"rows": cv.compare(*pair)}, "command": "bench/cupti_variants_h200.py", "rc": 0}
        rows = {r[1][0]: r[1] for r in mr._summary_rows({"cupti": st})}
        assert rows["the compiled variant CUPTI tells = ncu's (zoo/5_MHABlock)"][1:] == [
            "2/2 kernels" if kernels_met == "yes" else "1/2 kernels", "all", kernels_met]
        assert rows["a count the compiled kernels settle = the count's outcome"][1:] == ["1/1 cases", "all", "yes"]
        assert "| 0 | tf32 | flash_attn_fwd_kernel | 256 | 49152 | 256 | 49152 | m64n128k16, m64n64k16 |" in \
            mr.sec_cupti(st)
