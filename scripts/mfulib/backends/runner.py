"""One case in its own child process: a crash, hang (timeout) or out-of-memory stays in that case.

Parent side, :func:`run_child`: writes ``spec.json`` into a fresh attempt directory, starts
``[<backend wrapper, e.g. msprof ...>] python3 runner.py --spec spec.json`` in a new process group, kills the whole
group after ``timeout_s``, and returns a :class:`ChildResult` whose ``status`` is the child's own (``ok``,
``rejected``, ``oom``, ``error``: :func:`mfulib.failures.classify`, shared with verify_op.py) or ``timeout`` /
``crashed`` (no report: a signal or an abort; SIGKILL is usually the host's out-of-memory killer).

Child side, :func:`child_main` (this file run as a script): builds the case (:meth:`mfulib.opdir.OpDir.build_case`
with the compatibility layer of :mod:`mfulib.compat` installed first), then::

    prime call (compilation, autotuning; never measured)     range "mfu::prime"
    profiler session starts (cpu: before the prime call)
    repeat warmup + repeats times:
        [cache flush kernel, sync]                           outside the iteration range
        range "mfu::iter::<i>": [marker kernel], forward, sync
    [final marker kernel]
    profiler session ends -> trace file (cpu/cuda; msprof writes its own PROF dir)

and writes ``report.json`` atomically: status, error, device identity, compatibility report (core counts handed to
the operator), output bytes, trace path and wall times of each phase.

Spec keys: ``op_dir, case_id, impl (asc|ref), seed, warmup, repeats, backend, device, markers, profile,
flush_cache_mib, report_path, trace_path``.
"""
from __future__ import annotations

import argparse
import contextlib
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


def run_child(backend, spec: dict, attempt_dir: str, timeout_s: float) -> ChildResult:
    """Run one case in a child process (see the module docstring); never raises for a failing case."""
    from ..jsonio import read_json, write_json_atomic
    os.makedirs(attempt_dir, exist_ok=True)
    spec = dict(spec, report_path=os.path.join(attempt_dir, "report.json"),
                trace_path=os.path.join(attempt_dir, "trace.json"))
    spec_path = os.path.join(attempt_dir, "spec.json")
    write_json_atomic(spec_path, spec)
    cmd = backend.command([sys.executable, RUNNER_PATH, "--spec", spec_path], attempt_dir, spec)
    env = backend.child_env(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
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
    report = {}
    if os.path.exists(spec["report_path"]):
        try:
            report = read_json(spec["report_path"])
        except ValueError:
            report = {}
    if timed_out:
        report = dict(report, status="timeout",
                      error=f"timeout: no result after {timeout_s:g} s (hang or far too slow) - raise --case-timeout-s "
                            "or pick smaller cases")
    elif not report:
        if rc is not None and rc < 0:
            sig = signal.Signals(-rc).name if -rc in signal.Signals.__members__.values() else str(-rc)
            why = " (the host's out-of-memory killer, most likely)" if -rc == signal.SIGKILL else ""
            report = {"status": "crashed", "error": f"crashed: killed by signal {sig}{why}"}
        else:
            last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
            report = {"status": "crashed", "error": f"crashed: exit status {rc} without a report ({last})"}
    return ChildResult(report.get("status", "crashed"), report, rc, tail, wall, attempt_dir, cmd)


# ----------------------------------------------------------------------------------------------- child side


def _output_bytes(out) -> int:
    from ..opdir import tensors_in
    return int(sum(t.numel() * t.element_size() for t in tensors_in(out)))


def run_spec(spec: dict, backend, report: dict) -> None:
    """Run the iterations of one case (child side); fills ``report``; exceptions propagate to the caller."""
    if spec["backend"] == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    wall = report.setdefault("wall_s", {})
    wall["imports"] = time.perf_counter() - _T_START
    t = time.perf_counter()
    import torch
    from torch.profiler import record_function

    from .. import compat
    from ..opdir import OpDir, in_directory
    from .base import PRIME_RANGE
    backend.setup(spec)
    try:
        report["device"] = backend.identity(spec)
    except Exception as exc:  # identity is descriptive: never fail the case on it
        report["device"] = {"backend": spec["backend"], "error": f"{type(exc).__name__}: {exc}"}
    wall["setup"] = time.perf_counter() - t
    t = time.perf_counter()
    built = OpDir(spec["op_dir"]).build_case(spec["case_id"], impl=spec["impl"], seed=spec["seed"],
                                             device=spec["device"])
    report["compat"] = {k: v for k, v in compat.REPORT.items() if k != "patched"}
    wall["build"] = time.perf_counter() - t
    harness = None
    if spec.get("markers") or spec.get("flush_cache_mib"):
        from .harness import Harness
        harness = Harness(spec["device"], spec.get("flush_cache_mib") or 0)
    n = int(spec["warmup"]) + int(spec["repeats"])
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
            for i in range(n):
                if harness is not None and harness.flush_buf is not None:
                    harness.flush()
                    backend.sync()
                with backend.iteration(i):
                    if spec.get("markers"):
                        harness.marker()
                    built.model(*built.args)
                    backend.sync()
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
    report["status"] = "ok"
    report["error"] = None


def child_main(argv=None) -> int:
    from .. import interpreter
    from ..failures import classify
    from ..jsonio import read_json, write_json_atomic
    from . import get_backend
    ap = argparse.ArgumentParser(description="Run one case of an operator work directory (collector child).")
    ap.add_argument("--spec", required=True, help="spec.json written by the collector")
    args = ap.parse_args(argv)
    spec = read_json(args.spec)
    report = {"status": "error", "case": spec.get("case_id"), "impl": spec.get("impl"), "backend": spec.get("backend"),
              "pid": os.getpid(), "wall_s": {}}
    try:
        run_spec(spec, get_backend(spec["backend"]), report)
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded for this case
        status, msg = classify(exc)
        report.update(status=status, error=msg, traceback=traceback.format_exc(limit=8))
        if isinstance(exc, KeyboardInterrupt):
            raise
    finally:
        if spec.get("backend") == "cpu":  # what the interpreter adapted or rejected (mfulib/interpreter.py)
            report["cpu_adaptations"] = interpreter.adaptations()
        report["wall_s"]["total_in_child"] = time.perf_counter() - _T_START
        write_json_atomic(spec["report_path"], report)
    return 0 if report["status"] == "ok" else 3


if __name__ == "__main__":
    # run as a script: replace this file's folder (whose cpu.py/base.py... must not shadow other modules) by scripts/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from mfulib.backends.runner import child_main as _main  # the package's copy, not __main__'s
    sys.exit(_main())
