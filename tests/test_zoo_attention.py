"""The bundled attention operators: 5_MHABlock, 6_GQAAttention, 7_SparseVarlenAttention, 20_FlashAttentionV2
(examples/ops/{bench,gen}/zoo)
and the real-case FusionAttention (examples/ops/{bench,gen}/npukernelbench/level4/3_FusionAttention*).

Each ModelNew is checked against its reference through the pipeline's own path (prepare_explicit -> OpDir ->
mfulib.verify.correctness.verify_case, tolerances by dtype there) on the interpreter-sized cases; on a CPU the kernels run in the
Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1 before any kernel is defined), so only fp16/fp32 cases.
The 50 real FusionAttention lines are checked for acceptance on meta tensors: nothing big is allocated.
"""
import json
import os

import pytest
import torch

from mfulib.core import cases
from mfulib.verify import correctness as verify
from mfulib.core.opdir import import_file
from zoo_support import OPS, install_compat_or_skip, work_dir
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ZOO = {  # op -> (reference, implementation)
    "5_MHABlock": ("bench/zoo/5_MHABlock.py", "gen/zoo/5_MHABlock_triton_optimized.py"),
    "6_GQAAttention": ("bench/zoo/6_GQAAttention.py", "gen/zoo/6_GQAAttention_generated.py"),
    "7_SparseVarlenAttention": ("bench/zoo/7_SparseVarlenAttention.py",
                                "gen/zoo/7_SparseVarlenAttention_generated.py"),
    "20_FlashAttentionV2": ("bench/zoo/20_FlashAttentionV2.py", "gen/zoo/20_FlashAttentionV2_triton.py"),
}
FA_REF = os.path.join(OPS, "bench/npukernelbench/level4/3_FusionAttention.py")
FA_IMPL = os.path.join(OPS, "gen/npukernelbench/level4/3_FusionAttention_generated.py")
INTERPRETER_CASES = [0, 1, 2, 3]  # the first four lines of each zoo case file: fp16/fp32, <= 2^16 elements
INTERPRETER_MAX_ELEMS = 1 << 16
FA_REAL_CASES = "npukernelbench/level4/3_FusionAttention.json"


@pytest.fixture(scope="module", autouse=True)
def npu_compat():
    """5_MHABlock's ModelNew is Triton-Ascend style (import torch_npu, "npu" devices, core-count grids)."""
    return install_compat_or_skip(DEVICE)


@pytest.fixture(scope="module")
def zoo_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo_attention")
    return {op: work_dir(root, op, ref, impl, os.path.join(OPS, os.path.splitext(ref)[0] + ".json"))
            for op, (ref, impl) in ZOO.items()}


def meta_args(case):
    """Forward arguments of a parsed case line with every tensor on the meta device (shapes only)."""
    return [torch.empty(ent["shape"], dtype=cases.parse_dtype(ent["dtype"]), device="meta")
            if ent["type"] == "tensor" else ent["value"] for ent in case["inputs"]]


def outcome(fn, *args):
    """'ok' or the rejection reason; any other exception propagates."""
    try:
        fn(*args)
        return "ok"
    except ValueError as exc:
        assert str(exc).startswith("case rejected: "), f"a ValueError that is not a rejection: {exc}"
        return str(exc)[len("case rejected: "):]


@pytest.mark.parametrize("op", sorted(ZOO))
@pytest.mark.parametrize("case_id", INTERPRETER_CASES)
def test_zoo_attention_model_new_matches_the_reference_on_the_interpreter_sized_cases(zoo_dirs, op, case_id):
    row = verify.verify_case(zoo_dirs[op], case_id, device=DEVICE)
    assert row["status"] == "pass", row


@pytest.mark.parametrize("op", sorted(ZOO))
def test_zoo_case_files_hold_small_fp16_fp32_cases_and_h200_sized_cases_all_accepted_by_the_reference(op):
    ref_path = os.path.join(OPS, ZOO[op][0])
    lines = cases.read_case_file(os.path.splitext(ref_path)[0] + ".json")
    infos = [cases.describe_case(c, i) for i, c in enumerate(lines)]
    small = [i.case_id for i in infos
             if i.compute_dtype in ("float16", "float32") and max(t.numel for t in i.tensors) <= INTERPRETER_MAX_ELEMS]
    assert small == INTERPRETER_CASES
    assert {i.compute_dtype for i in infos} == {"float16", "bfloat16", "float32"}
    seq_axis = {"5_MHABlock": 1, "6_GQAAttention": 2, "7_SparseVarlenAttention": 1, "20_FlashAttentionV2": 1}[op]
    assert sum(i.tensors[0].shape[seq_axis] >= 4096 for i in infos) >= 5  # cases that fill the H200
    model = import_file(ref_path, f"ref_{op}").Model()
    for case in lines:  # every line is a consistent case: the reference runs it (on meta tensors)
        assert outcome(model, *meta_args(case)) == "ok"


def test_mhablock_grids_come_from_the_core_count_the_compat_layer_reports(npu_compat):
    impl = import_file(os.path.join(OPS, ZOO["5_MHABlock"][1]), "mha_impl_cores")
    assert impl.ModelNew().num_cores == npu_compat["cube_core_num"]
    # weights are rebuilt from the reference's recipe, value for value
    ref = import_file(os.path.join(OPS, ZOO["5_MHABlock"][0]), "mha_ref_weights")
    assert torch.equal(ref.projection_weight("v", 96), impl.projection_weight("v", 96))
    assert not torch.equal(ref.projection_weight("v", 96), ref.projection_weight("k", 96))


@pytest.fixture
def real_fa_cases(shared_dir):
    return cases.read_case_file(os.path.join(shared_dir, "data", FA_REAL_CASES))


def test_every_real_fusion_attention_case_is_accepted_or_rejected_with_its_reason(real_fa_cases):
    ref, impl = import_file(FA_REF, "fa_ref_meta").Model(), import_file(FA_IMPL, "fa_impl_meta").ModelNew()
    ref_out = [outcome(ref, *meta_args(c)) for c in real_fa_cases]
    impl_out = [outcome(impl.plan, *meta_args(c)) for c in real_fa_cases]
    # By hand from the file: sparse_mode cycles 0..5 by line, so modes 1 and 5 hold 9 and 8 lines -> the reference
    # accepts 50 - 17 = 33. Seven accepted lines have head_dim > 256 (lines 6, 15, 20, 21, 30, 45, 46: 512, 1280,
    # 512, 384, 1024, 768, 512), which the kernel rejects -> 26 accepted.
    assert len(real_fa_cases) == 50
    assert sum(r == "ok" for r in ref_out) == 33 and sum(r == "ok" for r in impl_out) == 26
    modes = [cases.case_value(c, "sparse_mode") for c in real_fa_cases]
    for mode, r, i in zip(modes, ref_out, impl_out):
        if mode in (1, 5):
            assert f"sparse_mode {mode}" in r and f"sparse_mode {mode}" in i
        else:
            assert r == "ok"
            assert i == "ok" or i.startswith("head_dim ") and "> 256" in i
    assert [n for n, i in enumerate(impl_out) if i.startswith("head_dim")] == [6, 15, 20, 21, 30, 45, 46]


# real lines run in every layout and every supported sparse_mode; bf16 lines are run in fp32/fp16 because the
# interpreter cannot run bf16 (the CUDA test runs them as they are)
REAL_LINES_FOR_INTERPRETER = {0: None, 2: None, 9: "float32", 3: "float16", 16: None}


def test_real_fusion_attention_cases_match_the_reference_in_all_four_layouts(real_fa_cases, tmp_path):
    chosen = []
    for line, dtype in REAL_LINES_FOR_INTERPRETER.items():
        case = json.loads(json.dumps(real_fa_cases[line]))
        for ent in case["inputs"]:
            if ent["type"] == "tensor" and dtype:
                ent["dtype"] = dtype
        chosen.append(case)
    (tmp_path / "cases").mkdir()
    case_path = tmp_path / "cases" / "3_FusionAttention.json"
    case_path.write_text(cases.dump_case_lines(chosen))
    op_dir = work_dir(tmp_path / "work", "3_FusionAttention", FA_REF, FA_IMPL, str(case_path))
    layouts = {cases.case_value(c, "input_layout") for c in chosen}
    modes = {cases.case_value(c, "sparse_mode") for c in chosen}
    assert layouts == {"BSH", "SBH", "BSND", "BNSD"} and modes == {0, 2, 3, 4}
    for case_id in range(len(chosen)):
        row = verify.verify_case(op_dir, case_id, device=DEVICE)  # sets MFU_DISABLE_DROPOUT=1 for the call
        assert row["status"] == "pass", row


def test_fusion_attention_dropout_drops_about_one_minus_keep_prob_and_rescales_the_rest(monkeypatch):
    monkeypatch.delenv("MFU_DISABLE_DROPOUT", raising=False)
    ref, impl = import_file(FA_REF, "fa_ref_drop").Model(), import_file(FA_IMPL, "fa_impl_drop").ModelNew()
    monkeypatch.setattr(type(ref), "dropout_enabled", False)
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 64, 64, device=DEVICE), torch.randn(1, 2, 64, 64, device=DEVICE)
    v = torch.eye(64, device=DEVICE).expand(1, 2, 64, 64).contiguous()  # V = I: the output is P' itself
    keep = 0.8
    probs = ref(q, k, v, 2, "BNSD", 0.125, keep, 2)
    out = impl(q, k, v, 2, "BNSD", 0.125, keep, 2)
    visible, kept = probs > 0, out != 0
    n = int(visible.sum())  # 2 heads x 64*65/2 causal entries = 4160
    dropped = n - int((kept & visible).sum())
    sigma = (n * keep * (1 - keep)) ** 0.5  # binomial: 4160 * 0.2 = 832 expected drops, sigma ~ 25.8
    assert abs(dropped - n * (1 - keep)) < 5 * sigma
    assert not (kept & ~visible).any()
    tol = 1e-2 if DEVICE == "cuda" else 1e-5  # TF32 dot on CUDA
    assert torch.allclose(out[kept], probs[kept] / keep, rtol=tol, atol=tol * 1e-2)
    monkeypatch.setenv("MFU_DISABLE_DROPOUT", "1")  # the switch verify uses: no entry dropped, no rescale
    assert torch.allclose(impl(q, k, v, 2, "BNSD", 0.125, keep, 2), probs, rtol=tol, atol=tol * 1e-2)


def test_varlen_attention_never_reads_padding_and_zeroes_padded_rows():
    ref = import_file(os.path.join(OPS, ZOO["7_SparseVarlenAttention"][0]), "vl_ref").Model()
    impl = import_file(os.path.join(OPS, ZOO["7_SparseVarlenAttention"][1]), "vl_impl").ModelNew()
    torch.manual_seed(0)
    lens = [0, 40, 13]
    q, k, v = (torch.randn(3, 40, h, 16, device=DEVICE) for h in (4, 2, 2))
    for t in (q, k, v):  # NaN in every padded token: any read of padding would poison the output
        t[0] = float("nan")
        t[2, 13:] = float("nan")
    for causal, window_left in [(True, -1), (False, 5), (True, 7)]:
        expected = ref(q, k, v, lens, 10000.0, causal, window_left, 0.25)
        got = impl(q, k, v, lens, 10000.0, causal, window_left, 0.25)
        assert torch.isfinite(got).all()
        assert (got[0] == 0).all() and (got[2, 13:] == 0).all()
        assert torch.allclose(got, expected, atol=1e-2 if DEVICE == "cuda" else 1e-5)


def test_gqa_bottom_right_causal_rows_that_see_no_key_are_zero():
    ref = import_file(os.path.join(OPS, ZOO["6_GQAAttention"][0]), "gqa_ref").Model()
    impl = import_file(os.path.join(OPS, ZOO["6_GQAAttention"][1]), "gqa_impl").ModelNew()
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 70, 32), torch.randn(1, 2, 30, 32), torch.randn(1, 2, 30, 32)
    q, k, v = q.to(DEVICE), k.to(DEVICE), v.to(DEVICE)
    got, expected = impl(q, k, v, True, 0.2), ref(q, k, v, True, 0.2)
    assert (got[:, :, :40] == 0).all() and (expected[:, :, :40] == 0).all()  # query i sees j <= i - 40
    assert torch.allclose(got, expected, atol=1e-2 if DEVICE == "cuda" else 1e-5)


@pytest.mark.parametrize("op, args, needle", [
    ("6_GQAAttention", ([1, 6, 8, 32], [1, 4, 8, 32], [1, 4, 8, 32], True, 0.1), "not a multiple of hkv"),
    ("7_SparseVarlenAttention", ([2, 8, 2, 32], [2, 8, 2, 32], [2, 8, 2, 32], [8, 9], 1e4, True, -1, 0.1),
     "actual_seq_lengths"),
    ("7_SparseVarlenAttention", ([1, 8, 2, 31], [1, 8, 2, 31], [1, 8, 2, 31], [8], 1e4, True, -1, 0.1), "even head"),
    ("5_MHABlock", ([1, 8, 100], 3, True), "not divisible by head_num"),
])
def test_inconsistent_cases_are_rejected_by_reference_and_implementation_with_the_reason(op, args, needle):
    args = [torch.empty(a, device="meta") if isinstance(a, list) and i < (1 if op == "5_MHABlock" else 3) else a
            for i, a in enumerate(args)]
    ref, impl = (import_file(os.path.join(OPS, p), f"rej_{op}_{n}") for n, p in enumerate(ZOO[op]))
    assert needle in outcome(ref.Model(), *args)
    assert needle in outcome(impl.ModelNew(), *args)


def test_the_layout_a_mhablock_directory_links_to_the_canonical_files_and_its_artifact_is_no_case_file():
    root = os.path.join(OPS, "verify", "MHABlock")
    verify_dir = os.path.join(root, "output", "iter_1", "verify")
    canonical = {"MHABlock.py": ZOO["5_MHABlock"][0], "MHABlock.json": "bench/zoo/5_MHABlock.json",
                 "MHABlock_generated.py": ZOO["5_MHABlock"][1]}
    inner = {"MHABlock_torch.py": "MHABlock.py", "MHABlock_torch.json": "MHABlock.json",
             "MHABlock_triton_ascend_impl.py": "MHABlock_generated.py"}
    for name, target in canonical.items():
        link = os.path.join(root, name)
        assert os.path.islink(link) and not os.path.isabs(os.readlink(link))
        assert os.path.samefile(link, os.path.join(OPS, target))
    for name, outer in inner.items():
        link = os.path.join(verify_dir, name)
        assert os.path.islink(link) and not os.path.isabs(os.readlink(link))
        assert os.path.samefile(link, os.path.join(root, outer))
    artifact = os.path.join(verify_dir, "verify_result_MHABlock.json")
    assert not cases.looks_like_case_file(artifact)
    with open(artifact, encoding="utf-8") as f:
        body = json.load(f)
    assert body["example_artifact"] is True
    assert not [k for r in body["results"] for k in r if k.endswith(("_us", "_ns", "_ms", "time"))]


@pytest.mark.parametrize("s_q, s_kv", [(37, 53), (53, 37)])
def test_fusion_attention_modes_2_and_3_align_the_diagonal_top_left_and_bottom_right(s_q, s_kv):
    ref, impl = import_file(FA_REF, f"fa_ref_diag{s_q}").Model(), import_file(FA_IMPL, f"fa_impl_diag{s_q}").ModelNew()
    torch.manual_seed(0)
    q = torch.randn(2, s_q, 4 * 24, device=DEVICE)  # BSH, 4 query heads of 24
    k, v = torch.randn(2, s_kv, 2 * 24, device=DEVICE), torch.randn(2, s_kv, 2 * 24, device=DEVICE)  # 2 kv heads
    outs = {}
    for mode in (0, 2, 3, 4):
        outs[mode] = impl(q, k, v, 4, "BSH", 0.3, 1.0, mode)
        assert torch.allclose(outs[mode], ref(q, k, v, 4, "BSH", 0.3, 1.0, mode), atol=1e-2 if DEVICE == "cuda" else 1e-5)
    assert torch.equal(outs[0], outs[4])  # band with unlimited pre/next tokens = no mask
    assert not torch.allclose(outs[2], outs[3])  # the two diagonals differ once s_q != s_kv
