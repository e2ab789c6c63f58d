"""Parse Nsight Compute CSV output (``ncu --csv``), both page layouts, into one record per profiled launch.

* ``--page details`` (the default with ``--metrics``): long format, one row per (launch, metric):
  ``"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",
  "Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"``;
* ``--page raw``: row 0 names (``"ID",...,"Kernel Name",...,<metric names>``), row 1 units, then one row per launch
  (docs/sources.md#ncu-metrics).

ncu interleaves its own ``==PROF==`` lines and the application's output with the CSV on stdout: only lines that
parse as rows of the table that starts at the ``"ID",`` header are read. Numbers carry locale thousands
separators (``"2,097,152"``, docs/sources.md#ncu-metrics): separators are removed before conversion;
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


BYTE_UNITS = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12, "kibyte": 1024.0,
              "mibyte": 1024.0 ** 2, "gibyte": 1024.0 ** 3}


def to_bytes(value, unit):
    """A size in ``unit`` (ncu's ``byte``/``Kbyte``/``Mbyte``/``Gbyte``, decimal; ``KiByte``... binary) as bytes;
    None when the unit is not a size unit."""
    factor = BYTE_UNITS.get(str(unit or "").strip().lower())
    if value is None or factor is None or not isinstance(value, float):
        return None
    return value * factor


def _csv_rows(text):
    """(header, rows) of the CSV lines of ncu's stdout (from the first ``"ID",`` header on), other lines dropped.

    Rows keep their own cell count: on the details page the header names the rule columns (``Rule Name, Rule
    Type, Rule Description, Estimated Speedup Type, Estimated Speedup``) that only rule rows fill, so metric rows
    can be shorter than the header; :func:`parse_ncu_csv` reads each cell by column name where present.
    """
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID",')), None)
    if start is None:
        return None, []
    header = next(csv.reader([lines[start]]))
    rows = []
    for ln in lines[start + 1:]:
        if not ln.startswith('"') or ln.startswith('"ID",'):
            continue
        try:
            cells = next(csv.reader(io.StringIO(ln)))
        except (csv.Error, StopIteration):
            continue
        rows.append(cells)
    return header, rows


RULE_COLUMNS = ("Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup")


def parse_ncu_csv(text):
    """Launch records from ``ncu --csv`` stdout (details or raw page) - the one ncu parser of the project.

    Returns a list ordered by ncu's launch ``ID``: ``{"id", "kernel_name", "stream", "grid", "block", "device",
    "context", "metrics": {name: number|text|None}, "units": {name: unit}, "sections": {name: section} (details
    page), "rules": [{"section", "rule", "type", "description", "speedup_type", "speedup"}] (details page rule
    rows)}``. Details page: a row with a ``Metric Name`` is a metric row (read up to ``Metric Value``; it may have
    fewer cells than the header), a row with a ``Rule Name`` and no metric is a rule row. Raw page: row 0 holds the
    units when its ID cell is not a number. Rows whose ID is not a number are skipped. An empty list when no table
    is present.
    """
    header, rows = _csv_rows(text)
    if header is None:
        return []
    col = {h: i for i, h in enumerate(header)}
    launches = {}

    def cell(cells, name):
        i = col.get(name)
        return cells[i] if i is not None and i < len(cells) else None

    def base(cells):
        idv = parse_number(cell(cells, "ID") or "")
        if not isinstance(idv, float):
            return None
        lid = int(idv)
        rec = launches.get(lid)
        if rec is None:
            rec = launches[lid] = {
                "id": lid, "kernel_name": cell(cells, "Kernel Name"), "stream": cell(cells, "Stream"),
                "grid": cell(cells, "Grid Size"), "block": cell(cells, "Block Size"), "device": cell(cells, "Device"),
                "context": cell(cells, "Context"), "metrics": {}, "units": {}, "sections": {}, "rules": []}
        return rec

    if "Metric Name" in col and "Metric Value" in col:  # details page, long format
        for cells in rows:
            rec = base(cells)
            if rec is None:
                continue
            name = cell(cells, "Metric Name")
            if name:
                if len(cells) <= col["Metric Value"]:
                    continue  # a cut-off line: no value
                rec["metrics"][name] = parse_number(cells[col["Metric Value"]])
                rec["units"][name] = cell(cells, "Metric Unit") or ""
                rec["sections"][name] = cell(cells, "Section Name") or ""
            elif cell(cells, "Rule Name"):
                rec["rules"].append({"section": cell(cells, "Section Name"), "rule": cell(cells, "Rule Name"),
                                     "type": cell(cells, "Rule Type"), "description": cell(cells, "Rule Description"),
                                     "speedup_type": cell(cells, "Estimated Speedup Type"),
                                     "speedup": parse_number(cell(cells, "Estimated Speedup") or "")})
    else:  # raw page: first data row holds the units
        fixed = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context", "Stream",
                 "Block Size", "Grid Size", "Device", "CC", "Section Name"}
        metric_cols = [h for h in header if h not in fixed]
        units = {}
        data = rows
        if rows and not isinstance(parse_number(cell(rows[0], "ID") or ""), float):
            units = {h: cell(rows[0], h) or "" for h in metric_cols}
            data = rows[1:]
        for cells in data:
            rec = base(cells)
            if rec is None:
                continue
            for h in metric_cols:
                v = cell(cells, h)
                rec["metrics"][h] = parse_number(v) if v is not None else None
                rec["units"][h] = units.get(h, "")
    return [launches[k] for k in sorted(launches)]


TIME_METRIC = "gpu__time_duration.sum"
#: the details page's name for :data:`TIME_METRIC` in the SpeedOfLight section (ncu's default ``basic`` set):
#: (section name, metric label). In the H200 recording tests/fixtures/profiles/cuda/ncu_details.csv both rows of each
#: launch carry the same value (226,944 ns for launch 0).
SOL_DURATION = ("GPU Speed Of Light Throughput", "Duration")


def kernel_duration(rec):
    """(ns, source) of one launch's device duration: ``gpu__time_duration.sum`` (raw page, or the details page with
    ``--metrics``), else the details page's SpeedOfLight ``Duration`` (what ``ncu --csv --page details`` prints with
    its default sections); (None, None) when neither is there or its unit is not a time. Units: ncu's own
    (``nsecond``/``usecond``/``msecond``, or ``ns`` with ``--print-units base``), converted by :func:`to_ns`."""
    d = to_ns(rec["metrics"].get(TIME_METRIC), rec["units"].get(TIME_METRIC))
    if d is not None:
        return d, TIME_METRIC
    section, label = SOL_DURATION
    if rec.get("sections", {}).get(label) == section:
        d = to_ns(rec["metrics"].get(label), rec["units"].get(label))
        if d is not None:
            return d, f"{section}: {label}"
    return None, None


def duration_ns(rec, metric: str = TIME_METRIC):
    """The launch's ``metric`` in ns (None when absent or not a time); for the default metric, the details page's
    SpeedOfLight ``Duration`` when ``gpu__time_duration.sum`` is absent (:func:`kernel_duration`)."""
    if metric == TIME_METRIC:
        return kernel_duration(rec)[0]
    return to_ns(rec["metrics"].get(metric), rec["units"].get(metric))


def short_kernel_name(name: str) -> str:
    """Function identifier of a kernel name: ``void at::native::foo<4>(int)`` -> ``foo``; ``matmul_kernel`` unchanged.

    Used to compare names from CUPTI (torch.profiler) and ncu, which spell templates and parameters differently.
    """
    s = re.sub(r"^\s*void\s+", "", str(name or ""))
    s = re.split(r"[<(]", s, maxsplit=1)[0]  # template arguments and parameters end the qualified name
    return s.split("::")[-1].strip()
