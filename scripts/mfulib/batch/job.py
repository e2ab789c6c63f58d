"""One batch job: the whole pipeline of one operator (``make OP=<op> ... all``) as an isolated child process.

:func:`run_job` is what both runners call (the local pool in a thread per device, Ray in a task): it starts
``make -C <skill dir> OP=<op> WORK=<batch out>/ops/<op> BACKEND=.. DEVICE_ID=.. [SEARCH=1] FORCE=[1] all`` in a
new session (its own process group), output to ``<batch out>/logs/<op>.log`` (the logs of the runs before, if any,
kept in ``logs/previous/``, the last :data:`PREVIOUS_LOGS`: :func:`keep_previous_log`), and waits. The outcome is
written to the job record (:mod:`mfulib.schemas.batch_json`) before it returns:

* ``ok`` - make exited 0 (every step's stamp was written, docs/ARCHITECTURE.md#work-directory);
* ``failed`` - any other exit status; ``failed_steps`` / ``reason`` come from the Makefile's
  ``make: step <name> FAILED`` line and the last error line before it in the log;
* ``timeout`` - still running after ``timeout_s``; ``interrupted`` - stopped by Ctrl-C / a cancelled task.
  ``failed_steps`` then names every step that was running (:func:`stopped_steps`: make runs steps in parallel).
  Both stop the operator in two stages (:func:`stop_tree`): first SIGTERM to make alone, which GNU make passes
  once to each running recipe and then waits for it - a step under ``scripts/device_lock.py`` takes it as its
  Ctrl-C (:mod:`mfulib.pipeline.step_child`) and writes its report with ``interrupted`` (a stopped search keeps
  its best point so far, the probe its finished ladders) - for at most ``grace_s`` seconds; then the whole process
  tree is killed: the make process group and every descendant seen before or after the SIGTERM, including step
  children that run in sessions of their own (the collector's case runners, :mod:`mfulib.backends.runner`),
  found through ``/proc`` (Linux), stopped with SIGSTOP first so none can fork away, then SIGKILLed.

Device visibility: given a device id ``d`` and ``restrict=True`` (the local pool), the child gets
``CUDA_VISIBLE_DEVICES=d`` / ``ASCEND_RT_VISIBLE_DEVICES=d`` (the variables in ``visibility_vars``) and
``DEVICE_ID=0``, so inside the child the device is always index 0 (with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` unless
set, so that id N is the GPU ``nvidia-smi`` numbers N); Ray sets these variables itself for a task that
holds a GPU/NPU resource, so there ``restrict=False``. ``MAKEFLAGS`` & co. and ``FORCE`` of an enclosing ``make batch``
are removed so the child make sees only its own variables. With a ``report`` target in the Makefile (``make report`` ->
``$(WORK)/report.html``) it runs after ``all`` succeeded; its failure is recorded in ``reason`` without failing the
operator. ``keep_prof=False`` removes ``<work>/prof/`` after success (a failed operator keeps its profiles).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
import shutil
import signal
import subprocess
import time

from mfulib.core.errors import UserError
from mfulib.schemas.batch_json import carried_s, device_label, read_job_record, write_job_record

#: ``FORCE`` too: GNU make exports its command-line variables into its recipes' environment, so ``make batch FORCE=1``
#: hands ``FORCE=1`` to this process, and a child make takes an environment variable its command line leaves unset
#: (every child's command line sets ``FORCE`` itself anyway: :func:`make_command`)
MAKE_ENV_DROP = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR", "MAKEFILES",
                 "FORCE")
STEP_FAILED = re.compile(r"make: step (\S+) FAILED \(exit status (\d+)\)")
ERROR_LINE = re.compile(r"^(error|Error|\S*Error|FAILED|Traceback|make: \*\*\*)")
POLL_S = 0.2
#: seconds a stopped operator's make gets, after its SIGTERM, to let the running step record what it finished
#: (``mfu_batch.py --stop-grace-s``); a step that takes longer is killed with the rest of the tree
GRACE_S = 20.0
#: at most this grace when the batch itself is stopped (Ctrl-C, a cancelled Ray task): the user is waiting, and Ray
#: force-kills a cancelled task after ``mfulib.batch.ray_runner.CANCEL_GRACE_S`` (15 s)
STOP_GRACE_S = 8.0


def _now():
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def child_env(device, restrict: bool, visibility_vars) -> dict:
    """The child's environment: ours without the enclosing make's variables, visibility restricted to ``device``."""
    env = {k: v for k, v in os.environ.items() if k not in MAKE_ENV_DROP}
    if restrict and device is not None:
        for var in visibility_vars:
            env[var] = str(device)
        if "CUDA_VISIBLE_DEVICES" in visibility_vars:  # id N = nvidia-smi's GPU N (CUDA's default is fastest first)
            env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env


def make_command(job: dict, opts: dict, device_index: int, device=None) -> list:
    """The ``make`` argv of ``job`` (dict from :func:`mfulib.batch.plan.discover_jobs`) under ``opts``; ``device``: the
    physical device id, None on the CPU. The child sees its device as index 0, so without ``LOCK_DEVICE`` every
    worker of a batch - and every make on the host - would take device 0's lock (the Makefile's ``DEVICE_LOCK``)
    and queue behind each other; by the physical id a worker shares its lock exactly with the makes that use the
    same device."""
    cmd = [opts["make"], "-C", opts["skill_dir"], f"OP={job['op']}", f"WORK={job['work']}",
           f"BACKEND={opts['backend']}", f"DEVICE_ID={device_index}"]
    if device is not None:
        cmd.append(f"LOCK_DEVICE={device}")
    cmd += [f"{k}={v}" for k, v in job["make_vars"].items()]
    if opts.get("search"):
        cmd.append("SEARCH=1")
    cmd += list(opts.get("make_args") or [])
    # FORCE always, and last (the last assignment on make's command line wins, over a --make-arg FORCE=.. too): the
    # batch's --force alone decides it, never a FORCE=1 inherited from the environment (make batch FORCE=1 exports it)
    return cmd + ["FORCE=1" if opts.get("force") else "FORCE=", "all"]


def report_command(job: dict, opts: dict) -> list:
    """The ``make ... report`` argv run after the operator's ``make all`` succeeded: the same variables with
    ``FORCE=`` (empty) - FORCE=1 applied once, in ``all``; here it would redo step 1 and every step after it."""
    return make_command(job, dict(opts, force=False), 0)[:-1] + ["report"]


#: earlier logs kept per operator in ``logs/previous/`` (the oldest beyond them is removed)
PREVIOUS_LOGS = 5
_STAMP_FMT = "%Y%m%dT%H%M%SZ"


def keep_previous_log(log_path: str, keep: int = PREVIOUS_LOGS) -> str | None:
    """Move an operator's log of the run before into ``<logs>/previous/<name>.<UTC time of its last write>.log``
    (``_2``, ``_3``... for a second run ending in the same second), so the names sort oldest first, and keep the
    ``keep`` newest of that operator there (a ``previous/<name>.log`` kept by an older version joins them under its
    own time). Returns the path it moved the log to, or None when there was none."""
    folder = os.path.join(os.path.dirname(log_path), "previous")
    stem = os.path.basename(log_path)[:-len(".log")] if log_path.endswith(".log") else os.path.basename(log_path)

    def move(src):
        stamp = _dt.datetime.fromtimestamp(os.path.getmtime(src), _dt.timezone.utc).strftime(_STAMP_FMT)
        dst, n = os.path.join(folder, f"{stem}.{stamp}.log"), 1
        while os.path.exists(dst):
            n += 1
            dst = os.path.join(folder, f"{stem}.{stamp}_{n}.log")
        os.replace(src, dst)
        return dst
    if not os.path.isfile(log_path):
        return None
    os.makedirs(folder, exist_ok=True)
    legacy = os.path.join(folder, os.path.basename(log_path))
    if os.path.isfile(legacy):
        move(legacy)
    moved = move(log_path)
    own = re.compile(re.escape(stem) + r"\.(\d{8}T\d{6}Z)(?:_(\d+))?\.log$")
    kept = sorted((m.group(1), int(m.group(2) or 1), name) for name in os.listdir(folder) if (m := own.match(name)))
    for *_, name in kept[:max(len(kept) - keep, 0)]:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(folder, name))
    return moved


def _stat(pid: int):
    """The fields of /proc/<pid>/stat from field 3 (state) on - after the command name, which may hold spaces and
    parentheses - or None when the process is gone (Linux; None elsewhere). proc(5): [0] state, [1] ppid, [19]
    starttime (clock ticks since boot)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _proc_children() -> dict:
    """{ppid: [pid]} of every process (Linux /proc; {} elsewhere)."""
    out = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if name.isdigit() and (st := _stat(int(name))) is not None:
            out.setdefault(int(st[1]), []).append(int(name))
    return out


def _descendants(pid: int) -> list:
    children, out, todo = _proc_children(), [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def _start(pid: int):
    """The start time of ``pid`` (clock ticks since boot), or None when it is gone."""
    st = _stat(pid)
    return int(st[19]) if st is not None and len(st) > 19 else None


def _identities(pids) -> dict:
    """{pid: start time} of the processes ``pids`` that exist now: who they are, so that a pid the kernel gives to
    another process once they exited is never taken for them."""
    return {pid: t for pid in pids if (t := _start(pid)) is not None}


def _still(known: dict) -> list:
    """The pids of ``known`` ({pid: start time}) still the same processes (same start time), and their descendants
    now."""
    same = [p for p, t in known.items() if _start(p) == t]
    return same + [d for p in same for d in _descendants(p)]


def kill_tree(proc: subprocess.Popen, known=None) -> None:
    """Stop, then SIGKILL ``proc``'s process group and all its descendants (whatever their session), and the
    processes ``known`` ({pid: start time}: descendants seen earlier - once their parent is gone they are no longer
    found under ``proc``) that are still the same processes, with their descendants; reaps it."""
    seen = set()
    for _ in range(2):  # a second pass catches what forked while the first was stopping
        for pid in [proc.pid] + _descendants(proc.pid) + _still(known or {}):
            if pid not in seen:
                seen.add(pid)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
    groups = set()
    for pid in seen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            groups.add(os.getpgid(pid))
    for g in groups | {proc.pid}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(g, signal.SIGKILL)
    for pid in seen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


def stop_tree(proc: subprocess.Popen, grace_s: float = GRACE_S, clock=time.monotonic) -> bool:
    """Stop an operator's make ``proc`` (the leader of its own process group) the way that lets its step record what
    it finished: SIGTERM to make alone - GNU make passes it once to each running recipe; a step under
    ``scripts/device_lock.py`` takes it as its Ctrl-C (also when the recipe's shell dies of it first: the lock
    wrapper's parent-death signal), so the step writes its report marked ``interrupted`` -, then wait up to
    ``grace_s`` seconds of ``clock()`` until make **and every process of its tree** has exited (make does not wait
    for a step whose shell it saw die: killing the tree once make is gone cut a search off before it wrote
    grid_search.json), then :func:`kill_tree` on whatever is left, descendants seen before the SIGTERM included -
    each known by its pid and start time, so a pid reused by another process meanwhile is left alone. Returns
    whether all exited within the grace. ``grace_s`` <= 0: no SIGTERM, the tree is killed at once. A
    KeyboardInterrupt during the wait still kills the tree before it propagates."""
    known = _identities(_descendants(proc.pid))
    graceful = False
    try:
        if grace_s and grace_s > 0 and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, signal.SIGTERM)
            t_end = clock() + grace_s
            while clock() < t_end:
                try:
                    proc.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    continue
                # every process of the tree gone (a zombie waiting to be reaped counts as gone)
                if not any((_stat(p) or ["Z"])[0] not in ("Z", "X") for p in _still(known)):
                    graceful = True
                    break
                time.sleep(POLL_S)
    finally:
        kill_tree(proc, known)
    return graceful


#: the lock wrapper's line when a stop reaches a step running its command (mfulib.pipeline.step_child)
STEP_STOPPED = re.compile(r"^step (\S+) interrupted \(SIG\w+\): stopping it")
#: GNU make's line for each step recipe it was running when it was stopped ("make: *** [Makefile:242:
#: <work>/.state/verify.ok] Terminated"), also a step still waiting for the device lock
RECIPE_STOPPED = re.compile(r"\*\*\* \[(?:[^\]]*?:\d+: )?\S*?/\.state/([a-z_]+)\.ok\] (?:Terminated|Interrupt|Killed|Error \d+)")
BATCH_NOTE = "# mfu_batch: "  # the batch's own lines in a job's log (its header, the stop it sends)


def stopped_steps(log_path: str) -> list:
    """Every step that was running when a stop came, in the order the job's log names them after the batch's
    last own line (the stop it announced): the lock wrapper's "step <name> interrupted (SIG..): stopping it"
    lines and make's "*** [.../.state/<name>.ok] Terminated" lines (a step waiting for the device lock has only
    the latter). Several where make ran steps in parallel (``ALL_JOBS``); [] when none was running."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()[-400:]
    except OSError:
        return []
    start = max((i for i, ln in enumerate(lines) if ln.startswith(BATCH_NOTE)), default=-1) + 1
    steps = [m.group(1) for ln in lines[start:]
             if (m := STEP_STOPPED.match(ln.strip()) or RECIPE_STOPPED.search(ln))]
    return list(dict.fromkeys(steps))


def _stopped_how(graceful: bool, grace_s, steps) -> str:
    if not steps:
        where = "the log names no step that was running"
    elif len(steps) == 1:
        where = f"step {steps[0]} was running and got the stop (its report says what it finished: make status)"
    else:
        where = (f"steps {', '.join(steps)} were running and got the stop (their reports say what they finished: "
                 "make status)")
    if not grace_s or grace_s <= 0:
        return "the whole process tree was killed at once (--stop-grace-s 0)"
    if graceful:
        return f"make got SIGTERM and it and its steps exited within {grace_s:g} s; {where}"
    return (f"make got SIGTERM but it or a step still ran after {grace_s:g} s (--stop-grace-s), so the whole process "
            f"tree was killed; {where}")


def failure_reason(log_path: str, rc) -> tuple:
    """(failed step or None, one-line reason) read from the end of a job's log."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()[-400:]
    except OSError:
        return None, f"exit status {rc} (no log)"
    step, where = None, len(lines)
    for i in range(len(lines) - 1, -1, -1):
        m = STEP_FAILED.search(lines[i])
        if m:
            step, where = m.group(1), i
            break
    detail = next((ln.strip() for ln in reversed(lines[:where]) if ERROR_LINE.match(ln.strip())), None)
    if detail is None:
        detail = next((ln.strip() for ln in reversed(lines[:where]) if ln.strip()), "")
    head = f"step {step} failed (exit status {rc})" if step else f"make exited {rc}"
    return step, f"{head}: {detail[:300]}" if detail else head


def _has_report_target(skill_dir: str) -> bool:
    try:
        with open(os.path.join(skill_dir, "Makefile"), encoding="utf-8") as f:
            return any(re.match(r"^report\s*:", ln) for ln in f)
    except OSError:
        return False


def wait_outcome(proc, timeout_s, stop, clock=time.monotonic) -> str:
    """How waiting for ``proc`` (a ``subprocess.Popen``: its ``wait(timeout=)`` is polled every ``POLL_S`` s) ended:
    'done' | 'timeout' (``timeout_s`` seconds of ``clock()`` passed; None or 0: no limit) | 'stopped' (``stop()``
    became true first). ``clock``: seconds, monotonic (tests pass a fake one). KeyboardInterrupt passes through."""
    t_end = None if not timeout_s else clock() + timeout_s
    while True:
        try:
            proc.wait(timeout=POLL_S)
            return "done"
        except subprocess.TimeoutExpired:
            pass
        if stop is not None and stop():
            return "stopped"
        if t_end is not None and clock() > t_end:
            return "timeout"


def run_job(job: dict, opts: dict, device=None, restrict: bool = True, stop=None) -> dict:
    """Run one operator's pipeline; returns (and writes to ``job['record']``) its job record.

    ``job``: {name, op, layout, work, log, record, make_vars}; ``opts``: {make, skill_dir, backend, search, force,
    keep_prof, timeout_s, grace_s (:func:`stop_tree`; default :data:`GRACE_S`), visibility_vars, runner,
    make_args}; ``device``: the device id (None: CPU, no
    restriction); ``stop``: a callable polled every 0.2 s, true once the batch is being interrupted. Never raises
    for the operator's own failure; a KeyboardInterrupt (a cancelled Ray task) kills the tree, records
    ``interrupted`` and is re-raised."""
    for d in (job["work"], os.path.dirname(job["log"]), os.path.dirname(job["record"])):
        os.makedirs(d, exist_ok=True)
    dev_index = 0
    env = child_env(device, restrict, opts.get("visibility_vars", ()))
    env["DEVICE_ID"] = str(dev_index)
    cmd = make_command(job, opts, dev_index, device if restrict else None)
    shown_env = {k: env.get(k) for k in ("DEVICE_ID", "CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")}
    rec = {"name": job["name"], "op": job["op"], "layout": job["layout"], "status": "running", "rc": None,
           "reason": None, "failed_step": None, "failed_steps": [], "wall_s": None,
           "wall_earlier_s": earlier_wall_s(job, opts),
           "wall_total_s": None, "device": device, "device_env": shown_env,
           "runner": opts.get("runner", "local"), "started_at": _now(), "ended_at": None,
           "started_unix": time.time(), "ended_unix": None, "work": job["work"], "log": job["log"],
           "command": cmd, "report_html": None, "pruned_prof": []}
    write_job_record(job["record"], rec)
    keep_previous_log(job["log"])  # the log of the run before (a failure being retried) stays as evidence
    t0 = time.perf_counter()
    with open(job["log"], "w", encoding="utf-8") as log:
        log.write(f"{BATCH_NOTE}{job['name']} on {device_label(device)} ({shown_env}) at {rec['started_at']}\n"
                  f"# {' '.join(cmd)}\n")
        log.flush()
        try:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
        except OSError as exc:
            _finish(rec, t0, "failed", None, f"cannot start {cmd[0]}: {exc}", job)
            return rec
        grace_s, how = opts.get("grace_s", GRACE_S), None
        try:
            outcome = wait_outcome(proc, opts.get("timeout_s"), stop)
        except BaseException:
            why = f"interrupted (Ctrl-C / cancelled): {_rerun(opts)}"
            _finish(rec, t0, "interrupted", None, why, job)  # first: a Ray task may be force-killed while it waits
            grace_s = min(grace_s, STOP_GRACE_S)
            graceful = stop_tree(proc, grace_s)
            log.flush()
            _set_failed_steps(rec, stopped_steps(job["log"]))
            _finish(rec, t0, "interrupted", None, f"{why}; {_stopped_how(graceful, grace_s, rec['failed_steps'])}",
                    job)
            raise
        if outcome != "done":
            if outcome == "stopped":
                grace_s = min(grace_s, STOP_GRACE_S)
            log.write(f"{BATCH_NOTE}{outcome} - " + (f"SIGTERM to make, {grace_s:g} s for its step to record what "
                                                     "it finished\n" if grace_s and grace_s > 0 else
                                                     "killing the process tree at once (--stop-grace-s 0)\n"))
            log.flush()
            graceful = stop_tree(proc, grace_s)
    if outcome != "done":
        _set_failed_steps(rec, stopped_steps(job["log"]))
        how = _stopped_how(graceful, grace_s, rec["failed_steps"])
    if outcome == "timeout":
        _finish(rec, t0, "timeout", proc.returncode,
                f"timed out after {opts['timeout_s']:g} s (OP_TIMEOUT_S): {how}", job)
    elif outcome == "stopped" or proc.returncode == -signal.SIGINT or (proc.returncode != 0 and stop and stop()):
        # a Ctrl-C that reached the child between fork and its setsid (start_new_session) ends it with SIGINT
        # before the batch sees its own interrupt: that is the batch's interruption, not the operator's failure
        _finish(rec, t0, "interrupted", None, f"interrupted (Ctrl-C): {_rerun(opts)}"
                + (f"; {how}" if how else ""), job)
    elif proc.returncode != 0:
        step, why = failure_reason(job["log"], proc.returncode)
        _set_failed_steps(rec, [step] if step else [])
        _finish(rec, t0, "failed", proc.returncode, why, job)
    else:
        rec["rc"] = 0
        _after_success(rec, job, opts, env, stop)
        _finish(rec, t0, "ok", 0, rec["reason"], job)
    return rec


def _after_success(rec, job, opts, env, stop):
    """The optional report target, then the profile pruning (KEEP_PROF=0)."""
    html = os.path.join(job["work"], "report.html")
    if _has_report_target(opts["skill_dir"]):
        cmd = report_command(job, opts)
        with open(job["log"], "a", encoding="utf-8") as log:
            log.write(f"# {' '.join(cmd)}\n")
            log.flush()
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
            outcome = wait_outcome(proc, opts.get("timeout_s"), stop)
            if outcome != "done":
                stop_tree(proc, opts.get("grace_s", GRACE_S))
        if outcome != "done" or proc.returncode != 0:
            rec["reason"] = f"make report did not finish ({outcome}, exit status {proc.returncode}): see the log"
    rec["report_html"] = html if os.path.isfile(html) else None
    if not opts.get("keep_prof", True):
        prof = os.path.join(job["work"], "prof")
        if os.path.isdir(prof):
            shutil.rmtree(prof, ignore_errors=True)
            rec["pruned_prof"] = [prof]


def _rerun(opts: dict) -> str:
    """The resume advice of an interrupted operator (FORCE=1 again would start it over: driver.resume_advice)."""
    return "run the batch again" + (" without FORCE=1" if opts.get("force") else "") + " to resume"


def _set_failed_steps(rec: dict, steps: list) -> None:
    """``failed_steps`` (every step named) and ``failed_step`` (the same names as text, one name for one step: the
    field older readers know) of a job record (:mod:`mfulib.schemas.batch_json`)."""
    rec.update(failed_steps=list(steps), failed_step=", ".join(steps) or None)


def _finish(rec, t0, status, rc, reason, job):
    wall_s = round(time.perf_counter() - t0, 3)
    rec.update(status=status, rc=rc, reason=reason, wall_s=wall_s,
               wall_total_s=round(wall_s + (rec.get("wall_earlier_s") or 0.0), 3), ended_at=_now(),
               ended_unix=time.time())
    write_job_record(job["record"], rec)


def earlier_wall_s(job: dict, opts: dict) -> float:
    """Seconds the operator's earlier, unfinished runs took, which this run continues: make resumes from the steps'
    stamps, so the operator's whole cost is the sum of its runs (:func:`mfulib.schemas.batch_json.carried_s` of its
    job record). 0 when there is no record, the record is ok or unreadable (a run from scratch), or
    ``opts["force"]`` (FORCE=1 redoes every step)."""
    if opts.get("force"):
        return 0.0
    try:
        return carried_s(read_job_record(job["record"]))
    except UserError:
        return 0.0


def finished(job: dict) -> dict | None:
    """The job record of ``job`` when an earlier run finished it ok (it is then skipped unless FORCE=1)."""
    rec = read_job_record(job["record"])
    return rec if rec is not None and rec.get("status") == "ok" else None


def failed_record(job: dict, opts: dict, reason: str, device=None) -> dict:
    """Write and return a ``failed`` record for a job that could not report itself (its runner failed); it keeps the
    seconds of the runs before it (``wall_earlier_s`` = ``wall_total_s``: this run's own time is unknown)."""
    carried = earlier_wall_s(job, opts)
    rec = {"name": job["name"], "op": job["op"], "layout": job["layout"], "status": "failed", "rc": None,
           "reason": reason, "failed_step": None, "failed_steps": [], "wall_s": None, "wall_earlier_s": carried,
           "wall_total_s": carried,
           "device": device, "device_env": {},
           "runner": opts.get("runner", "local"), "started_at": None, "ended_at": _now(), "started_unix": None,
           "ended_unix": time.time(), "work": job["work"], "log": job["log"], "command": None, "report_html": None,
           "pruned_prof": []}
    os.makedirs(os.path.dirname(job["record"]), exist_ok=True)
    write_job_record(job["record"], rec)
    return rec
