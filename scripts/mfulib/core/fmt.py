"""Number formatting shared by every printed or rendered table: one percent formatter for MFU, MBU and shares, and
a count with its noun (``1 case``, ``2 cases``).

A ratio (MFU@nom, MFU@ach, MBU, a time or FLOPs share, a spread) is stored as a fraction (0.1234) and shown as a
percentage with a fixed number of decimals (``12.34%``); a missing figure is shown as a dash. Each table keeps its
own decimals and dash (ASCII ``-`` in terminal tables, the em dash in HTML and the batch summary), so the choice is
the caller's; the arithmetic and the missing-value rule are here only.
"""
from __future__ import annotations

from mfulib.core.definitions import finite_or_none

DASH = "-"
EM_DASH = "\u2014"


def pct(x, nd: int, dash: str = DASH) -> str:
    """``x`` (a fraction) as a percentage with ``nd`` decimals: ``pct(0.1234, 1)`` -> ``"12.3%"``.

    ``dash`` for a missing figure: None, NaN, +-inf, a bool or a non-number (see
    :func:`mfulib.core.definitions.finite_or_none`). The figure is ``x * 100`` rounded as Python's ``f`` format
    rounds, so ``pct(x, 2)`` equals ``f"{x:.2%}"`` for every finite float. Never raises.
    """
    v = finite_or_none(x)
    return dash if v is None else f"{v * 100:.{nd}f}%"


def plural(n, noun: str, nouns: str = None) -> str:
    """``n`` and ``noun``, the plural (``nouns``, default ``noun + "s"``) unless ``n`` is 1: ``plural(1, "case")``
    -> ``"1 case"``, ``plural(11, "case")`` -> ``"11 cases"``."""
    return f"{n} {noun if n == 1 else (nouns or noun + 's')}"
