"""Stage 1 of the grid search (:mod:`mfulib.search.grid`): every pool case ranked by wall clock per call.

SKILL.md step 2: the verify gate first (:class:`mfulib.verify.verified_cases.Gate`), then per pool case the prime call
(compilation), ``warmup`` and up to ``repeats`` iterations in the persistent worker (:mod:`mfulib.backends.runner`,
spec ``"profile": false``: no profiler, no msprof), each iteration a run of back-to-back calls with one device
synchronize, sized by one synchronised call before them (spec ``burst_target_ms``, :mod:`mfulib.core.wallclock`:
the probe's gate-4 method, so a reused probe timing and a stage-1 timing rank alike), stopping once at least 2
measured ones sum to :data:`STAGE1_BUDGET_S`; ranked by traced FLOPs (bytes moved for MBU) over the median wall
time per call.
Only a ranking: the figures the search reports come from the collector (stage 2).
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

from mfulib.backends import fp32_dot_is_tf32
from mfulib.core.definitions import actual_tflops, finite_or_none, is_positive, measured_peak_tflops
from mfulib.core.wallclock import BURST_TARGET_MS
from mfulib.core.opdir import OpDir
from mfulib.core.fmt import plural, sig

SCRATCH = "search"  # <work>/search/: the search's scratch files (mfulib.search.grid writes there too)
STAGE1_BUDGET_S = 0.1  # s: stage-1 measured iterations stop once they sum to this (at least 2): ranking only
STAGE2_TIE = 0.05  # fraction: a case ranked within this of stage 1's leader is a tie stage 1 cannot break
STAGE2_HOST = 2  # stage-2 places, beyond --stage2-max, for the best host-bound cases (host_bound_cases)
HOST_BOUND_FACTOR = 2.0  # a call at most this x the lightest call's wall time is paced by the host, not its kernel
HOST_FLOOR_FRAC = 0.25  # the lightest call is host time when its figure is below this fraction of the leader's
HOST_FLOOR_TIE = 0.1  # calls within this fraction of the lightest one's wall time are the floor's evidence too


class WallClockBackend:
    """A backend as stage 1 runs it: the same child side (:func:`mfulib.backends.get_backend` in the worker), but
    started plainly (no msprof wrapper) in a persistent worker; stage 1 ranks by wall clock, without a profiler session
    (SKILL.md step 2)."""

    persistent_worker = True

    def __init__(self, backend):
        self.inner, self.name = backend, backend.name

    def command(self, child_cmd, attempt_dir, opts):
        return list(child_cmd)

    def child_env(self, env):
        return self.inner.child_env(env)


def stage1(opdir: OpDir, pool: list, backend, opts, peaks: dict, metric: str, log, cost: dict,
           probe: dict | None = None):
    """Stage-1 rows (schema module), best first; the verify gate and the wall-clock run of every pool case.

    A pool case the probe already timed (gate 4 of its candidate, or the scale-1 baseline of a source case: the same
    wall clock per call without a profiler, same backend, seed and operator files -
    :func:`mfulib.search.pool.probe_timings`) is ranked by that time (``timing_source`` says so) instead of being
    run again, unless ``opts.stage1_retime``."""
    from tqdm import tqdm

    from mfulib.backends.runner import close_workers, run_child
    from mfulib.verify.verified_cases import Gate
    device = backend.device_string(opts.device_id)
    t0 = time.perf_counter()
    gate = Gate(opdir, backend.name, device, seed=opts.seed, case_timeout_s=opts.case_timeout_s,
                forced=opts.unverified_ok, log=log)
    todo = gate.pending([p["case"] for p in pool])
    if todo:
        gate.verify(todo)
    cost["verify"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    from mfulib.schemas.verify_json import input_digests
    from mfulib.search.pool import probe_timings
    reuse, why_not = ({}, "--stage1-retime") if opts.stage1_retime else \
        probe_timings(probe, backend.name, opts.seed, input_digests(opdir.path))
    if metric == "mbu" and reuse:  # MBU ranks bytes moved incl. outputs, which only a stage-1 run reports
        reuse, why_not = {}, "an MBU ranking needs each case's output bytes"
    if probe and why_not:
        log(f"stage 1: every pool case is timed (probe timings not reused: {why_not})")
    elif reuse:
        n = sum(1 for p in pool if p["case"] in reuse)
        log(f"stage 1: {n} of {len(pool)} pool case(s) ranked by the probe's gate-4 wall clock (the same method, "
            f"timing_source in grid_search.json); {len(pool) - n} timed here")
    wall = WallClockBackend(backend)
    rows = []
    root = tempfile.mkdtemp(prefix=".tmp-stage1-", dir=os.path.join(opdir.path, SCRATCH))
    tty = opts.progress and sys.stderr.isatty()  # a bar on a terminal, one line per case in a log
    bar = tqdm(pool, desc="search stage 1 (wall clock)", unit="case", disable=not tty, file=sys.stderr)
    try:
        for p in bar:
            row = {"case": p["case"], "rank": None, "status": None, "error": None, "wall_iter_ns": None,
                   "wall_median_ns": None, "wall_spread": None, "wall_tflops": None, "wall_gbps": None,
                   "rank_value": None, "output_bytes": None, "wall_s": None, "timing_source": "stage 1",
                   "calls_per_iteration": None}
            rows.append(row)
            admitted, mark = gate.admits(p["case"])
            if not admitted:
                row.update(status="not_verified", error=mark["reason"])
                continue
            if metric == "mfu" and not p["flops_traced"]:
                row.update(status="no_flops", error="the tracer counted no matrix FLOPs for this case (gate 2: FLOPs "
                                                    "> 0) - it cannot have an MFU")
                continue
            if p["case"] in reuse:
                med = reuse[p["case"]]["time_ms"] * 1e6
                row.update(status="ok", wall_median_ns=med, wall_s=0.0, timing_source=reuse[p["case"]]["from"])
                if p["flops_traced"]:
                    row["wall_tflops"] = actual_tflops(p["flops_traced"], med)
                row["wall_gbps"] = p["input_bytes"] / med  # outputs unknown here: inputs only
                continue
            spec = {"op_dir": opdir.path, "case_id": p["case"], "impl": "asc", "seed": opts.seed,
                    "warmup": opts.warmup, "repeats": opts.repeats, "backend": backend.name, "device": device,
                    "markers": False, "profile": False, "flush_cache_mib": 0, "repeat_budget_s": opts.stage1_budget_s,
                    "burst_target_ms": BURST_TARGET_MS}
            t_case = time.perf_counter()
            child = run_child(wall, spec, os.path.join(root, f"case{p['case']}"), opts.case_timeout_s)
            row.update(status=child.status, error=child.error, output_bytes=child.report.get("output_bytes"),
                       wall_s=time.perf_counter() - t_case, calls_per_iteration=child.report.get("calls_per_iteration"))
            per_iter = (child.report.get("iter_wall_ns") or [])[opts.warmup:]
            if child.status != "ok" or not per_iter:
                row["error"] = row["error"] or "the worker reported no iteration wall times"
                row["status"] = row["status"] if row["status"] != "ok" else "error"
                continue
            med = float(statistics.median(per_iter))
            row.update(wall_iter_ns=per_iter, wall_median_ns=med, wall_spread=(max(per_iter) - min(per_iter)) / med)
            if p["flops_traced"]:
                row["wall_tflops"] = actual_tflops(p["flops_traced"], med)
            moved = p["input_bytes"] + (row["output_bytes"] or 0)
            row["wall_gbps"] = moved / med
            bar.set_postfix_str(f"case {p['case']}: {med / 1e3:.1f} us")
            if opts.progress and not tty:
                log(f"stage 1: case {p['case']}: median wall {med / 1e3:.2f} us over {len(per_iter)} iteration(s)")
    finally:
        bar.close()
        close_workers()
        shutil.rmtree(root, ignore_errors=True)
        cost["stage1"] = time.perf_counter() - t0
    by_case = {p["case"]: p for p in pool}
    ach = peaks.get("peak_tflops") or {}
    peaks_known = all(measured_peak_tflops(ach, by_case[r["case"]]["compute_dtype"] or "",
                                           fp32_dot_is_tf32(backend.name, by_case[r["case"]]["compute_dtype"]))[0]
                      for r in rows if r["status"] == "ok")
    for r in rows:
        if r["status"] != "ok":
            continue
        if metric == "mbu":
            r["rank_value"] = r["wall_gbps"]
        elif peaks_known and r["wall_tflops"] is not None:
            dt = by_case[r["case"]]["compute_dtype"]
            r["rank_value"] = r["wall_tflops"] / measured_peak_tflops(ach, dt, fp32_dot_is_tf32(backend.name, dt))[0]
        else:
            r["rank_value"] = r["wall_tflops"]
    rows.sort(key=lambda r: (r["rank_value"] is None, -(r["rank_value"] or 0.0), r["case"]))
    for k, r in enumerate(x for x in rows if x["rank_value"] is not None):
        r["rank"] = k + 1
    return rows


def host_bound_cases(rows: list, factor: float = HOST_BOUND_FACTOR, floor_frac: float = HOST_FLOOR_FRAC) -> tuple:
    """(floor_ns, ranked rows whose wall clock the host paces): the ranked stage-1 ``rows`` (best first) whose median
    wall time per call is at most ``factor`` x the lightest call's (``floor_ns``), when the lightest calls are host
    time - one of the calls within :data:`HOST_FLOOR_TIE` of the lightest has a figure (``rank_value``) below
    ``floor_frac`` x the leader's, so at the leader's rate its kernel would fill at most that fraction of its call.
    (None, []) when no ranked row has a wall time, the leader's figure is not a positive number, or the lightest
    calls are kernel time.

    Why: back to back, a call's wall time is about max(host time per call, kernel time) - the host launches the next
    call while the device runs this one - so near the host's floor the wall clock measures the host and a case's wall
    figure can sit far below its kernel's. On the H100 (real ``npukernelbench/level3/1_BatchMatmul``, the referee pack
    of tree 72c252d4 in ``bench/validation/h100/``) the brute force's best point, [1, 2048, 4096] x [1, 4096, 2048]
    bf16, ran 66.2 us per call against a floor of 37.2 us: ranked 21st at 0.89 of the leader's wall figure, it
    re-timed at 76.9% MFU@ach in the collector against 73.4% for the case the search chose."""
    ranked = [r for r in rows if r.get("rank") is not None and r.get("rank_value") is not None]
    if not ranked or not is_positive(ranked[0]["rank_value"]):
        return None, []
    lead = ranked[0]["rank_value"]
    timed = [r for r in ranked if is_positive(r.get("wall_median_ns")) and finite_or_none(r["rank_value"]) is not None]
    if not timed:
        return None, []
    floor = min(r["wall_median_ns"] for r in timed)
    lightest = [r for r in timed if r["wall_median_ns"] <= (1.0 + HOST_FLOOR_TIE) * floor]
    if not any(r["rank_value"] < floor_frac * lead for r in lightest):
        return None, []
    return floor, [r for r in timed if r["wall_median_ns"] <= factor * floor]


def stage2_cases(rows: list, k: int, tie: float = STAGE2_TIE, max_k: int | None = None,
                 host: int = STAGE2_HOST) -> tuple:
    """(case ids stage 2 measures, why): the top ``k`` ranked stage-1 ``rows`` (best first, as :func:`stage1` returns
    them), then - up to ``max_k`` in all (None: ``2 k``) - every further case whose ``rank_value`` is at least
    (1 - ``tie``) x the leader's, in rank order; then up to ``host`` more: the best-ranked host-bound cases
    (:func:`host_bound_cases`) not chosen yet, whose wall figure may understate their kernel's by any amount.

    Why the tie band: a wall clock per call bounds the kernel time from above only - it adds the host's time, and for
    calls of tens of microseconds the host's launch rate rather than the kernel can set it - so cases a few per cent
    apart are not ordered by it. On the H100 (real ``npukernelbench/level3/1_BatchMatmul``, the referee pack in
    ``bench/validation/h100/``) stage 1's fourth case, 0.6% below its first, was the brute force's best point: 613
    TFLOP/s in the collector against 581 for the case stage 1 ranked first; with the top 3 only, the search missed
    it. ``tie`` 0 gives the top ``k`` alone; ``host`` 0 adds no host-bound case."""
    ranked = [r for r in rows if r.get("rank") is not None and r.get("rank_value") is not None]
    cap = 2 * k if max_k is None else max(k, max_k)
    top = list(dict.fromkeys(r["case"] for r in ranked[:k]))
    if not ranked:
        return top, f"the top {len(top)} of stage 1"
    extra, cut = [], []
    if tie > 0:
        band = (1.0 - tie) * ranked[0]["rank_value"]
        within = list(dict.fromkeys(r["case"] for r in ranked[k:] if r["rank_value"] >= band and r["case"] not in top))
        extra, cut = within[:cap - len(top)], within[cap - len(top):]
    floor_ns, bound = host_bound_cases(ranked) if host > 0 else (None, [])
    added = list(dict.fromkeys(r["case"] for r in bound if r["case"] not in top + extra))[:host]
    cut = [c for c in cut if c not in added]  # measured after all, as host-bound
    if tie <= 0:
        why = f"the top {len(top)} of stage 1"
    elif not extra:
        why = f"the top {len(top)} of stage 1 (no other case within {100 * tie:.3g}% of its leader)"
    else:
        why = (f"the top {len(top)} of stage 1 and {len(extra)} more within {100 * tie:.3g}% of its leader "
               f"(cases {', '.join(map(str, extra))}: a wall clock per call cannot order cases that close; "
               f"at most {cap} in all, --stage2-max" + (
                   f" - it left out {len(cut)} more within the band: case(s) {', '.join(map(str, cut))}"
                   if cut else "") + ")")
    chosen = top + extra
    if not added:
        return chosen, why
    lead = ranked[0]["rank_value"]
    value = {r["case"]: r["rank_value"] for r in bound}
    shares = ", ".join(f"{value[c] / lead:.2f}" for c in added)
    left = list(dict.fromkeys(r["case"] for r in bound if r["case"] not in chosen + added))
    one = len(added) == 1
    return chosen + added, (
        f"{why}, and the {plural(len(added), 'best host-bound case')} ({', '.join(map(str, added))}: at most "
        f"{HOST_BOUND_FACTOR:g} x the lightest call's {sig(floor_ns / 1e3, 3)} us per call, the host's launch rate "
        f"sets {'its' if one else 'their'} wall clock, so {'its wall figure' if one else 'their wall figures'} "
        f"({shares} x the leader's) may understate {'its kernel' if one else 'their kernels'}"
        + (f"; {plural(len(left), 'more host-bound case')} not measured: {', '.join(map(str, left[:8]))}"
           + (", ..." if len(left) > 8 else "") if left else "") + "; --stage2-host)")
