"""Human-readable forms of peak.json and mfu_decompose.json: terminal tables (tabulate) and a PNG plot.

Stored JSON keeps full precision; only these views round. The decomposition table follows SKILL.md's form
(``case dtype total us TFLOP/s MFU@nom MFU@ach <part> us <part> MFU ...``), with MBU, the case's bound and its
roofline headroom added, a ``report`` column and a ``speed-up`` column (against the baseline report) when several
reports are shown side by side. A second table lists every part: time, TFLOP/s, MFU@ach, bound (with its source),
headroom, the MFU@ach if that part were fixed, ranked by that payoff. A case without matrix work shows "—" for
TFLOP/s and MFU and its MBU starred (the headline); a case whose numerator check_flops.py did not confirm is
marked ``[unverified]`` (or ``[failed]``, ``[unchecked]``) with the reason below the table; a kernel time ncu
replayed (``--from-prof`` of an ncu CSV) is marked ``[ncu]``, with ncu's replay conditions below the table. Cases never
measured (the collector skipped them, or verify did not pass them) are no rows: they are listed below the table grouped
by the reason the collection recorded (:func:`never_measured_lines`); long text is wrapped, never cut off.
"""
from __future__ import annotations

import os
import textwrap

from tabulate import tabulate

from mfulib.backends import validates_only
from mfulib.core.fmt import TFLOPS_DIGITS, US_DIGITS, pct, plural, sig, times
from mfulib.core.symbols import factors_label
from mfulib.flops.kernel_parts import OTHER
from mfulib.report import cells
from mfulib.schemas.performance_json import BY_COLLECTOR, describe_not_measured


NO_MFU = "—"  # an operator without matrix work has no MFU (docs/ARCHITECTURE.md#flops)
WRAP = 116  # terminal text width of notes below the tables


def _wrap(text: str, indent: str = "  ") -> str:
    return textwrap.fill(str(text), width=WRAP, subsequent_indent=indent + "  ", initial_indent="")




def peak_table(peak: dict) -> str:
    """One row per measured math mode plus the copy bandwidth; errors listed below."""
    nom = (peak.get("nominal") or {}).get("tflops") or {}
    rows = []
    for mode, m in (peak.get("measured") or {}).items():
        s = m.get("best_shape") or {}
        frac = m.get("fraction_of_nominal")
        rows.append([mode, sig(m.get("peak_tflops")), m.get("unit", "TFLOP/s"), sig(m.get("sweep_tflops")),
                     pct(m.get("spread"), 1), sig(nom.get(mode)), pct(frac, 1),
                     f"{s.get('m')}x{s.get('n')}x{s.get('k')}" + (f" B {m['b_layout']}" if m.get("b_layout") else ""),
                     m.get("n_shapes"), sig(m.get("elapsed_s"), 2)])
    if peak.get("bandwidth_gbps") is not None:
        bw = peak.get("bandwidth") or {}
        nbw = (peak.get("nominal") or {}).get("bandwidth_gbps")
        rows.append(["copy bandwidth", sig(peak["bandwidth_gbps"]), "GB/s", "-", pct(bw.get("spread"), 1),
                     sig(nbw),
                     pct(bw.get("fraction_of_nominal"), 1), f"{bw.get('buffer_bytes', 0) >> 20} MiB", bw.get("iters"),
                     sig(bw.get("elapsed_s"), 2)])
    head = ["mode", "confirmed", "unit", "sweep", "spread", "nominal", "of nominal", "best m x n x k", "shapes", "s"]
    lines = [f"peaks of {peak.get('label')}", tabulate(rows, head, tablefmt="plain", disable_numparse=True),
             "  confirmed = the reported peak (best shape re-timed); sweep = that shape's sweep figure; spread = "
             "(p90-p10)/median of the confirm run"]
    for mode, err in (peak.get("errors") or {}).items():
        lines.append(f"  {mode}: {err}")
    src = (peak.get("nominal") or {}).get("source")
    if src:
        lines.append(f"  nominal: {src}")
    reg, clk = peak.get("regime") or {}, peak.get("clocks") or {}
    if reg:
        dc = reg.get("duty_cycle_measured")
        lines.append(f"  regime: {reg.get('kind')} (duty cycle {pct(dc, 0)} measured, "
                     f"<= {reg.get('duty_cycle_max', 1):.0%} by design)")
    if clk.get("sm_clock_mhz") or clk.get("throttle_reasons_seen"):
        sm = clk.get("sm_clock_mhz") or {}
        lines.append(f"  SM clock {sm.get('min', '-')}-{sm.get('max', '-')} MHz over {clk.get('n_samples')} samples;"
                     f" throttle reasons seen: {', '.join(clk.get('throttle_reasons_seen') or {}) or 'none'}")
    trust = peak.get("trust") or {}
    if trust and not trust.get("trusted"):
        lines.append("  NOT CACHED, noisy: " + ("; ".join(trust.get("untrusted") or []) or "interrupted"))
    if peak.get("cache", {}).get("hit"):
        lines.append(f"  (from the cache {peak['cache']['path']}, measured {peak['cache'].get('measured_at')})")
    elif peak.get("elapsed_s") is not None:
        lines.append(f"  measured in {peak['elapsed_s']:.1f} s (budget {peak.get('budget_s')} s)"
                     + (" - INTERRUPTED, partial" if peak.get("interrupted") else ""))
    return "\n".join(lines)


def _part_names(reports: list) -> list:
    names = []
    for rep in reports:
        for p in rep.get("kernel_parts") or {}:
            if p not in names:
                names.append(p)
    has_other = any(p["part"] == OTHER for rep in reports for r in rep["rows"] for p in r.get("parts") or [])
    return names + ([OTHER] if has_other else [])


def shape_cell(row: dict, width: int = 28, sep: str = "\n") -> str:
    """A row's first input shape (the case file's), with its search origin when the probe appended it:
    ``[8,256,64]<-case0:batchx4,seqx2`` (the origin's factors; ``<-case0x4``, its scale, where it records none),
    without spaces; a shape longer than ``width`` is wrapped after its commas into lines joined by ``sep`` (a
    multi-line table cell), never cut."""
    lines = cells.shape_lines(row.get("shape") or "-", width)
    o = row.get("search_origin") or {}
    if o.get("source_case") is not None and str(o["source_case"]) != str(row.get("case")):  # not an original case
        scale = o.get("scale")  # (the search's x1 point: the case itself, no origin to name)
        origin = f"<-case{o['source_case']}" + (":" + factors_label(o["factors"], sep="") if o.get("factors") else
                                                f"x{scale:g}" if isinstance(scale, (int, float)) else "")
        if len(lines[-1]) + len(origin) > width and len(lines[-1]) > 1:
            lines.append("")
        lines[-1] += origin
    return sep.join(lines)


def never_measured_lines(reports: list) -> list:
    """Why the cases without a row were never measured, grouped by the reason the collection recorded
    (:func:`mfulib.schemas.performance_json.describe_not_measured` over each report's ``not_measured``; a report
    written before that field gives its skipped rows), then the cases the selection rule left out
    (``not_selected``)."""
    multi = len(reports) > 1
    entries, notes = [], []
    for rep in reports:
        lab = rep.get("label") if multi else None
        if "not_measured" in rep:
            entries += [dict(e, label=lab) for e in rep.get("not_measured") or []]
        else:  # an mfu_decompose.json written before not_measured: its skipped rows
            entries += [{"case": r.get("case"), "by": BY_COLLECTOR, "status": "skipped", "reason": r.get("reason"),
                         "label": lab} for r in rep.get("rows") or [] if r.get("status") == "skipped"]
        left = rep.get("not_selected") or {}
        if left.get("cases"):
            ids = left["cases"]
            notes.append(f"{lab + ': ' if lab else ''}{plural(len(ids), 'case')} not selected by the rule "
                         f"({left.get('rule')}): {', '.join(map(str, ids[:12]))}{' ...' if len(ids) > 12 else ''}"
                         f" - --cases picks {'it' if len(ids) == 1 else 'them'} (make: COLLECT_ARGS=\"--cases ...\")")
    return describe_not_measured(entries) + notes


def decompose_table(result: dict) -> str:
    """The decomposition table, then maxima, reading aid, errors and warnings."""
    reports = result["reports"]
    multi = len(reports) > 1
    parts = _part_names(reports)
    ach = "MFU@ach" if result.get("peak_trusted", True) else "MFU@ach(!)"  # an untrusted peak, said above the table
    head = (["report"] if multi else []) + ["case", "shape", "dtype", "total us", "TFLOP/s", "MFU@nom", ach,
                                            "MBU", "bound", "headroom"] + (["speed-up"] if multi else [])
    for p in parts:
        head += [f"{p} us"] + ([f"{p} MFU"] if p != OTHER else [])  # 'other' does no counted FLOPs
    rows, not_ok, no_matrix, marked, ok_rows = [], [], [], [], []
    for rep in reports:
        for r in rep["rows"]:
            lead = [rep["label"]] if multi else []
            if r["status"] == "skipped":  # never measured: listed below with its reason (never_measured_lines)
                continue
            if r["status"] != "ok":
                rows.append(lead + [r["case"], shape_cell(r), r["status"]] + ["-"] * (len(head) - len(lead) - 3))
                not_ok.append(f"{rep['label'] + ' ' if multi else ''}case {r['case']} {r['status']}: "
                              f"{r.get('reason', '')}")
                continue
            dt = r["dtype"] + ("(tf32)" if r.get("tf32") else "")
            if r.get("matrix_work", True):
                mfus = [sig(r["actual_tflops"], TFLOPS_DIGITS), cells.mfu_nom(r, 2), cells.util(r["mfu_ach"], 1)]
            else:  # no matrix work: no MFU, MBU is the headline (docs/ARCHITECTURE.md#mbu)
                mfus = [NO_MFU, NO_MFU, NO_MFU]
            mark = "" if r.get("numerator") in (None, "checked") else f" [{r['numerator']}]"
            bd = (r.get("bound") or {})
            label = bd.get("label") or "-"
            label += " (fallback)" if str(bd.get("source") or "").startswith("fallback") else ""
            replay = " [ncu]" if r.get("ncu_replay") else ""  # an ncu replay time, not a free-running one
            noisy = f" {cells.SPREAD_MARK}" if cells.spread_flagged(r) else ""  # the collector's spread flag
            row = lead + [f"{r['case']}{mark}", shape_cell(r), dt, sig(r["kernel_time_us"], US_DIGITS) + replay + noisy] + \
                mfus + [pct(r["mbu"], 1) + (" *" if not r.get("matrix_work", True) else ""), label,
                        times((r.get("roofline") or {}).get("headroom"))] + \
                ([times((r.get("speedup") or {}).get("value"))] if multi else [])
            ok_rows.append(r)
            if not r.get("matrix_work", True):
                no_matrix.append(r)
            if replay:
                marked.append(f"{rep['label'] + ' ' if multi else ''}case {r['case']}: total us [ncu]: "
                              f"{r['ncu_replay'].get('note') or 'ncu replay time'}")
            if mark:
                marked.append(f"{rep['label'] + ' ' if multi else ''}case {r['case']}: numerator: {r['numerator']}"
                              f" - {r.get('numerator_reason') or 'see flops_check.json'}")
            by = {p["part"]: p for p in r.get("parts") or []}
            for p in parts:
                d = by.get(p)
                pc = ["-", "-"] if d is None else [sig(d["time_us"], US_DIGITS), NO_MFU if d.get("flops") == 0 else
                                                   cells.util(d.get("mfu_ach"), 1)]  # no matrix work: no MFU
                row += pc[:1] if p == OTHER else pc
            rows.append(row)
    lines = [f"peak: {result.get('peak_label')}  ({result['peak_json']})"]
    if not result.get("peak_trusted", True):
        lines.append("MFU@ach(!): the peak calibration is NOT trusted (noisy; see the warning below) - MFU@ach, "
                     "headroom and the roofline divide by it")
    reg = result.get("regime") or {}
    if reg.get("note"):
        lines.append(_wrap(f"cache regime: {reg['note']}"))
    lines.append(tabulate(rows, head, tablefmt="plain", disable_numparse=True))
    lines.extend(_wrap(t, "    ") for t in never_measured_lines(reports))
    lines.extend(_wrap(t) for t in not_ok)
    lines.extend(_wrap(t) for t in marked)
    lines.extend(_wrap(t) for t in cells.legend(ok_rows, {rep.get("backend") for rep in reports}))
    ptab = parts_table(result)
    if ptab:
        lines.extend(["", ptab])
    vtab = pmu_view_table(result)
    if vtab:
        lines.extend(["", vtab])
    if no_matrix:
        vec = "; ".join(f"case {r['case']} {sig(r['vector_tflops'], TFLOPS_DIGITS)} vector TFLOP/s" for r in no_matrix
                        if r.get("vector_tflops"))
        lines.append(f"* no matrix work: no MFU ({NO_MFU}); MBU is the headline" + (f" ({vec})" if vec else ""))
    mx = result.get("maxima") or {}
    if "mbu" in mx and not ("mfu_ach" in mx or "mfu_nom" in mx):
        m = mx["mbu"]
        lines.append(f"max: MBU {pct(m['value'], 2)} (case {m['case']} {m['dtype']}) - no matrix work: MBU is the "
                     "headline")
    if "mfu_ach" in mx or "mfu_nom" in mx:
        bits = []
        for key, name in (("mfu_ach", "MFU@ach"), ("mfu_nom", "MFU@nom")):
            if key in mx:
                m = mx[key]
                bits.append(f"{name} {pct(m['value'], 2)} (case {m['case']} {m['dtype']}"
                            + (f", {m['report']}" if multi else "") + ")")
        cpu = any(validates_only(rep.get("backend"), (rep.get("device") or {}).get("accelerator"))
                  for rep in result.get("reports", []))
        lines.append("max: " + "; ".join(bits) + (" - CPU-interpreter numbers: they validate the pipeline, they "
                                                   "are not a utilisation" if cpu else ""))
    lines.append("")
    lines.append("how to read it:")
    lines.extend(_wrap("  " + s, "    ") for s in result.get("reading_aid") or [])
    for n in result.get("notes") or []:
        lines.append(_wrap(f"note: {n}"))
    for w in result.get("warnings") or []:
        lines.append(_wrap(f"warning: {w}"))
    for e in result.get("errors") or []:
        lines.append(_wrap(f"error: {e}"))
    return "\n".join(lines)


def parts_table(result: dict) -> str:
    """One row per part of every ok case with FLOPs, ranked per case by payoff (:func:`mfulib.report.roofline.
    rank_by_payoff`): time, TFLOP/s, MFU@ach, bound (source), headroom ("unknown (bytes)" when the part's bytes are
    unknown), the case MFU@ach if that part were fixed (and its target), speed-up against the baseline report when
    several are shown. Empty when no case has parts."""
    from tabulate import tabulate
    multi = len(result["reports"]) > 1
    rows = []
    for rep in result["reports"]:
        for r in rep["rows"]:
            if r.get("status") != "ok" or not r.get("parts") or not r.get("matrix_work", True):
                continue
            order = r.get("payoff_order") or [p["part"] for p in r["parts"]]
            by = {p["part"]: p for p in r["parts"]}
            for name in order:
                p = by[name]
                rf, bd = p.get("roofline") or {}, p.get("bound") or {}
                src = str(bd.get("source") or "-").replace("fallback:fp32-vs-fp16", "fallback")
                rows.append(([rep["label"]] if multi else []) + [
                    r["case"], name, sig(p.get("time_us"), US_DIGITS), pct(p.get("time_share"), 0),
                    sig(p.get("tflops"), TFLOPS_DIGITS), cells.util(p.get("mfu_ach"), 1),
                    f"{bd.get('label', '-')} [{src}]",
                    "unknown (bytes)" if rf.get("roof") == "unknown" else times(rf.get("headroom")),
                    pct(rf.get("mfu_if_fixed"), 1) + (f" ({rf['target_source']})" if rf.get("target_source")
                                                      and not rf.get("withheld") else "")]
                    + ([times((p.get("speedup") or {}).get("value"))] if multi else []))
    if not rows:
        return ""
    head = (["report"] if multi else []) + ["case", "part", "us", "time", "TFLOP/s", "MFU@ach", "bound [source]",
                                            "headroom", "case MFU@ach if fixed"] + (["speed-up"] if multi else [])
    return ("parts, by payoff (what fixing each part alone buys the case):\n"
            + tabulate(rows, head, tablefmt="plain", disable_numparse=True))


def pmu_view_table(result: dict) -> str:
    """Official MFU beside the PMU view (executed FLOPs over the active cores) and their ratio (redundancy), for
    the cases whose counters give executed work; empty otherwise."""
    from tabulate import tabulate
    rows = []
    for rep in result["reports"]:
        for r in rep["rows"]:
            v = r.get("pmu_view") or {}
            if r.get("status") == "ok" and v.get("executed_flops"):
                rows.append([rep["label"], r["case"], pct(v.get("official_mfu"), 1), pct(v.get("pmu_mfu"), 1),
                             pct(v.get("active_core_fraction"), 0), times(v.get("redundancy"))])
    if not rows:
        return ""
    return ("official MFU (semantic FLOPs, all cores) vs PMU view (executed FLOPs, active cores):\n"
            + tabulate(rows, ["report", "case", "official MFU", "PMU MFU", "active cores", "executed/semantic"],
                       tablefmt="plain", disable_numparse=True))


def plot_decompose(result: dict, path: str) -> str | None:
    """Per case, two stacked bars (time share, FLOPs share) split by part; PNG at ``path``, titled with the device.
    Cases of one part only are left out of that plot (their bars would be 100% by construction); when no case has
    two parts, the plot shows MBU and MFU@ach per case instead (:func:`_plot_utilisation`).

    Returns the path, or None when no case was decomposed. Draws on a bare :class:`matplotlib.figure.Figure` with the
    Agg canvas (no display needed): pyplot is never imported, which took about half of mfu_decompose.py's wall time
    (pyinstrument).
    """
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    ok = [(rep["label"], r) for rep in result["reports"] for r in rep["rows"] if r.get("status") == "ok"]
    rows = [(lab, r) for lab, r in ok if len(r.get("parts") or []) > 1]
    if not rows:  # single-part operators: a share bar is 100% by construction - plot what matters (MBU, MFU@ach)
        return _plot_utilisation(result, ok, path) if ok else None
    parts = _part_names(result["reports"])
    multi = len(result["reports"]) > 1
    labels, time_sh, flop_sh = [], [], []
    for lab, r in rows:
        by = {p["part"]: p for p in r["parts"]}
        labels.append((f"{lab}: " if multi else "") + f"case {r['case']} {r['dtype']}\n{cells.headline(r)}")
        time_sh.append([(by.get(p) or {}).get("time_share") or 0.0 for p in parts])
        flop_sh.append([(by.get(p) or {}).get("flops_share") or 0.0 for p in parts])
    fig = Figure(figsize=(9, 1.6 + 0.9 * len(rows)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    colors = colormaps["tab10"]
    height = 0.38
    for i in range(len(rows)):
        for j, (shares, yoff, hatch) in enumerate(((time_sh[i], -height / 2, None), (flop_sh[i], height / 2, "//"))):
            left = 0.0
            for k, p in enumerate(parts):
                w = shares[k]
                if w <= 0:
                    continue
                ax.barh(i + yoff, w, height=height * 0.95, left=left, color=colors(k % 10), hatch=hatch,
                        edgecolor="white")
                if w > 0.06:
                    ax.text(left + w / 2, i + yoff, f"{w:.0%}", ha="center", va="center", fontsize=7)
                left += w
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share (upper bar: kernel time, lower hatched bar: FLOPs)")
    device = result.get("peak_label") or "?"
    ax.set_title(chart_title(f"time share vs FLOPs share per part - {device}"), fontsize=10)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=colors(k % 10), label=p) for k, p in enumerate(parts)], fontsize=8,
              loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="part", title_fontsize=8)
    return _save(fig, path)


def chart_title(text: str, width: int = 80) -> str:
    """A chart title wrapped onto lines of at most ``width`` characters (a long device label is never cut)."""
    return textwrap.fill(text, width=width)


def save_figure(fig, target) -> None:
    """Save ``fig`` as PNG to ``target`` (a path or a binary file) with every artist inside the image: the tight
    bounding box takes in titles and legends placed outside the axes (:func:`plot_decompose`, the roofline)."""
    fig.savefig(target, format="png", dpi=110, bbox_inches="tight", pad_inches=0.15)


def _save(fig, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp.png"
    save_figure(fig, tmp)
    os.replace(tmp, path)
    return path


def _plot_utilisation(result: dict, ok: list, path: str) -> str:
    """Horizontal bars of MBU and MFU@ach per case (single-part operators); PNG at ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    multi = len(result["reports"]) > 1
    fig = Figure(figsize=(9, 1.6 + 0.6 * len(ok)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    height = 0.38
    top, labelled = 1.0, set()
    for i, (lab, r) in enumerate(ok):
        for off, key, name, color in ((-height / 2, "mbu", "MBU", "tab:blue"), (height / 2, "mfu_ach", "MFU@ach",
                                                                                   "tab:orange")):
            v = r.get(key)
            if v is None:
                continue
            ax.barh(i + off, v, height=height * 0.95, color=color, label=None if name in labelled else name)
            labelled.add(name)
            top = max(top, v)
            ax.text(v, i + off, f" {pct(v, 1)}", va="center", fontsize=7)
    ax.set_yticks(range(len(ok)))
    ax.set_yticklabels([(f"{lab}: " if multi else "") + f"case {r['case']} {r.get('dtype')}" for lab, r in ok],
                       fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("fraction of the measured peak (bandwidth for MBU, dtype's compute peak for MFU@ach)")
    ax.set_xlim(0, top * 1.15)  # room for the value labels right of the longest bar
    ax.set_title(chart_title(f"one kernel part per case: MBU and MFU@ach - {result.get('peak_label') or '?'}"),
                 fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: covers no bar
    return _save(fig, path)
