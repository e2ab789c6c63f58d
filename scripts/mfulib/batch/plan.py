"""A whole benchmark level in one command: the batch's operators, devices, order and the local worker pool.

``make batch`` (scripts/mfu_batch.py) runs every operator of a source through the whole per-operator pipeline
(``make OP=<op> ... all``, :mod:`mfulib.batch.job`), each isolated in its own child process, work directory
(``<out>/ops/<op>``), log (``<out>/logs/<op>.log``) and job record (``<out>/jobs/<op>.json``).

Operators (:func:`discover_jobs`), one source per batch:

* layout B ``BENCH=<level dir>[:<dir>...] GEN=<generated dir>``: every reference id with an implementation
  (:func:`mfulib.sources.discover.discover_layout_b`); ids without one are skipped with that reason;
* layout A ``ROOT=<dir>``: each sub-directory that is a layout A operator dir (an op root or verify dir,
  :func:`mfulib.sources.discover.discover_layout_a`), named ``op_<Op>_<timestamp>`` by the generation flow (spec
  "布局 A") - per operator the newest (largest timestamp digits, then newest mtime) runs, the older ones are listed
  as skipped; a directory without that pattern is an operator named after the directory;
* layout C ``REF_ROOT=<dir> IMPL_ROOT=<dir>``: every reference with an implementation at the same relative path
  (:func:`mfulib.sources.layoutc.discover_layout_c`);
* bundled ``EXAMPLES=<set>[,<set>...]``: the operators ``make examples`` lists whose name starts with ``<set>/``
  (``zoo``, ``verify``, ``layoutc``, ``npukernelbench/level4``, ...) or ``all``.

``OPS=a,b`` keeps a subset (by name, or its last path component). Devices (:func:`resolve_devices`): ``DEVICES=``,
else ``ASCEND_RT_VISIBLE_DEVICES``, else ``CUDA_VISIBLE_DEVICES``, else the GPUs ``nvidia-smi -L`` lists, else the
NPUs present as ``/dev/davinci<N>`` (the Ascend driver's device nodes), else one CPU worker; one worker per device.

Order (:func:`estimate_costs`): longest first by estimated cost. The estimate is, in this order, the operator's
measured wall time of an earlier run (its ok job record in this output dir, or ``COSTS_FROM=<batch_summary.json>``
of another batch; ``wall_total_s``: the unfinished runs that the ok one resumed are part of its cost); else its total
input bytes over all cases (the case file's tensors, shape x dtype size, summed over lines) times the median
seconds-per-byte of the operators that have both; else unknown. Unknown estimates go first (by input bytes, then
name): an unknown operator may be a long one, and longest-first (Graham's LPT list schedule) loses least by starting
long jobs early. Each free worker takes the next operator in that order.
"""
from __future__ import annotations

import collections
import concurrent.futures
import glob
import os
import queue
import re
import statistics
import threading

from mfulib.backends import NAMES, backend_class
from mfulib.core.cases import describe_case, read_case_file
from mfulib.sources.discover import discover_layout_a, discover_layout_b
from mfulib.core.errors import UserError
from mfulib.sources.examples import list_examples, resolve
from mfulib.sources.layoutc import discover_layout_c
from mfulib.schemas.batch_json import job_record_path, read_job_record, read_summary, safe_name, whole_cost_s

OP_DIR = re.compile(r"^op_(?P<op>.+?)_(?P<ts>\d[\d_\-T:.]*)$")


# ----------------------------------------------------------------------------------------------- operators
def _job(out_dir, name, op, layout, make_vars, cases=None, older=()):
    return {"name": name, "op": op, "layout": layout, "make_vars": make_vars, "cases": cases, "older": list(older),
            "work": os.path.join(out_dir, "ops", name), "log": os.path.join(out_dir, "logs", safe_name(name) + ".log"),
            "record": job_record_path(out_dir, name)}


def discover_jobs(source: dict, out_dir: str):
    """(jobs, skipped [(name, why)], broken [(name, why)]) for ``source`` ({kind: B|A|C|examples, ...}).

    ``broken`` operators could not be paired (their error is recorded as a failure, never run). Raises UserError
    for a missing directory or an unknown example set."""
    kind = source["kind"]
    if kind == "B":
        bench = source["bench"].split(":")
        pairs, missing = discover_layout_b(bench, source["gen"])
        jobs = [_job(out_dir, p["name"], p["name"], "B", {"BENCH": source["bench"], "GEN": source["gen"]},
                     p["cases"]) for p in pairs if "error" not in p]
        broken = [(p["name"], p["error"]) for p in pairs if "error" in p]
        return jobs, [(f"id {i}", f"no implementation of id {i} in GEN={source['gen']}") for i in missing], broken
    if kind == "C":
        pairs, missing = discover_layout_c(source["ref_root"], source["impl_root"])
        mv = {"REF_ROOT": source["ref_root"], "IMPL_ROOT": source["impl_root"]}
        jobs = [_job(out_dir, p["id"], p["id"], "C", mv) for p in pairs if "error" not in p]
        broken = [(p["id"], p["error"]) for p in pairs if "error" in p]
        return jobs, [(rel, f"no implementation of {rel}.py under IMPL_ROOT") for rel in missing], broken
    if kind == "A":
        return _discover_root(source["root"], out_dir)
    if kind == "examples":
        return _discover_examples(source["sets"], out_dir)
    raise UserError(f"unknown batch source {kind!r}")


def _ts_key(ts, path):
    digits = re.sub(r"\D", "", ts or "")
    return (int(digits) if digits else -1, os.path.getmtime(path))


def _discover_root(root, out_dir):
    if not os.path.isdir(root):
        raise UserError(f"ROOT={root}: directory not found - give the directory holding the op_<Op>_<time> dirs")
    groups, skipped = collections.defaultdict(list), []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not os.path.isdir(path) or name.startswith("."):
            continue
        m = OP_DIR.match(name)
        try:
            info = discover_layout_a(path)
        except UserError as exc:
            skipped.append((name, f"not a layout A operator dir: {exc}"))
            continue
        groups[m.group("op") if m else name].append((_ts_key(m.group("ts") if m else None, path), path, info))
    jobs = []
    for op, found in sorted(groups.items()):
        found.sort(key=lambda t: t[0], reverse=True)
        _, newest, info = found[0]
        older = [p for _, p, _ in found[1:]]
        skipped += [(os.path.basename(p), f"older copy of {op}: {os.path.basename(newest)} is measured")
                    for p in older]
        jobs.append(_job(out_dir, op, op, "A", {"V": newest}, info["cases"], older))
    return jobs, skipped, []


def _discover_examples(sets, out_dir):
    names = [n for n, _ in list_examples()]
    wanted = [s.strip().strip("/") for s in sets.split(",") if s.strip()]
    chosen = names if "all" in wanted else [n for n in names if any(n.startswith(s + "/") for s in wanted)]
    if not chosen:
        sets_known = sorted({n.split("/")[0] for n in names} | {n.rsplit("/", 1)[0] for n in names})
        raise UserError(f"EXAMPLES={sets}: no bundled operator in that set - sets: {', '.join(sets_known)} (or all)")
    jobs, skipped = [], []
    for n in chosen:
        try:
            how = resolve(n)
        except UserError as exc:  # npukernelbench without its shared case data: nothing to measure here
            skipped.append((n, f"case data absent: {exc}"))
            continue
        cases = None
        try:
            if how["layout"] == "A":
                cases = discover_layout_a(how["src"])["cases"]
            elif how["layout"] == "B":
                pairs, _ = discover_layout_b(how["bench"].split(":"), how["gen"], ids=[how["id"]])
                cases = pairs[0].get("cases") if pairs else None
        except UserError:
            cases = None  # the pipeline's prepare step reports it
        jobs.append(_job(out_dir, n, n, how["layout"], {}, cases))
    return jobs, skipped, []


def select(jobs, ops: str | None):
    """The jobs named in ``ops`` (comma-separated names or last path components); UserError for an unknown one."""
    if not ops:
        return jobs
    out = []
    for want in [o.strip() for o in ops.split(",") if o.strip()]:
        hit = [j for j in jobs if j["name"] == want or j["name"].split("/")[-1] == want]
        if not hit:
            raise UserError(f"OPS: no operator {want!r} in this batch - operators: "
                            f"{', '.join(j['name'] for j in jobs)}")
        out += [j for j in hit if j not in out]
    return out


# ----------------------------------------------------------------------------------------------- costs
def input_bytes(case_file) -> int | None:
    """Total input bytes of all cases of a case file (tensors: prod(shape) x dtype size); None when unreadable."""
    if not case_file:
        return None
    try:
        return sum(describe_case(c, i).input_bytes for i, c in enumerate(read_case_file(case_file)))
    except (UserError, OSError, ValueError, KeyError, TypeError):
        return None


def history(out_dir: str, costs_from: str | None, jobs) -> dict:
    """{name: measured wall seconds} of earlier ok runs: COSTS_FROM's rows first, then this dir's job records. The
    seconds are the operator's whole cost (:func:`mfulib.schemas.batch_json.whole_cost_s`: ``wall_total_s``, its
    unfinished runs that an ok run resumed included, else ``wall_s``)."""
    out = {}
    if costs_from:
        for row in read_summary(costs_from)["rows"]:
            if row.get("status") == "ok" and whole_cost_s(row):
                out[row["name"]] = whole_cost_s(row)
    for j in jobs:
        try:
            rec = read_job_record(j["record"])
        except UserError:
            rec = None
        if rec and rec.get("status") == "ok" and whole_cost_s(rec):
            out[j["name"]] = whole_cost_s(rec)
    return out


def estimate_costs(jobs, measured: dict) -> list:
    """Set each job's ``input_bytes``, ``est_s`` and ``est_source``; returns the jobs longest first (module doc)."""
    for j in jobs:
        j["input_bytes"] = input_bytes(j["cases"] or _work_case_file(j["work"]))
    rates = [measured[j["name"]] / j["input_bytes"] for j in jobs if j["name"] in measured and j["input_bytes"]]
    rate = statistics.median(rates) if rates else None
    for j in jobs:
        if j["name"] in measured:
            j["est_s"], j["est_source"] = measured[j["name"]], "measured wall time of an earlier run"
        elif rate and j["input_bytes"]:
            j["est_s"], j["est_source"] = j["input_bytes"] * rate, "input bytes x median s/byte of measured ops"
        else:
            j["est_s"], j["est_source"] = None, "unknown (input bytes only)" if j["input_bytes"] else "unknown"
    return sorted(jobs, key=lambda j: (j["est_s"] is not None, -(j["est_s"] or 0), -(j["input_bytes"] or 0),
                                       j["name"]))


def _work_case_file(work):
    found = sorted(glob.glob(os.path.join(work, "*_perf_cases.jsonl")))
    return found[0] if found else None


def lpt_makespan(times, workers: int) -> float:
    """Makespan (s) of the longest-first list schedule of ``times`` (s) on ``workers`` identical workers (Graham
    1969, "Bounds on multiprocessing timing anomalies": LPT is within 4/3 - 1/(3m) of the optimum)."""
    loads = [0.0] * max(1, workers)
    for t in sorted(times, reverse=True):
        i = loads.index(min(loads))
        loads[i] += t
    return max(loads)


# ----------------------------------------------------------------------------------------------- devices
def resolve_devices(devices: str | None, backend: str, env=None):
    """(device ids, where they came from, visibility variables to restrict) - module docstring's order.

    ids are strings as the visibility variable takes them; ``[None]`` is one CPU worker (no restriction). The
    variables and the device discovery are the backends' (:attr:`~mfulib.backends.base.Backend.visible_devices_var`,
    :meth:`~mfulib.backends.base.Backend.discover_devices`; ``auto``: every built-in backend, npu first)."""
    env = os.environ if env is None else env
    candidates = [backend_class(n) for n in (NAMES if backend == "auto" else (backend,))]
    accelerators = [c for c in candidates if c.accelerator]
    known_vars = tuple(v for v in (backend_class(n).visible_devices_var for n in NAMES) if v)
    if devices:
        ids = [d.strip() for d in devices.split(",") if d.strip()]
        if not ids or len(set(ids)) != len(ids):
            raise UserError(f"DEVICES={devices}: give distinct device ids separated by commas, e.g. DEVICES=0,1")
        var = tuple(c.visible_devices_var for c in accelerators if c.visible_devices_var) or known_vars
        return ids, "DEVICES=", var
    if not accelerators:
        return [None], f"BACKEND={backend}: one CPU worker", ()
    for c in accelerators:
        var = c.visible_devices_var
        if var and env.get(var, "").strip():
            return [d.strip() for d in env[var].split(",") if d.strip()], var, (var,)
    for c in accelerators:
        ids, where = c.discover_devices()
        if ids:
            return ids, where, ((c.visible_devices_var,) if c.visible_devices_var else ())
    return [None], "no accelerator found: one CPU worker", ()


# ----------------------------------------------------------------------------------------------- local pool
INTERRUPT_GRACE_S = 1.0  # how long a worker whose operator was interrupted waits for the batch's own Ctrl-C


def run_local(jobs, devices, opts, on_done, run_job):
    """Run ``jobs`` (in order) with one worker per device (a ``concurrent.futures`` thread pool: each job takes a
    free device, so at most one job runs per device); ``on_done(record)`` after each, in this thread. Returns True
    when interrupted (Ctrl-C: the running operators are killed - ``run_job`` polls ``stop`` - and recorded
    ``interrupted``; the others never start)."""
    stop, free = threading.Event(), queue.Queue()
    for d in devices:
        free.put(d)

    def task(job):
        if stop.is_set():
            return None
        dev = free.get()
        try:
            rec = run_job(job, opts, dev, restrict=dev is not None, stop=stop.is_set)
            if (rec or {}).get("status") == "interrupted":  # a Ctrl-C that reached its child first reaches the
                stop.wait(INTERRUPT_GRACE_S)  # batch moments later: the next job must not start before it is seen
            return rec
        except Exception as exc:  # noqa: BLE001 - the runner itself failed: this job is failed, the batch goes on
            from mfulib.batch.job import failed_record
            return failed_record(job, opts, f"the batch could not run it: {type(exc).__name__}: {exc}", dev)
        finally:
            free.put(dev)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(devices), thread_name_prefix="batch-dev")
    futures = [pool.submit(task, job) for job in jobs]
    interrupted, delivered = False, set()

    def deliver(done):
        for f in done:  # each record reaches on_done once, whether before or after a Ctrl-C
            if f not in delivered and not f.cancelled():
                delivered.add(f)
                if f.result() is not None:
                    on_done(f.result())
    try:
        for fut in concurrent.futures.as_completed(futures):
            deliver([fut])
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        pending = [f for f in futures if f not in delivered and not f.cancelled()]
        while pending:
            try:
                done, _ = concurrent.futures.wait(pending, timeout=0.5)
            except KeyboardInterrupt:  # a second Ctrl-C: the running operators are already stopping
                continue
            deliver(done)
            pending = [f for f in pending if f not in done]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return interrupted
