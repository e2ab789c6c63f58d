"""Markdown tables in rendered text, read as cells: a test finds a row by its key cells and checks the cells that
matter by column name, instead of pinning the whole line (spacing, column order, cells it does not test).

A table is a header line, a separator line (``|---|---|``) and data lines, each ``| a | b |``; ``\\|`` inside a cell
is an escaped pipe (bench/make_results.py writes them so)."""
import re

_SPLIT = re.compile(r"(?<!\\)\|")


def _cells(line):
    s = line.strip()
    if not (s.startswith("|") and s.endswith("|") and len(s) > 1):
        return None
    return [c.strip() for c in _SPLIT.split(s[1:-1])]


def _is_separator(cells):
    return bool(cells) and all(c and set(c) <= set("-: ") for c in cells)


def md_rows(text):
    """Every data row of every table in ``text``, as a dict header -> cell (headers stripped; a row of another
    length than its header is kept with the headers it has)."""
    rows, header, prev = [], None, None
    for line in text.splitlines():
        cells = _cells(line)
        if cells is None:
            header, prev = None, None
            continue
        if _is_separator(cells):
            header = prev
        elif header is not None:
            rows.append(dict(zip(header, cells)))
        prev = cells
    return rows


def md_row(text, **where):
    """The one data row whose cells equal ``where`` (column name -> cell text; names with spaces or symbols go in
    through ``**{"wall s": ...}``). AssertionError naming ``where`` and the rows seen if none or several match."""
    rows = md_rows(text)
    hits = [r for r in rows if all(r.get(k) == v for k, v in where.items())]
    assert len(hits) == 1, f"{len(hits)} table rows match {where!r}; rows: {rows!r}"
    return hits[0]

