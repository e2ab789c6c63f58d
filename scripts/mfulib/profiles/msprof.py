"""Locate msprof / torch_npu kernel tables in a profile directory and load their kernel rows.

Where the rows come from (first found wins; docs/sources.md#msprof-csv):

1. ``PROF_*/mindstudio_profiler_output/op_summary_*.csv`` (CANN >= 7.0; sliced exports
   ``op_summary_slice_<n>_<ts>.csv`` merged in slice order);
2. ``PROF_*/mindstudio_profiler_output/task_time_*.csv`` (same PROF directory; when op_summary is absent);
3. ``PROF_*/device_*/summary/op_summary_*.csv`` (the old CANN 5.x/6.x layout);
4. ``*_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv`` (torch_npu profiler).

Stale and partial exports: PROF directories are ordered by the 17-digit timestamp in their name (then mtime); inside
one, exports by the 14-digit ``<ts>`` of the file names. The **newest complete** export wins: an export is complete
when its slices are numbered 0..n without a gap and every file has a header with a duration column. Everything
passed over is listed in the result (``ignored``), never silently merged.

Each file is read by :func:`mfulib.profiles.msprof_csv.parse_kernel_csv` (the one CSV parser: headers, units,
bad lines).

Marker rows (no kernel name, or a task type of :data:`MARKER_TASK_TYPES` such as ``PROFILING_ENABLE``,
``TASK_TIMEOUT_SET``, ``EVENT_RECORD``) are dropped and counted.
"""
from __future__ import annotations

import csv
import glob
import json
import os
import re

from mfulib.profiles.msprof_csv import has_duration_column, parse_kernel_csv, read_csv_table
from mfulib.core.errors import UserError

# task types that are runtime bookkeeping, not kernels (as in real op_summary and task_time exports,
# docs/sources.md#msprof-csv; ops-profiling quick mode excludes PROFILING_ENABLE/DISABLE and TASK_TIMEOUT_SET)
MARKER_TASK_TYPES = frozenset({
    "PROFILING_ENABLE", "PROFILING_DISABLE", "TASK_TIMEOUT_SET", "EVENT_RECORD", "EVENT_WAIT", "EVENT_RESET",
    "NOTIFY_RECORD", "NOTIFY_WAIT", "WRITE_BACK", "INVALID", "MODEL_MAINTAINCE", "MODEL_EXECUTE", "STREAM_SWITCH",
    "STREAM_ACTIVE", "LABEL_SET", "LABEL_SWITCH", "LABEL_GOTO", "CAPTURE_RECORD", "CAPTURE_WAIT"})

_TS_RE = r"(?P<ts>\d{1,20})"
_EXPORT_RE = {kind: re.compile(rf"^{kind}_(?:slice_(?P<slice>\d+)_)?{_TS_RE}\.csv$")
              for kind in ("op_summary", "task_time")}
_PROF_TS_RE = re.compile(r"^PROF_\d+_(\d{17})_")
INFO_JSON_RE = re.compile(r"^info\.json\.\d{1,2}$")


def is_marker_row(row) -> bool:
    """True for runtime bookkeeping rows (no kernel name, or a marker task type)."""
    name = row.get("name")
    ttype = (row.get("task_type") or "").upper()
    return not name or ttype in MARKER_TASK_TYPES


# ------------------------------------------------------------------------------------------------ locating


def _prof_sort_key(path):
    m = _PROF_TS_RE.match(os.path.basename(path))
    return (m.group(1) if m else "", os.path.getmtime(path))


def prof_dirs(root):
    """Every ``PROF_*`` directory at or below ``root`` (``root`` itself if it is one), newest first."""
    root = os.path.abspath(root)
    found = set()
    if os.path.basename(root).startswith("PROF_") and os.path.isdir(root):
        found.add(root)
    for p in glob.glob(os.path.join(root, "**", "PROF_*"), recursive=True):
        if os.path.isdir(p):
            found.add(p)
    return sorted(found, key=_prof_sort_key, reverse=True)


def export_sets(out_dir, kind):
    """Exports of ``kind`` (``op_summary``/``task_time``) in one mindstudio_profiler_output dir, newest first.

    Returns a list of ``{"ts", "files" (slice order), "complete", "why"}``.
    """
    groups = {}
    for path in glob.glob(os.path.join(out_dir, f"{kind}_*.csv")):
        m = _EXPORT_RE[kind].match(os.path.basename(path))
        if not m:
            continue
        g = groups.setdefault(m.group("ts"), {"slices": {}, "whole": None})
        if m.group("slice") is None:
            g["whole"] = path
        else:
            g["slices"][int(m.group("slice"))] = path
    out = []
    for ts, g in groups.items():
        if g["whole"] is not None:
            files, why = [g["whole"]], None
        else:
            idx = sorted(g["slices"])
            files = [g["slices"][i] for i in idx]
            why = None if idx == list(range(len(idx))) else f"slices {idx}: not numbered 0..{len(idx) - 1} (missing)"
        if why is None:
            for p in files:
                try:
                    header, _ = read_csv_table(p)
                except (OSError, UnicodeDecodeError, csv.Error) as exc:
                    why = f"{os.path.basename(p)} unreadable ({exc})"
                    break
                if not header or not has_duration_column(header):
                    why = f"{os.path.basename(p)} has no header with a duration column (partial write?)"
                    break
        out.append({"ts": ts, "files": files, "complete": why is None, "why": why})
    return sorted(out, key=lambda e: int(e["ts"]), reverse=True)


def locate(root):
    """Find the kernel table under ``root`` (a PROF dir, its parent, or a torch_npu ``*_ascend_pt`` dir).

    Returns ``{"kind": op_summary|task_time|old_op_summary|kernel_details, "files": [...], "prof_dir",
    "ignored": [why...]}``. Raises UserError (with what was found) when nothing usable exists.
    """
    ignored = []
    for prof in prof_dirs(root):
        out_dir = os.path.join(prof, "mindstudio_profiler_output")
        for kind in ("op_summary", "task_time"):
            sets = export_sets(out_dir, kind) if os.path.isdir(out_dir) else []
            for i, s in enumerate(sets):
                if s["complete"]:
                    ignored += [f"{prof}: {kind} export {o['ts']} is older than {s['ts']} (stale)"
                                for o in sets[i + 1:]]
                    return {"kind": kind, "files": s["files"], "prof_dir": prof, "ts": s["ts"], "ignored": ignored}
                ignored.append(f"{prof}: {kind} export {s['ts']} incomplete: {s['why']}")
        old = sorted(glob.glob(os.path.join(prof, "device_*", "summary", "op_summary_*.csv")))
        if old:
            return {"kind": "old_op_summary", "files": old, "prof_dir": prof, "ts": None, "ignored": ignored}
        ignored.append(f"{prof}: no op_summary/task_time export")
    pt = sorted(glob.glob(os.path.join(os.path.abspath(root), "**", "ASCEND_PROFILER_OUTPUT", "kernel_details.csv"),
                          recursive=True), key=os.path.getmtime, reverse=True)
    if os.path.basename(os.path.abspath(root)) == "ASCEND_PROFILER_OUTPUT":
        pt = [p for p in [os.path.join(root, "kernel_details.csv")] if os.path.exists(p)] + pt
    if pt:
        ignored += [f"{p}: older kernel_details.csv (stale)" for p in pt[1:]]
        return {"kind": "kernel_details", "files": [pt[0]], "prof_dir": os.path.dirname(os.path.dirname(pt[0])),
                "ts": None, "ignored": ignored}
    detail = "; ".join(ignored) if ignored else "no PROF_* directory and no ASCEND_PROFILER_OUTPUT"
    raise UserError(f"{root}: no msprof kernel table found ({detail}) - msprof must write "
                    "PROF_*/mindstudio_profiler_output/op_summary_*.csv; if the PROF dir has only raw data, export "
                    "it with `msprof --export=on --output=<PROF dir>`")


def load_kernel_rows(root, device_id=None):
    """Kernel rows of the newest complete export under ``root``, marker rows removed, in time order.

    Returns ``(rows, meta)``; ``meta``: kind, files, prof_dir, ignored (stale/partial exports passed over),
    ``marker_rows_dropped``, ``reordered`` (True when rows were not in time order and were sorted),
    ``timing_column``. Rows whose start or duration is missing or zero are **kept in place** so that the caller
    can detect them (a zero-timestamp record is an incomplete profile, never a 0 ns kernel).
    """
    loc = locate(root)
    rows = []
    for i, path in enumerate(loc["files"]):
        rows += parse_kernel_csv(path, source=os.path.relpath(path, loc["prof_dir"]))
    if device_id is not None and any(r.get("device_id") is not None for r in rows):
        ids = {r.get("device_id") for r in rows}
        if device_id in ids:
            rows = [r for r in rows if r.get("device_id") in (device_id, None)]
    kept = [r for r in rows if not is_marker_row(r)]
    meta = dict(loc)
    meta["marker_rows_dropped"] = len(rows) - len(kept)
    starts = [r["start_ns"] for r in kept if r.get("start_ns")]
    meta["reordered"] = any(b < a for a, b in zip(starts, starts[1:]))
    if meta["reordered"]:
        valid = sorted((r for r in kept if r.get("start_ns")), key=lambda r: r["start_ns"])
        it = iter(valid)
        kept = [next(it) if r.get("start_ns") else r for r in kept]
    meta["timing_column"] = {"op_summary": "Task Duration(us)", "old_op_summary": "Task Duration(us)",
                             "task_time": "task_time(us)", "kernel_details": "Duration(us)"}[loc["kind"]]
    return kept, meta


# ------------------------------------------------------------------------------------------------ info.json


def read_info_json(root, device_id=None):
    """Runtime AI-core count and frequency from ``PROF_*/device_N/info.json.N`` (docs/sources.md#ascend-cube-peak).

    Returns ``{"ai_core_num", "aic_frequency_mhz", "aiv_num", "aiv_frequency_mhz", "platform_version",
    "device_id", "info_json_path"}`` (``PROF_*/device_N/info.json.N``) or None when none is found; ``*.done`` files
    are skipped.
    """
    cands = []
    for prof in prof_dirs(root):
        for d in sorted(glob.glob(os.path.join(prof, "device_*"))):
            if not re.fullmatch(r"device_\d{1,2}", os.path.basename(d)):
                continue
            for p in sorted(glob.glob(os.path.join(d, "info.json.*"))):
                if INFO_JSON_RE.match(os.path.basename(p)):
                    cands.append((p, os.path.relpath(p, os.path.dirname(prof))))
    if device_id is not None:
        cands.sort(key=lambda c: not c[0].endswith(f".{device_id}"))
    for path, rel in cands:
        try:
            with open(path, encoding="utf-8-sig") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        devs = data.get("DeviceInfo") or []
        if not devs:
            continue
        d = devs[0]

        def num(key):
            v = d.get(key)
            try:
                return float(v) if v not in (None, "") else None
            except (TypeError, ValueError):
                return None
        cores = num("ai_core_num")
        return {"ai_core_num": int(cores) if cores else None, "aic_frequency_mhz": num("aic_frequency"),
                "aiv_num": int(num("aiv_num")) if num("aiv_num") else None, "aiv_frequency_mhz": num("aiv_frequency"),
                "platform_version": data.get("platform_version"), "device_id": d.get("id"),
                "info_json_path": rel}
    return None
