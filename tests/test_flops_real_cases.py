"""The checked flops files of the bundled operators, and the tracer on the real NPUKernelBench case files.

The real files live in ../shared/data (never copied into the project): those tests skip where it is absent.
FusionAttention is checked three ways on every supported case: hand-derived FLOPs (below), the tracer on the
plain-torch reference (masked matmuls), and the tracer on a reference that calls torch_npu.npu_fusion_attention
(the stand-in formula path) - all three must agree within 1%.
"""
import json
import os

import pytest

from mfulib.flops import tracer as fc
from mfulib.flops import check as fchk
from mfulib.flops import contract as fcon
from mfulib.flops import npu_standins
from mfulib.core.opdir import OpDir
from mfulib.sources.prepare import prepare_explicit
from test_flops_tracer import LOADER

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "examples", "ops", "bench")
DUMMY_IMPL = "class ModelNew:\n    pass\n"
SUPPORTED_MODES = (0, 2, 3, 4)


def real_workdir(tmp_path, shared_dir, level, op, ref=None):
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "impl.py").write_text(DUMMY_IMPL)
    flops = os.path.join(BENCH, "npukernelbench", level, op + "_flops.py")
    dst = tmp_path / op
    prepare_explicit(ref or os.path.join(BENCH, "npukernelbench", level, op + ".py"),
                     os.path.join(shared_dir, "data", "npukernelbench", level, op + ".json"), str(src / "impl.py"),
                     str(dst), flops=flops)
    return OpDir(dst)


def hand_fa_flops(case):
    """4 * B * N * pairs * D, written out per layout: pairs = S*S (modes 0, 4) or S*(S+1)/2 (2, 3; S_q == S_kv)."""
    v = {e["name"]: e.get("shape", e.get("value")) for e in case["inputs"]}
    n, layout, mode = v["head_num"], v["input_layout"], v["sparse_mode"]
    q = v["query"]
    if layout == "BSH":
        b, s, d = q[0], q[1], q[2] // n
    elif layout == "SBH":
        b, s, d = q[1], q[0], q[2] // n
    elif layout == "BSND":
        b, s, d = q[0], q[1], q[3]
    else:  # BNSD
        b, s, d = q[0], q[2], q[3]
    pairs = s * s if mode in (0, 4) else s * (s + 1) // 2
    return 2 * b * n * pairs * (d + d), mode


def test_fusion_attention_tracer_matches_hand_derived_flops_on_every_supported_real_case(tmp_path, shared_dir):
    od = real_workdir(tmp_path, shared_dir, "level4", "3_FusionAttention")
    seen_modes, seen_layouts = set(), set()
    for i, case in enumerate(od.read_cases()):
        want, mode = hand_fa_flops(case)
        r = fc.trace_case(od, i)
        if mode not in SUPPORTED_MODES:
            assert r.status == "rejected", (i, mode)   # rejected cases stay rejected
            continue
        assert r.status == "ok", (i, r.reason)
        assert r.total_flops == pytest.approx(want, rel=0.01), (i, mode)
        seen_modes.add(mode)
        seen_layouts.add(case["inputs"][4]["value"])
    assert seen_modes == set(SUPPORTED_MODES) and seen_layouts == {"BSH", "SBH", "BSND", "BNSD"}


NPU_CALLING_REF = LOADER + '''
class Model(nn.Module):
    def forward(self, query, key, value, head_num, input_layout, scale, keep_prob, sparse_mode):
        import torch_npu   # NPU-only reference, as NPUKernelBench level4 writes them
        return torch_npu.npu_fusion_attention(query, key, value, head_num, input_layout, scale=scale,
                                              keep_prob=keep_prob, sparse_mode=sparse_mode)[0]
'''


@pytest.mark.skipif(npu_standins.real_torch_npu() is not None, reason="a real torch_npu runs its own op instead of the stand-in")
def test_npu_fusion_attention_formula_matches_hand_derived_flops_on_the_real_cases(tmp_path, shared_dir):
    (tmp_path / "src").mkdir()
    ref = tmp_path / "src" / "3_FusionAttention.py"
    ref.write_text(NPU_CALLING_REF)
    od = real_workdir(tmp_path, shared_dir, "level4", "3_FusionAttention", ref=str(ref))
    for i, case in enumerate(od.read_cases()):
        want, mode = hand_fa_flops(case)
        if mode not in SUPPORTED_MODES:
            continue
        r = fc.trace_case(od, i)
        assert r.formula_flops == {"torch_npu.npu_fusion_attention": pytest.approx(want, rel=0.01)}, i


@pytest.mark.parametrize("level, op, largest", [("level4", "3_FusionAttention", None), ("level4", "2_FFN", 12),
                                                ("level1", "10_LayerNorm", 6), ("level3", "1_BatchMatmul", 6)])
def test_the_checked_flops_files_of_the_real_operators_pass(tmp_path, shared_dir, level, op, largest):
    od = real_workdir(tmp_path, shared_dir, level, op)
    ff = fcon.load_flops(od.flops_py)
    ids = fchk.select_cases(od, ff, None, largest)
    rows = [fchk.check_case(ff, od, i) for i in ids]
    # a case both sides reject is shown as rejected (counted apart), every other case passes
    want = ["rejected" if r["flops_status"] == "rejected" else "pass" for r in rows]
    assert [r["status"] for r in rows] == want, [(r["case"], r["diagnosis"]) for r in rows]
    assert all(fchk.rejected_by(r) in (None, "both") for r in rows)
    assert not ff.review_lines()
    assert all(c["status"] == "pass" for c in fchk.file_checks(ff, rows))
    assert fchk.summarize(rows, [])["verdict"] == "passed"
    if op == "10_LayerNorm":  # no matrix work: 0 on both sides, and the vector arithmetic really checked
        assert all(r["flops"] == 0 and r["vector_flops"] > 0 for r in rows)
        assert all(c["status"] == "pass" for r in rows for c in r["checks"] if c["name"] == "vector_flops")


def test_every_gated_real_ffn_case_stays_rejected_by_flops_py(shared_dir, tmp_path):
    od = real_workdir(tmp_path, shared_dir, "level4", "2_FFN")
    ff = fcon.load_flops(od.flops_py)
    for case in od.read_cases():
        gated = case["inputs"][3]["value"] in ("swiglu", "geglu", "reglu")
        assert (fcon.evaluate_case(ff, case)["status"] == "rejected") == gated


ZOO = ["1_BatchMatmul", "2_Softmax", "3_RMSNorm", "4_FFN", "5_MHABlock", "6_GQAAttention", "7_SparseVarlenAttention",
       "20_FlashAttentionV2"]


@pytest.mark.parametrize("op", ZOO)
def test_the_checked_flops_files_of_the_zoo_operators_pass(tmp_path, op):
    src = tmp_path / "src"
    src.mkdir()
    (src / "impl.py").write_text(DUMMY_IMPL)
    dst = tmp_path / op
    prepare_explicit(os.path.join(BENCH, "zoo", op + ".py"), os.path.join(BENCH, "zoo", op + ".json"),
                     str(src / "impl.py"), str(dst), flops=os.path.join(BENCH, "zoo", op + "_flops.py"))
    od = OpDir(dst)
    ff = fcon.load_flops(od.flops_py)
    ids = sorted(set(fchk.select_cases(od, ff, None, 1)) | {0, 1})  # the largest and the first two
    rows = [fchk.check_case(ff, od, i) for i in ids]
    assert [r["status"] for r in rows] == ["pass"] * len(rows), [(r["case"], r["diagnosis"]) for r in rows]
    assert not ff.review_lines() and ff.kernel_parts
    if op in ("2_Softmax", "3_RMSNorm"):  # vector-only: matrix 0 = tracer 0, vector_flops checked (not skipped)
        assert all(r["flops"] == 0 and r["vector_flops"] > 0 for r in rows)
        assert all(c["status"] == "pass" for r in rows for c in r["checks"] if c["name"] == "vector_flops")
    assert all(c["status"] == "pass" for c in fchk.file_checks(ff, rows))
    json.dumps(rows)  # the rows are what flops_check.json stores
