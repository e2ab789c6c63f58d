"""Which collection each kept profile belongs to: the index ``<keep>/prof/runs.json`` that the collector writes at
the end of every ``--keep-prof`` collection (:func:`record_run`), and the choice of profiles ``--from-prof`` reads
from a keep directory (:func:`select_kept`: the latest run by default, every current folder with ``--all-runs``).

``runs.json`` (``schema`` :data:`SCHEMA`)::

    {"schema": "mfu-keep-prof-runs/1",
     "runs": [{"run_id": "20261202T060624Z-3f2a1c", "created_at": "2026-12-02T06:06:24Z",
               "case_file": "/abs/work/<Op>_perf_cases.jsonl", "case_file_sha256": "<hex>",
               "profiles": [{"case": 3, "impl": "asc", "folder": "case3_asc"}, ...]}, ...]}

Runs are in collection order (the last is the latest). ``folder`` is relative to ``prof/``. A new collection never
deletes an older profile: a ``case<N>_<impl>`` folder it is about to replace moves to
``prof/older/<its run id>/case<N>_<impl>`` (``older/unindexed/...`` for a folder no run records) and its run's entry
follows it (:func:`make_room`)."""
from __future__ import annotations

import os
import shutil
import time

from mfulib.core.errors import UserError
from mfulib.core.jsonio import read_json, sha256, write_json_atomic

INDEX_NAME = "runs.json"
SCHEMA = "mfu-keep-prof-runs/1"
OLDER = "older"  # prof/older/<run id>/case<N>_<impl>: profiles replaced by a later run, kept


def new_run_id() -> str:
    """A run id unique per collection: UTC time to the second plus 6 random hex digits."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + os.urandom(3).hex()


def read_index(prof_dir: str):
    """The parsed ``<prof_dir>/runs.json``, or None when there is none. Raises UserError naming the file when it is
    not an index of this schema."""
    path = os.path.join(prof_dir, INDEX_NAME)
    if not os.path.exists(path):
        return None
    try:
        doc = read_json(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable ({exc}) - delete it to read the folders as an unindexed keep dir "
                        "(runs may then be mixed)") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("runs"), list):
        raise UserError(f"{path}: not a kept-profile index (schema {SCHEMA!r} with a runs list) - delete it to read "
                        "the folders as an unindexed keep dir")
    return doc


def _write(prof_dir: str, doc: dict) -> None:
    write_json_atomic(os.path.join(prof_dir, INDEX_NAME), doc)


def make_room(prof_dir: str, folder: str) -> str | None:
    """Before a new profile takes ``<prof_dir>/<folder>``: move the one there to ``older/<its run id>/<folder>``
    (its run's index entry follows). Returns the new path (None when the folder was free)."""
    src = os.path.join(prof_dir, folder)
    if not os.path.exists(src):
        return None
    doc = read_index(prof_dir)
    owner = None
    for run in (doc or {}).get("runs", []):
        for p in run.get("profiles", []):
            if p.get("folder") == folder:
                owner = run
    dst_rel = os.path.join(OLDER, owner["run_id"] if owner else "unindexed", folder)
    dst = os.path.join(prof_dir, dst_rel)
    if os.path.exists(dst):
        shutil.rmtree(dst)  # the same run's same folder moved before: the same profile
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.move(src, dst)
    if owner:
        for p in owner["profiles"]:
            if p.get("folder") == folder:
                p["folder"] = dst_rel
        _write(prof_dir, doc)
    return dst


def record_run(prof_dir: str, run_id: str, case_file: str, profiles: list) -> dict:
    """Append one collection to ``<prof_dir>/runs.json`` (created when missing); ``profiles``: [(case id, impl,
    folder relative to prof_dir)]. Returns the run entry."""
    doc = read_index(prof_dir) or {"schema": SCHEMA, "runs": []}
    entry = {"run_id": run_id, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "case_file": os.path.abspath(case_file),
             "case_file_sha256": sha256(case_file) if os.path.exists(case_file) else None,
             "profiles": [{"case": c, "impl": i, "folder": f} for c, i, f in profiles]}
    doc["runs"].append(entry)
    _write(prof_dir, doc)
    return entry


def _owner_of(doc: dict) -> dict:
    """{folder: run entry} over every run of the index."""
    return {p["folder"]: run for run in doc["runs"] for p in run.get("profiles", [])}


def select_kept(prof_dir: str, folders: list, all_runs: bool = False) -> tuple:
    """The kept profiles ``--from-prof`` reads from ``prof_dir`` and what it says about them.

    ``folders``: the ``case<N>_<impl>`` folders found directly in ``prof_dir`` (absolute paths, in reading order).
    Returns ``(chosen folders, info)``; ``info``: {prof_dir, mode ("latest" | "all-runs" | "unindexed"), run_id,
    created_at, case_file, case_file_sha256, ignored [{folder, run_id}], note, warning (None or text)}.
    Without an index every folder is read and ``warning`` says runs may be mixed. Latest: the profiles the last run
    of the index recorded; a recorded folder that is gone is named in ``warning``."""
    doc = read_index(prof_dir)
    info = {"prof_dir": prof_dir, "mode": None, "run_id": None, "created_at": None, "case_file": None,
            "case_file_sha256": None, "ignored": [], "note": None, "warning": None}
    if doc is None:
        info.update(mode="unindexed", warning=(
            f"{prof_dir}: no {INDEX_NAME} (kept by an older version of the collector): cannot tell which run each "
            "profile belongs to - profiles of different runs may be mixed; re-collect with --keep-prof to index them"))
        return list(folders), info
    if not doc["runs"]:
        raise UserError(f"{os.path.join(prof_dir, INDEX_NAME)}: records no run - delete it, or re-collect with "
                        "--keep-prof")
    owner = _owner_of(doc)
    rel = {f: os.path.relpath(f, prof_dir) for f in folders}
    if all_runs:
        runs = sorted({owner[r]["run_id"] if r in owner else "unindexed" for r in rel.values()})
        info.update(mode="all-runs", note=(
            f"--all-runs: reading every current profile folder of {prof_dir} ({len(folders)}), from run(s) "
            f"{', '.join(runs)} - profiles of different runs are mixed"))
        return list(folders), info
    last = doc["runs"][-1]
    info.update(mode="latest", run_id=last["run_id"], created_at=last.get("created_at"),
                case_file=last.get("case_file"), case_file_sha256=last.get("case_file_sha256"))
    chosen, gone = [], []
    for p in last.get("profiles", []):
        path = os.path.join(prof_dir, p["folder"])
        (chosen if os.path.isdir(path) else gone).append(path if os.path.isdir(path) else p["folder"])
    taken = {os.path.relpath(c, prof_dir) for c in chosen}
    for run in doc["runs"][:-1]:
        info["ignored"] += [{"folder": p["folder"], "run_id": run["run_id"]} for p in run.get("profiles", [])
                            if p["folder"] not in taken and os.path.isdir(os.path.join(prof_dir, p["folder"]))]
    info["ignored"] += [{"folder": r, "run_id": None} for r in rel.values() if r not in owner]
    ign = ", ".join(f"{i['folder']} ({'run ' + i['run_id'] if i['run_id'] else 'no run recorded'})"
                    for i in info["ignored"])
    info["note"] = (f"{prof_dir}: reading the latest run {last['run_id']} ({last.get('created_at')}; "
                    f"{', '.join(os.path.relpath(c, prof_dir) for c in chosen) or 'no profile'})"
                    + (f"; ignored {len(info['ignored'])} profile(s) of other runs: {ign} (--all-runs reads every "
                       "current folder, runs mixed)" if info["ignored"] else ""))
    if gone:
        info["warning"] = f"{prof_dir}: run {last['run_id']} recorded profile(s) now missing: {', '.join(gone)}"
    return chosen, info
