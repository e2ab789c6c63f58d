"""Large msprof exports read with pandas typed columns: :func:`read_frame` (the typed table) and :func:`frame_rows`
(the row dicts :func:`mfulib.collect.msprof.parse_kernel_csv` returns).

Why: a 1M-row op_summary (46 columns, ~310 MB) took ~130 s cell by cell in Python; issue 13 asks for <= 5 s.
Same result as the cell-by-cell path (``tests/test_msprof_parse.py`` compares both on the same quirky file):

* text columns are read as strings and cleaned once per distinct value (:func:`pandas.factorize`): whitespace, TAB
  and quotes stripped, NA spellings -> None (facts §0.3: tripled quotes around shapes);
* microsecond columns are read as strings and converted to integer ns **exactly** by digit arithmetic on a byte
  matrix (:func:`exact_ns`; float64 cannot hold ``1780676244313289.120`` us in ns), the TAB suffix of
  ``Task Start Time(us)`` (facts §0.2) included; a cell with anything else (an exponent) goes through the row
  converter ``us_to_ns`` one by one;
* int columns and PMU columns are read as float64 (NA spellings -> NaN) and returned as int where the value is
  integral (``Model ID`` 4294967295 < 2**53 stays exact), else float; NaN -> absent.

Any file pandas cannot read with these types (a text cell in a numeric column, ragged rows) raises
:class:`FastPathUnsupported` and the caller parses it cell by cell, which names the bad line.
"""
from __future__ import annotations

import numpy as np

_PARALLEL_MIN_BYTES = 32 << 20  # files larger than this are read by several processes
CHUNK_ROWS = 250_000  # rows per block of the byte-matrix conversion (bounds its memory to ~100 MB)


class FastPathUnsupported(Exception):
    """The file needs the cell-by-cell parser (it gives the precise error, or handles the oddity)."""


def exact_ns(values, us_to_ns):
    """Microsecond text cells -> (int64 ns array, NA mask): exact, half up beyond the ns digit; NaN and digit-less
    cells are NA. ``values``: object array of str or NaN; ``us_to_ns``: the row converter for cells outside
    ``[+-]digits[.digits]`` plus whitespace/quotes (it raises ValueError for a non-number)."""
    ns, na = np.zeros(len(values), dtype=np.int64), np.zeros(len(values), dtype=bool)
    for lo in range(0, len(values), CHUNK_ROWS):
        hi = min(lo + CHUNK_ROWS, len(values))
        ns[lo:hi], na[lo:hi] = _exact_ns_block(values[lo:hi], us_to_ns)
    return ns, na


def _exact_ns_block(values, us_to_ns):
    import pandas as pd
    s = pd.Series(values, dtype=object)
    na = s.isna().to_numpy()
    try:
        b = s.where(~na, "").to_numpy().astype("S")
    except UnicodeEncodeError as exc:
        raise FastPathUnsupported(f"non-ASCII time cell: {exc}") from None
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
    na = na | ~digit.any(1)
    for i in np.flatnonzero(odd & ~na):
        v = us_to_ns(values[i])  # raises ValueError for a non-number, as the row path does
        if v is None:
            na[i] = True
        else:
            ns[i] = v
    return ns, na


def _read_chunk(job):
    """One byte range of the file -> {"n", "cols": {index: typed column}} (runs in a worker process)."""
    import io
    import pandas as pd
    path, start, end, cols, kinds, na_values, us_to_ns = job
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    dtype = {i: (str if kinds.get(k) in ("us", "text") else "float64") for i, k in cols.items()}
    try:
        df = pd.read_csv(io.BytesIO(data), header=None, usecols=sorted(cols), dtype=dtype,
                         encoding="utf-8", na_values=sorted(na_values), keep_default_na=False,
                         skip_blank_lines=True, engine="c", skipinitialspace=True)
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise FastPathUnsupported(str(exc).splitlines()[0]) from None
    out = {}
    for i, key in cols.items():
        col = df[i].to_numpy() if i in df.columns else np.full(len(df), np.nan)
        kind = kinds.get(key)
        if kind == "us":
            out[i] = ("ns", exact_ns(col, us_to_ns))
        elif kind == "text":
            codes, uniques = pd.factorize(pd.Series(col, dtype=object), use_na_sentinel=True)
            out[i] = ("text", (codes.astype(np.int32), list(uniques)))
        else:
            out[i] = ("num", np.asarray(col, dtype=np.float64))
    return {"n": len(df), "cols": out}


def _byte_ranges(path, parts: int):
    """[(start, end)] of the data rows (after the header line), split at line ends into about ``parts`` ranges."""
    import os
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


def read_frame(path, cols, kinds, na_values, clean, us_to_ns, workers: int | None = None):
    """The kernel CSV as a typed :class:`pandas.DataFrame` with canonical column names.

    ``cols``: {column index: canonical key or ``pmu:<header>``}; ``kinds``: {key: ``"us"|"int"|"text"``} for
    canonical keys; other keys are PMU columns. Columns: ``<name>_ns`` (``start_us`` -> ``start_ns``) pandas
    ``Int64`` exact ns; text keys ``category`` of cleaned values (NA spellings -> missing); int and PMU keys
    ``float64`` (NaN = missing; ints < 2**53 exact). ``workers`` processes read byte ranges of files over 32 MiB
    in parallel (None: up to 16, one per CPU). Raises FastPathUnsupported when pandas cannot read the file with
    these types (the caller then parses cell by cell; msprof writes no quoted newlines, so splitting at line ends
    is safe)."""
    import os
    import pandas as pd
    size = os.path.getsize(path)
    workers = workers or min(16, os.cpu_count() or 1)
    parts = workers if size > _PARALLEL_MIN_BYTES and workers > 1 else 1
    jobs = [(path, a, b, cols, kinds, na_values, us_to_ns) for a, b in _byte_ranges(path, parts)]
    if len(jobs) > 1:
        import concurrent.futures as cf
        with cf.ProcessPoolExecutor(max_workers=len(jobs)) as pool:
            chunks = list(pool.map(_read_chunk, jobs))
    else:
        chunks = [_read_chunk(j) for j in jobs]
    data = {}
    for i, key in cols.items():
        parts_ = [ch["cols"][i][1] for ch in chunks]
        kind = kinds.get(key)
        if kind == "us":
            ns = np.concatenate([p[0] for p in parts_]) if parts_ else np.zeros(0, np.int64)
            na = np.concatenate([p[1] for p in parts_]) if parts_ else np.zeros(0, bool)
            data[key[:-3] + "_ns"] = pd.arrays.IntegerArray(ns, na)
        elif kind == "text":
            cats, index, codes = [], {}, []
            for ch_codes, uniques in parts_:
                local = np.array([index.setdefault(v, len(index)) if v is not None else -1
                                  for v in (clean(u) for u in uniques)] + [-1], dtype=np.int32)
                codes.append(local[ch_codes])  # code -1 (NaN) picks the appended -1
            cats = list(index)
            data[key] = pd.Categorical.from_codes(np.concatenate(codes) if codes else np.zeros(0, np.int32), cats)
        else:
            data[key] = np.concatenate(parts_) if parts_ else np.zeros(0)
    return pd.DataFrame(data)


def _objects(col) -> list:
    """A typed frame column -> Python objects as the row parser gives them (int where integral, None for NA)."""
    import pandas as pd
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = list(col.cat.categories) + [None]
        return [cats[k] for k in col.cat.codes.to_numpy().tolist()]
    if isinstance(col.dtype, pd.Int64Dtype):
        vals = col.to_numpy(dtype=np.int64, na_value=0).tolist()
        for i in np.flatnonzero(col.isna().to_numpy()):
            vals[i] = None
        return vals
    arr = col.to_numpy(dtype=np.float64)
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


def frame_rows(df, source: str) -> list:
    """Row dicts of a :func:`read_frame` frame, as :func:`mfulib.collect.msprof.parse_kernel_csv` returns them."""
    base = {k: _objects(df[k]) for k in df.columns if not k.startswith("pmu:")}
    pmu = {k[4:]: _objects(df[k]) for k in df.columns if k.startswith("pmu:")}
    keys, pkeys = list(base), list(pmu)
    n = len(df)
    rows = [dict(zip(keys, vals)) for vals in zip(*base.values())] if keys else [{} for _ in range(n)]
    pcols = list(pmu.values())
    for row, vals in zip(rows, zip(*pcols) if pkeys else ((),) * n):
        row["pmu"] = {k: v for k, v in zip(pkeys, vals) if v is not None} if None in vals else dict(zip(pkeys, vals))
        row["source"] = source
    return rows
