"""Re-timing the search's leaders across collector runs: the limit as a median over runs, its spread, the tie rule.

Stage 2 times each case in one collector process, so its figure is one process's measurement; the spread between
processes (clocks, placement, the device's state) is larger than the spread of the repeats inside one (a GQA limit of
64.0% was re-timed at 60.6% in another process). So the top ``k`` stage-2 rows are measured again in ``R`` fresh
collector processes, **interleaved**: run ``r`` (1..R) measures them in stage 2's ranking (best first) rotated by ``r``
(:func:`run_order`), so that no case always runs first or last and a drift over time (warming, throttling) spreads
over all of them instead of favouring one. Stage 2's own measurement is run 0. Only the kernel time is measured again
(the collector's PMU pass is off, ``--pmu none``): each run's figure is the stage-2 row's figure
(:func:`mfulib.search.numerator.common_figure`) recomputed from that run's kernel time with stage 2's numerator,
bytes and peaks (:func:`mfulib.search.numerator.point_figures`).

Per re-timed candidate (:func:`summarize`): ``values`` [figure per run, run 0 first; runs that gave no kernel time
left out], ``kernel_time_ns`` [per run, None where that run gave none], ``runs`` (len(values)), ``median``, ``min``,
``max``, ``spread`` ((max - min) / median, the convention of ``repeat_spread`` and ``wall_spread``).
The limit is the candidate with the highest median. **Tie rule** (:func:`is_tie`): two candidates whose medians differ
by less than their combined spread - the sum of their ranges (max - min), in the figure's units - (or equal medians)
are a tie: the runs cannot tell them apart. Every re-timed candidate tied with the leader is listed (:func:`tie_of`;
the highest median stays the limit).
"""
from __future__ import annotations

import statistics
import time

from mfulib.core.errors import UserError
from mfulib.search import numerator as _sn


def run_order(cases: list, r: int) -> list:
    """The order run ``r`` measures ``cases`` (stage 2's ranking, best first) in: rotated left by ``r`` (``r`` = 0
    or a multiple of len(cases): the ranking itself). E.g. run_order([7, 9, 4], 1) == [9, 4, 7]."""
    if not cases:
        return []
    r %= len(cases)
    return list(cases[r:]) + list(cases[:r])


def summarize(values: list, kernel_time_ns: list) -> dict:
    """{runs, values, kernel_time_ns, median, min, max, spread} of one candidate's per-run ``values`` (figures,
    None for a run without a kernel time: left out of ``values``) and per-run ``kernel_time_ns``. ``median`` (and
    ``min``, ``max``, ``spread``) None when no run gave a value; ``spread`` = (max - min) / median."""
    got = [v for v in values if v is not None]
    out = {"runs": len(got), "values": got, "kernel_time_ns": list(kernel_time_ns), "median": None, "min": None,
           "max": None, "spread": None}
    if got:
        med = float(statistics.median(got))
        out.update(median=med, min=min(got), max=max(got),
                   spread=(max(got) - min(got)) / med if med > 0 else None)
    return out


def is_tie(a: dict, b: dict) -> bool:
    """Whether the summaries ``a`` and ``b`` (:func:`summarize`) are a tie: their medians differ by less than the sum
    of their ranges (max - min), or not at all (equal medians: the runs cannot order them). False when either has no
    median."""
    if a.get("median") is None or b.get("median") is None:
        return False
    gap, combined = abs(a["median"] - b["median"]), (a["max"] - a["min"]) + (b["max"] - b["min"])
    return gap < combined or gap == 0


def tie_of(ranked: list) -> list | None:
    """The tie at the top of ``ranked`` [(case, summary)], highest median first: [leader case, then every other
    case whose summary is a tie with the leader's (:func:`is_tie`), in ``ranked``'s order] when there is one, else
    None. Every candidate is compared with the leader, not only the runner-up: a third case with a wide range can tie
    with the leader while the second, narrow, does not."""
    if len(ranked) < 2:
        return None
    lead = ranked[0][1]
    tied = [case for case, summary in ranked[1:] if is_tie(lead, summary)]
    return [ranked[0][0]] + tied if tied else None


def retime(rows: list, metric: str, top_k: int, runs: int, collect, log, cost: dict, on_stop=None):
    """Re-time the top ``top_k`` measured stage-2 ``rows`` (best first, :func:`mfulib.search.grid.stage2`) in
    ``runs`` collector runs (module docstring). ``collect(ids, r)`` runs the collector on case ids ``ids`` (that
    order) as run ``r`` and returns its performance.json path (UserError: that run is recorded as failed and the
    others still count). Sets ``row["retimed"]`` (:func:`summarize`) on each re-timed row, reorders ``rows`` in
    place (re-timed ones by median, then the rest as stage 2 ranked them) and returns the ``retime`` block
    {top_k, runs, figure, runs_done [{run, order, performance_json, error}], ranked [case ids by median], tie
    [case, case] | None}, or None when disabled (``top_k`` or ``runs`` 0) or nothing was measured. ``cost["retime"]``
    gets the wall seconds. Stopped (KeyboardInterrupt) after at least one finished run: the same is done with the
    runs finished so far (the stopped one's ``error`` "interrupted"), handed to ``on_stop(block)``, and the stop goes
    on."""
    from mfulib.schemas import performance_json as _perf
    ok = [r for r in rows if r.get("metric_value") is not None]
    top = ok[:top_k]
    if not top or runs < 1:
        return None
    fld, _kind = _sn.common_figure(rows, metric)
    kts = {r["case"]: [r.get("kernel_time_ns")] for r in top}
    done = []
    t0 = time.perf_counter()
    try:
        for r in range(1, runs + 1):
            order = run_order([x["case"] for x in top], r)
            entry = {"run": r, "order": order, "performance_json": None, "error": None}
            done.append(entry)
            try:
                entry["performance_json"] = collect(order, r)
                rep = _perf.load_report(entry["performance_json"])
            except UserError as exc:
                entry["error"] = str(exc)
                log(f"re-timing run {r}/{runs}: {exc}")
                for c in order:
                    kts[c].append(None)
                continue
            by = {e["case"]: e for e in rep["per_case"]}
            for c in order:
                e = by.get(c) or {}
                kts[c].append(e.get("kernel_time_ns") if not e.get("skipped") else None)
    except KeyboardInterrupt:
        finished = [e for e in done if e["performance_json"] and not e["error"]]
        if done and done[-1] not in finished and not done[-1]["error"]:
            done[-1]["error"] = "interrupted"
        if on_stop is not None and finished:
            on_stop(_finish(rows, top, kts, metric, fld, runs, done))
        raise
    finally:
        cost["retime"] = time.perf_counter() - t0
    return _finish(rows, top, kts, metric, fld, runs, done)


def _finish(rows: list, top: list, kts: dict, metric: str, fld: str, runs: int, done: list) -> dict:
    """:func:`retime`'s end: each re-timed row's ``retimed`` from its kernel times per run (``kts``: stage 2's first;
    runs not finished have none), ``rows`` reordered, the ``retime`` block."""
    for row in top:
        values = [(_sn.point_figures(row.get("numerator") if metric == "mfu" else None, row.get("bytes_moved"), kt,
                                     row.get("peak_nom_tflops"), row.get("peak_ach_tflops"),
                                     row.get("bandwidth_gbps")).get(fld) if kt else None)
                  for kt in kts[row["case"]]]
        row["retimed"] = summarize(values, kts[row["case"]])
    ranked = sorted(top, key=lambda x: (x["retimed"]["median"] is None, -(x["retimed"]["median"] or 0.0), x["case"]))
    rest = [x for x in rows if all(x is not t for t in top)]
    rows[:] = ranked + rest
    pairs = [(x["case"], x["retimed"]) for x in ranked]
    return {"top_k": len(top), "runs": runs, "figure": fld, "runs_done": done, "ranked": [c for c, _ in pairs],
            "tie": tie_of(pairs)}


def retimed_limit(best: dict, rows: list, block: dict) -> dict:
    """``best`` (:func:`mfulib.search.limit.best_of` of the re-ordered rows) with the re-timed limit: its figure
    (``mfu`` or ``mbu``, whichever it carries) and ``kernel_time_ns`` become the medians over the runs, and
    ``retimed`` = the leader's :func:`summarize` block plus ``figure`` and ``tie`` (the block's). A figure in
    TFLOP/s or GB/s (no peak known) leaves ``mfu`` / ``mbu`` None; ``retimed`` then carries the medians."""
    row = next(r for r in rows if r["case"] == best["case"])
    rt = row.get("retimed")
    if not rt or rt["median"] is None:
        return best
    out = dict(best, retimed=dict(rt, figure=block["figure"], tie=block["tie"]))
    key = {"mfu_ach": "mfu", "mfu_nom": "mfu", "mbu": "mbu"}.get(block["figure"])  # else the figure is TF/s or GB/s
    if key and out.get(key) is not None:
        out[key] = rt["median"]
    kts = [t for t in rt["kernel_time_ns"] if t]
    out["kernel_time_ns"] = float(statistics.median(kts)) if kts else best.get("kernel_time_ns")
    return out
