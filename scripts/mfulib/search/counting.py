"""The counting pass on the leaders only: the executed-FLOPs counters where they can change the limit, bounded.

The numerator rule (:mod:`mfulib.search.numerator`) takes min(traced, executed): a hardware count can only lower
a point's figure, never raise it. So a point's figure from the traced FLOPs alone is an **upper bound** of its
figure under the rule, and the counters (Nsight Compute on CUDA, a replay pass of 10 s and more per case on the
H200) are needed only where they can change which point is the limit. With ``--counts-on leaders`` (the default)
stage 2 and the re-timing runs time without counters, and this pass then counts candidates one at a time, in
order of their figure (the re-timed median where re-timed, else stage 2's), each in its own collector run with
the counters on: after each count the candidate's figures are recomputed from min(traced, executed) over the same
kernel times, and the pass stops once the best counted figure is at least the next candidate's upper bound - no
uncounted candidate can then beat it (branch and bound). Where the counters give no executed count (warpgroup MMA
of several shapes on Hopper, a refused counter), the first count already settles it: its figure is exact and it
stays first - and where the compiled kernels stage 2's launches ran already say so (several wgmma shapes in one
kernel: :func:`mfulib.flops.executed.settled_without_counts`), that case is settled without a counting run at all.
``--counts-on all`` counts every stage-2 case in stage 2's own run (the earlier behaviour).

Each row gets ``counted``: True (counted here; its numerator follows the rule), False (not counted: its figure is
the traced upper bound, ``num_src_why`` says so), and the pass returns {order [case ids counted, in order], stopped
(why it stopped), runs [{case, performance_json, error, settled_by}]}.
"""
from __future__ import annotations

import time

from mfulib.core.errors import UserError
from mfulib.search import numerator as _sn
from mfulib.search import retime as _rt


def key_of(row: dict):
    """The figure a row ranks by: its re-timed median when re-timed, else stage 2's ``metric_value`` (None: none)."""
    rt = row.get("retimed")
    if rt and rt.get("median") is not None:
        return rt["median"]
    return row.get("metric_value")


def group_of(rows: list) -> list:
    """The rows that can become the limit: the re-timed ones with a median when any (best_of takes the first row, and
    re-timed rows come first), else every row with a stage-2 figure."""
    timed = [r for r in rows if (r.get("retimed") or {}).get("median") is not None]
    return timed or [r for r in rows if r.get("metric_value") is not None]


def apply_count(row: dict, executed, executed_src, why, fld: str, metric: str) -> None:
    """Set ``row``'s numerator from min(traced, ``executed``) and recompute its figures (stage 2's from its kernel
    time, the re-timed values from each run's kernel time) in place; ``fld`` is the ranking figure
    (:func:`mfulib.search.numerator.common_figure`)."""
    row.update(_sn.numerator(row.get("numerator_traced"), executed, executed_src, why))
    figs = _sn.point_figures(row["numerator"] if metric == "mfu" else None, row.get("bytes_moved"),
                             row.get("kernel_time_ns"), row.get("peak_nom_tflops"), row.get("peak_ach_tflops"),
                             row.get("bandwidth_gbps"))
    row.update(figs)
    if row.get("status") == "ok":
        row["metric_value"] = row.get(fld)
    rt = row.get("retimed")
    if rt:
        kts = rt["kernel_time_ns"]
        values = [(_sn.point_figures(row["numerator"] if metric == "mfu" else None, row.get("bytes_moved"), kt,
                                     row.get("peak_nom_tflops"), row.get("peak_ach_tflops"),
                                     row.get("bandwidth_gbps")).get(fld) if kt else None) for kt in kts]
        row["retimed"] = _rt.summarize(values, kts)
    row["counted"] = True


def count_leaders(rows: list, metric: str, count, log, cost: dict, retime_block: dict | None = None) -> dict:
    """Count the fewest candidates that settle the limit (module docstring). ``rows``: the stage-2 rows, best first
    (after :func:`mfulib.search.retime.retime` when re-timed), their numerator the traced count; ``count(case)``
    runs the counters on one case and returns (executed, executed_src, why_no_executed[, its performance.json path])
    (UserError: that run failed, the row keeps the traced count, with the reason). Re-orders ``rows`` in place
    (the group that can be the limit by its figure, then the rest), updates ``retime_block``'s ``ranked`` and
    ``tie`` when given, adds ``cost["counts"]`` (wall seconds) and returns the pass's block. A row whose
    ``count_settled`` gives a reason (stage 2's :func:`mfulib.flops.executed.settled_without_counts`, from the
    compiled kernels its launches ran) can only count to "no executed count": it is settled in its turn without
    calling ``count`` (its run entry says ``settled_by`` "compiled kernels"), with the outcome a count gives for
    every counter value."""
    fld, _kind = _sn.common_figure(rows, metric)
    group = group_of(rows)
    for r in rows:
        r["counted"] = False
    block = {"order": [], "stopped": None, "runs": []}
    t0 = time.perf_counter()
    try:
        best = None
        while True:
            todo = sorted((r for r in group if not r["counted"] and key_of(r) is not None),
                          key=lambda r: (-key_of(r), r["case"]))
            if not todo:
                block["stopped"] = "every candidate that can be the limit was counted"
                break
            nxt = todo[0]
            if best is not None and key_of(best) >= key_of(nxt):
                block["stopped"] = (f"case {best['case']}'s counted figure {key_of(best):.6g} >= case {nxt['case']}'s "
                                    f"upper bound {key_of(nxt):.6g} (traced FLOPs; a count only lowers it)")
                break
            entry = {"case": nxt["case"], "performance_json": None, "error": None, "settled_by": None}
            block["runs"].append(entry)
            try:
                if nxt.get("count_settled"):
                    entry["settled_by"] = "compiled kernels"
                    executed, src, why = None, None, f"no executed count: {nxt['count_settled']}"
                    log(f"counting case {nxt['case']}: settled without a counting run - {nxt['count_settled']}")
                else:
                    got = count(nxt["case"])
                    executed, src, why = got[:3]
                    entry["performance_json"] = got[3] if len(got) > 3 else None
            except UserError as exc:
                entry["error"] = str(exc)
                log(f"counting case {nxt['case']}: {exc}")
                executed, src, why = None, None, f"the counting run failed: {exc}"
            apply_count(nxt, executed, src, why, fld, metric)
            block["order"].append(nxt["case"])
            if best is None or key_of(nxt) > key_of(best):
                best = nxt
    finally:
        cost["counts"] = cost.get("counts", 0.0) + time.perf_counter() - t0
    for r in rows:
        if not r["counted"] and r.get("numerator") is not None:
            r["num_src_why"] = ("not counted: its traced figure, an upper bound, cannot beat the counted limit; "
                                + (r.get("num_src_why") or ""))
    ranked = sorted(group, key=lambda r: (key_of(r) is None, -(key_of(r) or 0.0), r["case"]))
    rest = [r for r in rows if all(r is not g for g in group)]
    rows[:] = ranked + rest
    if retime_block is not None:
        timed = [r for r in ranked if r.get("retimed")]
        retime_block["ranked"] = [r["case"] for r in timed]
        retime_block["tie"] = _rt.tie_of([(r["case"], r["retimed"]) for r in timed])
    return block
