"""The search's limit block: the best measured stage-2 row of a search, in grid_search.json's ``best`` form
(:mod:`mfulib.schemas.grid_search_json`); :func:`mfulib.search.retime.retimed_limit` then gives it the medians over
the re-timing runs."""
from __future__ import annotations

from mfulib.search import numerator as _sn


def best_of(stage2_rows: list, pool: list, metric: str):
    """The ``best`` block (schema module) of the stage-2 rows (sorted best first), None when none was measured."""
    ok = [r for r in stage2_rows if r["metric_value"] is not None]
    if not ok:
        return None
    r = ok[0]
    p = {x["case"]: x for x in pool}[r["case"]]
    fld, kind = _sn.common_figure(stage2_rows, metric)
    mfu = r.get(fld) if fld in ("mfu_ach", "mfu_nom") else None
    return {"case": r["case"], "source_case": p["source_case"], "factors": p["factors"], "scale": p["scale"],
            "metric": metric, "mfu": mfu, "mfu_kind": kind if metric == "mfu" and mfu is not None else None,
            "mbu": r.get("mbu"), "num_src": r.get("num_src"), "num_src_why": r.get("num_src_why"),
            "numerator_traced": r.get("numerator_traced"), "numerator_executed": r.get("numerator_executed"),
            "numerator": r.get("numerator"), "kernel_time_ns": r.get("kernel_time_ns")}

