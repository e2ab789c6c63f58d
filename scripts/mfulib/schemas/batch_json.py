"""The batch's files: one job record per operator (``jobs/<name>.json``) and the summary (``batch_summary.json``).

Both live in the batch output directory (``make batch``'s ``BATCH_OUT``), never in an operator's work directory.

**Job record** (written by :func:`mfulib.batch.job.run_job`, atomically: first with status ``running``, then with
the outcome): provenance + ``name``, ``layout``, ``status`` (one of :data:`JOB_STATUSES`), ``rc`` (the pipeline's
exit status; None when it never ran to an end), ``reason`` (why it failed: the step that failed and its last error
line, the timeout, the interrupt; None when ok), ``failed_steps`` (the step that failed, [that one]; for a
timeout or an interrupt every step that was running when the stop came - make runs steps in parallel - in the
order the log names them; [] when none), ``failed_step`` (the same names as one text, ``", "``-joined: one name
for one step, None for none; the field of records written before ``failed_steps``, which :func:`read_job_record`
turns into a one-name ``failed_steps``), ``wall_s`` (seconds, the
``make all`` wall time of this run), ``wall_earlier_s`` (seconds of the earlier unfinished runs this one resumed -
failed, timed out, interrupted, or left running by a batch killed hard - 0 after an ok one or with FORCE=1:
:func:`carried_s`), ``wall_total_s`` (``wall_s`` + ``wall_earlier_s``: the operator's whole cost, what a later batch
orders by, :func:`whole_cost_s`; a record the batch wrote for a runner failure has ``wall_s`` null and carries
``wall_earlier_s`` alone); every seconds field is a finite number >= 0 or null,
``device`` (the device id the job ran on, as the visibility variable takes it; None on CPU), ``device_env``
(the variables the child got: ``DEVICE_ID`` and ``CUDA_VISIBLE_DEVICES`` / ``ASCEND_RT_VISIBLE_DEVICES``),
``runner`` (local|ray), ``started_at`` / ``ended_at`` (ISO times, UTC), ``started_unix`` / ``ended_unix``
(seconds since the epoch, for overlap checks), ``work``, ``log``, ``command``, ``report_html``
(path or None), ``pruned_prof`` (profile dirs removed by ``KEEP_PROF=0``).

**Summary** (:func:`write_summary`): provenance + ``source`` {layout, what was given}, ``out_dir``, ``runner``,
``devices``, ``workers``, ``wall_s``, ``interrupted``, ``resume`` (how to resume an interrupted batch, None when it
was not: :func:`mfulib.batch.driver.resume_advice`), ``counts`` {operators, succeeded, reused, failed, timeout,
interrupted, not_run, skipped, failed_why {reason: n}, skipped_why {reason: n}, search_incomplete (rows whose
search is incomplete: the budget cut the probe, or a stop ended the probe or the search), earlier (rows of
operators this run left out, below)}, ``sum_op_wall_s``,
``ideal_makespan_s`` (longest-first list schedule of the measured per-operator times on ``workers`` workers,
Graham's LPT rule), ``rows`` (one per operator, keys :data:`ROW_KEYS`; ``in_run`` False for an operator a run
with ``OPS=`` left out whose job record an earlier run of this output dir wrote - its earlier result, read back,
counted in no total: :func:`mfulib.batch.driver.earlier_rows`; ``search``: None without a search,
"complete" (+ "; limit: <its best point>" + "; tie: case a / case b"), or "search incomplete: ..." when the
probe's --budget-s cut it or a stop ended the probe or the search -
:func:`mfulib.batch.summary.search_state`) and ``skipped`` [{name, why}].
"""
from __future__ import annotations

import os

from mfulib.core.definitions import finite_or_none, is_positive
from mfulib.core.errors import UserError
from mfulib.core.jsonio import provenance, write_json_atomic
from mfulib.schemas.common import read_work_json, wrong_type

SCHEMA = 1
TOOL = "mfu_batch"
JOB_TOOL = "mfu_batch_job"
SUMMARY_NAME = "batch_summary.json"
# running: started, no outcome yet (a batch killed hard leaves it; the next run redoes the operator)
JOB_STATUSES = ("running", "ok", "failed", "timeout", "interrupted")
# one summary row per operator (CSV / markdown / HTML columns, in this order)
ROW_KEYS = ("name", "layout", "status", "reason", "case", "scale", "factors", "search", "dtype", "mfu_nom", "mfu_ach",
            "mbu", "headline", "dragging_part", "bound", "numerator", "errors", "wall_s", "wall_total_s", "device",
            "resumed", "in_run", "older", "work", "log", "report_html", "decompose_json")


def device_label(device) -> str:
    """A job's ``device`` as text: ``"device 3"``, or ``"the CPU"`` for None (a CPU worker, no restriction)."""
    return "the CPU" if device is None else f"device {device}"


def devices_label(devices) -> str:
    """A batch's worker devices as text: ``"devices 0, 1"``, ``"device 0"``, or ``"the CPU"`` (``[None]``)."""
    ids = [d for d in devices or [] if d is not None]
    if not ids:
        return "the CPU"
    return ("device " if len(ids) == 1 else "devices ") + ", ".join(map(str, ids))


def job_record_path(out_dir: str, name: str) -> str:
    """``<out_dir>/jobs/<name with / as __>.json``."""
    return os.path.join(out_dir, "jobs", safe_name(name) + ".json")


def safe_name(name: str) -> str:
    """An operator name as one file-name component (layout C ids hold ``/``)."""
    return name.replace(os.sep, "__").replace("/", "__")


def write_job_record(path: str, record: dict) -> None:
    """Write a job record (provenance added) atomically; raises UserError for a status outside JOB_STATUSES."""
    if record.get("status") not in JOB_STATUSES:
        raise UserError(f"{path}: job status {record.get('status')!r} is not one of {JOB_STATUSES}")
    write_json_atomic(path, {**provenance(JOB_TOOL, SCHEMA), **record})


def read_job_record(path: str):
    """The job record at ``path``, or None when absent. Raises UserError for a file that is not a job record."""
    if not os.path.exists(path):
        return None
    fix = "delete it (the operator is then run again)"
    doc = read_work_json(path, "", fix)
    if not isinstance(doc, dict) or doc.get("tool") != JOB_TOOL:
        raise UserError(f"{path}: not an mfu_batch job record (tool={JOB_TOOL}) - {fix}")
    if doc.get("status") not in JOB_STATUSES:
        raise wrong_type(path, "status", doc.get("status"), f"one of {JOB_STATUSES}", fix)
    for key in ("wall_s", "wall_earlier_s", "wall_total_s"):
        if doc.get(key) is not None and not _seconds_ok(doc[key]):
            raise wrong_type(path, key, doc[key], "seconds (a finite number >= 0) or null", fix)
    steps = doc.get("failed_steps")
    if steps is not None and not (isinstance(steps, list) and all(isinstance(x, str) for x in steps)):
        raise wrong_type(path, "failed_steps", steps, "a list of step names", fix)
    if doc.get("failed_step") is not None and not isinstance(doc["failed_step"], str):
        raise wrong_type(path, "failed_step", doc["failed_step"], "a step name or null", fix)
    if steps is None:  # a record from before failed_steps: its one failed_step
        doc["failed_steps"] = [doc["failed_step"]] if doc.get("failed_step") else []
    return doc


def _seconds_ok(x) -> bool:
    v = finite_or_none(x)
    return v is not None and v >= 0


def whole_cost_s(rec: dict):
    """The operator's whole cost in seconds from a job record or summary row: ``wall_total_s`` (its unfinished runs
    that this one resumed included), never less than ``wall_s``; ``wall_s`` alone for a file from before
    ``wall_total_s``; None when neither is a finite number > 0 (a hand-edited or foreign file is not trusted)."""
    vals = [float(rec[k]) for k in ("wall_total_s", "wall_s") if is_positive(rec.get(k))]
    return max(vals) if vals else None


def carried_s(rec: dict | None) -> float:
    """Seconds a run that resumes the operator of job record ``rec`` carries from the runs before it (0 for none):
    its ``wall_total_s`` (else ``wall_s``) when ``rec`` is an unfinished run (failed, timeout, interrupted), its
    ``wall_earlier_s`` when it was left ``running`` by a batch killed hard (that run's own time is unknown), 0 after
    an ok run (a fresh run follows only with FORCE=1)."""
    if not rec or rec.get("status") == "ok":
        return 0.0
    if rec.get("status") == "running":
        v = rec.get("wall_earlier_s")
        return float(v) if _seconds_ok(v) else 0.0
    return whole_cost_s(rec) or 0.0


def write_summary(out_dir: str, summary: dict) -> str:
    """Write ``<out_dir>/batch_summary.json`` (provenance added) atomically; returns its path."""
    path = os.path.join(out_dir, SUMMARY_NAME)
    write_json_atomic(path, {**provenance(TOOL, SCHEMA), **summary})
    return path


def read_summary(path: str) -> dict:
    """Read a batch_summary.json (e.g. ``COSTS_FROM=``); UserError naming the file when it is not one."""
    doc = read_work_json(path, "run make batch first (it writes batch_summary.json into BATCH_OUT)",
                         "run make batch again")
    if not isinstance(doc, dict) or doc.get("tool") != TOOL or not isinstance(doc.get("rows"), list):
        raise UserError(f"{path}: not an mfu_batch summary (tool={TOOL} with rows) - pass the batch_summary.json "
                        "make batch wrote")
    return doc
