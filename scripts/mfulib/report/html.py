"""The HTML report of a decomposition: one self-contained file (figures embedded as base64 PNG, inline CSS, no
script, no external resource) that a person opens in a browser - ``mfu_decompose.py --html PATH`` / ``make report``.

Sections, in order: the case table (dtype, kernel time, TFLOP/s, MFU@nom, the headline MFU@ach or MBU, numerator
status, bound label, headroom), the roofline plot, per case the part table (time share, FLOPs share, MFU@ach,
bound label with the counters that support it, headroom, payoff = the operator's MFU if that part alone were fixed)
and the time-share vs FLOPs-share bars (:func:`mfulib.report.tables.plot_decompose`), PMU counters per kernel where the
collector read them, the reading aid, errors / warnings / notes, and the provenance (device, software versions,
peaks, regime, PMU collection, numerator status).

Roofline (Williams, Waterman & Patterson, "Roofline: an insightful visual performance model", CACM 52(4), 2009):
attainable TFLOP/s = min(peak of the dtype, AI x bandwidth), AI = FLOPs / bytes in FLOP/byte, bandwidth in GB/s
(so AI x GB/s / 1e3 is TFLOP/s); the roofs are peak.json's *measured* per-dtype peaks and copy bandwidth. A case's
point is (AI, achieved TFLOP/s) with AI from its ``roofline.ai_flop_per_byte`` (h14a's decomposition field) or
else FLOPs / (input + output bytes); a part is drawn only where its own ``roofline`` gives an AI. Fields a
decomposition lacks (``bound``, ``roofline``, ``regime`` of older files) are shown as "—", never guessed.
"""
from __future__ import annotations

import base64
import html
import io
import json
import os
import tempfile

from mfulib.core.definitions import OPS_MODES, canonical_mode, finite_or_none
from mfulib.core.fmt import EM_DASH as DASH, TFLOPS_DIGITS, US_DIGITS, pct, sig, times
from mfulib.core.jsonio import write_text_atomic
from mfulib.report import cells
from mfulib.report.tables import chart_title, never_measured_lines, save_figure, shape_cell
from mfulib.schemas.provenance import HTML_MARK

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:24px;color:#1d2330;
max-width:1400px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #d0d5dd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;font-size:13px;margin:6px 0 12px}
th,td{border:1px solid #d0d5dd;padding:3px 8px;text-align:right;vertical-align:top}
th{background:#f2f4f7;text-align:center}td.l,th.l{text-align:left}
.sub{color:#566074;font-size:13px}.err{color:#b42318}.warn{color:#b54708}
.bound{font-weight:600}.ev{color:#566074;font-size:12px}
img{max-width:100%;border:1px solid #e4e7ec;margin:6px 0}
ul{font-size:13px}code{font-size:12px}td{overflow-wrap:anywhere}td code{white-space:normal}
"""


# ------------------------------------------------------------------------------------------------------- cells


def fmt_us(x):
    """A time in us, as the terminal table shows it (:data:`mfulib.core.fmt.US_DIGITS` significant digits)."""
    return sig(x, US_DIGITS, DASH)


def fmt_counter(key, v):
    """A PMU counter value: percentages with one decimal, counts and bytes with 4 significant digits."""
    n = finite_or_none(v)
    if n is None:
        return DASH
    if key.endswith("_pct") or key.endswith("_ratio"):
        return f"{n:.1f}"
    return sig(n, 4, DASH)


def esc(x) -> str:
    return html.escape(DASH if x is None else str(x))


def _table(head, rows, left=()) -> str:
    """An HTML table; ``left``: column indices aligned left (text columns). Cells are escaped here."""
    ths = "".join(f'<th class="l">{esc(h)}</th>' if i in left else f"<th>{esc(h)}</th>" for i, h in enumerate(head))
    body = []
    for r in rows:
        tds = "".join((f'<td class="l">{c}</td>' if i in left else f"<td>{c}</td>") for i, c in enumerate(r))
        body.append(f"<tr>{tds}</tr>")
    return f"<table><tr>{ths}</tr>{''.join(body)}</table>"


def bound_cell(b) -> str:
    """``bound`` {label, source, evidence, note} as HTML: the label, its source and the evidence counters."""
    if not isinstance(b, dict) or not b.get("label"):
        return DASH
    ev = b.get("evidence") or {}
    evs = ", ".join(f"{esc(k)}={esc(fmt_counter(k, v))}" for k, v in ev.items()) if isinstance(ev, dict) else esc(ev)
    src = f" <span class=\"ev\">({esc(b.get('source'))})</span>" if b.get("source") else ""
    note = f"<br><span class=\"ev\">{esc(b.get('note'))}</span>" if b.get("note") else ""
    return f"<span class=\"bound\">{esc(b['label'])}</span>{src}" + (f"<br><span class=\"ev\">{evs}</span>"
                                                                      if evs else "") + note


def _roof(obj, key):
    r = obj.get("roofline") if isinstance(obj, dict) else None
    return r.get(key) if isinstance(r, dict) else None


def headline(row) -> str:
    """The case's headline figure, named: ``MFU@ach 18.5%``, or ``MBU 13.8%`` for a case without matrix work
    (docs/ARCHITECTURE.md#mbu; :func:`mfulib.report.cells.headline`)."""
    return cells.headline(row, 1, DASH)


# ------------------------------------------------------------------------------------------------------ figures


def _png_b64(fig) -> str:
    buf = io.BytesIO()
    save_figure(fig, buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(b64: str, alt: str) -> str:
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{b64}">'


def roofline_points(doc: dict) -> list:
    """[(label, kind "case"|"part", ai FLOP/byte, achieved TFLOP/s, dtype)] of the cases and parts that can be placed
    (see the module docstring); cases without matrix work or without bytes are left out."""
    pts = []
    multi = len(doc.get("reports") or []) > 1
    for rep in doc.get("reports") or []:
        for r in rep.get("rows") or []:
            if r.get("status") != "ok":
                continue
            lead = f"{rep.get('label')}: " if multi else ""
            flops, nbytes, tf = finite_or_none(r.get("flops")), finite_or_none(r.get("bytes")), finite_or_none(r.get("actual_tflops"))
            ai = finite_or_none(_roof(r, "ai_flop_per_byte"))
            if ai is None and flops and nbytes:
                ai = flops / nbytes
            if ai and tf:
                pts.append((f"{lead}case {r.get('case')}", "case", ai, tf, r.get("peak_key") or r.get("dtype")))
            for p in r.get("parts") or []:
                pai, ptf = finite_or_none(_roof(p, "ai_flop_per_byte")), finite_or_none(p.get("tflops"))
                if pai and ptf:
                    pts.append((f"{lead}case {r.get('case')} {p.get('part')}", "part", pai, ptf,
                                r.get("peak_key") or r.get("dtype")))
    return pts


def plot_roofline(doc: dict, peak_doc: dict | None) -> tuple:
    """(base64 PNG or None, caption) of the roofline: measured roofs of peak.json, cases and parts as points."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    peaks = dict((peak_doc or {}).get("peak_tflops") or doc.get("peak_tflops") or {})
    peaks = {k: v for k, v in peaks.items() if finite_or_none(v)}
    bw = finite_or_none((peak_doc or {}).get("bandwidth_gbps")) or finite_or_none(doc.get("bandwidth_gbps"))
    pts = roofline_points(doc)
    if not pts and not peaks:
        return None, "no roofline: no measured peak and no case with FLOPs and bytes"
    ais = [p[2] for p in pts] or [1.0]
    lo, hi = min(ais + [1.0]) / 10, max(ais + [1e3]) * 10
    fig = Figure(figsize=(9, 5.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    import numpy as np
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    colors = colormaps["tab10"]
    roof_color = {}
    styles = ("-", "--", "-.", ":")
    if bw:  # the memory roof is shared by every dtype: drawn once, so no roof's slope lies hidden under another's
        ridge = max(peaks.values(), default=0.0) * 1e3 / bw
        xs = x[x <= max(ridge, lo)]
        ax.plot(xs, xs * bw / 1e3, color="grey", lw=1.4, label=f"memory roof {sig(bw)} GB/s")
    last_y, below_prev = None, False
    for i, (dt, pk) in enumerate(sorted(peaks.items(), key=lambda kv: -kv[1])):
        roof_color[dt] = colors(i % 10)
        unit = "TOPS" if canonical_mode(dt) in OPS_MODES else "TFLOP/s"  # int8: tera-ops (peak_json docstring)
        start = max(pk * 1e3 / bw, lo) if bw else lo  # the compute roof begins at its own ridge point
        # each dtype's roof in its own colour and dash, labelled at its right end: close peaks (bf16 800 beside fp16
        # 780) stay two lines with two labels, one above and one below
        ax.plot([start, hi], [pk, pk], color=roof_color[dt], lw=1.8, ls=styles[i % len(styles)],
                label=f"{dt} roof {sig(pk)} {unit}", zorder=3)
        below = last_y is not None and last_y / pk < 1.3 and not below_prev
        ax.annotate(f"{dt} {sig(pk)} {unit}", (hi, pk), xytext=(-4, -3 if below else 3), textcoords="offset points",
                    ha="right", va="top" if below else "bottom", fontsize=7, color=roof_color[dt])
        last_y, below_prev = pk, below
    for label, kind, ai, tf, dt in pts:  # filled in the colour of the roof of the point's own dtype
        ax.scatter([ai], [tf], marker="o" if kind == "case" else "s", s=46 if kind == "case" else 30,
                   color=roof_color.get(dt, "black"), edgecolors="black", linewidths=0.8, zorder=5)
        ax.annotate(label, (ai, tf), textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ys = [p[3] for p in pts] + list(peaks.values())
    ax.set_ylim(max(min(ys) / 10, 1e-6), max(ys) * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(chart_title(f"roofline - {doc.get('peak_label') or '?'} (measured roofs from peak.json)"),
                 fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # outside: covers no point
    left_out = sum(1 for rep in doc.get("reports") or [] for r in rep.get("rows") or []
                   if r.get("status") == "ok" and r.get("matrix_work") is False)
    cap = ("circles: cases; squares: parts with a roofline AI, filled in the colour of their dtype's roof. "
           "Roof = min(peak, AI x bandwidth): one grey memory roof, each dtype's compute roof in its colour and dash."
           + (f" {left_out} case(s) without matrix work are read by MBU and not drawn." if left_out else "")
           + ("" if bw else " No measured bandwidth in peak.json: compute roofs only."))
    return _png_b64(fig), cap


def plot_parts(doc: dict) -> str | None:
    """Base64 PNG of :func:`mfulib.report.tables.plot_decompose` (time share vs FLOPs share per part), None without parts."""
    from mfulib.report.tables import plot_decompose
    with tempfile.TemporaryDirectory(prefix="mfu_html_") as tmp:
        path = plot_decompose(doc, os.path.join(tmp, "parts.png"))
        if path is None:
            return None
        with open(path, "rb") as f:
            return base64.b64encode(f.read()).decode("ascii")


# ------------------------------------------------------------------------------------------------------ sections


def _perf_for(rep: dict, perf_docs, i: int):
    if isinstance(perf_docs, dict):
        return perf_docs.get(rep.get("label")) or perf_docs.get(rep.get("path"))
    if isinstance(perf_docs, (list, tuple)) and i < len(perf_docs):
        return perf_docs[i]
    return None


def case_table(doc: dict) -> str:
    multi = len(doc.get("reports") or []) > 1
    head = (["report"] if multi else []) + ["case", "shape", "dtype", "kernel time (us)", "repeat spread", "TFLOP/s",
                                            "MFU@nom", "headline (MFU@ach or MBU, named)", "numerator", "bound",
                                            "headroom"]
    rows, not_run, ok_rows = [], [], []
    for rep in doc.get("reports") or []:
        for r in rep.get("rows") or []:
            lead = [esc(rep.get("label"))] if multi else []
            if r.get("status") == "skipped":  # never measured: never_measured_lines below says why
                continue
            if r.get("status") != "ok":  # never a table row: listed under the table with the reason
                not_run.append(f"{rep.get('label') + ': ' if multi else ''}case {r.get('case')} {r.get('status')}: "
                               f"{r.get('reason')}")
                continue
            ok_rows.append(r)
            dt = f"{r.get('dtype')}{' (tf32)' if r.get('tf32') else ''}"
            shape = "<br>".join(esc(line) for line in shape_cell(r, 40).split("\n"))  # wrapped, never cut
            spread = pct(r.get("repeat_spread"), 1, DASH)
            if cells.spread_flagged(r):
                spread = f"<span class=\"warn\">{esc(spread)} {esc(cells.SPREAD_MARK)}</span>"
            rows.append(lead + [esc(r.get("case")), shape, esc(dt), fmt_us(r.get("kernel_time_us"))
                                + (" [ncu replay]" if r.get("ncu_replay") else ""), spread,
                                sig(r.get("actual_tflops"), TFLOPS_DIGITS, DASH), esc(cells.mfu_nom(r, 2, DASH)),
                                esc(headline(r)), esc(r.get("numerator")), bound_cell(r.get("bound")),
                                times(_roof(r, "headroom"), DASH)])
    left = {0, 1, 2, 3} if multi else {0, 1, 2}
    foot = "".join(f"<li>{esc(t)}</li>" for t in dict.fromkeys(not_run + never_measured_lines(doc.get("reports")
                                                                                               or [])))
    marks = cells.legend(ok_rows, {rep.get("backend") for rep in doc.get("reports") or []})
    return _table(head, rows, left=left | {len(head) - 3, len(head) - 2}) + \
        (f"<ul class=\"sub\">{''.join(f'<li>{esc(t)}</li>' for t in marks)}</ul>" if marks else "") + \
        (f"<p class=\"sub\">not measured (no row above):</p><ul class=\"sub\">{foot}</ul>" if foot else "")


def part_tables(doc: dict) -> str:
    out = []
    head = ["part", "kernels", "time (us)", "time share", "FLOPs share", "MFU@ach", "bound (evidence)", "headroom",
            "payoff: op MFU if fixed"]
    for rep in doc.get("reports") or []:
        for r in rep.get("rows") or []:
            if r.get("status") != "ok" or not r.get("parts"):
                continue
            rows = []
            parts = sorted(r["parts"], key=lambda p: -(finite_or_none(_roof(p, "mfu_if_fixed")) or -1.0))
            for p in parts:
                ks = ", ".join(p.get("kernels") or [])
                rows.append([esc(p.get("part")), f"<code>{esc(ks)}</code>", fmt_us(p.get("time_us")),
                             pct(p.get("time_share"), 1, DASH), pct(p.get("flops_share"), 1, DASH),
                             DASH if p.get("flops") == 0 else esc(cells.util(p.get("mfu_ach"), 1, DASH)),  # no matrix work
                             bound_cell(p.get("bound")), times(_roof(p, "headroom"), DASH),
                             pct(_roof(p, "mfu_if_fixed"), 1, DASH)])
            title = (f"{rep.get('label')}: " if len(doc.get("reports")) > 1 else "") + \
                f"case {r.get('case')} ({r.get('dtype')}, {headline(r)})"
            out.append(f"<h3>{esc(title)}</h3>" + _table(head, rows, left={0, 1, 6}))
    return "".join(out) or f"<p class=\"sub\">no parts {DASH} flops.py defines no KERNEL_PARTS</p>"


def pmu_tables(doc: dict, perf_docs) -> str:
    out = []
    for i, rep in enumerate(doc.get("reports") or []):
        perf = _perf_for(rep, perf_docs, i)
        if not perf:
            continue
        for c in perf.get("per_case") or []:
            pmu = c.get("pmu")
            if not isinstance(pmu, dict) or not pmu:
                if c.get("pmu_unavailable"):
                    out.append(f"<p class=\"sub\">case {esc(c.get('case'))}: no counters {DASH} "
                               f"{esc(c.get('pmu_unavailable'))}</p>")
                continue
            keys = list(dict.fromkeys(k for v in pmu.values() if isinstance(v, dict) for k in v))
            rows = [[f"<code>{esc(name)}</code>"] + [esc(fmt_counter(k, (v or {}).get(k))) for k in keys]
                    for name, v in pmu.items()]
            out.append(f"<h3>case {esc(c.get('case'))} ({esc(c.get('pmu_source'))})</h3>"
                       + _table(["kernel"] + keys, rows, left={0}))
    return "".join(out)


def provenance(doc: dict, perf_docs, peak_doc) -> str:
    items = []
    dev = doc.get("peak_device") if isinstance(doc.get("peak_device"), dict) else {}
    items.append(("device", dev.get("name") or doc.get("peak_label")))
    for k in ("driver", "cuda_runtime", "cann", "sm_count", "ai_core_num", "max_sm_clock_mhz"):
        if dev.get(k) is not None:
            items.append((f"device {k}", dev[k]))
    for k, v in sorted((doc.get("versions") or {}).items()):
        items.append((f"version {k}", v))
    items.append(("created", f"{doc.get('created_at')} by {doc.get('tool')} {doc.get('tool_version') or ''}"))
    items.append(("peak.json", doc.get("peak_json")))
    for k, v in sorted((doc.get("peak_tflops") or {}).items()):
        unit = "TOPS" if canonical_mode(k) in OPS_MODES else "TFLOP/s"  # int8: tera-ops (peak_json docstring)
        items.append((f"measured peak {k}", f"{sig(v, 4, DASH)} {unit}"))
    items.append(("measured bandwidth", f"{sig(doc.get('bandwidth_gbps'), 4, DASH)} GB/s"))
    preg = (peak_doc or {}).get("regime")
    if isinstance(preg, dict):
        items.append(("peak regime",
                      f"{preg.get('kind')} (duty cycle {pct(preg.get('duty_cycle_measured'), 1, DASH)})"))
    reg = doc.get("regime")
    if isinstance(reg, dict):
        items.append(("regime", f"flush before iterations: collect {reg.get('flush_cache_mib_collect')} MiB, "
                                f"peak {reg.get('flush_cache_mib_peak')} MiB. {reg.get('note') or ''}"))
    else:
        items.append(("regime", DASH))
    for i, rep in enumerate(doc.get("reports") or []):
        lab = rep.get("label")
        items.append((f"{lab}: nominal peak", f"{sig(rep.get('nominal_tflops'), 4, DASH)} TFLOP/s "
                                              f"({rep.get('nominal_source')})"))
        items.append((f"{lab}: timing", f"{rep.get('timing_method')}, warmup {rep.get('warmup')}, repeats "
                                        f"{rep.get('repeats')}, backend {rep.get('backend')}"))
        perf = _perf_for(rep, perf_docs, i) or {}
        pc = perf.get("pmu_collection")
        if isinstance(pc, dict):
            how = (f"{pc.get('tool')} {pc.get('ncu_version') or ''}, cache-control {pc.get('cache_control')}, "
                   f"clock-control {pc.get('clock_control')}" if pc.get("available") else pc.get("reason"))
            items.append((f"{lab}: PMU", how))
        if perf.get("flush_cache_mib") is not None:
            items.append((f"{lab}: collector flush", f"{perf.get('flush_cache_mib')} MiB before each iteration"))
        for r in rep.get("rows") or []:
            if r.get("status") == "ok":
                items.append((f"{lab}: case {r.get('case')} numerator",
                              f"{r.get('numerator')}" + (f" - {r.get('numerator_reason')}"
                                                         if r.get("numerator_reason") else "")))
    rows = [[esc(k), esc(v)] for k, v in items]
    return _table(["what", "value"], rows, left={0, 1})


def _list(title, items, cls="") -> str:
    if not items:
        return ""
    lis = "".join(f"<li class=\"{cls}\">{esc(x)}</li>" for x in items)
    return f"<h3>{esc(title)}</h3><ul>{lis}</ul>"


def render_html(doc: dict, perf_docs=None, peak_doc=None) -> str:
    """The report as one HTML string (see the module docstring); ``doc``: an mfu_decompose.json document,
    ``perf_docs``: the performance.json documents of its reports ({label or path: doc} or a list in report
    order; for the PMU tables and provenance), ``peak_doc``: peak.json (roofs; else the doc's own peak fields)."""
    labels = ", ".join(str(rep.get("label")) for rep in doc.get("reports") or [])
    roof_png, roof_cap = plot_roofline(doc, peak_doc)
    parts_png = plot_parts(doc)
    body = [f"<h1>MFU report {DASH} {esc(labels)}</h1>",
            f"<p class=\"sub\">{esc(doc.get('peak_label'))} &middot; {esc(doc.get('created_at'))}</p>"]
    if doc.get("complete") is False:
        body.append(f"<p class=\"err\">INCOMPLETE collection: {esc('; '.join(doc.get('missing') or []))}</p>")
    if doc.get("stale"):  # made from files that changed since (mfulib.schemas.provenance.judge)
        body.append(f"<p class=\"err\">STALE: {esc('; '.join(doc['stale']))}</p>")
    body += ["<h2>Cases</h2>", case_table(doc), "<h2>Roofline</h2>",
             _img(roof_png, "roofline plot") if roof_png else "", f"<p class=\"sub\">{esc(roof_cap)}</p>",
             "<h2>Parts</h2>", _img(parts_png, "time share vs FLOPs share per part") if parts_png else "",
             part_tables(doc)]
    pmu = pmu_tables(doc, perf_docs)
    if pmu:
        body += ["<h2>PMU counters per kernel</h2>", pmu]
    body += ["<h2>Reading aid</h2>", _list("how to read it", doc.get("reading_aid") or []),
             _list("errors", doc.get("errors") or [], "err"), _list("warnings", doc.get("warnings") or [], "warn"),
             _list("notes", doc.get("notes") or []), "<h2>Provenance</h2>", provenance(doc, perf_docs, peak_doc)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>MFU report {DASH} {esc(labels)}</title><style>{CSS}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")


def write_html(doc: dict, path: str, perf_docs=None, peak_doc=None, made_from=None) -> str:
    """Write :func:`render_html` atomically to ``path``; returns the path. ``made_from``
    (:mod:`mfulib.schemas.provenance`) is recorded as an HTML comment on the second line
    (:func:`mfulib.schemas.provenance.html_record` reads it back)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    text = render_html(doc, perf_docs, peak_doc)
    if made_from is not None:
        head, rest = text.split("\n", 1)
        text = f"{head}\n<!-- {HTML_MARK} {json.dumps(made_from)} -->\n{rest}"
    write_text_atomic(path, text)
    return path
