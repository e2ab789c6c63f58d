"""verify.json: step 2's per-case correctness of ModelNew against Model, its writer and reader/validator.

Provenance (``tool`` = ``verify_op.py``, ``device`` {backend, device, why, compat}) + ``op, work_dir, seed,
tolerance`` {dtype: tol}, ``tolerance_tf32``, ``cases`` [{case, dtype, shape, status: pass | fail | rejected |
error | crashed | timeout | skipped, reason, max_norm_err, tol, ...}] and ``summary`` {status: count}.
"""
from __future__ import annotations

from ..errors import UserError
from ..jsonio import write_json_atomic
from .common import read_work_json, wrong_type

SCHEMA = 1
TOOL = "verify_op.py"
FILE_NAME = "verify.json"
FAILED = ("fail", "error", "oom", "crashed", "timeout")  # statuses that make verify_op.py exit 1


def write_verify_json(path: str, doc: dict) -> None:
    """Write ``doc`` atomically to ``path``."""
    write_json_atomic(path, doc)


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
