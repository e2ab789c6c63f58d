"""grid_search.json: step 2's (case, scale) search for the limit MFU (scripts/mfu_grid_search.py), its writer and
readers. The collector reads the chosen cases (and each one's origin) through :func:`chosen_cases`.

Provenance (:func:`mfulib.core.jsonio.provenance`) + ``op_dir``, ``cases_file``, ``backend``, ``metric`` (``mfu``: the
operator does matrix work; ``mbu``: it does none, bytes moved rank it), ``probe_json`` (path read, None when
absent), ``rule`` (how the pool was built), ``notes`` [text],
``pool`` [{case, source_case, factors {symbol: factor}, scale (probe.json's scale of the candidate, else the
product of the factors; 1 for an original case),
original (bool), flops_rank (0-based rank of its source case among the originals by FLOPs - by bytes for mbu),
flops_traced (the tracer's matrix FLOPs, None: not traced), flops_py (flops.py's value or None), input_bytes,
compute_dtype, why (why it is in the pool)}],
``excluded`` [{case, reason, kind}] (original cases this backend does not run - ``kind`` :data:`NOT_RUN`, the
collector lists them as never measured: :func:`not_run_cases` -, probe variants left out of the pool, pool cases
verify refused),
``stage1`` [{case, rank (1 = best), status (ok | not_verified | rejected | oom | error | timeout | crashed | no_flops),
error, wall_iter_ns [wall time per call of each measured iteration, ns], calls_per_iteration (back-to-back calls in
each iteration, sized by one synchronised call before them, :mod:`mfulib.core.wallclock`; None for a reused probe
timing), wall_median_ns, wall_spread ((max - min) / median), wall_tflops
(traced FLOPs / median wall time), wall_gbps (bytes moved / median wall time), rank_value (wall_tflops over the
dtype's peak, or wall_tflops / wall_gbps when no peak is known), output_bytes, wall_s (wall seconds of this case's
stage-1 run in the worker: build, prime call, iterations; 0 for a reused probe timing), timing_source ("stage 1",
or the probe.json timing it reused: gate 4 of a passed candidate / a source's scale-1 baseline)}],
``stage2`` [{case, status, error, kernel_time_ns, repeat_spread, numerator_traced, numerator_executed, numerator,
num_src ("tracer" | "hardware:<counter>" | None), num_src_why, pmu_source, actual_tflops, mfu_nom, mfu_ach,
peak_nom_tflops, peak_ach_tflops, bytes_moved, achieved_gbps, mbu, bandwidth_gbps, metric_value, wall_s (seconds
between the collector's progress line of the previous case - the first: the collector's start - and this case's:
its timing child plus its PMU pass; None when the collector printed no line for it), retimed (the re-timed leaders
only, :func:`mfulib.search.retime.summarize`: {runs, values [the figure per run, stage 2's first], kernel_time_ns
[per run, None where a run gave none], median, min, max, spread ((max - min) / median)}), count_settled (only
when stage 2 timed without counters: why no count can give the case's executed FLOPs, read from the compiled
kernels its launches ran - :func:`mfulib.flops.executed.settled_without_counts` -, or None)}] - best first: the re-timed
ones by median, then the rest as stage 2 ranked them,
``stage2_performance_json`` (the collector's report of stage 2),
``retime`` {top_k, runs (re-timing runs asked for), figure (the field the values are: mfu_ach | mfu_nom |
actual_tflops | mbu | achieved_gbps), runs_done [{run, order [case ids in the order that run measured them],
performance_json, error}], ranked [case ids by median], tie [leader case, every case tied with it] | None (a tie: the
two medians differ by less than the sum of the two ranges)} (None: re-timing off, ``--retime-top 0`` / ``--retime-runs 0``, or nothing
measured; in a stopped search, the runs finished before the stop, the stopped one's ``error`` "interrupted";
:mod:`mfulib.search.retime`),
``best`` {case, source_case, factors, scale, metric, mfu, mfu_kind (ach | nom | None), mbu, num_src, num_src_why,
numerator_traced, numerator_executed, numerator, kernel_time_ns, retimed} (None when stage 2 measured nothing) - the
limit: with re-timing, the candidate of the highest median, ``mfu`` / ``mbu`` and ``kernel_time_ns`` its medians over
the runs and ``retimed`` its stage-2 row's ``retimed`` plus ``figure`` and ``tie`` (the retime block's); absent
without re-timing,
``counts`` {order [case ids counted, in order], stopped (why the pass stopped), runs [{case, performance_json (the
counting run's report, ``<work>/search/counts<case>/performance.json``; None where no run was made or it wrote none),
error, settled_by ("compiled kernels": settled by the stage-2 row's ``count_settled`` without a counting run; None:
counted)}]} (None: no counting pass - not cuda, ``--counts-on all``, counters off; :mod:`mfulib.search.counting`; each
stage-2 row then carries ``counted``: True, or False where its numerator stayed the traced upper bound),
``cost_s`` {flops, verify, stage1, stage2, retime, counts, total} (wall seconds of each part), ``chosen_cases`` [case ids the
collector measures after the search, best first], ``probe_cut`` (the probe.json ``interrupted`` text when its budget
cut the probe - :func:`mfulib.schemas.probe_json.budget_cut`: the search is then incomplete -, else None),
``complete`` (both stages ran to the end), ``interrupted`` (None, or why the run stopped early: Ctrl-C or SIGTERM and
the stages it had finished; absent in files written before it existed).
"""
from __future__ import annotations

import json
import os

from mfulib.core.definitions import is_number
from mfulib.core.errors import UserError
from mfulib.core.fmt import pct
from mfulib.core.jsonio import write_json_atomic
from mfulib.schemas.common import read_work_json, wrong_type

SCHEMA = 1
TOOL = "mfu_grid_search"
FILE_NAME = "grid_search.json"
NOT_RUN = "not_run"  # an ``excluded`` entry's kind: an original case this backend does not run (bf16, input cap)
REQUIRED = ("pool", "stage1", "stage2", "best", "cost_s", "chosen_cases")
TOP_KEYS = ("op_dir", "cases_file", "backend", "metric", "probe_json", "rule", "notes", "pool", "excluded", "stage1",
            "stage2", "stage2_performance_json", "retime", "counts", "best", "cost_s", "chosen_cases", "probe_cut",
            "complete", "interrupted")
COST_KEYS = ("flops", "verify", "stage1", "stage2", "retime", "counts", "total")  # cost_s: wall seconds of each part
BEST_KEYS = ("case", "source_case", "factors", "scale", "metric", "mfu", "mfu_kind", "mbu", "num_src", "num_src_why",
             "numerator_traced", "numerator_executed", "numerator", "kernel_time_ns", "retimed")


def write_grid_search_json(path: str, doc: dict) -> None:
    """Write ``doc`` (provenance + the body of :func:`mfulib.search.grid.run_search`) atomically to ``path``."""
    write_json_atomic(path, doc)


def check_output_path(path: str) -> None:
    """Refuse ``path`` as ``mfu_grid_search.py -o`` when writing it would destroy another file: a folder, or an
    existing file that is not an mfu_grid_search.py result (another step's report - probe.json, whose appended cases
    and case-file backup cannot be rebuilt, performance.json, ... -, a case file, a source). A missing path or an
    earlier grid search result is fine. Raises UserError naming the file and the fix."""
    if os.path.isdir(path):
        raise UserError(f"{path}: is a folder - -o takes the result file's path, e.g. -o /tmp/grid_alt.json")
    if not os.path.exists(path):
        return
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError, UnicodeDecodeError):
        doc = None
    if not isinstance(doc, dict) or doc.get("tool") != TOOL:
        raise UserError(f"{path}: exists and is not an mfu_grid_search.py result - -o never writes over another "
                        "file (a step's report, a case file); pass a new path, e.g. -o /tmp/grid_alt.json")


def read_grid_search_json(path: str) -> dict:
    """Read and check a grid_search.json: an object of this tool with the :data:`REQUIRED` keys, ``pool`` a list
    of {case: int, ...}, ``chosen_cases`` a list of case ids found in the pool. Raises UserError naming the file, the
    field and the fix."""
    fix = "re-run the search (make search, or scripts/mfu_grid_search.py --dir <work dir>)"
    doc = read_work_json(path, f"run the search first: {fix}", fix)
    if not isinstance(doc, dict) or doc.get("tool") != TOOL:
        raise UserError(f"{path}: not an mfu_grid_search.py result (no tool={TOOL}) - pass the file it wrote")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise UserError(f"{path}: lacks {missing} - {fix}")
    for key in ("pool", "stage1", "stage2", "chosen_cases"):
        if not isinstance(doc[key], list):
            raise wrong_type(path, key, doc[key], "a list", fix)
    for i, p in enumerate(doc["pool"]):
        if not isinstance(p, dict) or not _is_id(p.get("case")):
            raise wrong_type(path, f"pool[{i}]", p, "an object {case: int, source_case, factors, ...}", fix)
    pool_ids = {p["case"] for p in doc["pool"]}
    for i, c in enumerate(doc["chosen_cases"]):
        if not _is_id(c):
            raise wrong_type(path, f"chosen_cases[{i}]", c, "a case id (integer >= 0)", fix)
        if c not in pool_ids:
            raise UserError(f"{path}: chosen case {c} is not in the pool {sorted(pool_ids)} - {fix}")
    if not isinstance(doc["cost_s"], dict) or not all(v is None or is_number(v) for v in doc["cost_s"].values()):
        raise wrong_type(path, "cost_s", doc["cost_s"], "an object {stage: seconds}", fix)
    return doc


def _is_id(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def chosen_cases(path: str) -> tuple:
    """(case ids, {case id: origin}) the collector measures after a search: ``chosen_cases`` of the grid_search.json
    at ``path`` (best first) and each one's ``search_origin`` {source_case, factors, scale, grid_search_json,
    probe_json} for performance.json. Raises UserError (via :func:`read_grid_search_json`) for a bad file or an empty choice."""
    doc = read_grid_search_json(path)
    if not doc["chosen_cases"] and doc.get("interrupted"):
        raise UserError(f"{path}: the search was stopped before it chose ({doc['interrupted']}) - run it again "
                        "(make search), or collect without --search-json")
    if not doc["chosen_cases"]:
        raise UserError(f"{path}: the search chose no case (stage 2 measured nothing) - see its stage1/stage2 "
                        "errors, fix them and re-run the search, or collect without --search-json")
    by_id = {p["case"]: p for p in doc["pool"]}
    origins = {c: {"source_case": by_id[c].get("source_case"), "factors": dict(by_id[c].get("factors") or {}),
                   "scale": by_id[c].get("scale"), "grid_search_json": path, "probe_json": doc.get("probe_json")}
               for c in doc["chosen_cases"]}
    return list(doc["chosen_cases"]), origins


def not_run_cases(path: str) -> list:
    """[{case, reason}] of the original cases the search at ``path`` could not run on its backend (``excluded``
    entries of kind :data:`NOT_RUN`; files from before the kind: the reason's "not run on this backend" prefix) -
    what a collection of its chosen cases lists as never measured. [] for a file without them."""
    doc = read_grid_search_json(path)
    return [{"case": e.get("case"), "reason": e.get("reason")} for e in doc.get("excluded") or []
            if isinstance(e, dict) and (e.get("kind") == NOT_RUN
                                        or str(e.get("reason") or "").startswith("not run on this backend"))]


FIGURE_LABELS = (("mfu_ach", "MFU@ach"), ("mfu_nom", "MFU@nom"), ("mbu", "MBU"))


def figure_text(field: str, v: float) -> str:
    """A figure ``v`` of the stage-2 field ``field`` with its name and unit ("MFU@ach 4.57%", "312.4 TFLOP/s")."""
    label = dict(FIGURE_LABELS).get(field)
    if label:
        return f"{label} {pct(v, 2)}"
    return f"{v:.4g} {'TFLOP/s' if field == 'actual_tflops' else 'GB/s'}"


def stage2_figure(row: dict) -> str:
    """A stage-2 row's ranking value (``metric_value``: the field :func:`mfulib.search.numerator.common_figure`
    chose) with its name and unit."""
    v = row["metric_value"]
    field = next((f for f, _ in FIGURE_LABELS if row.get(f) == v),
                 "actual_tflops" if row.get("actual_tflops") == v else "gbps")
    return figure_text(field, v)


def best_text(doc: dict):
    """The limit of grid_search.json ``doc`` in words - "case N MFU x% (median of R runs, spread s%[; tie with case
    M])" - or None when it has no best point."""
    best = doc.get("best") if isinstance(doc.get("best"), dict) else {}
    if best.get("case") is None:
        return None
    fig = best.get("mfu") if best.get("mfu") is not None else best.get("mbu")
    text = f"case {best.get('case')}" + (f" {best.get('metric', '').upper()} {pct(fig, 2)}" if fig is not None else
                                         " (no peak known: no utilisation)")
    rt = best.get("retimed") or {}
    if rt.get("runs"):
        text += f" (median of {rt['runs']} runs, spread {rt['spread'] or 0.0:.1%}" + \
            (f"; tie with case {', '.join(map(str, rt['tie'][1:]))})" if rt.get("tie") else ")")
    return text


def best_so_far(doc: dict) -> str:
    """What a stopped search had found: its best point (:func:`best_text`); else, when re-timing runs had finished,
    the stage-2 row with the highest median over them ("case N MFU@ach x% (median of R runs; the re-timing was
    stopped)"); else its best stage-2 row ("case N MFU@ach x% (stage 2, not re-timed)"); else "none"."""
    text = best_text(doc)
    if text:
        return text
    rows = [r for r in doc.get("stage2") or [] if isinstance(r, dict)]
    retimed = [r for r in rows if isinstance(r.get("retimed"), dict) and r["retimed"].get("median") is not None
               and (r["retimed"].get("runs") or 0) > 1]
    if retimed:
        top = max(retimed, key=lambda r: r["retimed"]["median"])
        field = (doc.get("retime") or {}).get("figure") or top["retimed"].get("figure") or "mfu_ach"
        return (f"case {top['case']} {figure_text(field, top['retimed']['median'])} (median of "
                f"{top['retimed']['runs']} runs; the re-timing was stopped)")
    measured = [r for r in rows if r.get("metric_value") is not None]
    top = max(measured, key=lambda r: r["metric_value"], default=None)
    return f"case {top['case']} {stage2_figure(top)} (stage 2, not re-timed)" if top else "none"
