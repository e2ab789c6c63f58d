"""Parse Nsight Compute CSV output (``ncu --csv``), both page layouts, into one record per profiled launch.

* ``--page details`` (the default with ``--metrics``): long format, one row per (launch, metric):
  ``"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",
  "Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"``;
* ``--page raw``: row 0 names (``"ID",...,"Kernel Name",...,<metric names>``), row 1 units, then one row per launch
  (reference/peers_and_anchors.md §2.5).

ncu interleaves its own ``==PROF==`` lines and the application's output with the CSV on stdout: only lines that
parse as rows of the table that starts at the ``"ID",`` header are read. Numbers carry locale thousands
separators (``"2,097,152"``, reference/environment_notes.md): separators are removed before conversion;
``n/a`` cells are None. Time metrics are converted to ns with :func:`to_ns` from their unit column.
"""
from __future__ import annotations

import csv
import io
import re

TIME_UNITS_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9,
                 "s": 1e9}
_NA = {"", "n/a", "N/A", "NA", "nan"}


def parse_number(text):
    """``"2,097,152"`` -> 2097152.0; ``"209.34"`` -> 209.34; NA -> None; non-numbers are returned unchanged."""
    s = str(text).strip()
    if s in _NA:
        return None
    t = s.replace(",", "").replace("\u202f", "").replace("\xa0", "")
    try:
        return float(t)
    except ValueError:
        return s


def to_ns(value, unit):
    """A time value in ``unit`` (nsecond/usecond/msecond/second) as ns; None when the unit is not a time unit."""
    factor = TIME_UNITS_NS.get(str(unit or "").strip().lower())
    if value is None or factor is None or not isinstance(value, float):
        return None
    return value * factor


def _csv_rows(text):
    """The CSV lines of ncu's stdout (from the first ``"ID",`` header on), other lines dropped."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID",')), None)
    if start is None:
        return None, []
    header = next(csv.reader([lines[start]]))
    rows = []
    for ln in lines[start + 1:]:
        if not ln.startswith('"'):
            continue
        try:
            cells = next(csv.reader(io.StringIO(ln)))
        except (csv.Error, StopIteration):
            continue
        if len(cells) == len(header):
            rows.append(cells)
    return header, rows


def parse_ncu_csv(text):
    """Launch records from ``ncu --csv`` stdout (details or raw page).

    Returns a list ordered by ncu's launch ``ID``: ``{"id", "kernel_name", "stream", "grid", "block", "device",
    "metrics": {name: number|text|None}, "units": {name: unit}}``. An empty list when no table is present.
    """
    header, rows = _csv_rows(text)
    if header is None:
        return []
    col = {h: i for i, h in enumerate(header)}
    launches = {}

    def base(cells):
        lid = int(parse_number(cells[col["ID"]]))
        rec = launches.get(lid)
        if rec is None:
            rec = launches[lid] = {
                "id": lid, "kernel_name": cells[col["Kernel Name"]] if "Kernel Name" in col else None,
                "stream": cells[col["Stream"]] if "Stream" in col else None,
                "grid": cells[col["Grid Size"]] if "Grid Size" in col else None,
                "block": cells[col["Block Size"]] if "Block Size" in col else None,
                "device": cells[col["Device"]] if "Device" in col else None, "metrics": {}, "units": {}}
        return rec

    if "Metric Name" in col and "Metric Value" in col:  # details page, long format
        for cells in rows:
            rec = base(cells)
            name = cells[col["Metric Name"]]
            rec["metrics"][name] = parse_number(cells[col["Metric Value"]])
            rec["units"][name] = cells[col["Metric Unit"]] if "Metric Unit" in col else ""
    else:  # raw page: first data row holds the units
        fixed = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context", "Stream",
                 "Block Size", "Grid Size", "Device", "CC", "Section Name"}
        metric_cols = [h for h in header if h not in fixed]
        units = {}
        data = rows
        if rows and not re.fullmatch(r"\d+", rows[0][col["ID"]].replace(",", "").strip()):
            units = {h: rows[0][col[h]] for h in metric_cols}
            data = rows[1:]
        for cells in data:
            rec = base(cells)
            for h in metric_cols:
                rec["metrics"][h] = parse_number(cells[col[h]])
                rec["units"][h] = units.get(h, "")
    return [launches[k] for k in sorted(launches)]


def duration_ns(rec, metric: str = "gpu__time_duration.sum"):
    """The launch's ``gpu__time_duration`` in ns (None when the metric is absent or not a time)."""
    return to_ns(rec["metrics"].get(metric), rec["units"].get(metric))


def short_kernel_name(name: str) -> str:
    """Function identifier of a kernel name: ``void at::native::foo<4>(int)`` -> ``foo``; ``matmul_kernel`` unchanged.

    Used to compare names from CUPTI (torch.profiler) and ncu, which spell templates and parameters differently.
    """
    s = re.sub(r"^\s*void\s+", "", str(name or ""))
    s = re.split(r"[<(]", s, maxsplit=1)[0]  # template arguments and parameters end the qualified name
    return s.split("::")[-1].strip()
