"""verify.json: the verify step's per-case correctness of ModelNew against Model, its builder, writer, merger and reader.

Provenance (``tool`` = ``verify_op.py``, ``device`` {backend, device, why, compat}) + ``op, work_dir, seed,
tolerance`` {dtype: tol}, ``tolerance_tf32``, ``inputs`` {model.py: sha256, model_new.py: sha256} (the files the
rows were computed from), ``cases`` [{case, dtype, shape, status: pass | fail | rejected | error | oom | crashed |
timeout | skipped | unverified, reason, max_norm_err, tol, verified_by: full | batch_slice | head_slice | row_slice
(how ModelNew's output was compared: whole, or - when the whole reference ran out of memory - on slices of batch
items, heads or query rows; null/absent where nothing was compared), slices {rule, symbol, inputs [[input, axis]],
units, block, compared [[start, stop]], output_axes, output_widths (elements per unit), attributes, rule_check,
group (query heads per key/value head, a grouped head slice only)} and reference_oom (the reference's
out-of-memory message) on a row verified on slices (mfulib.verify.slices), verified_in (``max_shape_probe gate
3`` on a row the probe merged), ...}]; ``unverified``: the whole reference ran out of memory and no slice rule
verified the case (reason ``reference does not fit ...``), ``summary`` {status: count}, ``failed`` [case ids whose status
is in :data:`FAILED`], ``complete`` (every case of the case file has a row) and ``missing`` [case ids without a row:
a verify run limited by ``--cases``, or cases a search appended; the collector verifies such a case before timing
it and merges its row in with :func:`merge_rows`].
"""
from __future__ import annotations

import hashlib
import os
from collections import Counter

from mfulib.core.errors import UserError
from mfulib.core.jsonio import write_json_atomic
from mfulib.schemas.common import read_work_json, wrong_type

SCHEMA = 1
TOOL = "verify_op.py"
FILE_NAME = "verify.json"
FAILED = ("fail", "error", "oom", "crashed", "timeout", "unverified")  # statuses that make verify_op.py exit 1
INPUT_FILES = ("model.py", "model_new.py")  # the rows are valid only for these files' content


def input_digests(op_dir: str) -> dict:
    """{file name: sha256 hex} of :data:`INPUT_FILES` in the work directory ``op_dir`` (None for a missing file)."""
    out = {}
    for name in INPUT_FILES:
        path = os.path.join(op_dir, name)
        if not os.path.isfile(path):
            out[name] = None
            continue
        with open(path, "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def finish(doc: dict, n_cases: int) -> dict:
    """Sort ``doc["cases"]`` by case id and (re)compute ``summary``, ``failed``, ``complete`` and ``missing`` against
    a case file of ``n_cases`` cases (ids 0..n_cases-1). Returns ``doc``."""
    rows = sorted(doc.get("cases") or [], key=lambda r: r["case"])
    have = {r["case"] for r in rows}
    doc["cases"] = rows
    doc["summary"] = dict(Counter(r["status"] for r in rows).most_common())
    doc["failed"] = [r["case"] for r in rows if r["status"] in FAILED]
    doc["missing"] = [i for i in range(n_cases) if i not in have]
    doc["complete"] = not doc["missing"]
    return doc


def write_verify_json(path: str, doc: dict) -> None:
    """Write ``doc`` atomically to ``path``."""
    write_json_atomic(path, doc)


def merge_rows(path: str, rows: list, n_cases: int, new_doc=None, updates=None) -> dict:
    """Add (or replace, by case id) ``rows`` in the verify.json at ``path`` and write it back atomically.

    When ``path`` does not exist, ``new_doc()`` gives the document to start from (provenance + run fields, no
    cases). ``updates`` ({key: value}) is applied last (e.g. a recomputed ``cpu_adaptations``). ``summary``,
    ``failed``, ``complete`` and ``missing`` are recomputed (:func:`finish`). Returns the written document.
    Raises UserError when an existing file is not a verify.json (see :func:`read_verify_json`)."""
    if os.path.exists(path):
        doc = read_verify_json(path)
    elif new_doc is not None:
        doc = new_doc()
    else:
        raise UserError(f"{path}: not found - run verify_op.py (make verify) first")
    by_case = {r["case"]: r for r in doc.get("cases") or []}
    by_case.update({r["case"]: r for r in rows})
    doc["cases"] = list(by_case.values())
    doc.update(updates or {})
    finish(doc, n_cases)
    write_verify_json(path, doc)
    return doc


def backend_of(doc: dict):
    """The backend name (npu | cuda | cpu) a verify.json was made on, or None when it does not say."""
    dev = doc.get("device")
    return dev.get("backend") if isinstance(dev, dict) else None


def read_verify_json(path: str) -> dict:
    """Read and check a verify.json (a JSON object from verify_op.py with a ``cases`` list of objects holding an
    integer ``case`` and a ``status``). Raises UserError naming the file, the field and the fix."""
    fix = "re-run verify_op.py (make verify)"
    doc = read_work_json(path, fix, fix)
    if not isinstance(doc, dict) or doc.get("tool") != TOOL:
        raise UserError(f"{path}: not a verify_op.py result (no tool={TOOL}) - {fix}")
    cases = doc.get("cases")
    if not isinstance(cases, list):
        raise wrong_type(path, "cases", cases, "a list of case objects", fix)
    for i, c in enumerate(cases):
        if not isinstance(c, dict) or not isinstance(c.get("case"), int) or not isinstance(c.get("status"), str):
            raise wrong_type(path, f"cases[{i}]", c, "an object {case: int, status: str, ...}", fix)
    return doc


def completeness(doc: dict) -> tuple:
    """(done, problems) of a verify.json for the pipeline: done when no case failed (:data:`FAILED`); problems
    lists the failing cases and the cases without a row (the latter do not make it undone: the collector verifies
    a selected case that has no row)."""
    failed = [r for r in doc.get("cases") or [] if r.get("status") in FAILED]
    problems = [f"case {r['case']} {r['status']}: {r.get('reason')}" for r in failed]
    if doc.get("missing"):
        problems.append(f"cases without a row: {doc['missing']}")
    return not failed, problems
