"""The batch summary: one row per operator read from its work directory, and its CSV, markdown and HTML forms.

Per operator (:func:`operator_row`, keys :data:`mfulib.schemas.batch_json.ROW_KEYS`): the job's status and
reason, and from ``mfu_decompose.json`` (read through :mod:`mfulib.schemas.decompose_json`) its headline case -
the case :func:`mfulib.report.reading.maxima` names, by MFU@ach, else MFU@nom, else MBU (operators without
matrix work) - with that case's dtype, MFU@nom, MFU@ach, MBU, numerator status (``checked`` / ``unverified``, as
the decomposition marks it), errors (the decomposition's; why a job failed is its ``reason``), bound class (the
row's ``bound.label`` where the decomposition has one, else "—") and
dragging part: the part with the largest time share among those holding >= ``DRAG_MIN_TIME_SHARE`` of the time and
>= ``DRAG_RATIO`` x their FLOPs share (or unmatched "other" time) - the rule of the decomposition's reading aid
(:mod:`mfulib.report.reading`). ``case``, ``dtype`` and the figures are always the decomposition's headline case
(its maximum); with the search (``SEARCH=1``, a probe.json) that case's ``scale`` and ``factors`` per symbol (``batch
x4,seq x2``, "x1" for an original case) come from the probe's ``appended`` record; otherwise the scale is "—" (the
cases as given). The search's own limit - grid_search.json's ``best``, re-timed across runs, which the final
collection measures again and may rank otherwise - is in the ``search`` cell ("complete; limit: case N MFU x% (median
of 3 runs, ...)"). ``search`` (:func:`search_state`) also says whether that search is complete: "search
incomplete: ..." when the budget cut the probe (probe.json, :func:`mfulib.schemas.probe_json.budget_cut`) or a stop
ended the probe or the search (their ``interrupted``, e.g. the batch's --op-timeout-s, whose SIGTERM lets the step
record it) - the human tables' status then reads "ok (search incomplete)", never a plain "ok" - and the tie of its
re-timed leaders where there is one.

Files (:func:`write_outputs`, in the batch output dir): ``batch_summary.json`` (:mod:`mfulib.schemas.batch_json`),
``batch_summary.csv`` (raw numbers, MFU/MBU as fractions), ``batch_summary.md`` and ``index.html`` (percentages,
"—" where absent; the HTML links each operator's report.html, mfu_decompose.json and log, relative to the
output dir).
"""
from __future__ import annotations

import collections
import html
import os

from mfulib.report.reading import DRAG_MIN_TIME_SHARE, DRAG_RATIO
from mfulib.core.errors import UserError
from mfulib.core.fmt import EM_DASH as DASH, pct
from mfulib.core.jsonio import read_json, write_text_atomic
from mfulib.flops.kernel_parts import OTHER
from mfulib.core.symbols import factors_label
from mfulib.schemas.batch_json import ROW_KEYS, devices_label
from mfulib.schemas.decompose_json import read_decompose_json
from mfulib.schemas.grid_search_json import best_so_far, best_text
from mfulib.schemas.probe_json import RUNNING, budget_cut

HEADLINE_KEYS = (("mfu_ach", "MFU@ach"), ("mfu_nom", "MFU@nom"), ("mbu", "MBU"))


def _headline(dec):
    rows = [r for rep in dec["reports"] for r in rep["rows"] if r.get("status") == "ok"]
    for key, label in HEADLINE_KEYS:
        m = (dec.get("maxima") or {}).get(key)
        if m:
            hit = [r for r in rows if r.get("case") == m.get("case") and r.get("report") == m.get("report")]
            if hit:
                return hit[0], label
    return None, None


def dragging_part(row: dict):
    """The part of a decomposition row that drags (module docstring), or None."""
    cand = []
    for p in row.get("parts") or []:
        ts, fs = p.get("time_share"), p.get("flops_share")
        if ts is None or ts < DRAG_MIN_TIME_SHARE:
            continue
        if p.get("part") == OTHER or fs == 0 or (fs is not None and ts >= DRAG_RATIO * fs):
            cand.append((ts, p["part"]))
    return max(cand)[1] if cand else None


def _read(path):
    """The JSON object at ``path``, {} when absent or unreadable (a summary row never fails on one file)."""
    try:
        doc = read_json(path) if os.path.isfile(path) else {}
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def search_state(work: str, grid: dict) -> str | None:
    """The ``search`` cell of work directory ``work`` with its grid_search.json ``grid`` ({} when none): "search
    incomplete: the probe was cut by its budget (<probe.json interrupted>)" when the probe's --budget-s cut it
    (probe.json, else grid_search.json's ``probe_cut``); "search incomplete: the probe was stopped (...)" when a stop
    (Ctrl-C, a SIGTERM, the batch's --op-timeout-s) ended the probe and no search followed (make resumes a stopped
    probe before it searches), "search incomplete: the search was stopped (<grid_search.json interrupted>)" when one
    ended the grid search; else "complete" after a search (with "; tie: case a / case b" when its re-timed leaders
    tie), None without either file."""
    probe = _read(os.path.join(work, "probe.json"))
    cut = budget_cut(probe) or grid.get("probe_cut")
    if cut:
        return f"search incomplete: the probe was cut by its budget ({cut})"
    if not grid:
        if probe and not probe.get("complete") and probe.get("interrupted"):
            if probe["interrupted"] == RUNNING:
                return "search incomplete: the probe was killed while it ran (it recorded no stop)"
            return f"search incomplete: the probe was stopped ({probe['interrupted']})"
        return None
    if not grid.get("complete") and grid.get("interrupted"):
        return (f"search incomplete: the search was stopped ({grid['interrupted']}); best so far: "
                f"{best_so_far(grid)}")
    tie = ((grid.get("best") or {}).get("retimed") or {}).get("tie")
    limit = best_text(grid)
    return "complete" + (f"; limit: {limit}" if limit else "") + (f"; tie: case {' / case '.join(map(str, tie))}"
                                                                   if tie else "")


def operator_row(job: dict, rec: dict | None, resumed: bool = False) -> dict:
    """The summary row of one operator from its job record (None: never ran) and its work directory."""
    row = dict.fromkeys(ROW_KEYS)
    row.update(name=job["name"], layout=job["layout"], work=job["work"], log=job["log"],
               older=";".join(os.path.basename(p) for p in job.get("older") or []) or None, resumed=resumed,
               in_run=True)
    errors = []
    if rec is None:
        row.update(status="not_run", reason="not started (the batch was interrupted first)")
    else:
        row.update(status=rec["status"], reason=rec.get("reason"), wall_s=rec.get("wall_s"),
                   wall_total_s=rec.get("wall_total_s", rec.get("wall_s")),
                   device=rec.get("device"), report_html=rec.get("report_html"))
    html_path = os.path.join(job["work"], "report.html")
    if row["report_html"] is None and os.path.isfile(html_path):
        row["report_html"] = html_path
    dec_path = os.path.join(job["work"], "mfu_decompose.json")
    if os.path.isfile(dec_path) and row["status"] in ("ok", "failed"):
        row["decompose_json"] = dec_path
        try:
            dec = read_decompose_json(dec_path)
        except UserError as exc:
            errors.append(str(exc))
        else:
            errors += [str(e) for e in dec.get("errors") or []]
            best, label = _headline(dec)
            if best is not None:
                bound = best.get("bound")
                row.update(case=best.get("case"), dtype=best.get("dtype"), mfu_nom=best.get("mfu_nom"),
                           mfu_ach=best.get("mfu_ach"), mbu=best.get("mbu"), headline=label,
                           numerator=best.get("numerator"), dragging_part=dragging_part(best),
                           bound=bound.get("label") if isinstance(bound, dict) else None)
    grid = _read(os.path.join(job["work"], "grid_search.json"))
    probe = _read(os.path.join(job["work"], "probe.json"))
    if row["case"] is not None and probe:  # the headline case's scale: a case the probe appended, else an original
        app = (probe.get("appended") or {}).get(str(row["case"]))
        app = app if isinstance(app, dict) else {}
        row["scale"] = app.get("scale", 1)
        row["factors"] = factors_label(app.get("factors") or {})  # batch x4,seq x2 (x1: an original case)
    row["search"] = search_state(job["work"], grid)
    row["errors"] = "; ".join(errors) or None  # the decomposition's errors; why a job failed is its reason
    return row


def counts(rows, skipped) -> dict:
    """Operators, succeeded (of them reused from an earlier run), failed / timeout / interrupted / not run with
    their reasons, skipped with theirs - over this run's rows; ``earlier``: the rows of operators it left out
    (``in_run`` False: an earlier run's results, shown, never counted)."""
    earlier = sum(1 for r in rows if r.get("in_run") is False)
    rows = [r for r in rows if r.get("in_run") is not False]
    by = collections.Counter(r["status"] for r in rows)
    why = collections.Counter()
    for r in rows:
        if r["status"] in ("failed", "timeout"):
            why[_why_key(r)] += 1
    return {"operators": len(rows), "succeeded": by["ok"], "reused": sum(1 for r in rows if r["resumed"]),
            "failed": by["failed"], "timeout": by["timeout"], "interrupted": by["interrupted"] + by["running"],
            "not_run": by["not_run"], "skipped": len(skipped), "failed_why": dict(why),
            "search_incomplete": sum(1 for r in rows if incomplete(r)), "earlier": earlier,
            "skipped_why": dict(collections.Counter(_skip_key(w) for _, w in skipped))}


def incomplete(row: dict) -> bool:
    """Whether the summary row's search is incomplete (its ``search`` cell, :func:`search_state`)."""
    return str(row.get("search") or "").startswith("search incomplete")


def _why_key(row):
    if row["status"] == "timeout":
        return "timeout (OP_TIMEOUT_S)"
    reason = row.get("reason") or "unknown"
    return reason.split(":")[0]


def _skip_key(why):
    """The kind of a skip reason: "no implementation", "older copy", "not a layout A operator dir", ..."""
    return why.split(":")[0].split(" of ")[0]


def _cell(v):
    return DASH if v is None or v == "" else v


def _frame(rows, human: bool, out_dir: str, links: bool = False):
    import pandas as pd
    machine_only = ("work", "log", "report_html", "decompose_json", "wall_total_s")
    cols = [k for k in ROW_KEYS if k not in machine_only] if human else list(ROW_KEYS)
    data = []
    for r in rows:
        d = {k: r.get(k) for k in cols}
        if human:
            for k in ("mfu_nom", "mfu_ach", "mbu"):
                d[k] = pct(r.get(k), 2, DASH)
            d["wall_s"] = DASH if r.get("wall_s") is None else f"{r['wall_s']:.1f}"
            if incomplete(r):  # its limit is a lower bound: never a plain "ok"
                d["status"] = f"{r['status']} (search incomplete)"
            if r.get("in_run") is False:
                d["status"] = f"{d['status']} (earlier run, not in OPS)"
            d = {k: _cell(v) for k, v in d.items()}
            if links:
                d["name"] = html.escape(str(r["name"]))
                d["links"] = " ".join(f'<a href="{html.escape(os.path.relpath(r[k], out_dir))}">{label}</a>'
                                      for k, label in (("report_html", "report"), ("decompose_json", "json"),
                                                       ("log", "log")) if r.get(k) and os.path.exists(r[k])) or DASH
                for k in cols:
                    if k != "name":
                        d[k] = html.escape(str(d[k]))
        data.append(d)
    return pd.DataFrame(data, columns=cols + (["links"] if links else []))


def _counts_lines(c, summary) -> list:
    lines = [f"operators {c['operators']}: succeeded {c['succeeded']} (reused from an earlier run {c['reused']}), "
             f"failed {c['failed']}, timeout {c['timeout']}, interrupted {c['interrupted']}, not run {c['not_run']}; "
             f"skipped {c['skipped']}" + (f"; search incomplete {c['search_incomplete']} (a probe cut by its budget "
                                          "or a stopped search)"
                                          if c.get("search_incomplete") else "")]
    if c.get("earlier"):
        lines.append(f"{c['earlier']} more operator(s) of this output dir not in this run (OPS=): their earlier "
                     "results are listed too, marked 'earlier run, not in OPS', and counted in no total above")
    lines += [f"failed: {k}: {n}" for k, n in c["failed_why"].items()]
    lines += [f"skipped: {k}: {n}" for k, n in c["skipped_why"].items()]
    lines.append(f"runner {summary['runner']}, {summary['workers']} worker(s) on {devices_label(summary['devices'])} "
                 f"({summary['devices_from']}); wall {summary['wall_s']:.1f} s; sum of operator wall times "
                 f"{summary['sum_op_wall_s']:.1f} s; longest-first makespan on {summary['workers']} worker(s) "
                 f"{summary['ideal_makespan_s']:.1f} s" + (
                     "; INTERRUPTED: " + (summary.get("resume") or "run again to resume")
                     if summary["interrupted"] else ""))
    return lines


def write_outputs(out_dir: str, summary: dict) -> dict:
    """Write batch_summary.csv, batch_summary.md and index.html beside batch_summary.json; returns their paths."""
    rows, c = summary["rows"], summary["counts"]
    paths = {k: os.path.join(out_dir, n) for k, n in (("csv", "batch_summary.csv"), ("md", "batch_summary.md"),
                                                       ("html", "index.html"))}
    write_text_atomic(paths["csv"], _frame(rows, False, out_dir).to_csv(index=False))
    lines = _counts_lines(c, summary)
    md = ["# MFU batch summary", "", *[f"* {ln}" for ln in lines], "",
          _frame(rows, True, out_dir).to_markdown(index=False) if rows else "(no operators)", ""]
    if summary["skipped"]:
        md += ["## Skipped", "", *[f"* {n}: {w}" for n, w in ((s["name"], s["why"]) for s in summary["skipped"])], ""]
    write_text_atomic(paths["md"], "\n".join(md))
    table = _frame(rows, True, out_dir, links=True).to_html(index=False, escape=False, border=0) if rows else ""
    skipped = "".join(f"<li>{html.escape(s['name'])}: {html.escape(s['why'])}</li>" for s in summary["skipped"])
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>MFU batch summary</title><style>"
            "body{font-family:sans-serif} table{border-collapse:collapse} td,th{padding:2px 8px;"
            "border-bottom:1px solid #ddd;text-align:left}</style></head><body><h1>MFU batch summary</h1>"
            + "".join(f"<p>{html.escape(ln)}</p>" for ln in lines) + table
            + (f"<h2>Skipped</h2><ul>{skipped}</ul>" if skipped else "") + "</body></html>\n")
    write_text_atomic(paths["html"], page)
    return paths
