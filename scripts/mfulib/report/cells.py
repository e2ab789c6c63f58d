"""What a decomposition row's cells say, shared by the terminal tables and the HTML report: marks and their legend.

One place decides, for both views, how a figure is qualified beside its value:

* the noise band of a utilisation (:func:`mfulib.core.definitions.above_peak`: above 100% of the peak by more than
  the noise margin is an error in the inputs, 100-103% a warning, docs/ARCHITECTURE.md#noise-band): the value is
  shown with ``(ERROR)`` or ``(warning)``, never as a plain figure;
* the dtype caveat of MFU@nom (docs/ARCHITECTURE.md#mfu-nom): every dtype is divided by the fp16/bf16 nominal peak,
  so a float32, int8 or fp8 row carries :data:`NOM_MARK` on the row (int8 / fp8 exceed 100% legitimately, their
  nominal peak is above the fp16 figure); a fp16/bf16 row is judged by the band instead;
* the collector's repeat-spread flag: ``(max - min) / median`` of the measured iterations above
  :data:`mfulib.profiles.kernels.SPREAD_LIMIT` (:func:`spread_flagged`), shown as :data:`SPREAD_MARK` beside the
  kernel time;
* the headline of a row (MFU@ach, or MBU without matrix work, docs/ARCHITECTURE.md#mbu) named with its value;
* a shape wrapped at its commas, never cut.

:func:`legend` gives the line that explains each mark used, for below the table. Inputs: the rows of
:func:`mfulib.report.decompose.decompose_case` (or an older mfu_decompose.json's rows: missing fields give no mark).
"""
from __future__ import annotations

from mfulib.core.definitions import HALF_DTYPES, LOW_PRECISION_MODES, NOISE_MARGIN, above_peak, is_number, peak_key
from mfulib.core.fmt import DASH, pct
from mfulib.profiles.kernels import SPREAD_LIMIT

NOM_MARK = "[vs fp16 peak]"  # MFU@nom of a dtype other than fp16/bf16
SPREAD_MARK = "[spread]"  # the collector flagged the repeat spread
BAND_MARK = {"error": "(ERROR)", "warning": "(warning)"}


def band_mark(value) -> str:
    """``" (ERROR)"``, ``" (warning)"`` or ``""`` for a utilisation (a fraction) by the noise band."""
    level = above_peak(value) if is_number(value) else None
    return f" {BAND_MARK[level]}" if level else ""


def util(value, nd: int, dash: str = DASH) -> str:
    """A utilisation cell: the percentage with ``nd`` decimals and its band mark (:func:`band_mark`)."""
    text = pct(value, nd, dash)
    return text if text == dash else text + band_mark(value)


def nom_caveat(row: dict) -> bool:
    """True when the row's MFU@nom needs the dtype caveat: its dtype is not fp16/bf16 (fp32, tf32, int8, fp8)."""
    return bool(row.get("dtype")) and row.get("dtype") not in HALF_DTYPES


def mfu_nom(row: dict, nd: int, dash: str = DASH) -> str:
    """The MFU@nom cell: with :data:`NOM_MARK` for a dtype other than fp16/bf16, else with the band mark."""
    text = pct(row.get("mfu_nom"), nd, dash)
    if text == dash:
        return text
    return f"{text} {NOM_MARK}" if nom_caveat(row) else text + band_mark(row.get("mfu_nom"))


def headline(row: dict, nd: int = 1, dash: str = DASH) -> str:
    """The row's headline named: ``"MFU@ach 18.5%"``, or ``"MBU 13.8%"`` for a case without matrix work."""
    if row.get("matrix_work", True) is False or row.get("headline") == "mbu":
        return f"MBU {pct(row.get('mbu'), nd, dash)}"
    return f"MFU@ach {util(row.get('mfu_ach'), nd, dash)}"


def spread_flagged(row: dict) -> bool:
    """The collector's flag: ``repeat_spread`` above :data:`SPREAD_LIMIT` (:func:`mfulib.profiles.kernels.summarize`)."""
    s = row.get("repeat_spread")
    return is_number(s) and s > SPREAD_LIMIT


def spread_text(row: dict) -> str:
    """``"repeat spread 51.5% > 5%"`` for a flagged row, ``""`` otherwise."""
    return f"repeat spread {pct(row['repeat_spread'], 1)} > {SPREAD_LIMIT:.0%}" if spread_flagged(row) else ""


def shape_lines(shape, width: int) -> list:
    """A shape text without spaces (``[8,1024,1024]``), wrapped after commas into lines of at most ``width``
    characters (a dimension longer than ``width`` keeps its own line); ``[DASH]`` when missing."""
    text = str(shape).replace(" ", "") if shape not in (None, "") else DASH
    pieces = [p + "," for p in text.split(",")]
    pieces[-1] = pieces[-1][:-1]
    lines = [""]
    for piece in pieces:
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return lines


def legend(rows: list, backends=()) -> list:
    """The lines explaining each mark the ``rows`` (ok decomposition rows) show, in a fixed order; ``backends``:
    the reports' backends (the NPU wording of the MFU@nom caveat)."""
    out = []
    spread = [r for r in rows if spread_flagged(r)]
    if spread:
        out.append(f"{SPREAD_MARK} the collector flagged the repeat spread ((max - min) / median of the measured "
                   f"iterations) above {SPREAD_LIMIT:.0%}: " + ", ".join(
                       f"case {r.get('case')} {pct(r['repeat_spread'], 1)}" for r in spread[:8])
                   + (", ..." if len(spread) > 8 else "") + " - the figures of these cases are uncertain by that "
                   "much; collect again with more --repeats or on a quiet device")
    nom = sorted({r["dtype"] for r in rows if nom_caveat(r) and r.get("mfu_nom") is not None})
    if nom:
        npu = " (on the NPU the nominal table lists the fp16 cube rate under float32)" if "npu" in backends else ""
        lowp = [d for d in nom if peak_key(d) in LOW_PRECISION_MODES]
        out.append(f"{NOM_MARK} MFU@nom of a {'/'.join(nom)} case divides by the fp16/bf16 nominal peak, as "
                   f"msprof-analyze's operator_mfu does{npu}: compare it within one dtype only, and dtypes with "
                   "each other on MFU@ach" + (f"; {'/'.join(lowp)} nominal peaks are above the fp16 figure, so "
                                              "MFU@nom above 100% is expected there" if lowp else ""))
    figures = [r.get(k) for r in rows for k in ("mfu_ach", "mfu_nom") if not (k == "mfu_nom" and nom_caveat(r))]
    figures += [p.get("mfu_ach") for r in rows for p in r.get("parts") or []]
    levels = {above_peak(v) for v in figures if is_number(v)}
    if "error" in levels:
        out.append(f"{BAND_MARK['error']} above the peak by more than the {NOISE_MARGIN:.0%} noise margin: an "
                   "error in flops.py (FLOPs too high) or peak.json (too low, another device), not a result - see "
                   "the errors")
    if "warning" in levels:
        out.append(f"{BAND_MARK['warning']} 100-{1 + NOISE_MARGIN:.0%} of the peak: within the noise margin of "
                   "the peak, read it as the peak")
    withheld = next(((r.get("roofline") or {}).get("withheld") for r in rows if (r.get("roofline") or {}).get(
        "withheld")), None)
    if withheld:  # the CPU interpreter (mfulib.report.decompose.withhold_advice): why bound and headroom are empty
        out.append(f"bound, headroom, MFU@ach if fixed: {withheld}")
    return out
