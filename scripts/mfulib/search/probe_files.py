"""The probe's case files: a staged candidate's mirror of the work directory, and the write-back of passing
candidates (backup of the originals, resumable rewrite, restore, verify.json rows).

Every case copy of the work directory (``<Op>_perf_cases.jsonl``, ``model.json`` and prepare's aliases) is always
rewritten as its original (backed up once into :data:`BACKUP_DIR`, byte for byte: CRLF and a BOM stay) + the
appended lines recorded in probe.json, atomically per file, so an interrupted probe leaves the originals' lines
intact and a re-run reconciles; :func:`restore` puts the originals back.
"""
from __future__ import annotations

import hashlib
import os
import shutil

from mfulib.core import cases as _cases
from mfulib.core.errors import UserError
from mfulib.core.jsonio import write_text_atomic
from mfulib.schemas import probe_json as pj

BACKUP_DIR = pj.BACKUP_DIR


def stage_candidate(od, case: dict, root: str) -> str:
    """A directory under ``root`` that mirrors the work dir (symlinks) with case files holding only ``case``.
    Result files of the work dir are not linked, so no tool run there can touch them."""
    staged = os.path.join(root, "work")
    os.makedirs(staged)
    names = set(od.case_file_names())
    for name in os.listdir(od.path):
        src = os.path.join(od.path, name)
        if name in names:
            with open(os.path.join(staged, name), "w", encoding="utf-8") as f:
                f.write(_cases.dump_case_lines([case]))
        elif name.endswith(".py") or name == "prepare.json" or not (name.endswith(".json") or os.path.isdir(src)):
            os.symlink(src, os.path.join(staged, name))
    return staged



def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def backup(od, doc: dict) -> dict:
    """Copy the original case files into BACKUP_DIR once (kept across runs); returns doc["backup"]."""
    if doc.get("backup") and os.path.isdir(doc["backup"]["dir"]):
        return doc["backup"]
    bdir = od.file(BACKUP_DIR)
    os.makedirs(bdir, exist_ok=True)
    files = {}
    for name in od.case_file_names():
        dst = os.path.join(bdir, name)
        if not os.path.exists(dst):
            shutil.copy2(od.file(name), dst)
        files[name] = _sha(dst)
    n = len(_cases.read_case_file(os.path.join(bdir, os.path.basename(od.cases_path))))
    doc["backup"] = {"dir": bdir, "files": files, "n_cases": n}
    return doc["backup"]


def check_resumable(od, doc: dict) -> None:
    """Refuse to resume from a probe.json whose backup or operator files no longer match the work directory
    (re-prepared cases, edited model.py / model_new.py): resuming would overwrite new case files with old ones or
    reuse verdicts about other code. UserError naming the fix (``--restore``, or delete probe.json and
    BACKUP_DIR)."""
    from mfulib.schemas import verify_json as vj
    b = doc.get("backup")
    fix = f"run --restore first, or delete {pj.FILE_NAME} and {BACKUP_DIR}/ if the work dir was re-prepared"
    if b:
        for name in b["files"]:
            with open(os.path.join(b["dir"], name), "rb") as f:
                orig = f.read()
            cur = open(od.file(name), "rb").read() if os.path.exists(od.file(name)) else b""
            if not cur.startswith(orig.rstrip(b"\n")):
                raise UserError(f"{od.file(name)}: does not start with the original lines backed up in "
                                f"{b['dir']} - the case file changed since the last probe; {fix}")
    if doc.get("inputs") and doc["inputs"] != vj.input_digests(od.path):
        raise UserError(f"{od.path}: model.py / model_new.py changed since {pj.FILE_NAME} was written; {fix}")


def rewrite_case_files(od, doc: dict) -> None:
    """Every case copy := its original (from the backup, byte for byte) + the appended lines in id order."""
    b = doc["backup"]
    lines = [doc["appended"][k]["line"] for k in sorted(doc["appended"], key=int)]
    for name in b["files"]:
        with open(os.path.join(b["dir"], name), encoding="utf-8", newline="") as f:  # CRLF kept as it is
            text = f.read()
        eol = "\r\n" if "\r\n" in text else "\n"  # appended lines end as the file's own lines do
        if lines and text and not text.endswith("\n"):
            text += eol
        write_text_atomic(od.file(name), text + "".join(ln + eol for ln in lines))
    od._cases = None


def restore(od, doc: dict) -> list:
    """Put the backed-up case files back, drop verify.json rows of appended ids; returns the restored names."""
    b = doc.get("backup")
    if not b or not os.path.isdir(b["dir"]):
        raise UserError(f"{od.path}: no probe backup ({BACKUP_DIR}) - nothing to restore")
    for name in b["files"]:
        src = os.path.join(b["dir"], name)
        with open(src, encoding="utf-8", newline="") as f:  # byte for byte: CRLF and a BOM stay
            write_text_atomic(od.file(name), f.read())
    from mfulib.schemas import verify_json as vj
    vpath = od.file(vj.FILE_NAME)
    if os.path.exists(vpath):
        vdoc = vj.read_verify_json(vpath)
        vdoc["cases"] = [r for r in vdoc["cases"] if r["case"] < b["n_cases"]]
        vj.write_verify_json(vpath, vj.finish(vdoc, b["n_cases"]))
    shutil.rmtree(b["dir"])
    doc["appended"], doc["backup"] = {}, None
    for c in doc.get("candidates") or []:
        c["new_case_id"] = None
    return sorted(b["files"])


def record_verify(od, new_id: int, row: dict, backend: str, device: str, n_cases: int, seed: int) -> str:
    """Merge the candidate's verify row into verify.json under its new case id (skipped, with the reason returned,
    when verify.json was made on another backend)."""
    from mfulib.verify import correctness as _verify
    from mfulib.core.jsonio import provenance
    from mfulib.schemas import verify_json as vj
    path = od.file(vj.FILE_NAME)
    if os.path.exists(path) and vj.backend_of(vj.read_verify_json(path)) not in (None, backend):
        return f"verify.json is from backend {vj.backend_of(vj.read_verify_json(path))}: row not merged"

    def new_doc():
        doc = provenance(vj.TOOL, vj.SCHEMA, device={"backend": backend, "device": device,
                                                     "why": "verified by max_shape_probe (gate 3)"})
        doc.update(op=od.op_name, work_dir=od.path, seed=seed, tolerance=_verify.TOLERANCE,
                   tolerance_tf32=_verify.TOLERANCE_TF32, cases=[])
        return doc
    row = dict(row, case=new_id, verified_in="max_shape_probe gate 3")
    vj.merge_rows(path, [row], n_cases, new_doc=new_doc, updates={"inputs": vj.input_digests(od.path)})
    return "merged"

