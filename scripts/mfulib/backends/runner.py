"""One case in its own child process: a crash, hang (timeout) or out-of-memory stays in that case.

Parent side, :func:`run_child`: writes ``spec.json`` into a fresh attempt directory, starts
``[<backend wrapper, e.g. msprof ...>] python3 runner.py --spec spec.json`` in a new process group, kills the whole
group after ``timeout_s``, and returns a :class:`ChildResult` whose ``status`` is the child's own (``ok``,
``rejected``, ``oom``, ``error``: :func:`mfulib.core.failures.classify`, shared with verify_op.py) or ``timeout`` /
``crashed`` (no report: a signal or an abort; SIGKILL is usually the host's out-of-memory killer).

Child side, :func:`child_main` (this file run as a script): builds the case (:meth:`mfulib.core.opdir.OpDir.build_case`
with the compatibility layer of :mod:`mfulib.run.compat` installed first), then::

    prime call (compilation, autotuning; never measured)     range "mfu::prime"
    profiler session starts (cpu: before the prime call)
    repeat warmup + repeats times:
        [cache flush kernel, sync]                           outside the iteration range
        range "mfu::iter::<i>": [marker kernel], forward, sync
    [final marker kernel]
    profiler session ends -> trace file (cpu/cuda; msprof writes its own PROF dir)

and writes ``report.json`` atomically: status, error, device identity, compatibility report (core counts handed to
the operator), output bytes, trace path, wall times of each phase and ``iter_wall_ns`` (host wall clock of each of
the warmup + repeats iterations, ns per call, the device synchronised at its end: the shape search's profiler-free
timing, spec ``"profile": false``).

Spec keys: ``op_dir, case_id, impl (asc|ref), seed, warmup, repeats, backend, device, markers, profile,
flush_cache_mib, report_path, trace_path`` and the optional ``repeat_budget_s`` (absent/None: all ``repeats``):
the measured iterations stop early once at least 2 of them (``repeats`` if fewer) together took this many seconds
(the shape search's stage 1: ranking needs a few iterations, not a precise median), and the optional
``burst_target_ms`` (profiler-free runs only; absent/None: one call per iteration): one synchronised call after
the prime call (``sizing_call_ns``, in no iteration) sizes the iterations, then each iteration makes
``calls_per_iteration`` back-to-back calls with one synchronize, to last about this long (:mod:`mfulib.core.wallclock`,
the probe's gate-4 method), and ``iter_wall_ns`` holds its wall time per call.

Persistent workers (cpu and cuda, :attr:`Backend.persistent_worker`): instead of one process per case,
:func:`run_child` hands the spec to a :class:`mfulib.run.worker.Worker` kept per (backend, device) - this file run with
``--serve`` - which runs case after case; the attempt directory receives the same ``spec.json``, ``child.log``,
``report.json`` and trace as before. The isolation stays per case: a crash or a timeout is recorded for that case
exactly as above and the next case gets a fresh worker; a case that ends ``oom`` or ``error`` (a device fault may be
sticky) retires its worker after the report. Within one worker the inputs of a case are built once and reused by the
next spec of the same (work dir, case, seed, device) - ``--impl both`` and retries - as the iterations of one spec
always reuse them. On npu every case keeps its own child under msprof (one profile per case,
docs/ARCHITECTURE.md#backends). :func:`close_workers` ends the workers (the collector calls it when done; an exiting
parent closes the request pipes, which ends them too). ``MFU_WORKER=0`` restores one fresh child per case.
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field

_T_START = time.perf_counter()
RUNNER_PATH = os.path.abspath(__file__)


@dataclass
class ChildResult:
    """What one child run left: ``status``, its ``report`` (possibly {}), exit code, log tail, wall time."""
    status: str
    report: dict = field(default_factory=dict)
    returncode: int | None = None
    log_tail: str = ""
    wall_s: float = 0.0
    attempt_dir: str = ""
    command: list = field(default_factory=list)

    @property
    def error(self):
        if self.status == "ok":
            return None
        msg = self.report.get("error")
        if msg:
            return msg
        return f"{self.status}: {self.log_tail.strip().splitlines()[-1] if self.log_tail.strip() else 'no output'}"


def _tail(path, n=4000):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def _write_spec(spec: dict, attempt_dir: str):
    from mfulib.core.jsonio import write_json_atomic
    os.makedirs(attempt_dir, exist_ok=True)
    spec = dict(spec, report_path=os.path.join(attempt_dir, "report.json"),
                trace_path=os.path.join(attempt_dir, "trace.json"))
    spec_path = os.path.join(attempt_dir, "spec.json")
    write_json_atomic(spec_path, spec)
    return spec, spec_path


def _read_report(path) -> dict:
    from mfulib.core.jsonio import read_json
    if os.path.exists(path):
        try:
            return read_json(path)
        except ValueError:
            return {}
    return {}


def _timeout_error(timeout_s) -> str:
    return (f"timeout: no result after {timeout_s:g} s (hang or far too slow) - raise --case-timeout-s or pick "
            "smaller cases")


def _no_report_error(rc, tail) -> str:
    if rc is not None and rc < 0:
        sig = signal.Signals(-rc).name if -rc in signal.Signals.__members__.values() else str(-rc)
        why = " (the host's out-of-memory killer, most likely)" if -rc == signal.SIGKILL else ""
        return f"crashed: killed by signal {sig}{why}"
    last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
    return f"crashed: exit status {rc} without a report ({last})"


def run_child(backend, spec: dict, attempt_dir: str, timeout_s: float) -> ChildResult:
    """Run one case isolated from the others (see the module docstring): in the persistent worker of its
    backend and device where the backend has one, else in a fresh child process; never raises for a failing case."""
    from mfulib.run import worker
    if getattr(backend, "persistent_worker", False) and worker.enabled():
        return _POOL.run(backend, spec, attempt_dir, timeout_s)
    spec, spec_path = _write_spec(spec, attempt_dir)
    cmd = backend.command([sys.executable, RUNNER_PATH, "--spec", spec_path], attempt_dir, spec)
    env = worker.child_env(backend.child_env(os.environ))
    log_path = os.path.join(attempt_dir, "child.log")
    t0 = time.perf_counter()
    timed_out = False
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=attempt_dir,
                                    start_new_session=True)
        except OSError as exc:
            return ChildResult("crashed", {"error": f"cannot start {cmd[0]}: {exc}"}, None, "", 0.0, attempt_dir, cmd)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    wall = time.perf_counter() - t0
    tail = _tail(log_path)
    report = _read_report(spec["report_path"])
    if timed_out:
        report = dict(report, status="timeout", error=_timeout_error(timeout_s))
    elif not report:
        report = {"status": "crashed", "error": _no_report_error(rc, tail)}
    return ChildResult(report.get("status", "crashed"), report, rc, tail, wall, attempt_dir, cmd)


RETIRE_STATUSES = ("oom", "error")  # the worker may hold fragmented memory or a sticky device fault: replace it


class WorkerPool:
    """Persistent workers (:class:`mfulib.run.worker.Worker`) by (backend, device): parent side of ``--serve``."""

    def __init__(self):
        self.workers = {}
        self.started = 0
        self._tmp = None

    def _start(self, backend, device):
        import tempfile

        from mfulib.run import worker
        if self._tmp is None or not os.path.isdir(self._tmp):
            self._tmp = tempfile.mkdtemp(prefix="mfu_workers_")
        env = worker.child_env(backend.child_env(os.environ))
        env["TMPDIR"] = self._tmp  # staging dirs of a killed worker are removed with the pool
        self.started += 1
        log = os.path.join(self._tmp, f"worker{self.started}.log")
        return worker.Worker([sys.executable, RUNNER_PATH, "--serve"], env, log, cwd=self._tmp)

    def run(self, backend, spec: dict, attempt_dir: str, timeout_s: float) -> ChildResult:
        spec, spec_path = _write_spec(spec, attempt_dir)
        log_path = os.path.join(attempt_dir, "child.log")
        open(log_path, "w").close()
        key = (backend.name, spec["device"])
        w = self.workers.get(key)
        if w is not None and not w.alive():
            self.workers.pop(key).kill()
            w = None
        if w is None:
            try:
                w = self.workers[key] = self._start(backend, spec["device"])
            except OSError as exc:
                return ChildResult("crashed", {"error": f"cannot start {sys.executable}: {exc}"}, None, "", 0.0,
                                   attempt_dir, [])
        # a fresh worker's imports count against the first case, as a fresh child's always did
        reply = w.call({"spec_path": spec_path, "log_path": log_path}, timeout_s=timeout_s,
                       start_timeout_s=timeout_s)
        tail = _tail(log_path) or _tail(w.log_path)  # a worker that died starting up wrote to its own log
        report = _read_report(spec["report_path"])
        rc = None
        if reply.outcome == "timeout":
            self.workers.pop(key, None)
            report = dict(report, status="timeout", error=_timeout_error(timeout_s))
        elif reply.outcome == "died":
            self.workers.pop(key, None)
            rc = reply.returncode
            w.kill()
            if not report:
                report = {"status": "crashed", "error": _no_report_error(rc, tail)}
        elif not report:
            report = {"status": "crashed", "error": _no_report_error(None, tail)}
        if reply.outcome == "done" and (reply.message or {}).get("retire"):
            self.workers.pop(key, None)
            w.close()
            rc = w.proc.returncode
        return ChildResult(report.get("status", "crashed"), report, rc, tail, reply.wall_s, attempt_dir, w.argv)

    def close(self) -> None:
        """End every worker and remove their temp directory."""
        import shutil
        for w in self.workers.values():
            w.close()
        self.workers.clear()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


_POOL = WorkerPool()


def close_workers() -> None:
    """End the persistent workers :func:`run_child` started (idempotent)."""
    _POOL.close()


atexit.register(close_workers)


# ----------------------------------------------------------------------------------------------- child side


def _output_bytes(out) -> int:
    from mfulib.core.opdir import tensors_in
    return int(sum(t.numel() * t.element_size() for t in tensors_in(out)))


def run_spec(spec: dict, backend, report: dict) -> None:
    """Run the iterations of one case (child side); fills ``report``; exceptions propagate to the caller."""
    backend.prepare_process()
    wall = report.setdefault("wall_s", {})
    wall["imports"] = time.perf_counter() - _T_START
    t = time.perf_counter()
    import torch
    from torch.profiler import record_function

    from mfulib.run import compat
    from mfulib.core.opdir import OpDir, in_directory
    from mfulib.backends.base import PRIME_RANGE
    backend.setup(spec)
    if spec["device"] not in _IDENTITY:  # one process, one device: asked once per worker
        try:
            _IDENTITY[spec["device"]] = backend.identity(spec)
        except Exception as exc:  # identity is descriptive: never fail the case on it
            _IDENTITY[spec["device"]] = {"backend": spec["backend"], "error": f"{type(exc).__name__}: {exc}"}
    report["device"] = dict(_IDENTITY[spec["device"]])
    wall["setup"] = time.perf_counter() - t
    t = time.perf_counter()
    modules_before = set(sys.modules)
    key = (spec["op_dir"], spec["case_id"], spec["seed"], spec["device"])
    reuse = _INPUTS.get("key") == key
    if not reuse:  # drop the previous case's inputs before building the next (one case in memory at a time)
        _INPUTS.clear()
        if backend.torch_namespace is not None:  # device memory back before a large case is built (0.1-0.3 s)
            gc.collect()  # tensors held by reference cycles (a traceback, a module) go now, not at a later GC
            backend.empty_cache()
    built = OpDir(spec["op_dir"]).build_case(spec["case_id"], impl=spec["impl"], seed=spec["seed"],
                                             device=spec["device"], args=_INPUTS.get("args"))
    _INPUTS.update(key=key, args=built.args)
    report["inputs_reused"] = reuse
    if built.inputs_drawn is not None:
        _INPUTS["drawn"] = built.inputs_drawn
    report["inputs_drawn"] = _INPUTS.get("drawn")  # where they were drawn (mfulib.core.input_draw), reused or not
    report["compat"] = {k: v for k, v in compat.REPORT.items() if k != "patched"}
    wall["build"] = time.perf_counter() - t
    harness = None
    if spec.get("markers") or spec.get("flush_cache_mib"):
        from mfulib.backends.harness import Harness
        harness = Harness(backend, spec["device"], spec.get("flush_cache_mib") or 0)
    warmup = int(spec["warmup"])
    n = warmup + int(spec["repeats"])
    budget_ns = None if spec.get("repeat_budget_s") is None else float(spec["repeat_budget_s"]) * 1e9
    session = None
    try:
        with torch.no_grad(), in_directory(built.staging), contextlib.ExitStack() as stack:
            profile = spec.get("profile", True)
            if profile and backend.profile_prime:
                session = stack.enter_context(backend.session(spec))
            t = time.perf_counter()
            with record_function(PRIME_RANGE):
                out = built.model(*built.args)
                backend.sync()
            report["output_bytes"] = _output_bytes(out)
            del out
            wall["prime"] = time.perf_counter() - t
            if profile and not backend.profile_prime:
                session = stack.enter_context(backend.session(spec))
            t = time.perf_counter()
            iter_wall_ns = report["iter_wall_ns"] = []  # host wall clock per call of each iteration, device synced
            # back-to-back calls per iteration (spec burst_target_ms, profiler-free runs only), sized by one
            # synchronised call outside the iterations (mfulib.core.wallclock)
            burst = spec.get("burst_target_ms") if not profile else None
            calls, spent_ns = 1, 0
            if burst:
                from mfulib.core.wallclock import size_burst
                single_ms, calls = size_burst(lambda: built.model(*built.args), backend.sync, float(burst))
                report["sizing_call_ns"], report["calls_per_iteration"] = single_ms * 1e6, calls
            for i in range(n):
                if harness is not None and harness.flushes:
                    harness.flush()
                    backend.sync()
                t_iter = time.perf_counter_ns()
                with backend.iteration(i):
                    if spec.get("markers"):
                        harness.marker()
                    for _ in range(calls):
                        built.model(*built.args)
                    backend.sync()
                took = time.perf_counter_ns() - t_iter
                iter_wall_ns.append(took / calls)
                if i >= warmup:
                    spent_ns += took
                if budget_ns is not None and i + 1 - warmup >= min(2, n - warmup) and spent_ns >= budget_ns:
                    break  # time-bounded repeats (spec repeat_budget_s): enough for a ranking
            if spec.get("markers"):
                harness.marker()
                backend.sync()
            wall["iterations"] = time.perf_counter() - t
        t = time.perf_counter()
        if session is not None:
            report.update(backend.finish(spec, session))
        wall["export"] = time.perf_counter() - t
    finally:
        built.close()
        for name in [m for m in sys.modules if m.startswith("_mfu_") and m not in modules_before]:
            del sys.modules[name]  # the operator files are imported afresh for every case (opdir.import_file)
    report["status"] = "ok"
    report["error"] = None


_IDENTITY: dict = {}  # device string -> backend.identity() (asked once per process)
_INPUTS: dict = {}  # {"key": (op_dir, case_id, seed, device), "args": forward args} of the last case built
_SERVED = [0]  # specs this process has run


def run_and_report(spec: dict) -> dict:
    """Run one spec (child side) and write its ``report.json`` atomically; returns the report. Never raises for
    the case's own failure (KeyboardInterrupt excepted)."""
    from mfulib.run import interpreter
    from mfulib.core.failures import classify
    from mfulib.core.jsonio import write_json_atomic
    from mfulib.backends import get_backend
    t0 = time.perf_counter()
    first = _SERVED[0] == 0
    _SERVED[0] += 1
    report = {"status": "error", "case": spec.get("case_id"), "impl": spec.get("impl"), "backend": spec.get("backend"),
              "pid": os.getpid(), "specs_in_process": _SERVED[0], "wall_s": {}}
    interpreter.reset()
    backend = None
    try:
        backend = get_backend(spec["backend"])
        run_spec(spec, backend, report)
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded for this case
        from mfulib.core.wallclock import oom_advice
        status, msg = classify(exc, oom_advice(report.get("calls_per_iteration")))
        report.update(status=status, error=msg, traceback=traceback.format_exc(limit=8))
        _INPUTS.clear()
        if isinstance(exc, KeyboardInterrupt):
            raise
    finally:
        if backend is not None and backend.interpreter:  # what the interpreter adapted or rejected (run/interpreter.py)
            report["cpu_adaptations"] = interpreter.adaptations()
        if not first:  # the process start-up was paid by an earlier spec of this worker
            report["wall_s"]["imports"] = 0.0
        report["wall_s"]["total_in_child"] = time.perf_counter() - (_T_START if first else t0)
        write_json_atomic(spec["report_path"], report)
    return report


def _serve_request(req: dict) -> dict:
    """Worker handler (:func:`mfulib.run.worker.serve`): one spec, run in its attempt directory."""
    from mfulib.core.jsonio import read_json
    spec = read_json(req["spec_path"])
    os.chdir(os.path.dirname(spec["report_path"]))
    report = run_and_report(spec)
    return {"status": report["status"], "retire": report["status"] in RETIRE_STATUSES}


def child_main(argv=None) -> int:
    from mfulib.core.jsonio import read_json
    ap = argparse.ArgumentParser(description="Run one case of an operator work directory (collector child), or "
                                             "serve specs as a persistent worker (--serve).")
    ap.add_argument("--spec", help="spec.json written by the collector")
    ap.add_argument("--serve", action="store_true", help="persistent worker: specs come on --request-fd")
    args, _ = ap.parse_known_args(argv)
    if args.serve:
        from mfulib.run.worker import serve
        return serve(_serve_request, argv)
    if not args.spec:
        ap.error("--spec or --serve is required")
    report = run_and_report(read_json(args.spec))
    return 0 if report["status"] == "ok" else 3


if __name__ == "__main__":
    # run as a script: replace this file's folder (whose cpu.py/base.py... must not shadow other modules) by scripts/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from mfulib.backends.runner import child_main as _main  # the package's copy, not __main__'s
    sys.exit(_main())
