"""Human-readable forms of peak.json and mfu_decompose.json: terminal tables (tabulate) and a PNG plot.

Stored JSON keeps full precision; only these views round. The decomposition table follows the skill spec's form
(``case dtype total us TFLOPS MFU@nom MFU@ach <part> us <part> MFU ...``), with MBU added and a ``report`` column
when several reports are shown side by side.
"""
from __future__ import annotations

import os

from tabulate import tabulate

from .kernel_parts import OTHER


def _pct(x, nd=2):
    return "-" if x is None else f"{100 * x:.{nd}f}%"


def _f(x, nd=1):
    """Fixed decimals; values below 1 keep three significant digits (CPU GFLOP-scale peaks are not 0.0)."""
    if x is None:
        return "-"
    if 0 < abs(x) < 1:
        return f"{x:.3g}"
    return f"{x:.{nd}f}"


def peak_table(peak: dict) -> str:
    """One row per measured math mode plus the copy bandwidth; errors listed below."""
    nom = (peak.get("nominal") or {}).get("tflops") or {}
    rows = []
    for mode, m in (peak.get("measured") or {}).items():
        s = m.get("best_shape") or {}
        frac = m.get("fraction_of_nominal")
        rows.append([mode, _f(m.get("peak_tflops")), m.get("unit", "TFLOP/s"), _f(m.get("sweep_tflops")),
                     _pct(m.get("spread"), 1), _f(nom.get(mode)), _pct(frac, 1),
                     f"{s.get('m')}x{s.get('n')}x{s.get('k')}" + (f" B {m['b_layout']}" if m.get("b_layout") else ""),
                     m.get("n_shapes"), _f(m.get("elapsed_s"), 1)])
    if peak.get("bandwidth_gbps") is not None:
        bw = peak.get("bandwidth") or {}
        nbw = (peak.get("nominal") or {}).get("bandwidth_gbps")
        rows.append(["copy bandwidth", _f(peak["bandwidth_gbps"], 0), "GB/s", "-", _pct(bw.get("spread"), 1),
                     _f(nbw, 0),
                     _pct(bw.get("fraction_of_nominal"), 1), f"{bw.get('buffer_bytes', 0) >> 20} MiB", bw.get("iters"),
                     _f(bw.get("elapsed_s"), 1)])
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
        lines.append(f"  regime: {reg.get('kind')} (duty cycle {'-' if dc is None else f'{dc:.0%}'} measured, "
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


def decompose_table(result: dict) -> str:
    """The decomposition table, then maxima, reading aid, errors and warnings."""
    reports = result["reports"]
    multi = len(reports) > 1
    parts = _part_names(reports)
    head = (["report"] if multi else []) + ["case", "dtype", "total us", "TFLOPS", "MFU@nom", "MFU@ach", "MBU"]
    for p in parts:
        head += [f"{p} us"] + ([f"{p} MFU"] if p != OTHER else [])  # 'other' does no counted FLOPs
    rows, not_ok = [], []
    for rep in reports:
        for r in rep["rows"]:
            lead = [rep["label"]] if multi else []
            if r["status"] != "ok":
                rows.append(lead + [r["case"], r["status"]] + ["-"] * (len(head) - len(lead) - 2))
                not_ok.append(f"{rep['label'] + ' ' if multi else ''}case {r['case']} {r['status']}: "
                              f"{r.get('reason', '')}")
                continue
            dt = r["dtype"] + ("(tf32)" if r.get("tf32") else "")
            row = lead + [r["case"], dt, _f(r["kernel_time_us"]), _f(r["actual_tflops"]), _pct(r["mfu_nom"]),
                          _pct(r["mfu_ach"], 1), _pct(r["mbu"], 1)]
            by = {p["part"]: p for p in r.get("parts") or []}
            for p in parts:
                d = by.get(p)
                cells = ["-", "-"] if d is None else [_f(d["time_us"]), _pct(d.get("mfu_ach"), 1)]
                row += cells[:1] if p == OTHER else cells
            rows.append(row)
    lines = [f"peak: {result.get('peak_label')}  ({result['peak_json']})",
             tabulate(rows, head, tablefmt="plain", disable_numparse=True)]
    lines.extend(not_ok)
    mx = result.get("maxima") or {}
    if "mfu_ach" in mx or "mfu_nom" in mx:
        bits = []
        for key, name in (("mfu_ach", "MFU@ach"), ("mfu_nom", "MFU@nom")):
            if key in mx:
                m = mx[key]
                bits.append(f"{name} {_pct(m['value'])} (case {m['case']} {m['dtype']}"
                            + (f", {m['report']}" if multi else "") + ")")
        cpu = any(rep.get("backend") == "cpu" for rep in result.get("reports", []))
        lines.append("max: " + "; ".join(bits) + (" - CPU-interpreter numbers: they validate the pipeline, they "
                                                   "are not a utilisation" if cpu else ""))
    lines.append("")
    lines.append("how to read it:")
    lines.extend("  " + s for s in result.get("reading_aid") or [])
    for n in result.get("notes") or []:
        lines.append(f"note: {n}")
    for w in result.get("warnings") or []:
        lines.append(f"warning: {w}")
    for e in result.get("errors") or []:
        lines.append(f"error: {e}")
    return "\n".join(lines)


def plot_decompose(result: dict, path: str) -> str | None:
    """Per case, two stacked bars (time share, FLOPs share) split by part; PNG at ``path``, titled with the device.

    Returns the path, or None when no case has parts. Draws on a bare :class:`matplotlib.figure.Figure` with the
    Agg canvas (no display needed): pyplot is never imported, which took about half of mfu_decompose.py's wall time
    (pyinstrument).
    """
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = [(rep["label"], r) for rep in result["reports"] for r in rep["rows"]
            if r.get("status") == "ok" and r.get("parts")]
    if not rows:
        return None
    parts = _part_names(result["reports"])
    multi = len(result["reports"]) > 1
    labels, time_sh, flop_sh = [], [], []
    for lab, r in rows:
        by = {p["part"]: p for p in r["parts"]}
        labels.append((f"{lab}: " if multi else "") + f"case {r['case']} {r['dtype']}\n"
                      f"MFU@ach {_pct(r.get('mfu_ach'), 1)}")
        time_sh.append([(by.get(p) or {}).get("time_share") or 0.0 for p in parts])
        flop_sh.append([(by.get(p) or {}).get("flops_share") or 0.0 for p in parts])
    fig = Figure(figsize=(9, 1.6 + 0.9 * len(rows)))
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
    ax.set_title(f"time share vs FLOPs share per part - {device}", fontsize=10)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=colors(k % 10), label=p) for k, p in enumerate(parts)], fontsize=8,
              ncol=min(len(parts), 6), loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.25 / len(rows)),
              frameon=False)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)
    return path
