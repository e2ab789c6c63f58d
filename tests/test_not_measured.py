"""Cases a collection never timed, and why: the verify gate is asked for every case of the ranking (a case verify
skipped below the top-k is listed under performance.json ``selection.not_verified`` with verify's reason, never
left in the reserve), performance.json's reader turns the records into ``not_measured`` / ``not_selected``, the
decomposition carries them into mfu_decompose.json and the tables and the HTML report say per group of cases the
reason the files recorded (the CPU example's bf16 and over-the-input-cap cases). In process, no pipeline."""
import copy
import json
import os
import sys

from mfulib.collect.driver import Options, select_cases
from mfulib.collect.selection import select_verified
from mfulib.core.opdir import OpDir
from mfulib.report import decompose, html as report_html, tables
from mfulib.schemas import performance_json as perf_json
from mfulib.verify.verified_cases import default_max_input_mb, skip_reason
from test_decompose_fixture import PERF, _write_op

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_msprof"))
import tinyops  # noqa: E402

CAP = "inputs 67,108,864 B (67.11 MB) > --max-input-mb 1"
BF16 = "bfloat16 case: the Triton interpreter cannot run bf16 - run it on an accelerator (--backend npu/cuda)"


class VerdictGate:
    """Test double of mfulib.verify.verified_cases.Gate: fixed verify.json rows {case: (status, reason)}."""

    def __init__(self, rows):
        self.rows = {c: {"case": c, "status": s, "reason": r} for c, (s, r) in rows.items()}
        self.path, self.verified_now = "verify.json", []

    def admits(self, case_id):
        row = self.rows.get(case_id)
        if row is None or row["status"] == "pass":
            return True, {"status": row and row["status"], "reason": None, "forced": False}
        return False, {"status": row["status"], "reason": f"not verified: verify {row['status']} ({row['reason']})",
                       "forced": False}

    def recorded_reason(self, case_id):
        return (self.rows.get(case_id) or {}).get("reason")

    def pending(self, case_ids):
        return [c for c in case_ids if c not in self.rows]


def test_a_case_verify_skipped_below_the_top_k_is_not_verified_never_in_the_reserve(tmp_path):
    # tinyops on cuda ranks by FLOPs, largest first: 2, 4, 0, 3, 1; top-2 takes 2 and 4
    work = tinyops.make_workdir(tmp_path)
    od = OpDir(work)
    infos = od.describe_all()
    gate = VerdictGate({2: ("pass", None), 4: ("pass", None), 0: ("skipped", CAP), 3: ("pass", None),
                        1: ("fail", "max_norm_err 0.5 > tol 0.01")})
    sel, skipped, info = select_cases(infos, None, od, Options(top_k=2), "cuda", gate)
    assert [i.case_id for i in sel] == [2, 4]
    # before: the gate was asked only while slots were open, so 0 and 1 sat in the reserve and not_verified was []
    assert info["reserve"] == [3] and info["not_verified"] == [0, 1]
    assert {i.case_id: m["status"] for i, _, m in skipped} == {0: "skipped", 1: "fail"}
    lines = []
    select_verified(infos, None, od, Options(top_k=2), "cuda", gate, lines.append)
    assert [ln.split(" not timed")[0] for ln in lines] == ["case 0", "case 1"] and CAP in lines[0]


def test_the_cpu_default_input_cap_says_what_to_do_and_a_cap_given_says_only_the_numbers():

    class Big:  # the two CaseInfo fields skip_reason reads
        compute_dtype, input_bytes = "float16", 67_108_864
    why = skip_reason(Big(), "cpu", default_max_input_mb("cpu"))
    assert why.startswith(CAP) and "accelerator" in why and "VERIFY_ARGS" in why
    assert skip_reason(Big(), "cpu", 0.5) == "inputs 67,108,864 B (67.11 MB) > --max-input-mb 0.5"
    assert skip_reason(Big(), "cuda", default_max_input_mb("cuda")) is None  # no cap off the interpreter


def _perf_doc():
    perf = copy.deepcopy(PERF)
    perf["per_case"][3] = {"case": 50, "skipped": BF16}
    perf["per_case"].append({"case": 52, "skipped": BF16})
    perf["selection"] = {
        "rule": "top-3 by theoretical FLOPs (flops.py)", "order": [46, 48, 12], "reserve": [7],
        "not_verified": [{"case": c, "reason": f"not verified: verify skipped ({r}) - --unverified-ok ...",
                          "verify": {"status": "skipped", "reason": "(the gate's text)", "forced": False},
                          "verify_reason": r}
                         for c, r in ((6, CAP), (8, CAP), (4, "inputs 4,194,304 B (4.194 MB) > --max-input-mb 1"))]}
    return perf


def test_performance_json_records_every_unmeasured_case_with_its_recorded_reason():
    perf = _perf_doc()
    got = perf_json.not_measured(perf)
    assert [(e["case"], e["by"], e["status"]) for e in got] == [
        (50, "collector", "skipped"), (52, "collector", "skipped"), (6, "verify", "skipped"),
        (8, "verify", "skipped"), (4, "verify", "skipped")]
    assert got[0]["reason"] == BF16 and got[2]["reason"] == CAP  # verify.json's own reason, not the gate's text
    assert perf_json.not_selected(perf) == {"rule": "top-3 by theoretical FLOPs (flops.py)", "cases": [7]}
    # a file written before verify_reason: the gate's reason; an id alone: no reason, said so
    old = copy.deepcopy(perf)
    del old["selection"]["not_verified"][0]["verify_reason"]
    old["selection"]["not_verified"].append(9)
    got = {e["case"]: e for e in perf_json.not_measured(old)}
    assert got[6]["reason"].startswith("not verified: verify skipped") and got[9]["reason"] is None
    lines = perf_json.describe_not_measured(perf_json.not_measured(old))
    assert "  case 9 - not verified (verify: no verdict recorded), never timed: no reason recorded" in lines


def test_the_lines_group_cases_by_reason_and_count_the_groups_left_out():
    lines = perf_json.describe_not_measured(perf_json.not_measured(_perf_doc()))
    assert lines[0].startswith("5 case(s) never measured")
    assert lines[1] == f"  case 50, 52 - not run by the collector: {BF16}"
    assert lines[2] == f"  case 6, 8 - not verified (verify: skipped), never timed: {CAP}"
    assert lines[3].startswith("  case 4 - not verified (verify: skipped)")
    many = [{"case": i, "by": "verify", "status": "fail", "reason": f"err {i}"} for i in range(5)]
    lines = perf_json.describe_not_measured(many, limit=2)
    assert len(lines) == 4 and lines[-1].startswith("  ... and 3 more case(s)")
    assert perf_json.describe_not_measured([]) == []


def test_the_decomposition_carries_the_reasons_into_its_json_table_and_html(tmp_path):
    d = _write_op(tmp_path, perf=_perf_doc())
    result = decompose.decompose(str(d), str(d / "peak.json"))
    rep = result["reports"][0]
    assert [e["case"] for e in rep["not_measured"]] == [50, 52, 6, 8, 4]
    assert rep["not_selected"]["cases"] == [7]
    text = tables.decompose_table(result)
    assert "skipped by the selection" not in text  # the old wording, which hid verify's verdicts
    flat = " ".join(text.split())
    assert f"case 6, 8 - not verified (verify: skipped), never timed: {CAP}" in flat
    assert f"case 50, 52 - not run by the collector: {BF16}" in flat
    assert "1 case not selected by the rule (top-3 by theoretical FLOPs (flops.py)): 7" in flat
    assert all(len(ln) <= tables.WRAP for ln in text.splitlines() if "never timed" in ln)
    page = report_html.case_table(result)
    assert "never timed: inputs 67,108,864 B" in page and "not run by the collector" in page
    # --cases: only the asked cases' reasons, no reserve line
    only = decompose.decompose(str(d), str(d / "peak.json"), cases=[46, 6])["reports"][0]
    assert [e["case"] for e in only["not_measured"]] == [6] and only["not_selected"] is None


def test_an_older_mfu_decompose_json_without_not_measured_still_lists_its_skipped_rows(tmp_path):
    d = _write_op(tmp_path, perf=_perf_doc())
    result = json.loads(json.dumps(decompose.decompose(str(d), str(d / "peak.json"))))
    for rep in result["reports"]:
        del rep["not_measured"], rep["not_selected"]
    lines = tables.never_measured_lines(result["reports"])
    assert lines[0].startswith("2 case(s) never measured") and lines[1].startswith("  case 50, 52 - not run by")


def test_the_collector_table_lists_the_cases_verify_excluded_with_verify_reason(capsys):
    from mfulib.collect import console
    doc = _perf_doc()
    doc.update(backend="npu", device={"name": "Ascend910B2"}, n_cases_valid=3, peak={})
    console.print_table(doc)
    out = " ".join(capsys.readouterr().out.split())
    assert f"case 6, 8 - not verified (verify: skipped), never timed: {CAP}" in out
    assert "never selected" not in out and "valid cases 3/3 measured" in out


def test_a_collection_of_a_searchs_chosen_cases_lists_the_originals_the_search_could_not_run(tmp_path):
    """With --search-json the collector times the search's chosen cases only; the original cases the search could
    not run on the backend (grid_search.json ``excluded`` of kind not_run; older files by the reason's prefix) are
    listed as never measured, by the search, with its reason - not the probe variants it merely left out."""
    from mfulib.schemas import grid_search_json as gsj
    doc = {"tool": gsj.TOOL, "pool": [{"case": 20}], "stage1": [], "stage2": [], "best": None, "cost_s": {},
           "chosen_cases": [20],
           "excluded": [{"case": 5, "reason": f"not run on this backend: {BF16}", "kind": gsj.NOT_RUN},
                        {"case": 6, "reason": f"not run on this backend: {CAP}"},  # a file from before the kind
                        {"case": 31, "reason": "variant of case 9, which is not among the top 8"}]}
    path = tmp_path / "grid_search.json"
    path.write_text(json.dumps(doc))
    assert gsj.not_run_cases(str(path)) == [{"case": 5, "reason": f"not run on this backend: {BF16}"},
                                            {"case": 6, "reason": f"not run on this backend: {CAP}"}]
    perf = {"per_case": [], "selection": {"rule": "chosen by the search", "search_json": str(path),
                                          "search_not_run": gsj.not_run_cases(str(path))}}
    got = perf_json.not_measured(perf)
    assert [(e["case"], e["by"]) for e in got] == [(5, "search"), (6, "search")]
    lines = perf_json.describe_not_measured(got)
    assert lines[1] == f"  case 5 - not run by the search (grid_search.json excluded): not run on this backend: {BF16}"
