"""What a ``--from-prof`` path holds: :func:`discover` lists its profiles (kept | msprof | chrome | ncu |
msprof_csv) in recording order, sniffing files by their first bytes (never by name alone)."""
from __future__ import annotations

import glob
import os
import re

from mfulib.collect.keep_index import INDEX_NAME, select_kept
from mfulib.profiles.msprof_csv import has_duration_column
from mfulib.core.errors import UserError


def _is_kept(d) -> bool:
    return os.path.isfile(os.path.join(d, "spec.json")) and (
        os.path.exists(os.path.join(d, "trace.json")) or os.path.isdir(os.path.join(d, "msprof")))


def head_text(path, n=1 << 20):
    """The first ``n`` bytes of a file (gunzipped when it is gzip) as text; "" when unreadable."""
    import gzip
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            return f.read(n).decode("utf-8", errors="replace")
    except (OSError, EOFError):
        return ""


def _sniff_file(path):
    """The format of one file, or None: ``chrome`` (a JSON document with ``traceEvents``, or an event list) |
    ``ncu`` (an ``"ID",`` table header or ``==PROF==`` lines) | ``msprof_csv`` (a CSV with a duration column)."""
    low = path.lower()
    head = head_text(path)
    if low.endswith((".json", ".json.gz")):
        return "chrome" if ('"traceEvents"' in head or head.lstrip().startswith("[")) else None
    lines = head.splitlines()
    if any(ln.startswith('"ID",') for ln in lines) or any(ln.startswith("==PROF==") for ln in lines):
        return "ncu"
    first = head.splitlines()[0] if head.strip() else ""
    if low.endswith(".csv") and has_duration_column([h.strip() for h in first.split(",")]):
        return "msprof_csv"
    return None


def discover(path, all_runs=False, kept_runs=None):
    """``[(kind, path)]`` of the profiles at ``path`` (kind: kept | msprof | chrome | ncu | msprof_csv), in
    recording order (kept: case then impl; others by name). Raises UserError when none is recognised.

    A keep directory (``<dir>/prof`` or ``prof`` itself) gives the profiles of its latest run only
    (:func:`mfulib.collect.keep_index.select_kept`; ``all_runs``: every current ``case<N>_<impl>`` folder, runs
    mixed; without a ``runs.json`` index: every folder, with a warning). ``kept_runs``: a list that receives the
    selection's info dict (what was read, what was ignored, the note and warning to show) per keep directory."""
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise UserError(f"--from-prof {path}: not found - give a PROF_* / *_ascend_pt directory, a chrome trace "
                        "(.json/.json.gz), an ncu --csv file, or a --keep-prof directory")
    if os.path.isfile(path):
        kind = _sniff_file(path)
        if kind is None and path.lower().endswith((".json", ".json.gz")):
            kind = "chrome"  # given explicitly: load_chrome says what is wrong with it
        if kind is None and (path.lower().endswith((".nsys-rep", ".qdrep", ".sqlite"))
                             or head_text(path, 16).startswith("SQLite format 3")):
            raise UserError(f"--from-prof {path}: an Nsight Systems report or SQLite export - not read by this tool "
                            "(--help); record the loop with torch.profiler (chrome trace) or ncu --csv instead")
        if kind is None:
            raise UserError(f"--from-prof {path}: not a chrome trace, an ncu --csv output or an msprof CSV (no "
                            "traceEvents, no \"ID\", header, no duration column)")
        return [(kind, path)]
    if _is_kept(path):
        return [("kept", path)]
    for base in (path, os.path.join(path, "prof")):
        kept = sorted((d for d in glob.glob(os.path.join(base, "case*_*")) if _is_kept(d)), key=_kept_key)
        if kept or os.path.exists(os.path.join(base, INDEX_NAME)):
            chosen, info = select_kept(base, kept, all_runs)
            if kept_runs is not None:
                kept_runs.append(info)
            if not chosen:
                raise UserError(f"--from-prof {path}: {info['warning'] or info['note']}")
            return [("kept", d) for d in sorted(chosen, key=_kept_key)]
    base = os.path.basename(path)
    if base.startswith("PROF_") or base.endswith("_ascend_pt") or base == "ASCEND_PROFILER_OUTPUT":
        return [("msprof", path)]
    found = []
    pts = sorted(glob.glob(os.path.join(path, "**", "*_ascend_pt"), recursive=True))
    found += [("msprof", p) for p in pts if os.path.isdir(p)]
    for p in sorted(glob.glob(os.path.join(path, "**", "PROF_*"), recursive=True)):
        if os.path.isdir(p) and not any(p.startswith(q + os.sep) for _, q in found) and \
                not any(os.path.basename(a).startswith("PROF_") for a in _parents(p, path)):
            found.append(("msprof", p))
    taken = [q for _, q in found]
    for p in sorted(glob.glob(os.path.join(path, "**", "*"), recursive=True)):
        if os.path.isfile(p) and not any(p.startswith(q + os.sep) for q in taken):
            kind = _sniff_file(p)
            if kind in ("chrome", "ncu"):
                found.append((kind, p))
    if not found:
        raise UserError(f"--from-prof {path}: no profile found (no PROF_* or *_ascend_pt directory, chrome trace "
                        ".json/.json.gz, ncu --csv file, or kept case<N>_<impl>/spec.json)")
    return found


def _parents(p, stop):
    out = []
    d = os.path.dirname(p)
    while d.startswith(stop) and d != stop:
        out.append(d)
        d = os.path.dirname(d)
    return out


def _kept_key(d):
    m = re.match(r"case(\d+)_(\w+)$", os.path.basename(d))
    return (int(m.group(1)), m.group(2)) if m else (1 << 30, os.path.basename(d))
