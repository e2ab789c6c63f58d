"""Checks that cannot fail are `unverified`, rejected and empty cases are counted apart, and an operator
without matrix work has no MFU - down to check_flops.py's exit status, performance.json and the decomposition.

Every hand value is worked in its test's docstring. Fixtures are hand-made (no measurement).
"""
import copy
import json
import os
import subprocess
import sys

from mfulib.report import decompose
from mfulib.flops import check as fchk
from mfulib.flops import contract as fcon
from mfulib.report import tables as report
from mfulib.collect import driver as collect
from mfulib.schemas import flops_check_json
from test_decompose_fixture import PEAK, _k
from test_flops_check import write_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(ROOT, "scripts", "check_flops.py")

MM_REF = '''
class Model(nn.Module):
    def forward(self, a, b):
        if a.shape[1] != b.shape[0]:
            raise ValueError("case rejected: inner dims differ")
        return a @ b
'''


def _t(name, shape, dtype="float32"):
    return {"name": name, "type": "tensor", "required": True, "dtype": dtype, "shape": shape}


MM_CASES = [{"inputs": [_t("a", [4, 8]), _t("b", [8, 3])]},      # 2 * 4 * 8 * 3 = 192 FLOPs
            {"inputs": [_t("a", [4, 8]), _t("b", [5, 3])]},      # rejected by both (8 != 5)
            {"inputs": [_t("a", [0, 8]), _t("b", [8, 3])]}]      # empty a: no work
MM_FLOPS = '''
from mfulib.flops.contract import shape
def flops(case):
    a, b = shape(case, "a"), shape(case, "b")
    if a[1] != b[0]:
        raise ValueError("case rejected: inner dims differ")
    return 2.0 * a[0] * a[1] * b[1]
'''


def _run(od, *extra):
    return subprocess.run([sys.executable, CHECK, "--op-dir", str(od.path), "--backend", "none", *extra],
                          capture_output=True, text=True, timeout=300)


def test_rejected_and_empty_cases_are_counted_and_shown_apart(tmp_path):
    """Case 0: a [4, 8] @ b [8, 3] = 2 * 4 * 8 * 3 = 192 FLOPs on both sides (pass). Case 1: inner dims 8 != 5, rejected
    by flops.py and by the reference: status "rejected", counted in n_rejected (the defect guarded against: n_rejected 0
    beside 17 rejected cases). Case 2: a [0, 8] is empty: 0 FLOPs of work, "no work: nothing to time", neither flops.py
    nor the tracer is asked, and the collector never selects it."""
    od = write_dir(tmp_path, MM_REF, MM_CASES, MM_FLOPS)
    ff = fcon.load_flops(od.flops_py)
    rows = [fchk.check_case(ff, od, i) for i in range(3)]
    assert [r["status"] for r in rows] == ["pass", "rejected", "no_work"]
    assert rows[0]["flops"] == rows[0]["tracer"]["total_flops"] == 192
    assert fchk.rejected_by(rows[1]) == "both" and fchk.NO_WORK in rows[2]["diagnosis"]
    s = fchk.summarize(rows, [])
    assert s["verdict"] == "passed" and s["n_rejected"] == 1 and s["rejected_cases"] == [1] and s["n_no_work"] == 1
    r = _run(od)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rejected (both)" in r.stdout and "1 rejected (cases [1])" in r.stdout and "1 with no work" in r.stdout
    infos = [od.describe(i) for i in range(3)]
    opts = collect.Options(op_dir=str(od.path))
    selected, skipped, _ = collect.select_cases(infos, ff, od, opts, "cuda")
    assert 2 not in [i.case_id for i in selected]
    assert any(i.case_id == 2 and r.startswith("no work: nothing to time") for i, r, _ in skipped)


def test_a_draft_with_review_markers_is_unverified_with_exit_3_unless_accepted(tmp_path):
    """The same 192-FLOP matmul, but flops.py still carries a `# REVIEW` line: every check agrees (ratio 1), yet a
    draft must be reviewed by a person, so the verdict is unverified (exit 3) and the message names the line;
    --accept-unverified exits 0 and keeps the verdict in flops_check.json, which the collector reads as
    numerator "unverified" for case 0."""
    draft = MM_FLOPS.replace("    return 2.0", "    # REVIEW: operand order guessed\n    return 2.0", 1)
    od = write_dir(tmp_path, MM_REF, MM_CASES[:1], draft)
    r = _run(od)
    assert r.returncode == fchk.EXIT_UNVERIFIED == 3, r.stdout + r.stderr
    assert "UNVERIFIED" in r.stdout and "operand order guessed" in r.stdout and "review each" in r.stdout
    r = _run(od, "--accept-unverified")
    assert r.returncode == 0
    with open(os.path.join(od.path, "flops_check.json"), encoding="utf-8") as f:
        doc = json.load(f)
    assert doc["summary"]["verdict"] == "unverified" and doc["accept_unverified"] is True
    v = flops_check_json.numerator_verdicts(os.path.join(od.path, "flops_check.json"))
    assert v["verdict"] == "unverified" and v["cases"][0]["numerator"] == "unverified"
    ff = fcon.load_flops(od.flops_py)
    assert collect.numerator_of(v, 0, ff)["numerator"] == "unverified"
    assert collect.numerator_of(v, 7, ff)["numerator"] == "unchecked"


def test_a_reference_the_tracer_cannot_run_is_unverified_not_passed(tmp_path):
    """A reference whose forward cannot run on its own inputs (it calls an NPU-only function with no stand-in):
    the tracer errors, so flops.py's 192 cannot be held against anything - unverified, exit 3 (the defect guarded
    against: "PASSED" with only warnings)."""
    ref = MM_REF.replace("return a @ b", "return torch.ops.no_such_ns.no_such_op(a, b)")
    od = write_dir(tmp_path, ref, MM_CASES[:1], MM_FLOPS)
    row = fchk.check_case(fcon.load_flops(od.flops_py), od, 0)
    assert row["status"] == "unverified" and "could not run" in row["diagnosis"]
    assert _run(od).returncode == 3


PERF = {"schema": 1, "tool": "msprof_perf_summary", "backend": "npu", "device": {"name": "Ascend910B2"},
        "warmup": 5, "repeats": 5, "peak": {"nominal_tflops": {"float16": 353.9}, "source": "fixture"},
        "per_case": [
            {"case": 0, "shape": "[4096, 4096]", "compute_dtype": "float16", "tf32": False, "flops": 0.0,
             "vector_flops": 5 * 4096 * 4096, "flops_parts": {"softmax": 0.0}, "numerator": "checked",
             "input_bytes": 2 * 4096 * 4096, "output_bytes": 2 * 4096 * 4096,
             "kernels": [_k("softmax_kernel", 80000)], "kernel_time_ns": 80000, "span_ns": 81000},
            {"case": 1, "shape": "[64, 64];[64, 64]", "compute_dtype": "float16", "tf32": False,
             "flops": 2 * 64 ** 3, "numerator": "unverified",
             "numerator_reason": "tracer counted 0 and the reference's work is in ops it cannot see: npu::x",
             "input_bytes": 16384, "output_bytes": 8192, "kernels": [_k("softmax_kernel", 1000)],
             "kernel_time_ns": 1000, "span_ns": 1200}]}


def test_no_matrix_work_has_no_mfu_and_an_unverified_numerator_is_marked_in_table_and_json(tmp_path):
    """Case 0 (softmax [4096, 4096] fp16, flops 0, vector_flops 5 * 16777216 = 83886080): no MFU ("—"); MBU =
    (2 * 2 * 16777216 B) / 80000 ns / 1600 GB/s = 67108864 / 80000 / 1600 = 52.43 %, the headline; vector TFLOP/s
    = 83886080 / 80000 / 1e3 = 1.0486. Case 1 (64^3 matmul, 2 * 64^3 = 524288 FLOPs in 1000 ns = 0.524 TFLOP/s)
    carries numerator "unverified": the row says so in mfu_decompose.json and the table marks the case."""
    d = tmp_path / "op"
    d.mkdir()
    (d / "performance.json").write_text(json.dumps(PERF))
    (d / "peak.json").write_text(json.dumps(PEAK))
    (d / "flops.py").write_text('KERNEL_PARTS = {"softmax": ["*softmax*"]}\ndef flops(case):\n    return 0.0\n')
    res = decompose.decompose(str(d), str(d / "peak.json"))
    rows = {r["case"]: r for rep in res["reports"] for r in rep["rows"]}
    r0, r1 = rows[0], rows[1]
    assert r0["status"] == "ok" and r0["mfu_nom"] is None and r0["mfu_ach"] is None and r0["headline"] == "mbu"
    assert abs(r0["mbu"] - 67108864 / 80000 / 1600) < 1e-12 and abs(r0["mbu"] - 0.52429) < 1e-4
    assert abs(r0["vector_tflops"] - 1.048576) < 1e-9
    assert r1["numerator"] == "unverified" and abs(r1["actual_tflops"] - 0.524288) < 1e-9
    assert any("numerator unverified" in f["message"] for f in r1["flags"])
    table = report.decompose_table(res)
    line0 = next(ln for ln in table.splitlines() if ln.startswith("0 "))
    assert line0.count("—") == 4 and "52.4% *" in line0  # TFLOP/s, MFU@nom, MFU@ach and the part's MFU
    assert "1 [unverified]" in table and "case 1: numerator: unverified" in table
    assert "max: MBU" not in table  # case 1 has an MFU, so the MFU maxima lead
    only_vec = copy.deepcopy(PERF)
    only_vec["per_case"] = only_vec["per_case"][:1]
    (d / "performance.json").write_text(json.dumps(only_vec))
    assert "max: MBU 52.43% (case 0" in report.decompose_table(decompose.decompose(str(d), str(d / "peak.json")))


def test_the_no_mfu_dash_does_not_fail_the_decompose_step_on_a_console_that_cannot_encode_it(tmp_path):
    # "—" on an ASCII / Latin-1 console: a replacement character, never a UnicodeEncodeError (exit 1)
    d = tmp_path / "op"
    d.mkdir()
    (d / "performance.json").write_text(json.dumps(PERF))
    (d / "peak.json").write_text(json.dumps(PEAK))
    (d / "flops.py").write_text('KERNEL_PARTS = {"softmax": ["*softmax*"]}\ndef flops(case):\n    return 0.0\n')
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "mfu_decompose.py")
    r = subprocess.run([sys.executable, script, "--op-dir", str(d), "--peak-json", str(d / "peak.json")],
                       capture_output=True, env=dict(os.environ, PYTHONIOENCODING="ascii"), timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    line0 = next(ln for ln in r.stdout.decode("ascii").splitlines() if ln.startswith("0 "))
    assert line0.count("?") == 4 and "52.4% *" in line0


def test_the_shape_cell_names_the_search_origin_of_an_appended_case_only():
    appended = {"case": 11, "shape": "[4, 10000]", "search_origin": {"source_case": 2, "scale": 2}}
    assert report.shape_cell(appended) == "[4,10000]<-case2x2"
    appended["search_origin"]["factors"] = {"batch": 2, "seq": 4}  # the probe's factors, where recorded
    assert report.shape_cell(appended, width=40) == "[4,10000]<-case2:batchx2,seqx4"
    assert report.shape_cell(appended) == "[4,10000]\n<-case2:batchx2,seqx4"  # over 28 characters: wrapped, not cut
    # the search's x1 point of an original case is the case itself: no origin to name
    original = {"case": 2, "shape": "[2, 10000]", "search_origin": {"source_case": 2, "scale": 1}}
    assert report.shape_cell(original) == "[2,10000]"
    # a long shape is wrapped after its commas (a multi-line cell), never cut
    assert report.shape_cell({"case": 0, "shape": "[1, 2, 3, 4, 5, 6, 7, 8, 9]"}, width=10) == "[1,2,3,4,\n5,6,7,8,9]"
    assert report.shape_cell({"case": 0}) == "-"
