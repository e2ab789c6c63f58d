"""Number formatting shared by every printed or rendered table: percentages (MFU, MBU, shares), plain figures
(times, throughputs), ratios (headroom, speed-up) and a count with its noun (``1 case``, ``2 cases``), each with
one formatter used by the terminal and the HTML.

A ratio (MFU@nom, MFU@ach, MBU, a time or FLOPs share, a spread) is stored as a fraction (0.1234) and shown as a
percentage with a fixed number of decimals (``12.34%``); a missing figure is shown as a dash. Each table keeps its
own decimals and dash (ASCII ``-`` in terminal tables, the em dash in HTML and the batch summary), so the choice is
the caller's; the arithmetic and the missing-value rule are here only.
"""
from __future__ import annotations

import math

from mfulib.core.definitions import finite_or_none

DASH = "-"
EM_DASH = "\u2014"


# significant digits of every time (us) and throughput (TFLOP/s) column: the collector's, the decomposition's and
# the HTML's tables show the same figure alike (:func:`sig`)
US_DIGITS, TFLOPS_DIGITS = 4, 3
# significant digits of a nonzero percentage too small for its column's decimals (:func:`pct`)
SMALL_PCT_DIGITS = 2

def pct(x, nd: int, dash: str = DASH) -> str:
    """``x`` (a fraction) as a percentage with ``nd`` decimals: ``pct(0.1234, 1)`` -> ``"12.3%"``.

    ``dash`` for a missing figure: None, NaN, +-inf, a bool or a non-number (see
    :func:`mfulib.core.definitions.finite_or_none`). The figure is ``x * 100`` rounded as Python's ``f`` format
    rounds, so ``pct(x, 2)`` equals ``f"{x:.2%}"`` for every finite float of at least ``10 ** -nd`` percent. A
    nonzero figure below that (a CPU interpreter's MBU of 0.0064%) shows :data:`SMALL_PCT_DIGITS` significant digits
    rather than a row of zeros that reads as nothing measured: ``pct(6.39e-05, 2)`` -> ``"0.0064%"``. Never raises.
    """
    v = finite_or_none(x)
    if v is None:
        return dash
    if v and abs(v * 100) < 10.0 ** -nd:
        nd = SMALL_PCT_DIGITS - 1 - math.floor(math.log10(abs(v * 100)))
    return f"{v * 100:.{nd}f}%"


def sig(x, digits: int = 4, dash: str = DASH) -> str:
    """``x`` with ``digits`` significant digits in fixed-point notation, never an exponent, thousands grouped with
    commas: ``sig(0.012345)`` -> ``"0.01235"``, ``sig(12.345)`` -> ``"12.35"``, ``sig(21881.29)`` -> ``"21,881"``.

    From ``10 ** digits`` up the figure is a whole number (more digits than asked, none dropped); at most 12
    decimals (smaller figures round to ``0.000000000000``). One format for every magnitude, so a column of
    throughputs or times reads alike from CPU-scale (0.0012) to accelerator-scale (1,234) figures; ``dash`` for a
    missing figure (the rule of :func:`pct`). Never raises.
    """
    v = finite_or_none(x)
    if v is None:
        return dash
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    decimals = min(max(digits - 1 - mag, 0), 12)
    text = f"{v:,.{decimals}f}"
    shown = abs(float(text.replace(",", "")))
    if decimals and shown and math.floor(math.log10(shown)) > mag:
        text = f"{v:,.{decimals - 1}f}"  # rounding carried into a new digit (9.9996 -> 10.000): keep `digits`
    return text


def times(x, dash: str = DASH) -> str:
    """A ratio such as a roofline headroom or a speed-up: three significant digits and ``x`` (:func:`sig`):
    ``times(2.188)`` -> ``"2.19x"``, ``times(21881.29)`` -> ``"21,881x"``; ``dash`` when missing."""
    text = sig(x, 3, dash)
    return text if text == dash else text + "x"


def plural(n, noun: str, nouns: str = None) -> str:
    """``n`` and ``noun``, the plural (``nouns``, default ``noun + "s"``) unless ``n`` is 1: ``plural(1, "case")``
    -> ``"1 case"``, ``plural(11, "case")`` -> ``"11 cases"``."""
    return f"{n} {noun if n == 1 else (nouns or noun + 's')}"
