"""Locate and parse msprof / torch_npu kernel tables by column name (reference/ascend_msprof_facts.md).

Where the rows come from (first found wins; facts §2, §11):

1. ``PROF_*/mindstudio_profiler_output/op_summary_*.csv`` (CANN >= 7.0; sliced exports
   ``op_summary_slice_<n>_<ts>.csv`` merged in slice order);
2. ``PROF_*/mindstudio_profiler_output/task_time_*.csv`` (same PROF directory; when op_summary is absent);
3. ``PROF_*/device_*/summary/op_summary_*.csv`` (the old CANN 5.x/6.x layout);
4. ``*_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv`` (torch_npu profiler).

Stale and partial exports: PROF directories are ordered by the 17-digit timestamp in their name (then mtime); inside
one, exports by the 14-digit ``<ts>`` of the file names. The **newest complete** export wins: an export is complete
when its slices are numbered 0..n without a gap and every file has a header with a duration column. Everything
passed over is listed in the result (``ignored``), never silently merged.

Values (facts §0, §3, §5): whitespace, TAB and quotes are stripped (``1780676244313289.000\\t``,
tripled quotes around shapes -> ``81920,4096``); ``N/A``, ``NA``, ``-`` and empty cells are None; microsecond values are
converted to integer nanoseconds **exactly** (``1780676244313289.120`` us has 19 significant digits in ns, more
than a float64 holds); big integers (``Model ID`` 4294967295) stay ints. Headers are matched by name with the
aliases of facts §11 (``Block Dim|Block Num``, ``Op Name|Name``, ``Task Type|Accelerator Core``, ...): the column
order is never assumed. Every other numeric column is kept as a PMU value (``aic_mac_ratio``, ``aicore_time(us)``,
``mac_ratio`` on non-A2 chips, ...).

Marker rows (no kernel name, or a task type of :data:`MARKER_TASK_TYPES` such as ``PROFILING_ENABLE``,
``TASK_TIMEOUT_SET``, ``EVENT_RECORD``) are dropped and counted.
"""
from __future__ import annotations

import csv
import glob
import json
import os
import re

from mfulib.collect import msprof_fast
from mfulib.core.errors import UserError

NA_VALUES = {"", "N/A", "NA", "n/a", "na", "-", "None", "nan", "NaN"}

# canonical key -> header spellings seen across CANN versions and torch_npu (facts §3, §4, §5, §11)
COLUMN_ALIASES = {
    "name": ("Op Name", "Name", "kernel_name"),
    "op_type": ("OP Type", "Type", "Op Type"),
    "task_type": ("Task Type", "Accelerator Core", "kernel_type"),
    "start_us": ("Task Start Time(us)", "Task Start Time", "Start Time(us)", "task_start(us)"),
    "duration_us": ("Task Duration(us)", "Duration(us)", "task_time(us)"),
    "stop_us": ("task_stop(us)",),
    "wait_us": ("Task Wait Time(us)", "Wait Time(us)"),
    "block_dim": ("Block Dim", "Block Num"),
    "mix_block_dim": ("Mix Block Dim", "Mix Block Num"),
    "device_id": ("Device_id", "Device Id"),
    "model_id": ("Model ID",),
    "task_id": ("Task ID", "task_id"),
    "stream_id": ("Stream ID", "stream_id"),
    "op_state": ("OP State",),
    "hf32_eligible": ("HF32 Eligible",),
    "input_shapes": ("Input Shapes",),
    "input_dtypes": ("Input Data Types",),
    "input_formats": ("Input Formats",),
    "output_shapes": ("Output Shapes",),
    "output_dtypes": ("Output Data Types",),
    "output_formats": ("Output Formats",),
    "context_id": ("Context ID",),
    "step_id": ("Step Id",),
    "model_name": ("Model Name",),
    "infer_id": ("Infer ID",),
}
_ALIAS_LOOKUP = {re.sub(r"\s+", " ", a).strip().lower(): key for key, names in COLUMN_ALIASES.items() for a in names}
_TEXT_KEYS = {"name", "op_type", "task_type", "op_state", "hf32_eligible", "input_shapes", "input_dtypes",
              "input_formats", "output_shapes", "output_dtypes", "output_formats", "model_name"}
_INT_KEYS = {"block_dim", "mix_block_dim", "device_id", "model_id", "task_id", "stream_id", "context_id", "step_id",
             "infer_id"}
_US_KEYS = {"start_us": "start_ns", "duration_us": "duration_ns", "stop_us": "stop_ns", "wait_us": "wait_ns"}

# task types that are runtime bookkeeping, not kernels (facts §3.3, §4 task_time sample; ops-profiling quick mode
# excludes PROFILING_ENABLE/DISABLE and TASK_TIMEOUT_SET)
MARKER_TASK_TYPES = frozenset({
    "PROFILING_ENABLE", "PROFILING_DISABLE", "TASK_TIMEOUT_SET", "EVENT_RECORD", "EVENT_WAIT", "EVENT_RESET",
    "NOTIFY_RECORD", "NOTIFY_WAIT", "WRITE_BACK", "INVALID", "MODEL_MAINTAINCE", "MODEL_EXECUTE", "STREAM_SWITCH",
    "STREAM_ACTIVE", "LABEL_SET", "LABEL_SWITCH", "LABEL_GOTO", "CAPTURE_RECORD", "CAPTURE_WAIT"})

_TS_RE = r"(?P<ts>\d{1,20})"
_EXPORT_RE = {kind: re.compile(rf"^{kind}_(?:slice_(?P<slice>\d+)_)?{_TS_RE}\.csv$")
              for kind in ("op_summary", "task_time")}
_PROF_TS_RE = re.compile(r"^PROF_\d+_(\d{17})_")
INFO_JSON_RE = re.compile(r"^info\.json\.\d{1,2}$")


# ------------------------------------------------------------------------------------------------ values


def clean(text):
    """A cell as text: whitespace/TAB and surrounding quotes stripped; NA spellings -> None."""
    if text is None:
        return None
    s = str(text).strip().strip("\"'").strip()
    return None if s in NA_VALUES else s


def us_to_ns(text):
    """Exact integer nanoseconds of a microsecond cell (``"1780676244313289.120\\t"`` -> 1780676244313289120).

    Returns None for NA cells; raises ValueError for a cell that is not a number.
    """
    s = clean(text)
    if s is None:
        return None
    m = re.fullmatch(r"([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?", s)
    if not m or not (m.group(2) or m.group(3)):
        raise ValueError(f"not a number: {text!r}")
    if m.group(4):  # exponent form: float is the best we can do
        return int(round(float(s) * 1000))
    sign = -1 if m.group(1) == "-" else 1
    whole = int(m.group(2) or 0)
    frac = (m.group(3) or "")
    frac_ns = int((frac + "000")[:3])
    rest = frac[3:]
    if rest and int(rest[0]) >= 5:  # round half up beyond the ns digit
        frac_ns += 1
    return sign * (whole * 1000 + frac_ns)


def to_number(text):
    """int for integer cells (4294967295 stays exact), float otherwise, None for NA; ValueError if not numeric."""
    s = clean(text)
    if s is None:
        return None
    if re.fullmatch(r"[+-]?\d+", s):
        return int(s)
    return float(s)


def parse_shapes(text):
    """``"81920,4096;8192,512"`` -> [[81920, 4096], [8192, 512]]; None for NA; tensors with NA dims -> None."""
    s = clean(text)
    if s is None:
        return None
    out = []
    for part in s.split(";"):
        part = part.strip().strip("\"'")
        if not part:
            out.append([])
            continue
        try:
            out.append([int(d) for d in part.split(",") if d.strip() != ""])
        except ValueError:
            out.append(None)
    return out


# ------------------------------------------------------------------------------------------------ one file


def read_csv_table(path):
    """(header, rows) of a CSV written by msprof / torch_npu: BOM tolerated, trailing empty columns dropped."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            return [], []
        rows = [r for r in reader if any(c.strip() for c in r)]
    header = [h.strip() for h in header]
    while header and header[-1] == "":
        header.pop()
    return header, rows


def canonical_columns(header):
    """{column index: canonical key or ``pmu:<header>``} for a header row (names matched by alias, any order)."""
    out = {}
    for i, h in enumerate(header):
        if not h:
            continue
        key = _ALIAS_LOOKUP.get(re.sub(r"\s+", " ", h).strip().lower())
        out[i] = key if key else "pmu:" + h
    return out


def has_duration_column(header) -> bool:
    return "duration_us" in canonical_columns(header).values()


FAST_PATH_MIN_BYTES = 1 << 20  # files this large are read with pandas (mfulib.collect.msprof_fast); smaller ones cell by cell
_KINDS = {**{k: "us" for k in _US_KEYS}, **{k: "int" for k in _INT_KEYS}, **{k: "text" for k in _TEXT_KEYS}}


def _header(path):
    with open(path, encoding="utf-8-sig", newline="") as f:
        first = next(csv.reader(f), [])
    header = [h.strip() for h in first]
    while header and header[-1] == "":
        header.pop()
    return header


def read_kernel_frame(path, header=None, cols=None, workers: int | None = None):
    """One kernel CSV as a typed pandas DataFrame (:func:`mfulib.collect.msprof_fast.read_frame`: ``start_ns`` /
    ``duration_ns`` / ... exact Int64 ns, text keys categorical, int and ``pmu:<header>`` columns float64).

    Raises UserError without a duration column; :class:`mfulib.collect.msprof_fast.FastPathUnsupported` when pandas
    cannot read the file with these types (:func:`parse_kernel_csv` then parses it cell by cell)."""
    header = header if header is not None else _header(path)
    cols = cols if cols is not None else canonical_columns(header)
    if "duration_us" not in cols.values():
        raise UserError(f"{path}: no duration column (expected one of {COLUMN_ALIASES['duration_us']}); header is "
                        f"{header[:12]} - is this an msprof op_summary/task_time or torch_npu kernel_details file?")
    return msprof_fast.read_frame(path, cols, _KINDS, NA_VALUES, clean, us_to_ns, workers)


def parse_kernel_csv(path, source: str = None, fast: bool | None = None):
    """Rows of one op_summary / task_time / kernel_details CSV as dicts with canonical keys.

    Each row: ``name, op_type, task_type, start_ns, duration_ns, wait_ns, stop_ns`` (ints, ns), the int columns
    (``block_dim``, ``stream_id``, ``task_id``, ...), text columns (shapes, dtypes...), ``pmu``: {header: number}
    for every other numeric column, and ``source`` (file). Raises UserError when the file has no duration column
    or a duration cell is not a number.

    ``fast``: read with pandas typed columns (:mod:`mfulib.collect.msprof_fast`, same rows; 1M rows in seconds instead of
    minutes); None = for files of at least :data:`FAST_PATH_MIN_BYTES`. A file the fast path cannot type is parsed
    cell by cell, which names the bad line.
    """
    header = _header(path)
    cols = canonical_columns(header)
    if "duration_us" not in cols.values():
        raise UserError(f"{path}: no duration column (expected one of {COLUMN_ALIASES['duration_us']}); header is "
                        f"{header[:12]} - is this an msprof op_summary/task_time or torch_npu kernel_details file?")
    source = source or os.path.basename(path)
    if fast if fast is not None else os.path.getsize(path) >= FAST_PATH_MIN_BYTES:
        try:
            rows = msprof_fast.frame_rows(read_kernel_frame(path, header, cols), source)
        except (msprof_fast.FastPathUnsupported, ValueError, ImportError):
            rows = None  # the cell-by-cell parser below gives the precise error (or handles the oddity)
        if rows is not None:
            for row in rows:
                if row.get("duration_ns") is None and row.get("stop_ns") is not None and \
                        row.get("start_ns") is not None:
                    row["duration_ns"] = row["stop_ns"] - row["start_ns"]
            return rows
    _header_again, table = read_csv_table(path)
    rows = []
    for line_no, cells in enumerate(table, start=2):
        row = {"pmu": {}, "source": source}
        for i, key in cols.items():
            cell = cells[i] if i < len(cells) else None
            try:
                if key in _US_KEYS:
                    row[_US_KEYS[key]] = us_to_ns(cell)
                elif key in _INT_KEYS:
                    v = to_number(cell)
                    row[key] = int(v) if isinstance(v, (int, float)) and float(v).is_integer() else v
                elif key in _TEXT_KEYS:
                    row[key] = clean(cell)
                elif key.startswith("pmu:"):
                    try:
                        v = to_number(cell)
                    except ValueError:
                        v = None  # a text PMU cell: not a ratio
                    if v is not None:
                        row["pmu"][key[4:]] = v
            except ValueError as exc:
                raise UserError(f"{path}:{line_no}: column {header[i]!r}: {exc} - the file is damaged or not an "
                                "msprof export; re-export it (msprof --export=on --output=<PROF dir>)") from None
        if row.get("duration_ns") is None and row.get("stop_ns") is not None and row.get("start_ns") is not None:
            row["duration_ns"] = row["stop_ns"] - row["start_ns"]
        rows.append(row)
    return rows


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
                    ignored += [f"{prof}: {kind} export {o['ts']} is older than {s['ts']} (stale)" for o in sets[i + 1:]]
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
    """Runtime AI-core count and frequency from ``PROF_*/device_N/info.json.N`` (facts §4 "info.json.N").

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
