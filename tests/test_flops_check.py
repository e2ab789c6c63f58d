"""check_flops: planted mistakes in flops.py, each caught with its own diagnosis.

The operator is the team's MHA block (examples/ops/bench/zoo/5_MHABlock.py: four [hidden, hidden] projections,
attention with an optional top-left causal mask) on small cases, plus small hand-made references for the
variable-length, vector-only and custom-op situations.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from mfulib.flops import check as fchk
from mfulib.flops import contract as fcon
from mfulib.core.jsonio import read_json
from mfulib.schemas import flops_check_json
from mfulib.core.opdir import OpDir
from mfulib.sources.prepare import prepare_explicit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "examples", "ops", "bench", "zoo")
CHECK = os.path.join(ROOT, "scripts", "check_flops.py")

# x [b, s, hidden], head_num, causal.  Hand count for case 0 (b=2, s=16, hidden=32, causal):
#   proj = 4 * 2*(2*16)*32*32 = 262144;  attn = 2 * b * pairs * (hidden + hidden) = 2*2*136*64 = 34816
MHA_CASES = [[2, 16, 32, 4, True], [1, 12, 32, 2, False]]
MHA_CASE0_PROJ, MHA_CASE0_ATTN = 262144, 34816

CORRECT = '''
from mfulib.flops.contract import attention_flops, attention_pairs, attr, matmul_flops, shape
KERNEL_PARTS = {"attn": ["*flash*"], "proj": ["*matmul*"]}
def flops_parts(case):
    b, s, h = shape(case, "x")
    pairs = attention_pairs(s, s, causal=bool(attr(case, "causal")))
    return {"proj": 4 * matmul_flops(b * s, h, h), "attn": attention_flops(pairs, 1, h, h, batch=b)}
def flops(case):
    return float(sum(flops_parts(case).values()))
'''

PLANTED = {
    # causal reduction forgotten: the dense s*s pairs
    "causal_missed": CORRECT.replace('attention_pairs(s, s, causal=bool(attr(case, "causal")))', "s * s"),
    # only the attention core: the four projections are missing
    "projections_missed": CORRECT.replace('"proj": 4 * matmul_flops(b * s, h, h), ', ""),
    # parts do not add up to flops()
    "parts_not_summing": CORRECT.replace("return float(sum(flops_parts(case).values()))",
                                         "return float(sum(flops_parts(case).values())) + 1e6"),
    # zero
    "zero": CORRECT.replace("return float(sum(flops_parts(case).values()))", "return 0.0"),
    # everything counted twice (4 FLOPs per MAC)
    "doubled": CORRECT.replace("return float(sum(flops_parts(case).values()))",
                               "return 2.0 * sum(flops_parts(case).values())"),
}


def mha_workdir(tmp_path, flops_src, name="mha"):
    src = tmp_path / "src"
    src.mkdir()
    cases = src / "5_MHABlock.json"
    cases.write_text("".join(json.dumps({"inputs": [
        {"name": "x", "type": "tensor", "required": True, "dtype": "float32", "shape": [b, s, h]},
        {"name": "head_num", "type": "attr", "required": True, "dtype": "int", "value": n},
        {"name": "causal", "type": "attr", "required": True, "dtype": "bool", "value": c}]}) + "\n"
        for b, s, h, n, c in MHA_CASES))
    impl = src / "impl.py"
    impl.write_text("class ModelNew:\n    pass\n")
    dst = tmp_path / name
    prepare_explicit(os.path.join(ZOO, "5_MHABlock.py"), str(cases), str(impl), str(dst))
    (dst / "flops.py").write_text(textwrap.dedent(flops_src))
    return OpDir(dst)


def check(od, case_id=0, **kw):
    return fchk.check_case(fcon.load_flops(od.flops_py), od, case_id, **kw)


def status_of(row, name):
    return next(c for c in row["checks"] if c["name"] == name)["status"]


def test_a_correct_flops_py_passes_with_ratio_one(tmp_path):
    od = mha_workdir(tmp_path, CORRECT)
    row = check(od)
    assert row["flops"] == MHA_CASE0_PROJ + MHA_CASE0_ATTN
    assert row["flops_parts"] == {"proj": MHA_CASE0_PROJ, "attn": MHA_CASE0_ATTN}
    assert row["status"] == "pass" and row["ratio"] == 1.0


def test_a_missed_causal_reduction_is_diagnosed_as_counting_the_dense_scores(tmp_path):
    row = check(mha_workdir(tmp_path, PLANTED["causal_missed"]))
    assert status_of(row, "tracer") == "fail"
    assert "dense score matrix" in row["diagnosis"]
    dense_attn = 2 * 2 * 16 * 16 * 64  # 65536
    assert row["ratio"] == pytest.approx((MHA_CASE0_PROJ + dense_attn) / (MHA_CASE0_PROJ + MHA_CASE0_ATTN))


def test_missed_projections_are_diagnosed_with_the_op_that_holds_them(tmp_path):
    row = check(mha_workdir(tmp_path, PLANTED["projections_missed"]))
    assert status_of(row, "tracer") == "fail"
    assert row["ratio"] < 0.5
    assert "aten::mm" in row["diagnosis"] and "projections" in row["diagnosis"]


def test_parts_that_do_not_add_up_fail_the_parts_check(tmp_path):
    row = check(mha_workdir(tmp_path, PLANTED["parts_not_summing"]))
    assert status_of(row, "parts_sum") == "fail"


def test_zero_flops_for_an_operator_with_matrix_work_fail_against_the_tracer(tmp_path):
    """flops.py returns 0 for an MHA block whose projections and attention are matrix work: flops 0 is a legal
    value (no matrix work) but the tracer counts > 0, so the ratio 0 fails (< 0.5: work missed)."""
    row = check(mha_workdir(tmp_path, PLANTED["zero"]))
    assert status_of(row, "flops_finite") == "pass" and status_of(row, "tracer") == "fail"
    assert row["ratio"] == 0.0 and row["status"] == "fail"


def test_doubled_flops_are_diagnosed_as_about_two(tmp_path):
    row = check(mha_workdir(tmp_path, PLANTED["doubled"]), case_id=1)  # the non-causal case
    assert row["ratio"] == pytest.approx(2.0)
    assert "about 2" in row["diagnosis"]


def test_kernel_parts_naming_a_part_without_flops_fail_the_file_check(tmp_path):
    od = mha_workdir(tmp_path, CORRECT.replace('"proj": ["*matmul*"]', '"gemm": ["*matmul*"]'))
    ff = fcon.load_flops(od.flops_py)
    rows = [fchk.check_case(ff, od, 0)]
    kp = next(c for c in fchk.file_checks(ff, rows) if c["name"] == "kernel_parts")
    assert kp["status"] == "fail" and "gemm" in kp["detail"]


def test_implied_time_at_the_peak_beyond_the_single_call_limit_is_an_error():
    # 1e12 FLOPs at 100 TFLOP/s take 10 ms: fine; 1e18 FLOPs would take 10000 s at the peak: no benchmark call is
    # that long. (MFU above the peak from a measured kernel time is step 4's check: test_collect_units.)
    ok = fchk.implied_time_check(1e12, {"tflops": 100.0, "source": "test"})
    assert ok["status"] == "pass" and "implied 10 ms" in ok["detail"]
    assert fchk.implied_time_check(1e12, None)["status"] == "skip"
    assert fchk.implied_time_check(1e18, {"tflops": 100.0, "source": "test"})["status"] == "fail"
    assert fchk.implied_time_check(1e12, {"tflops": 100.0, "source": "test"}, max_implied_ms=5.0)["status"] == "fail"


def test_the_implied_time_peak_comes_from_peak_json_never_from_the_later_performance_json(tmp_path):
    # step 3 must not read step 4's output: a broken performance.json is not even opened
    (tmp_path / "performance.json").write_text("{not json")
    assert fchk.resolve_peak(str(tmp_path), None, "none")["tflops"] is None
    (tmp_path / "peak.json").write_text(json.dumps({"tool": "peak_calib", "peak_tflops": {"float16": 900.0},
                                                    "nominal": {"tflops": {"float16": 989.5}, "source": "sheet"}}))
    got = fchk.resolve_peak(str(tmp_path), None, "none")
    assert got["tflops"] == 989.5 and "peak.json nominal (sheet)" in got["source"]


# ------------------------------------------------------------------------------------------- other situations

def write_dir(tmp_path, ref_body, case_lines, flops_src, name="op"):
    from test_flops_tracer import LOADER, write_workdir
    od = write_workdir(tmp_path, LOADER + textwrap.dedent(ref_body), case_lines, name)
    with open(od.flops_py, "w") as f:
        f.write(textwrap.dedent(flops_src))
    return od


VARLEN_REF = '''
class Model(nn.Module):
    def forward(self, q, actual_seq_lengths):
        out = torch.zeros_like(q)
        for b, n in enumerate(actual_seq_lengths):   # [b, s, d]: sequence b has n real tokens
            x = q[b, :n]
            out[b, :n] = (x @ x.T).softmax(-1) @ x
        return out
'''
VARLEN_CASE = {"inputs": [{"name": "q", "type": "tensor", "required": True, "dtype": "float32", "shape": [2, 32, 8]},
                          {"name": "actual_seq_lengths", "type": "attr", "required": True, "dtype": "list",
                           "value": [32, 5]}]}


def test_padded_lengths_in_a_variable_length_case_are_diagnosed(tmp_path):
    padded = '''
from mfulib.flops.contract import attention_flops, shape
def flops(case):
    b, s, d = shape(case, "q")
    return float(attention_flops(s * s, 1, d, d, batch=b))       # padded maximum: wrong
'''
    row = check(write_dir(tmp_path, VARLEN_REF, [VARLEN_CASE], padded))
    assert row["status"] == "fail"
    assert "actual lengths" in row["diagnosis"]
    assert row["ratio"] == pytest.approx(2 * 1024 / (1024 + 25))


def test_lengths_inconsistent_with_the_shapes_fail_the_length_check(tmp_path):
    bad = json.loads(json.dumps(VARLEN_CASE))
    bad["inputs"][1]["value"] = [40, 5]  # 40 > s = 32
    fine = '''
from mfulib.flops.contract import attention_flops, attr, shape
def flops(case):
    d = shape(case, "q")[-1]
    return float(sum(attention_flops(n * n, 1, d, d) for n in attr(case, "actual_seq_lengths")))
'''
    row = check(write_dir(tmp_path, VARLEN_REF, [bad], fine))
    assert status_of(row, "seq_lengths") == "fail"


LN_REF = '''
class Model(nn.Module):
    def forward(self, x):
        return F.layer_norm(x, [x.shape[-1]])
'''
LN_CASE = {"inputs": [{"name": "x", "type": "tensor", "required": True, "dtype": "float32", "shape": [64, 128]}]}


def test_a_vector_only_operator_passes_as_checked_with_matrix_zero_and_its_vector_arithmetic_checked(tmp_path):
    """LayerNorm without affine on x [64, 128]: no matrix work (flops 0 on both sides) and vector arithmetic
    5 per element (mean sum, centre, square, variance sum, normalise) = 5 * 64 * 128 = 40960, the tracer's
    aten::native_layer_norm cost."""
    vec = '''
def flops(case):
    return 0.0
def vector_flops(case):
    return 5.0 * 64 * 128
'''
    row = check(write_dir(tmp_path, LN_REF, [LN_CASE], vec))
    assert row["status"] == "pass" and row["tracer"]["vector_flops"] == 40960
    assert status_of(row, "vector_flops") == "pass"
    assert "no matrix work on either side" in row["diagnosis"] and "native_layer_norm" in row["diagnosis"]


def test_vector_arithmetic_counted_as_matrix_flops_fails(tmp_path):
    """The old convention (flops = 5 per element = 40960 for x [64, 128]) now fails: the reference has no matrix
    work (tracer 0), so any flops(case) > 0 is a forged MFU numerator."""
    old = '''
def flops(case):
    return 5.0 * 64 * 128
'''
    row = check(write_dir(tmp_path, LN_REF, [LN_CASE], old))
    assert row["status"] == "fail" and "matrix work only" in row["diagnosis"]


def test_a_forged_vector_count_fails_against_the_element_costs(tmp_path):
    """A Sum operator forged at 10^9 FLOPs per element: x [64, 128] sums to 8192 FLOPs (1 per input element of
    aten::sum), vector_flops says 8192e9 - the vector check fails (the defect: 'passed with exit 0')."""
    ref = '''
class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=-1)
'''
    forged = '''
def flops(case):
    return 0.0
def vector_flops(case):
    return 1e9 * 64 * 128
'''
    row = check(write_dir(tmp_path, ref, [LN_CASE], forged))
    assert row["tracer"]["vector_flops"] == 8192
    assert status_of(row, "vector_flops") == "fail" and row["status"] == "fail"
    honest = forged.replace("1e9 * 64 * 128", "64 * 128")
    (tmp_path / "ok").mkdir()
    assert check(write_dir(tmp_path / "ok", ref, [LN_CASE], honest))["status"] == "pass"


def test_a_tracer_blind_to_a_custom_op_gives_unverified_not_passed(tmp_path):
    """a [4, 8] @ b [8, 3] through a custom op the tracer cannot see: flops.py says 2 * 4 * 8 * 3 = 192, the
    tracer counts 0 and names the op: the check cannot fail, so the case is unverified (never pass)."""
    from test_flops_tracer import test_a_custom_op_is_named_as_unseen_instead_of_silently_counting_zero as make_op
    make_op()  # registers the mfu_testdouble::mystery_mm test double
    ref = '''
class Model(nn.Module):
    def forward(self, a, b):
        return torch.ops.mfu_testdouble.mystery_mm(a, b)
'''
    mm = '''
def flops(case):
    return 2.0 * 4 * 8 * 3
'''
    case = {"inputs": [{"name": "a", "type": "tensor", "required": True, "dtype": "float32", "shape": [4, 8]},
                       {"name": "b", "type": "tensor", "required": True, "dtype": "float32", "shape": [8, 3]}]}
    od = write_dir(tmp_path, ref, [case], mm)
    row = check(od)
    assert row["status"] == "unverified"
    assert "cannot see" in row["diagnosis"] and "mfu_testdouble::mystery_mm" in row["diagnosis"]
    summary = fchk.summarize([row], [])
    assert summary["verdict"] == "unverified" and not summary["passed"] and summary["n_unverified"] == 1
    from mfulib.flops.check_command import exit_status
    assert exit_status(summary) == fchk.EXIT_UNVERIFIED == 3
    assert exit_status(summary, accept_unverified=True) == 0


def test_flops_py_must_reject_what_the_reference_rejects(tmp_path):
    ref = '''
class Model(nn.Module):
    def forward(self, x):
        raise ValueError("case rejected: not supported")
'''
    od = write_dir(tmp_path, ref, [{"inputs": [{"name": "x", "type": "tensor", "required": True, "dtype": "float32",
                                                "shape": [2, 2]}]}], "def flops(case):\n    return 8.0\n")
    row = check(od)
    assert row["status"] == "fail" and "reference rejects" in row["diagnosis"]


def test_flops_with_args_receives_the_seeded_forward_arguments(tmp_path):
    ref = '''
class Model(nn.Module):
    def forward(self, x, n):
        return x[:n] @ x[:n].T
'''
    with_args = '''
def flops(case, args):
    x, n = args                       # n as get_input_groups() built it
    return 2.0 * n * n * x.shape[1]
'''
    case = {"inputs": [{"name": "x", "type": "tensor", "required": True, "dtype": "float32", "shape": [16, 4]},
                       {"name": "n", "type": "attr", "required": True, "dtype": "int", "value": 10}]}
    row = check(write_dir(tmp_path, ref, [case], with_args), seed=7)
    assert row["status"] == "pass" and row["flops"] == 2 * 10 * 10 * 4 and row["seed"] == 7


# ------------------------------------------------------------------------------------------------ the CLI

def test_the_cli_exits_one_on_a_planted_mistake_and_zero_once_fixed(tmp_path):
    od = mha_workdir(tmp_path, PLANTED["causal_missed"])
    r = subprocess.run([sys.executable, CHECK, "--op-dir", od.path, "--backend", "none"], capture_output=True,
                       text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED" in r.stdout and "dense score matrix" in r.stdout
    doc = read_json(os.path.join(od.path, "flops_check.json"))
    assert doc["schema"] == flops_check_json.SCHEMA and doc["tool"] == "check_flops.py" and not doc["summary"]["passed"]
    with open(od.flops_py, "w") as f:
        f.write(textwrap.dedent(CORRECT))
    r = subprocess.run([sys.executable, CHECK, "--op-dir", od.path, "--backend", "none", "--quiet"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_cli_reports_a_missing_flops_py_as_a_user_error(tmp_path):
    od = mha_workdir(tmp_path, CORRECT)
    os.remove(od.flops_py)
    r = subprocess.run([sys.executable, CHECK, "--op-dir", od.path], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "flops_generator.py" in r.stderr


def test_tracer_only_mode_needs_no_flops_py(tmp_path):
    od = mha_workdir(tmp_path, CORRECT)
    os.remove(od.flops_py)
    out = tmp_path / "tracer.json"
    r = subprocess.run([sys.executable, CHECK, "--op-dir", od.path, "--tracer-only", "--cases", "0", "-o", str(out),
                        "--quiet"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = read_json(out)
    assert doc["per_case"][0]["tracer"]["total_flops"] == MHA_CASE0_PROJ + MHA_CASE0_ATTN
    shutil.rmtree(od.path)


def test_an_npu_only_reference_that_calls_npu_is_traced_on_meta_by_the_cli(tmp_path):
    ref = '''
import json, os, torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, a, b):
        import torch_npu                            # NPU-only reference: torch_npu and .npu() everywhere
        return torch.bmm(a.npu(), b.npu())
def get_input_groups():
    return [[torch.randn(e["shape"]).npu() for e in json.loads(line)["inputs"]]
            for line in open(os.path.splitext(__file__)[0] + ".json") if line.strip()]
'''
    shape = [8, 1024, 1024]  # 32 MiB per input: built on meta, never allocated
    case = {"inputs": [{"name": n, "type": "tensor", "required": True, "dtype": "float32", "shape": shape}
                       for n in ("a", "b")]}
    from test_flops_tracer import write_workdir
    od = write_workdir(tmp_path, ref, [case])
    r = subprocess.run([sys.executable, CHECK, "--op-dir", od.path, "--tracer-only", "--quiet"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    tr = read_json(os.path.join(od.path, "flops_check.json"))["per_case"][0]["tracer"]
    assert (tr["device"], tr["total_flops"]) == ("meta", 2 * 8 * 1024 ** 3)


# ------------------------------------------------------------------------------------------------ bad input

def test_a_string_from_flops_and_an_unknown_compute_dtype_fail_the_case_with_the_file_named(tmp_path):
    bad = CORRECT.replace("return float(sum(flops_parts(case).values()))", "return '384'") + \
        "def compute_dtype(case):\n    return 'fp8'\n"
    od = mha_workdir(tmp_path, bad)
    row = check(od, 0)
    assert row["status"] == "fail" and row["flops"] is None and row["compute_dtype"] is None
    diag = row["diagnosis"]
    assert f"{od.flops_py}: " in diag and "returned str '384'" in diag and "case 0" in diag
    assert status_of(row, "compute_dtype") == "fail" and "'fp8'" in row["compute_dtype_error"]


@pytest.mark.parametrize("argv, says", [
    (["--largest", "0"], "--largest 0: must be >= 1"),
    (["--largest", "-2"], "--largest -2: must be >= 1"),
    (["--cases", "5-3"], "'5-3' is not a case id or a non-empty range"),
    (["--cases", ","], "no case selected (--cases is empty)"),
    (["--peak-tflops", "0"], "--peak-tflops 0.0: must be a finite number > 0"),
    (["--peak-tflops", "nan"], "--peak-tflops nan"),
    (["--max-implied-ms", "0"], "--max-implied-ms 0.0: must be a finite number > 0"),
])
def test_the_cli_refuses_options_that_select_nothing_or_no_sensible_limit(tmp_path, argv, says):
    import check_flops
    from mfulib.core.errors import UserError
    od = mha_workdir(tmp_path, CORRECT)
    with pytest.raises(UserError) as err:
        check_flops.main(["--op-dir", od.path, "--backend", "none", "--quiet"] + argv)
    assert says in str(err.value)
    assert not os.path.exists(os.path.join(od.path, "flops_check.json"))


@pytest.mark.parametrize("doc, says", [
    ([1, 2], "the document is list [1, 2]"),
    ({"tool": "peak_calib", "peak_tflops": {"float16": "fast"}}, "peak_tflops.float16 is str 'fast'"),
])
def test_a_peak_json_of_the_wrong_structure_is_a_user_error_naming_file_and_field(tmp_path, doc, says):
    from mfulib.core.errors import UserError
    (tmp_path / "peak.json").write_text(json.dumps(doc))
    with pytest.raises(UserError) as err:
        fchk.resolve_peak(str(tmp_path), None, "none")
    assert str(tmp_path / "peak.json") in str(err.value) and says in str(err.value)


def test_a_flops_parts_that_raised_everywhere_is_not_called_missing():
    """KERNEL_PARTS beside a flops_parts that raised on every case: the cases carry the error; the file check must not
    advise defining a flops_parts that is there."""
    import types
    from mfulib.flops.contract import FlopsFile
    ff = types.SimpleNamespace(kernel_parts={"proj": ["matmul*"]}, has_parts=True, review_lines=lambda: [])
    ff.check_kernel_parts_keys = lambda names: FlopsFile.check_kernel_parts_keys(ff, names)
    rows = [{"case": 0, "flops_parts": None, "status": "fail"}]
    (kp,) = [c for c in fchk.file_checks(ff, rows) if c["name"] == "kernel_parts"]
    assert kp["status"] == "skip" and "define flops_parts" not in kp["detail"]
    ff.has_parts = False  # truly missing: the advice stands, and it fails
    (kp,) = [c for c in fchk.file_checks(ff, rows) if c["name"] == "kernel_parts"]
    assert kp["status"] == "fail" and "define flops_parts" in kp["detail"]
