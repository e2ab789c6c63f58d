"""Issue 29 items 1, 3, 4, 6: class bounds of the FLOPs checker, the tracer's grouped matmul and keyword-only
binding, stand-ins that count 0, the user-side formula hook, REVIEW markers about kernels.

Hand values come from the forward() of public NPUKernelBench-format references (``class Model`` +
``get_input_groups()`` reading ``<N>_<Op>.json``) found in the public code index: their repository is not named by
the index (its ``find_string`` hits carry no repository), so they are cited by file name, what their forward() does
and the index id that ``read_file`` opens:

* ``2_GroupedMatmul.py`` (index id 62023336183): ``forward(A, B, offsets)`` returns ``F.grouped_mm(A, B,
  offs=offsets)``; its builder gives 2-D cases ``offsets = [(i + 1) * (total_rows // num_groups) for i in
  range(num_groups)]`` - END offsets, as torch defines them (torch/nn/functional.py ``grouped_mm``: "offs[i] marks
  the end of group i ... elements beyond offs[-1] are ignored").
* ``7_SparseFlashAttention.py`` (index id 71306326619): ``forward(query, key, value, sparse_indices, scale_value,
  ..., layout_query='BSND', layout_kv='BSND', sparse_mode=3)``; per query token and KV head it gathers the keys
  ``sparse_indices`` lists (stopping at -1), then ``q @ k_sel.T`` and ``softmax @ v_sel``: 2 * N1 * selected *
  (D + D_v) per token. Its case file has no layout attribute where the default BSND holds.
* level2 ``GroupNormSwish`` (named in docs/sources.md's benchmark conventions): calls
  ``torch_npu.npu_group_norm_swish``, whose tracer stand-in counts 0 matrix FLOPs.

The same classes in repository-cited public references (tests/test_flops_drafts_classes.py reads them for the
drafts): grouped matmul ``weich97/NPUKernelBench`` ``tasks/level3/GMM/GroupedMatmul/validation/module.py``; sparse
attention ``sgl-project/sgl-kernel-npu`` ``tests/python/sgl_kernel_npu/test_sparse_flash_attention.py``;
GroupNormSwish ``weich97/NPUKernelBench`` ``tasks/level2/Norm/GroupNormSwish/validation/module.py``.

The references' code is not copied: the work directories below call the same ops with the same argument
conventions, and the hand values are computed from the formulas above.
"""
import textwrap

import pytest
import torch

from mfulib.core.cases import describe_case
from mfulib.core.symbol_roles import attention_roles, grouped_matmul_operands
from mfulib.flops import check as fchk
from mfulib.flops import contract as fcon
from mfulib.flops import tracer as fc
from mfulib.flops import user_formulas
from mfulib.flops.bounds import class_bound_checks
from mfulib.flops.tracer import TraceResult

from test_flops_tracer import LOADER, attr_, tensor, write_workdir


def status_of(row, name):
    return next(c for c in row["checks"] if c["name"] == name)["status"]


def detail_of(row, name):
    return next(c for c in row["checks"] if c["name"] == name)["detail"]


def workdir(tmp_path, ref_body, cases, flops_src, name="op", extra=None):
    od = write_workdir(tmp_path, ref_body, cases, name)
    (tmp_path / name / "flops.py").write_text(textwrap.dedent(flops_src))
    for fname, body in (extra or {}).items():
        (tmp_path / name / fname).write_text(textwrap.dedent(body))
    return od


def check(od, case_id=0):
    ff = fcon.load_flops(od.flops_py)
    reg, standins = user_formulas.registry_with(user_formulas.collect(ff.module, ff.path))
    return fchk.check_case(ff, od, case_id, trace_kwargs={"registry": reg, "standins": standins})


# ------------------------------------------------------------------------------------------------ grouped matmul

GMM_REF = '''
import json, os, torch, torch.nn as nn, torch.nn.functional as F
class Model(nn.Module):
    def forward(self, A, B, offsets=None):
        return F.grouped_mm(A, B, offs=offsets)
def get_input_groups():
    out = []
    for line in open(os.path.splitext(__file__)[0] + ".json"):
        if not line.strip():
            continue
        a, b = json.loads(line)["inputs"][:2]
        A = torch.randn(a["shape"], dtype=torch.float16)
        B = torch.randn(b["shape"], dtype=torch.float16)
        g = a["shape"][0] // b["shape"][0]   # end offsets, as the public builder writes them
        out.append([A, B, torch.tensor([(i + 1) * g for i in range(b["shape"][0])], dtype=torch.int32)])
    return out
def get_init_inputs():
    return []
'''
# A [100, 64] fp16 (6400 elements: below the 64K shadow size), B [3, 64, 32]: group size 100 // 3 = 33, offsets
# [33, 66, 99]: torch computes rows 0..98 -> 2 * 99 * 64 * 32 = 405504. Start offsets (all 100 rows): 409600.
GMM_CASE = {"inputs": [tensor("A", [100, 64], "float16"), tensor("B", [3, 64, 32], "float16"),
                       {"name": "offsets", "type": "tensor", "required": False, "dtype": "int32", "shape": [3]}]}
GMM_HAND, GMM_ALL_ROWS = 2 * 99 * 64 * 32, 2 * 100 * 64 * 32


def test_a_small_fp16_grouped_matmul_is_counted_at_its_end_offsets_not_zero(tmp_path):
    od = write_workdir(tmp_path, GMM_REF, [GMM_CASE])
    r = fc.trace_case(od, 0)
    assert r.status == "ok" and r.device == "meta"
    assert r.total_flops == GMM_HAND == 405504


def test_grouped_matmul_flops_py_at_end_offsets_passes_start_offsets_fail(tmp_path):
    right = f"def flops(case):\n    return {GMM_HAND}.0\n"
    row = check(workdir(tmp_path, GMM_REF, [GMM_CASE], right))
    assert row["status"] == "pass" and row["ratio"] == 1.0
    assert status_of(row, "grouped_matmul_bound") == "pass"
    (tmp_path / "s").mkdir()
    start = f"def flops(case):\n    return {GMM_ALL_ROWS}.0\n"   # every row, as start offsets would read them
    row = check(workdir(tmp_path / "s", GMM_REF, [GMM_CASE], start))
    assert row["status"] == "fail" and row["ratio"] == pytest.approx(100 / 99)


def test_a_grouped_count_above_the_ungrouped_product_fails_the_bound(tmp_path):
    """Every group over all rows: 3 x 409600 - above the ungrouped A @ B[g] product 2 * 100 * 64 * 32."""
    forged = f"def flops(case):\n    return {3 * GMM_ALL_ROWS}.0\n"
    row = check(workdir(tmp_path, GMM_REF, [GMM_CASE], forged))
    assert status_of(row, "grouped_matmul_bound") == "fail"
    assert "exceeds the ungrouped product" in detail_of(row, "grouped_matmul_bound")
    assert f"= {GMM_ALL_ROWS} " in detail_of(row, "grouped_matmul_bound")


def test_grouped_operands_from_the_case_shapes():
    info = describe_case(GMM_CASE, 0)
    g = grouped_matmul_operands(info)
    assert g == {"a": "A", "b": "B", "offsets": "offsets", "ungrouped_flops": GMM_ALL_ROWS}
    three_d = {"inputs": [tensor("A", [4, 16, 64]), tensor("B", [4, 64, 32])]}
    assert grouped_matmul_operands(describe_case(three_d, 0))["ungrouped_flops"] == 2 * 4 * 16 * 64 * 32


# ------------------------------------------------------------------------------------------------ attention bounds

def _sfa_case(b, s1, n1, d, s2, n2, k, layout=True):
    ins = [tensor("query", [b, s1, n1, d], "float16"), tensor("key", [b, s2, n2, d], "float16"),
           tensor("value", [b, s2, n2, d], "float16"),
           {"name": "sparse_indices", "type": "tensor", "required": True, "dtype": "int32", "shape": [b, s1, n2, k]},
           attr_("scale_value", 0.125, "float")]
    if layout:
        ins += [attr_("layout_query", "BSND", "str"), attr_("layout_kv", "BSND", "str")]
    return {"inputs": ins}


def _bound(cases, case_id, flops, tracer_status="unverified", tr=None):
    infos = [describe_case(c, i) for i, c in enumerate(cases)]
    tr = tr or TraceResult(status="error", reason="torch_npu op not runnable here")
    return class_bound_checks({"status": "ok", "flops": flops}, tr, tracer_status, infos, case_id)


def test_sparse_attention_reading_a_default_count_exceeds_dense_attention():
    """SFA case B 1, S1 4, N1 8, D 64, S2 16, N2 1, 8 index slots. Dense: 2 * 1 * 8 * 4 * 16 * (64 + 64) =
    131072. The draft that reads sparse_count 2048 instead of the index tensor: 2 * 8 * 4 * 2048 * 128 =
    16777216 (128x dense) - fails; the count of 8 selected keys per token, 2 * 8 * 4 * 8 * 128 = 65536, passes."""
    cases = [_sfa_case(1, 4, 8, 64, 16, 1, 8)]
    (chk,) = _bound(cases, 0, 16777216)
    assert chk["name"] == "attention_bound" and chk["status"] == "fail"
    assert "exceeds dense attention" in chk["detail"] and "131072" in chk["detail"]
    (chk,) = _bound(cases, 0, 65536)
    assert chk["status"] == "pass"


def test_sparse_attention_without_a_layout_takes_heads_from_the_symbol_analysis():
    """The public case file gives no layout (the builder defaults to BSND): over two cases the key heads divide the
    query heads on axis 2 (8/1, 16/2), so axis 2 is heads and axis 1 the sequence. Case 1: B 2, S1 8, N1 16,
    D 32, S2 64, N2 2: dense 2 * 2 * 16 * 8 * 64 * (32 + 32) = 2097152."""
    cases = [_sfa_case(1, 4, 8, 64, 16, 1, 8, layout=False), _sfa_case(2, 8, 16, 32, 64, 2, 8, layout=False)]
    roles = attention_roles([describe_case(c, i) for i, c in enumerate(cases)])
    assert roles[1].dims == {"b": 2, "n_q": 16, "s_q": 8, "s_k": 64, "d": 32, "d_v": 32}
    (chk,) = _bound(cases, 1, 2097152 * 1.5)
    assert chk["status"] == "fail"


def test_attention_roles_unknown_are_unverified_naming_what_is_missing():
    """One case, q and k [1, 8, 8, 64], no layout: nothing tells heads from sequence - unverified, never a pass;
    when the tracer verified the count the bound adds nothing (skip)."""
    case = {"inputs": [tensor("q", [1, 8, 8, 64]), tensor("k", [1, 8, 8, 64]), tensor("v", [1, 8, 8, 64])]}
    (chk,) = _bound([case], 0, 1e9)
    assert chk["status"] == "unverified" and "heads and which the sequence" in chk["detail"]
    (chk,) = _bound([case], 0, 1e9, tracer_status="pass", tr=TraceResult(status="ok", total_flops=1e9))
    assert chk["status"] == "skip"


@pytest.mark.parametrize("inputs, dense", [
    # TND: q [T 96, N 4, D 64], k/v [T 96, 4, 64]: every query with every key of the buffer 2 * 4 * 96 * 96 * 128
    ([tensor("query", [96, 4, 64]), tensor("key", [96, 4, 64]), tensor("value", [96, 4, 64]),
      attr_("input_layout", "TND", "str"), attr_("actual_seq_qlen", [32, 96], "list")], 2 * 4 * 96 * 96 * 128),
    # BSH with head_num 4: q [2, 16, 256] (d 64), k/v [2, 32, 256]: 2 * 2 * 4 * 16 * 32 * (64 + 64)
    ([tensor("query", [2, 16, 256]), tensor("key", [2, 32, 256]), tensor("value", [2, 32, 256]),
      attr_("head_num", 4), attr_("input_layout", "BSH", "str")], 2 * 2 * 4 * 16 * 32 * 128),
    # paged BSH: q [2, 1, 512] (8 heads of 64, 1 KV head), caches [10, 16, 64], block_table [2, 5], block_size
    # 16: 5 * 16 = 80 reachable keys: 2 * 2 * 8 * 1 * 80 * (64 + 64)
    ([tensor("query", [2, 1, 512]), tensor("key", [10, 16, 64]), tensor("value", [10, 16, 64]),
      {"name": "block_table", "type": "tensor", "required": True, "dtype": "int32", "shape": [2, 5]},
      attr_("num_heads", 8), attr_("num_key_value_heads", 1), attr_("block_size", 16),
      attr_("input_layout", "BSH", "str")], 2 * 2 * 8 * 80 * 128),
    # paged BSH, the table as a list attribute: q [2, 4, 64] (4 heads of 16), caches [6, 16, 32] (2 KV heads, d_v
    # 16), 3 blocks of 16 per sequence: 2 * 2 * 4 * 4 * 48 * (16 + 16)
    ([tensor("query", [2, 4, 64]), tensor("key", [6, 16, 32]), tensor("value", [6, 16, 32]),
      attr_("block_table", [[0, 1, 2], [3, 4, 5]], "list"), attr_("num_heads", 4), attr_("num_key_value_heads", 2),
      attr_("block_size", 16), attr_("input_layout", "BSH", "str")], 2 * 2 * 4 * 4 * 48 * 32),
])
def test_dense_attention_of_tnd_bsh_and_paged_layouts(inputs, dense):
    case = {"inputs": inputs}
    (roles,) = attention_roles([describe_case(case, 0)]).values()
    assert roles.dense_flops() == dense
    assert _bound([case], 0, dense)[0]["status"] == "pass"
    assert _bound([case], 0, dense * 1.02)[0]["status"] == "fail"


# ------------------------------------------------------------------------------------------------ tracer verdicts

def test_a_stand_in_counting_zero_makes_the_case_unverified_naming_the_op():
    """GroupNormSwish through torch_npu.npu_group_norm_swish: the stand-in counts 0 matrix FLOPs, flops.py 1e6:
    the tracer's 0 is the stand-in's claim - unverified naming the op, not 'failed' blaming flops.py."""
    tr = TraceResult(status="ok", total_flops=0.0, formula_flops={"torch_npu.npu_group_norm_swish": 0.0},
                     vector_ops={"aten::mul": 1})
    ev = {"status": "ok", "flops": 1e6, "flops_parts": None, "reason": None}
    out = fchk.compare_with_tracer(ev, tr, {"inputs": []}, 0)
    assert out["status"] == "unverified" and "torch_npu.npu_group_norm_swish" in out["diagnosis"]
    plain = TraceResult(status="ok", total_flops=0.0, vector_ops={"aten::mul": 1})
    assert fchk.compare_with_tracer(ev, plain, {"inputs": []}, 0)["status"] == "fail"


KW_REF = LOADER + '''
class Model(nn.Module):
    def forward(self, a, b, *, scale=1.0, transpose_b=False):
        return (a @ (b.T if transpose_b else b)) * scale
'''


def test_keyword_only_forward_arguments_are_bound_by_case_file_name(tmp_path):
    """forward(a, b, *, scale, transpose_b) fed [a, b, 0.5, True] positionally by get_input_groups():
    a [4, 8] @ b.T ([3, 8] -> [8, 3]) = 2 * 4 * 8 * 3 = 192."""
    case = {"inputs": [tensor("a", [4, 8]), tensor("b", [3, 8]), attr_("scale", 0.5, "float"),
                       attr_("transpose_b", True, "bool")]}
    r = fc.trace_case(write_workdir(tmp_path, KW_REF, [case]), 0)
    assert r.status == "ok" and r.total_flops == 192
    assert any("keyword-only" in n for n in r.notes)


# ------------------------------------------------------------------------------------------------ user formulas

def _custom_op():
    if not hasattr(torch.ops, "mfu_userhook") or not hasattr(torch.ops.mfu_userhook, "fused_mm"):
        lib = torch.library.Library("mfu_userhook", "DEF")  # test double: an opaque custom op
        lib.define("fused_mm(Tensor a, Tensor b) -> Tensor")
        lib.impl("fused_mm", lambda a, b: a @ b, "CPU")
        lib.impl("fused_mm", lambda a, b: a.new_empty(a.shape[0], b.shape[1]), "Meta")
        _custom_op.lib = lib


CUSTOM_REF = LOADER + '''
class Model(nn.Module):
    def forward(self, a, b):
        return torch.ops.mfu_userhook.fused_mm(a, b)
'''
CUSTOM_CASE = {"inputs": [tensor("a", [4, 8]), tensor("b", [8, 3])]}   # 2 * 4 * 8 * 3 = 192
FLOPS_192 = "def flops(case):\n    return 192.0\n"
OPS_FILE = '''
from mfulib.flops.contract import op_formula
@op_formula("mfu_userhook::fused_mm", source="a @ b: 2 * M * K * N")
def fused_mm_flops(values, a, b):
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]
'''


def test_a_formula_registered_beside_flops_py_is_used_and_reported(tmp_path):
    _custom_op()
    row = check(workdir(tmp_path, CUSTOM_REF, [CUSTOM_CASE], FLOPS_192, extra={"flops_ops.py": OPS_FILE}))
    assert row["tracer"]["total_flops"] == 192 and row["tracer"]["user_formulas"] == {"mfu_userhook::fused_mm": 192}
    assert row["status"] == "pass" and "flops.py's own claim" in detail_of(row, "user_formula")
    (tmp_path / "no").mkdir()
    assert check(workdir(tmp_path / "no", CUSTOM_REF, [CUSTOM_CASE], FLOPS_192))["status"] == "unverified"


def test_a_user_formula_in_flops_py_is_checked_like_the_rest(tmp_path):
    _custom_op()
    row = check(workdir(tmp_path, CUSTOM_REF, [CUSTOM_CASE], OPS_FILE + "def flops(case):\n    return 384.0\n"))
    assert row["status"] == "fail" and row["ratio"] == 2.0


def test_a_user_formula_for_an_op_with_a_built_in_one_is_refused(tmp_path):
    src = OPS_FILE.replace("mfu_userhook::fused_mm", "aten::_grouped_mm") + FLOPS_192
    od = workdir(tmp_path, CUSTOM_REF, [CUSTOM_CASE], src)
    ff = fcon.load_flops(od.flops_py)
    with pytest.raises(fcon.UserError, match="built-in formula"):
        user_formulas.registry_with(user_formulas.collect(ff.module, ff.path))
    with pytest.raises(ValueError, match="namespace::op"):
        user_formulas.op_formula("fused_mm")


# ------------------------------------------------------------------------------------------------ markers

def test_review_markers_about_kernels_do_not_block_a_pass_but_formula_markers_do(tmp_path):
    kernel = FLOPS_192 + ("# REVIEW: no Triton kernel launch found (no model_new.py?) - generic patterns: match "
                          "them to kernel names\n")
    ff = fcon.load_flops(workdir(tmp_path, CUSTOM_REF, [CUSTOM_CASE], kernel).flops_py)
    checks = fchk.file_checks(ff, [])
    assert [c["status"] for c in checks if c["name"].startswith("review")] == ["warn"]
    assert fchk.verdict_of([{"status": "pass"}], checks) == "passed"
    (tmp_path / "f").mkdir()
    formula = kernel + "# REVIEW: every index slot counted (an upper bound): a -1 ends a token's list\n"
    ff = fcon.load_flops(workdir(tmp_path / "f", CUSTOM_REF, [CUSTOM_CASE], formula).flops_py)
    checks = fchk.file_checks(ff, [])
    assert fchk.verdict_of([{"status": "pass"}], checks) == "unverified"
    assert "1 FLOPs line(s)" in next(c["detail"] for c in checks if c["name"] == "review_markers")
