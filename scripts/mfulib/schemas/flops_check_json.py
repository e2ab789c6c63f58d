"""flops_check.json: step 3's check of flops.py against the independent tracer, its writer and readers.

Provenance (``tool`` = ``check_flops.py``) + ``op_dir, cases_file, tolerance, seed, tracer_caps, mode`` (check |
tracer-only), ``accept_unverified`` (bool: --accept-unverified given), ``flops_py`` {path, sha256, takes_args,
kernel_parts, user_formulas [{op, source, file}]: formulas flops.py registered, mfulib.flops.user_formulas},
``peak`` (the peak of the implied-time check: {tflops, source}), ``summary`` {verdict (passed | unverified |
failed), passed (verdict == passed), n_cases, by_status, n_rejected, rejected_cases, n_no_work, n_unverified,
unverified_reasons, ratio_min, ratio_max}, ``file_checks`` [{name, status, detail}], ``per_case`` [{case, shape,
dtype, input_bytes, seed, flops, flops_parts, vector_flops, ratio, tracer {status, total_flops, vector_flops,
vector_uncosted, user_formulas {op: FLOPs}, ...}, checks (+ attention_bound / grouped_matmul_bound, user_formula:
mfulib.flops.bounds, mfulib.flops.user_formulas), status (pass | warn | rejected | unverified | fail | no_work),
diagnosis}], ``complete`` (every case of the case file was checked) and ``missing`` [case ids not checked:
``--cases`` / ``--largest`` limited the run]. The collector reads the tracer's counts through :func:`tracer_flops`
and the numerator's verdict through :func:`numerator_verdicts`; make status judges the file through
:func:`completeness`.
"""
from __future__ import annotations

from mfulib.core.jsonio import read_json, write_json_atomic

SCHEMA = 1
TOOL = "check_flops.py"
FILE_NAME = "flops_check.json"


def write_flops_check_json(path: str, doc: dict, n_cases=None) -> None:
    """Write ``doc`` atomically to ``path``; with ``n_cases`` (the case file's length) ``complete`` and ``missing``
    are set from the case ids of ``doc["per_case"]``."""
    if n_cases is not None:
        have = {r.get("case") for r in doc.get("per_case") or [] if isinstance(r, dict)}
        doc["missing"] = [i for i in range(n_cases) if i not in have]
        doc["complete"] = not doc["missing"]
    write_json_atomic(path, doc)


def completeness(doc: dict) -> tuple:
    """(passed, problems) of a flops_check.json: passed = ``summary.passed``; problems name the failing cases and
    file-level checks (and the unchecked cases, which do not make it fail)."""
    summary = doc.get("summary") if isinstance(doc.get("summary"), dict) else {}
    problems = [f"case {r.get('case')} {r.get('status')}: {r.get('diagnosis')}" for r in doc.get("per_case") or []
                if isinstance(r, dict) and r.get("status") == "fail"]
    problems += [f"{c.get('name')}: {c.get('detail')}" for c in doc.get("file_checks") or []
                 if isinstance(c, dict) and c.get("status") == "fail"]
    if doc.get("missing"):
        problems.append(f"cases not checked: {doc['missing']}")
    return bool(summary.get("passed")), problems


def tracer_flops(path: str) -> dict:
    """{case id: tracer FLOPs} of the cases the tracer counted (status ok) in the flops_check.json at ``path``;
    {} when the file is absent, unreadable or not of this format (the count is an optional cross-check)."""
    try:
        rows = read_json(path).get("per_case") or []
    except (OSError, ValueError, AttributeError):
        return {}
    out = {}
    for r in rows if isinstance(rows, list) else []:
        tr = (r.get("tracer") or {}) if isinstance(r, dict) else {}
        if isinstance(r.get("case"), int) and isinstance(tr, dict) and tr.get("status") == "ok":
            out[r["case"]] = tr.get("total_flops")
    return out


def numerator_verdicts(path: str) -> dict:
    """The verdict on flops.py per case from the flops_check.json at ``path``: {"verdict": passed | unverified |
    failed | None, "accepted": bool, "reasons": [text], "cases": {case id: {"numerator": checked | unverified |
    failed | rejected | no_work, "reason": text}}}; verdict None (and no cases) when the file is absent or not of
    this format. A case is "checked" when its row passed (warnings allowed); the file's REVIEW markers make every
    case "unverified"."""
    try:
        doc = read_json(path)
        rows = doc.get("per_case") or []
        summary = doc.get("summary") or {}
    except (OSError, ValueError, AttributeError):
        return {"verdict": None, "accepted": False, "reasons": [], "cases": {}}
    file_unverified = [c.get("detail") for c in doc.get("file_checks") or [] if isinstance(c, dict)
                       and c.get("status") == "unverified"]
    names = {"pass": "checked", "warn": "checked", "fail": "failed"}
    cases = {}
    for r in rows if isinstance(rows, list) else []:
        if not isinstance(r, dict) or not isinstance(r.get("case"), int):
            continue
        st = names.get(r.get("status"), r.get("status"))
        reason = r.get("diagnosis") if st != "checked" else None
        if st == "checked" and file_unverified:
            st, reason = "unverified", file_unverified[0]
        cases[r["case"]] = {"numerator": st, "reason": reason}
    return {"verdict": summary.get("verdict") or ("passed" if summary.get("passed") else "failed"),
            "accepted": bool(doc.get("accept_unverified")), "reasons": list(summary.get("unverified_reasons") or []),
            "cases": cases}
