"""The one parser of msprof / torch_npu kernel CSVs (op_summary, task_time, kernel_details, msprof-op OpBasicInfo):
:func:`parse_kernel_csv` (row dicts) and :func:`read_kernel_frame` (a typed pandas DataFrame), both built from the
same typed columns.

Headers are matched by name with the aliases of :data:`COLUMN_ALIASES` (``Block Dim|Block Num``, ``Op Name|Name``,
``Task Type|Accelerator Core``, ...): the column order is never assumed; a file without a duration column is refused.
Every other named column is kept as a PMU value (``aic_mac_ratio``, ``aicore_time(us)``, ``mac_ratio`` on non-A2
chips, ...).

Values, one rule per column kind (the same rule for every file, small or large):

* **text** (names, types, shapes, dtypes): whitespace, TAB and surrounding quotes stripped (tripled quotes around
  shapes -> ``81920,4096``), ``N/A``, ``NA``, ``-``, empty and the other :data:`NA_VALUES` -> None;
* **microseconds** (start, duration, wait, stop): integer nanoseconds, **exactly** (``1780676244313289.120\\t`` us
  has 19 significant digits in ns, more than a float64 holds), half up beyond the ns digit; a trailing TAB is
  stripped; a cell that is not a number is a bad line;
* **numbers** (ids, block dims, PMU counters): float64, returned as an int where integral (``Model ID`` 4294967295,
  below 2**53, stays exact), None for NA; a text cell in an id column is a bad line, in a PMU column it is dropped.

A bad line raises UserError naming the file and its line (``op_summary_1.csv:4: column 'Task Start Time(us)'``).

How the cells are read is the only part that depends on the file's size: from :data:`FAST_PATH_MIN_BYTES` on,
pandas' C reader (number columns typed in C; over 32 MiB split at line ends across processes; 1M rows in seconds,
not minutes); smaller files, and any file the C reader cannot take (ragged rows, a bad cell whose line must be
named), the ``csv`` module. Both feed the same column converters. Sources: CANN's msprof documentation (op_summary /
task_time fields) and torch_npu's profiler output (kernel_details.csv).
"""
from __future__ import annotations

import csv
import os
import re

import numpy as np

from mfulib.core.errors import UserError

NA_VALUES = {"", "N/A", "NA", "n/a", "na", "-", "None", "nan", "NaN"}

# canonical key -> header spellings seen across CANN versions and torch_npu
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
_US_KEYS = {"start_us": "start_ns", "duration_us": "duration_ns", "stop_us": "stop_ns", "wait_us": "wait_ns"}

FAST_PATH_MIN_BYTES = 1 << 20  # files this large are read with pandas' C reader; smaller ones with the csv module
_PARALLEL_MIN_BYTES = 32 << 20  # files larger than this are read by several processes
CHUNK_ROWS = 250_000  # rows per block of the byte-matrix ns conversion (bounds its memory to ~100 MB)


class _BadCell(Exception):
    """A cell of row ``index`` (0-based among the data rows read) that its column's rule refuses."""
    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index


class _NeedsCsvReader(Exception):
    """The C reader cannot read the file (or a bad cell's line must be named): read it with the csv module."""


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


# ------------------------------------------------------------------------------------------------ header


def read_csv_table(path):
    """(header, rows) of a CSV written by msprof / torch_npu: BOM tolerated, blank rows and trailing empty header
    columns dropped (any table: api_statistic too)."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            return [], []
        rows = [r for r in reader if any(c.strip() for c in r)]
    return _trim(header), rows


def _trim(header):
    header = [h.strip() for h in header]
    while header and header[-1] == "":
        header.pop()
    return header


def read_header(path):
    """The header row of a CSV (BOM tolerated, trailing empty columns dropped); [] for an empty file."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        return _trim(next(csv.reader(f), []))


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


def _kind(key):
    """``us`` | ``text`` | ``num`` (ids such as ``block_dim`` and every ``pmu:<header>`` column)."""
    return "us" if key in _US_KEYS else "text" if key in _TEXT_KEYS else "num"


# ------------------------------------------------------------------------------------------------ column rules


def _us_column(values):
    """Microsecond cells (str; anything else is a missing cell) -> (int64 ns, NA mask) by digit arithmetic on a byte
    matrix; cells outside ``[+-]digits[.digits]`` plus whitespace/quotes go through :func:`us_to_ns`. Raises _BadCell."""
    ns, na = np.zeros(len(values), dtype=np.int64), np.zeros(len(values), dtype=bool)
    for lo in range(0, len(values), CHUNK_ROWS):
        hi = min(lo + CHUNK_ROWS, len(values))
        ns[lo:hi], na[lo:hi] = _us_block(values[lo:hi], lo)
    return ns, na


def _us_block(values, offset):
    try:
        b = np.array([v if isinstance(v, str) else "" for v in values], dtype="S")
    except UnicodeEncodeError:  # a non-ASCII cell: every cell through us_to_ns, which names the bad one
        na = np.array([not isinstance(v, str) for v in values], dtype=bool)
        return _us_cells(values, offset, np.zeros(len(values), dtype=np.int64), na, range(len(values)))
    na = b == b""  # missing or empty: NA
    n, w = len(b), max(b.dtype.itemsize, 1)
    c = np.frombuffer(b.tobytes(), dtype=np.uint8).reshape(n, w) if n else np.zeros((0, 1), np.uint8)
    digit = (c >= 48) & (c <= 57)
    dot = c == 46
    minus = c == 45
    allowed = digit | dot | minus | np.isin(c, (0, 9, 32, 34, 39, 43))
    odd = ~allowed.all(1) | (dot.sum(1) > 1) | (minus.sum(1) > 1)
    # one pass over the byte columns: integer digits before the dot, the first four fraction digits after it
    whole, frac = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    seen_dot, n_int, n_frac = np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    round_up = np.zeros(n, dtype=bool)
    for j in range(w):
        dj = c[:, j].astype(np.int64) - 48
        is_d = digit[:, j]
        in_int = is_d & ~seen_dot
        whole = np.where(in_int, whole * 10 + dj, whole)
        n_int += in_int
        in_frac = is_d & seen_dot
        n_frac += in_frac
        frac = np.where(in_frac & (n_frac <= 3), frac * 10 + dj, frac)
        round_up |= in_frac & (n_frac == 4) & (dj >= 5)
        seen_dot |= dot[:, j]
    frac = frac * np.array([1000, 100, 10, 1], dtype=np.int64)[np.minimum(n_frac, 3)] + round_up
    odd |= n_int > 18
    ns = np.where(minus.any(1), -1, 1) * (whole * 1000 + frac)
    odd |= ~digit.any(1) & ~na  # no digit: NA spelling or not a number - us_to_ns decides
    return _us_cells(values, offset, ns, na, np.flatnonzero(odd & ~na))


def _us_cells(values, offset, ns, na, idx):
    for i in idx:
        try:
            v = us_to_ns(values[i])
        except ValueError as exc:
            raise _BadCell(offset + int(i), str(exc)) from None
        if v is None:
            na[i] = True
        else:
            ns[i] = v
    return ns, na


def _num_column(values, pmu: bool):
    """Number cells (str or None) -> float64 (NaN = NA); a text cell is NaN in a PMU column, else _BadCell."""
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        s = clean(v) if isinstance(v, str) else None
        if s is None:
            continue
        try:
            out[i] = float(s)
        except ValueError:
            if not pmu:
                raise _BadCell(i, f"not a number: {v!r}") from None
    return out


def _text_column(codes, uniques):
    """Interned text cells (codes into ``uniques``, -1 = missing) -> (int32 codes, categories): :func:`clean` once
    per distinct cell, equal cleaned values merged, NA -> code -1."""
    index = {}
    local = np.array([index.setdefault(v, len(index)) if v is not None else -1
                      for v in (clean(u) for u in uniques)] + [-1], dtype=np.int32)
    return local[np.asarray(codes, dtype=np.int64)], list(index)  # code -1 (missing) picks the appended -1


# ------------------------------------------------------------------------------------------------ reading cells


def _read_with_csv(path, cols):
    """The file through the csv module -> (n rows, {index: typed column}); a bad cell raises UserError naming its
    line."""
    raw = {i: [] for i in cols}
    lines = []
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        header = _trim(next(reader, []))
        for cells in reader:
            if not any(c.strip() for c in cells):
                continue
            lines.append(reader.line_num)
            for i in cols:
                raw[i].append(cells[i] if i < len(cells) else None)
    out = {}
    for i, key in cols.items():
        try:
            out[i] = _convert(key, raw[i])
        except _BadCell as exc:
            raise UserError(f"{path}:{lines[exc.index]}: column {header[i]!r}: {exc} - the file is damaged or not an "
                            "msprof export; re-export it (msprof --export=on --output=<PROF dir>)") from None
    return len(lines), out


def _convert(key, values):
    kind = _kind(key)
    if kind == "us":
        return _us_column(values)
    if kind == "text":
        first = {}
        codes = [first.setdefault(v, len(first)) if v is not None else -1 for v in values]
        return _text_column(codes, list(first))
    return _num_column(values, key.startswith("pmu:"))


def _read_chunk(job):
    """One byte range of the file through pandas' C reader -> (n rows, {index: typed column}) (runs in a worker
    process for large files). Raises _NeedsCsvReader where the C reader cannot type it."""
    import io
    import pandas as pd
    path, start, end, cols = job
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)

    def read(as_text):
        dtype = {i: (str if _kind(k) != "num" or i in as_text else "float64") for i, k in cols.items()}
        return pd.read_csv(io.BytesIO(data), header=None, usecols=sorted(cols), dtype=dtype, encoding="utf-8",
                           na_values=sorted(NA_VALUES), keep_default_na=False, skip_blank_lines=True, engine="c",
                           skipinitialspace=True)
    try:
        try:
            df = read(())
        except ValueError:  # a cell a number column cannot type: those columns as text, through the text rule
            df = read({i for i, k in cols.items() if _kind(k) == "num"})
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise _NeedsCsvReader(str(exc).splitlines()[0]) from None
    out = {}
    try:
        for i, key in cols.items():
            col = df[i].to_numpy() if i in df.columns else np.full(len(df), np.nan)
            kind = _kind(key)
            if kind == "us":
                out[i] = _us_column(col)  # missing cells are NaN: not str, so NA
            elif kind == "text":
                codes, uniques = pd.factorize(pd.Series(col, dtype=object), use_na_sentinel=True)
                out[i] = _text_column(codes, list(uniques))
            elif col.dtype == object:
                out[i] = _num_column([v if isinstance(v, str) else None for v in col], key.startswith("pmu:"))
            else:
                out[i] = np.asarray(col, dtype=np.float64)
    except _BadCell as exc:
        raise _NeedsCsvReader(str(exc)) from None  # the csv reader names the line
    return len(df), out


def _byte_ranges(path, parts: int):
    """[(start, end)] of the data rows (after the header line), split at line ends into about ``parts`` ranges
    (msprof writes no quoted newlines, so splitting at line ends is safe)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        f.readline()
        begin = f.tell()
        cuts = [begin]
        for j in range(1, parts):
            f.seek(max(begin + (size - begin) * j // parts, cuts[-1]))
            f.readline()
            if f.tell() >= size:
                break
            if f.tell() > cuts[-1]:
                cuts.append(f.tell())
    cuts.append(size)
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def _read_with_pandas(path, cols, workers):
    size = os.path.getsize(path)
    workers = workers or min(16, os.cpu_count() or 1)
    parts = workers if size > _PARALLEL_MIN_BYTES and workers > 1 else 1
    jobs = [(path, a, b, cols) for a, b in _byte_ranges(path, parts)]
    if len(jobs) > 1:
        import concurrent.futures as cf
        with cf.ProcessPoolExecutor(max_workers=len(jobs)) as pool:
            chunks = list(pool.map(_read_chunk, jobs))
    else:
        chunks = [_read_chunk(j) for j in jobs]
    out = {}
    for i, key in cols.items():
        parts_ = [ch[1][i] for ch in chunks]
        kind = _kind(key)
        if kind == "us":
            out[i] = (np.concatenate([p[0] for p in parts_] or [np.zeros(0, np.int64)]),
                      np.concatenate([p[1] for p in parts_] or [np.zeros(0, bool)]))
        elif kind == "text":  # chunks' categories merged into one list
            index, codes = {}, []
            for ch_codes, cats in parts_:
                local = np.array([index.setdefault(v, len(index)) for v in cats] + [-1], dtype=np.int32)
                codes.append(local[ch_codes])
            out[i] = (np.concatenate(codes or [np.zeros(0, np.int32)]), list(index))
        else:
            out[i] = np.concatenate(parts_ or [np.zeros(0)])
    return sum(ch[0] for ch in chunks), out


def _columns(path, fast, workers):
    """(header, cols, n rows, {canonical key: typed column}) of one kernel CSV; UserError without a duration
    column or for a bad line. A later column of the same key replaces an earlier one."""
    header = read_header(path)
    cols = canonical_columns(header)
    if "duration_us" not in cols.values():
        raise UserError(f"{path}: no duration column (expected one of {COLUMN_ALIASES['duration_us']}); header is "
                        f"{header[:12]} - is this an msprof op_summary/task_time or torch_npu kernel_details file?")
    typed = None
    if fast if fast is not None else os.path.getsize(path) >= FAST_PATH_MIN_BYTES:
        try:
            n, typed = _read_with_pandas(path, cols, workers)
        except (_NeedsCsvReader, ImportError):
            typed = None  # the csv reader handles the oddity or names the bad line
    if typed is None:
        n, typed = _read_with_csv(path, cols)
    return n, {cols[i]: typed[i] for i in sorted(cols)}


# ------------------------------------------------------------------------------------------------ results


def _objects(key, col) -> list:
    """A typed column -> Python objects (ints where integral, None for NA) in row order."""
    kind = _kind(key)
    if kind == "text":
        codes, cats = col
        cats = list(cats) + [None]
        return [cats[k] for k in codes.tolist()]
    if kind == "us":
        return [None if missing else v for v, missing in zip(col[0].tolist(), col[1].tolist())]
    arr = col
    finite = ~np.isnan(arr)
    integral = finite & (np.abs(arr) < 2 ** 53) & (arr == np.round(arr))
    if integral.all():
        return arr.astype(np.int64).tolist()
    out = arr.tolist()
    for i in np.flatnonzero(integral):
        out[i] = int(arr[i])
    for i in np.flatnonzero(~finite):
        out[i] = None
    return out


def parse_kernel_csv(path, source: str = None, fast: bool | None = None, workers: int | None = None):
    """Rows of one op_summary / task_time / kernel_details CSV as dicts with canonical keys.

    Each row: ``name, op_type, task_type, start_ns, duration_ns, wait_ns, stop_ns`` (ints, ns; a missing duration
    is ``stop_ns - start_ns`` when both are there), the int columns (``block_dim``, ``stream_id``, ``task_id``,
    ...), text columns (shapes, dtypes...), ``pmu``: {header: number} for every other numeric column, and
    ``source`` (file). Raises UserError when the file has no duration column or a cell breaks its column's rule
    (the file and line named).

    ``fast``: read the cells with pandas' C reader (True), the csv module (False), or by size (None: pandas from
    :data:`FAST_PATH_MIN_BYTES`); the rows are the same. ``workers``: reader processes for files over 32 MiB.
    """
    n, typed = _columns(path, fast, workers)
    source = source or os.path.basename(path)
    base = {_US_KEYS.get(k, k): _objects(k, c) for k, c in typed.items() if not k.startswith("pmu:")}
    pmu = {k[4:]: _objects(k, c) for k, c in typed.items() if k.startswith("pmu:")}
    keys, pkeys = list(base), list(pmu)
    rows = [dict(zip(keys, vals)) for vals in zip(*base.values())] if keys else [{} for _ in range(n)]
    for row, vals in zip(rows, zip(*pmu.values()) if pkeys else ((),) * n):
        row["pmu"] = {k: v for k, v in zip(pkeys, vals) if v is not None} if None in vals else dict(zip(pkeys, vals))
        row["source"] = source
        if row.get("duration_ns") is None and row.get("stop_ns") is not None and row.get("start_ns") is not None:
            row["duration_ns"] = row["stop_ns"] - row["start_ns"]
    return rows


def read_kernel_frame(path, fast: bool | None = True, workers: int | None = None):
    """One kernel CSV as a typed :class:`pandas.DataFrame` of the same columns: ``start_ns`` / ``duration_ns`` /
    ... exact ``Int64`` ns, text keys ``category`` (NA -> missing), number keys and ``pmu:<header>`` ``float64``
    (NaN = missing). Raises UserError as :func:`parse_kernel_csv` does."""
    import pandas as pd
    _n, typed = _columns(path, fast, workers)
    data = {}
    for key, col in typed.items():
        kind = _kind(key)
        if kind == "us":
            data[_US_KEYS[key]] = pd.arrays.IntegerArray(*col)
        elif kind == "text":
            data[key] = pd.Categorical.from_codes(col[0], col[1])
        else:
            data[key] = col
    return pd.DataFrame(data)
