"""flops_check.json: step 3's check of flops.py against the independent tracer, its writer and readers.

Provenance (``tool`` = ``check_flops.py``) + ``op_dir, cases_file, tolerance, seed, tracer_caps, mode`` (check |
tracer-only), ``flops_py`` {path, sha256, takes_args, kernel_parts}, ``peak`` (the peak of the implied-time check:
{tflops, source}), ``summary`` {passed, n_cases, by_status, ratio_min, ratio_max}, ``file_checks`` [{name, status,
detail}], ``per_case`` [{case, shape, dtype, input_bytes, seed, flops, flops_parts, ratio, tracer {status,
total_flops, ...}, checks, status, diagnosis}], ``complete`` (every case of the case file was checked) and
``missing`` [case ids not checked: ``--cases`` / ``--largest`` limited the run]. The collector reads the tracer's
counts through :func:`tracer_flops`; make status judges the file through :func:`completeness`.
"""
from __future__ import annotations

from ..jsonio import read_json, write_json_atomic

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
