"""The batch from start to summary: operators, order, resume, the runner (local pool or Ray), progress, summary.

:func:`run_batch` is ``scripts/mfu_batch.py``'s body (what ``make batch`` runs). Resume: an operator whose job
record says ``ok`` (an earlier run of this output dir finished it) is not run again - its row is read back, marked
``resumed`` - unless ``force`` (``FORCE=1``: the child make gets ``FORCE=1`` too, so step 1 is redone and every
later step after it, the old work dir kept as a backup by the Makefile's own rule). Failed, timed-out, interrupted
and never-started operators run again; operators ``OPS=`` leaves out keep their earlier rows in the summary
(:func:`earlier_rows`); ``make`` inside each redoes only the steps without a stamp.

Ctrl-C (SIGINT) or SIGTERM: the running operators' process trees are killed and recorded ``interrupted``, nothing
else starts, the summary is written with what finished and the exit status is 130; a re-run resumes - without
FORCE=1 after a FORCE=1 batch (:func:`resume_advice`). Exit status
0 when every operator succeeded, 1 when one failed, timed out or could not be paired (the batch still ran the
others).
"""
from __future__ import annotations

import os
import signal
import time

from mfulib.core.paths import REPO_ROOT
from mfulib.batch.plan import discover_jobs, estimate_costs, history, lpt_makespan, resolve_devices, run_local, select
from mfulib.batch.job import GRACE_S, finished, run_job
from mfulib.batch.summary import counts, operator_row, write_outputs
from mfulib.core.jsonio import ensure_writable_dir
from mfulib.schemas.batch_json import device_label, devices_label, read_job_record, safe_name, write_summary

EXIT_FAILED, EXIT_INTERRUPTED = 1, 130


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_batch(source: dict, out_dir: str, ops=None, force=False, search=False, keep_prof=True, timeout_s=None,
              devices=None, backend="auto", runner="local", make="make", skill_dir=None, costs_from=None,
              make_args=(), progress=True, log=print, grace_s=None) -> tuple:
    """Run the batch; returns (exit status, summary dict). ``source`` as :func:`mfulib.batch.plan.discover_jobs`
    takes it; ``grace_s``: seconds a timed-out or interrupted operator's make gets after its SIGTERM
    (:func:`mfulib.batch.job.stop_tree`; None: :data:`mfulib.batch.job.GRACE_S`). Raises UserError for a bad
    source, OPS name, DEVICES list or output dir (before anything runs)."""
    from tqdm import tqdm
    out_dir = ensure_writable_dir(out_dir, f"BATCH_OUT={out_dir}")
    skill_dir = skill_dir or REPO_ROOT
    jobs, skipped, broken = discover_jobs(source, out_dir)
    names_wanted = {j["name"] for j in select(jobs + [_pseudo(out_dir, n, source) for n, _ in broken], ops)}
    outside = [j for j in jobs if j["name"] not in names_wanted]  # OPS left them out: their earlier rows are kept
    jobs = [j for j in jobs if j["name"] in names_wanted]
    broken = [(n, w) for n, w in broken if n in names_wanted]
    ids, dev_from, vis_vars = resolve_devices(devices, backend)
    ordered = estimate_costs(jobs, history(out_dir, costs_from, jobs))
    reused = {} if force else {j["name"]: r for j in ordered if (r := finished(j))}
    pending = [j for j in ordered if j["name"] not in reused]
    opts = {"make": make, "skill_dir": skill_dir, "backend": backend, "search": search, "force": force,
            "keep_prof": keep_prof, "timeout_s": timeout_s, "visibility_vars": vis_vars, "runner": runner,
            "grace_s": GRACE_S if grace_s is None else grace_s,
            "make_args": list(make_args)}
    log(f"mfu_batch: {len(ordered)} operator(s) ({len(reused)} finished earlier, skipped; FORCE=1 redoes them), "
        f"{len(skipped)} skipped, {len(broken)} not pairable; {len(ids)} worker(s) on {devices_label(ids)} "
        f"({dev_from}); runner "
        f"{runner}; order longest first: {', '.join(j['name'] for j in pending) or '-'}")
    records, t_start = {}, time.time()
    bar = tqdm(total=len(pending), desc="batch", unit="op", disable=not progress or not pending, mininterval=1.0)

    def on_done(rec):
        records[rec["name"]] = rec
        bar.update(1)
        bar.write(f"{rec['name']}: {rec['status']} in {rec.get('wall_s') or 0:.1f} s on "
                  f"{device_label(rec.get('device'))}"
                  + (f" - {rec['reason']}" if rec.get("reason") else ""))

    old = {s: signal.signal(s, h) for s, h in ((signal.SIGINT, signal.default_int_handler),
                                                 (signal.SIGTERM, _raise_interrupt))}
    try:
        try:
            if runner == "ray":
                from mfulib.batch.ray_runner import run_ray
                interrupted = run_ray(pending, len(ids), opts, on_done)
            else:
                interrupted = run_local(pending, ids, opts, on_done, run_job)
        except KeyboardInterrupt:  # arrived before the runner's own handler (e.g. while Ray was starting)
            interrupted = True
        bar.close()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    rows, kept_old = [], []
    for j in ordered:
        if j["name"] in reused:
            rows.append(operator_row(j, reused[j["name"]], resumed=True))
            continue
        rec = records.get(j["name"])
        if rec is None:  # a cancelled Ray task wrote its own; one of an earlier run means this run never got there
            disk = read_job_record(j["record"])
            rec = disk if disk is not None and (disk.get("started_unix") or 0) >= t_start else None
            if rec is None and disk is not None and disk.get("status") == "ok":
                kept_old.append(j["name"])  # not reached: a resume takes its earlier run's result as finished
        rows.append(operator_row(j, rec))
    for name, why in broken:
        row = operator_row(_pseudo(out_dir, name, source), None)
        row.update(status="failed", reason=f"cannot be paired: {why}")
        rows.append(row)
    rows += earlier_rows(outside)
    times = [r["wall_s"] for r in rows if r["status"] == "ok" and r["wall_s"] and r["in_run"]]
    summary = {"source": source, "out_dir": out_dir, "runner": runner, "devices": ids, "devices_from": dev_from,
               "workers": len(ids), "backend": backend, "search": bool(search), "wall_s": time.time() - t_start,
               "interrupted": interrupted, "resume": resume_advice(force, kept_old) if interrupted else None,
               "order": [j["name"] for j in ordered],
               "estimates": {j["name"]: {"est_s": j["est_s"], "source": j["est_source"],
                                         "input_bytes": j["input_bytes"]} for j in ordered},
               "sum_op_wall_s": sum(times), "ideal_makespan_s": lpt_makespan(times, len(ids)),
               "lpt_makespan_s": {str(n): lpt_makespan(times, n) for n in sorted({1, 2, len(ids)})},
               "skipped": [{"name": n, "why": w} for n, w in skipped], "rows": rows}
    summary["counts"] = counts(rows, skipped)
    path = write_summary(out_dir, summary)
    paths = write_outputs(out_dir, summary)
    log(f"mfu_batch: wrote {path}, {paths['csv']}, {paths['md']}, {paths['html']}")
    c = summary["counts"]
    log(f"mfu_batch: {c['succeeded']}/{c['operators']} succeeded, {c['failed']} failed, {c['timeout']} timed out"
        + (f", INTERRUPTED - {summary['resume']}" if interrupted else ""))
    if interrupted:
        return EXIT_INTERRUPTED, summary
    return (EXIT_FAILED if c["failed"] or c["timeout"] else 0), summary


def earlier_rows(jobs) -> list:
    """The summary rows of operators this run left out (``OPS=``) that an earlier run of this output dir recorded
    (a job record other than ``running``): read back as they are, ``in_run`` False, so a subset run's summary keeps
    the whole output dir in view; they count in no total and no exit status (:func:`mfulib.batch.summary.counts`)."""
    rows = []
    for j in jobs:
        rec = read_job_record(j["record"])
        if rec is not None and rec.get("status") != "running":
            rows.append(dict(operator_row(j, rec, resumed=True), in_run=False))
    return rows


def resume_advice(force: bool, kept_old=()) -> str:
    """How to resume an interrupted batch. A re-run skips the operators with an ``ok`` job record and runs the others'
    ``make all``, which redoes only the steps without a stamp - unless FORCE=1, which skips nothing and redoes step 1
    and every step after it: after a FORCE=1 batch the resume is the same command without FORCE=1. ``kept_old``:
    the operators that batch did not reach, whose ``ok`` records are an earlier run's (a resume skips them)."""
    if not force:
        return "run the same command again to resume"
    names = ",".join(kept_old)
    return ("run the same command again WITHOUT FORCE=1 (--force) to resume; with it every operator starts over"
            + (f"; not reached, so still holding an earlier run's result (the resume skips them): {names} - "
               f"OPS={names} FORCE=1 redoes them" if kept_old else ""))


def _pseudo(out_dir, name, source):
    """A job dict for an operator that cannot run (not paired): rows and OPS selection need its name and paths."""
    return {"name": name, "op": name, "layout": source["kind"], "make_vars": {}, "cases": None, "older": [],
            "work": os.path.join(out_dir, "ops", name), "log": os.path.join(out_dir, "logs", safe_name(name) + ".log"),
            "record": os.path.join(out_dir, "jobs", safe_name(name) + ".json")}
