"""GPU validation of the attention operators: every case line, compiled Triton (3.6 on the H200), bf16 included.

Run on the GPU machine from the repository root:
    python3 -m pytest -q tests/gpu/test_zoo_attention_cuda.py tests/test_zoo_attention.py
(the second file's small-case tests run compiled there too). Every zoo line, up to seq 16k, goes through
prepare_explicit -> OpDir -> mfulib.verify.correctness.verify_case on "cuda", with its tolerances: float16 1e-2, bfloat16 2e-2,
float32 1e-2 (tl.dot on fp32 is TF32). The references chunk their fp32 score matrices to <= 1 GiB, so the largest
line needs a few GiB - except 20_FlashAttentionV2's, which builds its dense scores whole (its largest line, [2, 8192,
4096] with 32 heads, holds 2 x 16 GiB of fp32 scores and their softmax). All 50 real FusionAttention lines run too: 26 pass, 24 rejected with their reasons.
"""
import os

import pytest
import torch

from mfulib.core import cases
from mfulib.run import compat
from mfulib.verify import correctness as verify
from mfulib.core.opdir import OpDir
from mfulib.sources.prepare import prepare_explicit

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (compiled Triton kernels)")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPS = os.path.join(REPO, "examples", "ops")
OPERATORS = {  # op -> (reference, implementation, case file or None for the reference's sibling .json)
    "5_MHABlock": ("bench/zoo/5_MHABlock.py", "gen/zoo/5_MHABlock_triton_optimized.py", None),
    "6_GQAAttention": ("bench/zoo/6_GQAAttention.py", "gen/zoo/6_GQAAttention_generated.py", None),
    "7_SparseVarlenAttention": ("bench/zoo/7_SparseVarlenAttention.py",
                                "gen/zoo/7_SparseVarlenAttention_generated.py", None),
    "20_FlashAttentionV2": ("bench/zoo/20_FlashAttentionV2.py", "gen/zoo/20_FlashAttentionV2_triton.py", None),
    "3_FusionAttention": ("bench/npukernelbench/level4/3_FusionAttention.py",
                          "gen/npukernelbench/level4/3_FusionAttention_generated.py",
                          "npukernelbench/level4/3_FusionAttention.json"),
}


@pytest.fixture(scope="module")
def op_dirs(tmp_path_factory):
    compat.install("cuda")  # 5_MHABlock's ModelNew is Triton-Ascend style
    shared = os.environ.get("MFU_SHARED_DIR", os.path.join(os.path.dirname(REPO), "shared"))
    root, dirs = tmp_path_factory.mktemp("attention_cuda"), {}
    for op, (ref, impl, real) in OPERATORS.items():
        case_path = os.path.join(shared, "data", real) if real else os.path.join(OPS, os.path.splitext(ref)[0] + ".json")
        if os.path.isfile(case_path):
            dst = os.path.join(str(root), op)
            prepare_explicit(os.path.join(OPS, ref), case_path, os.path.join(OPS, impl), dst)
            dirs[op] = OpDir(dst)
    return dirs


def run_all(op_dir):
    rows = []
    for case_id in range(len(op_dir.read_cases())):
        rows.append(verify.verify_case(op_dir, case_id, device="cuda"))
        torch.cuda.empty_cache()
    return rows


@pytest.mark.parametrize("op", ["5_MHABlock", "6_GQAAttention", "7_SparseVarlenAttention", "20_FlashAttentionV2"])
def test_every_zoo_attention_line_passes_on_the_gpu(op_dirs, op):
    failed = [row for row in run_all(op_dirs[op]) if row["status"] != "pass"]
    assert not failed, failed


def test_every_real_fusion_attention_line_passes_or_is_rejected_with_its_reason_on_the_gpu(op_dirs):
    if "3_FusionAttention" not in op_dirs:
        pytest.skip("../shared/data/npukernelbench/level4/3_FusionAttention.json is absent")
    op_dir = op_dirs["3_FusionAttention"]
    rows = run_all(op_dir)
    modes = [cases.case_value(c, "sparse_mode") for c in op_dir.read_cases()]
    for row, mode in zip(rows, modes):
        if mode in (1, 5):
            assert row["status"] == "rejected" and f"sparse_mode {mode}" in row["reason"], row
        else:
            assert row["status"] == "pass" or (row["status"] == "rejected" and "head_dim" in row["reason"]), row
    assert sum(r["status"] == "pass" for r in rows) == 26  # 50 - 17 (modes 1, 5) - 7 (head_dim > 256)
