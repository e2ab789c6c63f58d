"""A persistent worker process: it runs request after request (case after case) so that the process start-up
(Python, ``import torch``, the device context, the profiler's first initialisation) is paid once per operator, not
once per case - and it is replaced whenever a case kills it, hangs or leaves it in doubt.

Why: on the H200, ``make ... all`` spent most of its 107-153 s starting processes (torch imported per child) and
compiling, while the device work was a few seconds. The per-case isolation guarantees stay: a case that
crashes the worker (a signal, ``os._exit``, an abort) or does not finish within its timeout is recorded for that case
and the next case gets a fresh worker; a case whose handler asks for it (``retire``: out of memory, an error that may
have left a sticky device fault) ends the worker after its reply.

Protocol (parent :class:`Worker`, child :func:`serve`): the parent starts ``argv + ["--request-fd", R, "--reply-fd",
W]`` in a new process group (killing the group also kills what the case started), with stdin closed and
stdout/stderr to a log file. Requests and replies are JSON lines on two private pipes, never on stdout, so operator
prints cannot corrupt them. For each request the child writes ``{"started": id}``, points its file descriptors 1
and 2 at the request's ``log_path`` (so a crash message, faulthandler's dump or a Triton compiler error lands in that
case's log), runs the handler, and writes ``{"done": id, ...reply}``. End of the request pipe (the parent closed it,
or died) ends the child.

A worker that dies names its cause: the exception that ended it is written to the case's log before the output
returns to the worker log, :meth:`Worker.tail` gives the worker log's last lines since its start (its imports, an
exit outside a case), and :func:`died_why` puts the exit status (a signal by name) beside them.

Timeouts: a fresh worker has ``start_timeout_s`` to pick the first request up (its imports); from ``started`` on the
case has its own ``timeout_s``. :func:`child_env` makes Triton's compile cache one per-user directory for every
worker (verify and collect alike), so kernels compiled in one step are loaded, not recompiled, in the next.
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

TRITON_CACHE_ENV = "TRITON_CACHE_DIR"
WORKER_ENV = "MFU_WORKER"  # "0": one fresh process per case (the pre-worker behaviour; for comparisons)


def enabled() -> bool:
    """Whether persistent workers are used (``MFU_WORKER`` unset or not ``0``)."""
    return os.environ.get(WORKER_ENV, "1") != "0"


def triton_cache_dir(env=None) -> str:
    """Triton's compile cache for every worker: ``$TRITON_CACHE_DIR`` when set, else Triton's own per-user default
    ``$TRITON_HOME/.triton/cache`` (``~`` when TRITON_HOME is unset; triton/knobs.py ``cache_dir``), made explicit."""
    env = os.environ if env is None else env
    if env.get(TRITON_CACHE_ENV):
        return env[TRITON_CACHE_ENV]
    home = env.get("TRITON_HOME") or os.path.expanduser("~")
    return os.path.join(home, ".triton", "cache")


def die_with_parent() -> None:
    """Linux: have the kernel send SIGKILL to the calling process when its parent dies (prctl PR_SET_PDEATHSIG = 1,
    kept across exec), so a killed tool never leaves its children running (a tracer spinning a CPU, a candidate on
    the device). Use as ``preexec_fn`` of a subprocess, or call it first thing in a child. Elsewhere a no-op."""
    import ctypes
    import signal
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def child_env(env: dict) -> dict:
    """``env`` plus the shared Triton cache directory and unbuffered Python output, for a worker or child."""
    env = dict(env)
    env[TRITON_CACHE_ENV] = triton_cache_dir(env)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def log_tail(path: str, n: int = 3, offset: int = 0) -> str:
    """The last ``n`` non-empty lines of the log ``path`` from byte ``offset`` on, joined by `` | ``; a crash's ``Fatal
    Python error`` line (faulthandler) first when there is one; "" when there is none or no file."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    fatal = [ln for ln in lines if ln.startswith("Fatal Python error")][-1:]
    return " | ".join(fatal + [ln for ln in lines[-n:] if ln not in fatal])


def exit_status(rc) -> str:
    """A process's exit status in words: ``exit 1``, ``killed by SIGKILL (signal 9: out of host memory - the kernel's
    OOM killer - or a kill from outside)``; ``rc`` negative for a signal (subprocess's convention)."""
    if rc is None:
        return "no exit status"
    if rc >= 0:
        return f"exit {rc}"
    try:
        name = signal.Signals(-rc).name
    except ValueError:
        name = f"signal {-rc}"
    hint = {"SIGKILL": ": out of host memory - the kernel's OOM killer - or a kill from outside",
            "SIGSEGV": ": a crash in native code", "SIGABRT": ": an abort (a failed assertion in native code)"}
    return f"killed by {name} (signal {-rc}{hint.get(name, '')})"


def died_why(rc, *tails: str, limit: int = 600) -> str:
    """``the child died (<exit status>): <its last output lines>`` from the non-empty ``tails`` (the case's log, the
    worker's log), at most ``limit`` characters of them (the end kept)."""
    tail = " | ".join(t for t in tails if t)
    if len(tail) > limit:
        tail = "..." + tail[-limit:]
    return f"the child died ({exit_status(rc)}): " + (tail or "it wrote nothing to stdout or stderr")


@dataclass
class Reply:
    """What one request came to: ``outcome`` ``done`` (``message`` is the child's reply), ``timeout`` (killed after
    ``timeout_s``) or ``died`` (the worker exited first: ``returncode``, negative for a signal)."""
    outcome: str
    message: dict | None = None
    returncode: int | None = None
    wall_s: float = 0.0


class Worker:
    """Parent side of one worker process (module docstring). Raises OSError when the process cannot start."""

    def __init__(self, argv: list, env: dict, log_path: str, cwd: str | None = None):
        req_r, self._req_w = os.pipe()
        self._resp_r, resp_w = os.pipe()
        self.log_path = log_path
        self.log_start = os.path.getsize(log_path) if os.path.exists(log_path) else 0  # this process's part of it
        self.argv = list(argv) + ["--request-fd", str(req_r), "--reply-fd", str(resp_w)]
        try:
            with open(log_path, "ab") as log:
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             env=env, cwd=cwd, pass_fds=(req_r, resp_w), start_new_session=True)
        except BaseException:
            for fd in (self._req_w, self._resp_r):
                os.close(fd)
            raise
        finally:
            os.close(req_r)
            os.close(resp_w)
        self._buf = b""
        self._next_id = 0
        self._busy = False
        self.requests = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, n: int = 3) -> str:
        """The last ``n`` lines this worker wrote to its own log (outside a case: start-up, what ended it)."""
        return log_tail(self.log_path, n, self.log_start)

    def _lines(self, deadline: float):
        """Complete reply lines read before ``deadline`` (monotonic); [] on timeout; None at end of file."""
        out = []
        while not out:
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            ready, _, _ = select.select([self._resp_r], [], [], min(left, 0.5))
            if not ready:
                if self.proc.poll() is not None and not select.select([self._resp_r], [], [], 0)[0]:
                    return None
                continue
            chunk = os.read(self._resp_r, 65536)
            if not chunk:
                return None
            self._buf += chunk
            *lines, self._buf = self._buf.split(b"\n")
            out = [json.loads(x) for x in lines if x.strip()]
        return out

    def call(self, request: dict, timeout_s: float, start_timeout_s: float) -> Reply:
        """Send ``request``; wait ``start_timeout_s`` for the child to take it up, then ``timeout_s`` for its reply.
        A timeout kills the worker (its whole process group); never raises for the case's own failure."""
        self._busy = True  # until a reply: an interrupted call leaves it set, and close() kills instead of waiting
        t0 = time.monotonic()
        self._next_id += 1
        rid = self._next_id
        self.requests += 1
        try:
            os.write(self._req_w, (json.dumps(dict(request, id=rid), default=str) + "\n").encode())
        except (BrokenPipeError, OSError):
            return Reply("died", returncode=self.proc.wait(), wall_s=time.monotonic() - t0)
        deadline = t0 + start_timeout_s
        while True:
            lines = self._lines(deadline)
            if lines is None:
                return Reply("died", returncode=self.proc.wait(), wall_s=time.monotonic() - t0)
            if not lines:
                self.kill()
                return Reply("timeout", returncode=self.proc.returncode, wall_s=time.monotonic() - t0)
            for msg in lines:
                if msg.get("started") == rid:
                    deadline = time.monotonic() + timeout_s
                elif msg.get("done") == rid:
                    self._busy = False
                    return Reply("done", message=msg, wall_s=time.monotonic() - t0)

    def kill(self) -> None:
        """SIGKILL the worker's process group and reap it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._close_fds()

    def close(self, grace_s: float = 10.0) -> None:
        """End the worker: close its request pipe (it exits once idle) and kill it after ``grace_s``; a worker still
        inside a request (the call was interrupted) is killed at once."""
        if self._busy:
            self.kill()
            return
        with contextlib.suppress(OSError):
            os.close(self._req_w)
        self._req_w = -1
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def _close_fds(self) -> None:
        for name in ("_req_w", "_resp_r"):
            fd = getattr(self, name)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, -1)


# ----------------------------------------------------------------------------------------------- child side


def _redirect_output(path: str | None, saved: tuple) -> None:
    """Point fds 1 and 2 at ``path`` (appending), or back at the worker log (``saved`` duplicates) when None."""
    sys.stdout.flush()
    sys.stderr.flush()
    if path is None:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    finally:
        os.close(fd)


def serve(handler, argv=None) -> int:
    """Child side: answer requests with ``handler(request) -> dict`` until the request pipe ends (module
    docstring). A reply with ``retire: true`` ends the worker after it is sent. ``handler`` must record a case's
    failure in its reply, not raise; an exception that escapes it ends the worker (the parent sees ``died``)."""
    import argparse
    import faulthandler
    import traceback
    ap = argparse.ArgumentParser(description="persistent worker (mfulib/run/worker.py)")
    ap.add_argument("--request-fd", type=int, required=True)
    ap.add_argument("--reply-fd", type=int, required=True)
    args, _ = ap.parse_known_args(argv)
    for fd in (args.request_fd, args.reply_fd):  # what a case starts must not hold the pipes open
        os.set_inheritable(fd, False)
    faulthandler.enable()  # a segfault's Python stack goes to fd 2: the case's log
    saved = (os.dup(1), os.dup(2))
    start_dir = os.getcwd()
    requests = os.fdopen(args.request_fd, "rb")

    def send(msg):
        os.write(args.reply_fd, (json.dumps(msg, default=str) + "\n").encode())

    for line in requests:
        if not line.strip():
            continue
        req = json.loads(line)
        send({"started": req["id"]})
        _redirect_output(req.get("log_path"), saved)
        try:
            reply = handler(req)
        except BaseException:
            traceback.print_exc()  # into the case's log, while fd 2 still points there: the parent names the cause
            raise
        finally:
            _redirect_output(None, saved)
            os.chdir(start_dir)
        send(dict(reply, done=req["id"]))
        if reply.get("retire"):
            break
    return 0
