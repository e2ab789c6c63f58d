"""A warm start for the probe's gate-2 traces: one zygote process imports torch once, then forks a child per trace.

Gate 2 runs ``--flops-tool`` (``check_flops.py --tracer-only``) once per candidate. As a fresh process each run pays
``import torch`` (~2 s on a 2-core CI box) and ``torch._dynamo`` (~4 s more: torch's ``FlopCounterMode`` dispatch
is wrapped in ``torch._disable_dynamo``, which imports dynamo on first use) before it traces anything; the H200
batch's probe spent 7-12 s per candidate there. The zygote (``python3 -m mfulib.run.trace_zygote`` from the scripts
dir, or this file as a script) pays those imports once, without running any torch op or starting a Python thread,
and then forks one child per request (as torch's DataLoader forks its workers). Each child is what the subprocess
was: its own process and session (killable as a group), stdout/stderr to the job's log, ``sys.argv`` = the tool's
command line, the tool run as ``__main__``, its exit status reported back. Isolation is the same - a trace that crashes, hangs or exhausts memory takes only its
child - and the verdicts are the same: the child runs the same tool with the same arguments.

Protocol (JSON lines): the parent writes ``{"id": n, "argv": [tool, arg, ...], "log": path, "cwd": dir, "env":
{...}}`` (its working directory and environment now, as a subprocess would inherit them) to the zygote's stdin;
the zygote answers ``{"id": n, "pid": pid}`` when the child is forked and ``{"id": n, "rc": status}`` when it
ended (negative: killed by that signal). EOF on stdin ends the zygote and SIGKILLs the children still running.
The zygote and its children die with their parent (PR_SET_PDEATHSIG, :func:`mfulib.run.worker.die_with_parent`); the
zygote first kills each child's process group, so what a tool started dies too (:func:`_reap_on_parent_death`).

:class:`Zygote` is the parent's side; :func:`shared` gives one per process (None where forking is not available
or the zygote did not come up: the caller then starts a plain subprocess).
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from mfulib.core.paths import SCRIPTS_DIR

READY = "zygote-ready"
PARENT_ENV = "MFU_TRACE_ZYGOTE_PARENT"  # the pid the zygote was started by (parent's side sets it)


def kill_tree(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` and ``pid`` itself (a child killed before its setsid has no group)."""
    import contextlib
    import signal
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)


def stop(job, wait_s: float = 10.0) -> None:
    """End a job of :func:`start_tool` that may still run: :func:`kill_tree` unless it has ended, then reap it
    (at most ``wait_s``)."""
    import contextlib
    import subprocess
    if job.poll() is None:
        kill_tree(job.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        job.wait(timeout=wait_s)


# ------------------------------------------------------------------------------------------------ zygote side
def _child(argv: list, log: str, cwd: str | None = None, env: dict | None = None) -> None:
    """In the forked child: become the tool's process and never return (os._exit with its status). ``cwd`` and
    ``env``: the parent's working directory and environment when it asked (a plain subprocess inherits both; the
    zygote's own are those of its start, and its cwd is the scripts dir)."""
    code = 1
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the zygote's handler (:func:`_reap_on_parent_death`)
        os.setsid()
        from mfulib.run.worker import die_with_parent
        die_with_parent()  # the zygote is the parent now; it dies with the probe
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        import runpy
        sys.argv = list(argv)
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        try:
            runpy.run_path(argv[0], run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the child reports every failure as its exit status, like a process
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        try:
            _exit_like_an_interpreter()
        finally:
            os._exit(code)


def _exit_like_an_interpreter() -> None:
    """What a Python process does at its end before the child's ``os._exit`` (which skips all of it): wait for the
    tool's non-daemon threads, run its ``atexit`` handlers, and collect the garbage so that files it left open
    are flushed and closed (CPython's ``Py_FinalizeEx`` order: threading shutdown, atexit, then module teardown).
    Without it a tool writing its result from a thread, an atexit hook or an unclosed file leaves it missing or
    empty, where the plain subprocess wrote it."""
    import atexit
    import gc
    try:
        for t in threading.enumerate():
            if t is not threading.main_thread() and not t.daemon:
                t.join()
        atexit._run_exitfuncs()
        gc.collect()
    except BaseException:  # noqa: BLE001 - as at a real exit: report it, keep the status
        import traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _reap_on_parent_death(children: dict) -> None:
    """Linux: when the parent dies the kernel sends SIGTERM (PR_SET_PDEATHSIG, replacing the SIGKILL of
    :func:`mfulib.run.worker.die_with_parent`), and the handler SIGKILLs the process group of every child in
    ``children`` (pid -> request id) before the zygote exits: a trace child dies with the zygote by its own death
    signal, but what the tool started (its subprocesses, in the child's group) would otherwise outlive the probe."""
    import signal
    from mfulib.run.worker import die_with_parent

    def on_term(signum, _frame):
        for pid in list(children):
            kill_tree(pid)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    die_with_parent(signal.SIGTERM)
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):  # the parent died before the prctl: no signal will come
        on_term(signal.SIGTERM, None)


def serve() -> int:
    """The zygote's loop (module docstring). Preloads torch and torch._dynamo, then forks on request."""
    children = {}  # pid -> request id
    _reap_on_parent_death(children)
    import select
    import torch  # noqa: F401 - the point of the zygote
    try:
        import torch._dynamo  # noqa: F401
        import torch.utils.flop_counter  # noqa: F401
    except Exception:  # noqa: BLE001 - an older torch: the children import what they need themselves
        pass
    # fork after ``import torch`` is what torch's DataLoader workers do: safe while no Python thread runs and no
    # device context exists (torch's own idle native thread at import is fine; a CUDA context is not)
    if threading.active_count() != 1 or (torch.cuda.is_available() and torch.cuda.is_initialized()):
        print(json.dumps({"error": "the preloaded zygote runs Python threads or holds a CUDA context: forking it "
                                   "is not safe"}), flush=True)
        return 2
    print(READY, flush=True)
    buf = b""
    stdin = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
    closed = False
    while not closed or children:
        if closed:  # the parent is gone: nothing will read the answers
            for pid in children:
                kill_tree(pid)
        ready, _, _ = select.select([] if closed else [stdin], [], [], 0.05)
        if ready:
            chunk = os.read(stdin.fileno(), 65536)
            if not chunk:
                closed = True
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                req = json.loads(line)
                sys.stdout.flush()
                pid = os.fork()
                if pid == 0:
                    _child(req["argv"], req["log"], req.get("cwd"), req.get("env"))
                children[pid] = req["id"]
                print(json.dumps({"id": req["id"], "pid": pid}), flush=True)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            rid = children.pop(pid, None)
            if rid is not None and not closed:
                rc = os.waitstatus_to_exitcode(status)
                print(json.dumps({"id": rid, "rc": rc}), flush=True)
    return 0


# ------------------------------------------------------------------------------------------------ parent side
class ZygoteJob:
    """One forked trace: ``pid``, ``poll()`` / ``wait(timeout)`` like :class:`subprocess.Popen` (``wait`` raises
    ``subprocess.TimeoutExpired``); end it with :func:`stop`."""

    def __init__(self, zygote: "Zygote", rid: int, pid: int):
        self.zygote, self.rid, self.pid = zygote, rid, pid
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            self.returncode = self.zygote._rc(self.rid)
        return self.returncode

    def wait(self, timeout=None):
        import subprocess
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if not self.zygote.alive():
                self.returncode = -9  # the zygote died (and with it the child): a failed trace
                break
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired(f"zygote job {self.rid}", timeout)
            with self.zygote._changed:
                if self.zygote._rcs.get(self.rid) is None:
                    self.zygote._changed.wait(0.05)
        return self.returncode



class Zygote:
    """The parent's handle on one zygote process. ``start(argv, log)`` -> :class:`ZygoteJob`; ``close()`` ends
    it (its children are killed). Raises RuntimeError from the constructor when it does not come up within
    ``ready_timeout_s``."""

    def __init__(self, ready_timeout_s: float = 120.0):
        import subprocess
        from mfulib.run.worker import die_with_parent
        here = SCRIPTS_DIR
        env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   **{PARENT_ENV: str(os.getpid())})
        self.proc = subprocess.Popen([sys.executable, "-m", "mfulib.run.trace_zygote"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=here,
                                     start_new_session=True, preexec_fn=die_with_parent)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._next, self._pids, self._rcs = 0, {}, {}
        ready = threading.Event()
        first = []

        def reader():
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").strip()
                if not ready.is_set():
                    first.append(line)
                    ready.set()
                    continue
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                with self._changed:
                    if "pid" in msg:
                        self._pids[msg["id"]] = msg["pid"]
                    if "rc" in msg:
                        self._rcs[msg["id"]] = msg["rc"]
                    self._changed.notify_all()
            ready.set()
            with self._changed:
                self._changed.notify_all()

        self._reader = threading.Thread(target=reader, daemon=True)
        self._reader.start()
        if not ready.wait(ready_timeout_s) or first != [READY]:
            self.close()
            raise RuntimeError(f"trace zygote did not start: {first[:1] or 'no answer'}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _rc(self, rid):
        with self._changed:
            return self._rcs.get(rid)

    def start(self, argv: list, log: str, timeout_s: float = 30.0) -> ZygoteJob:
        """Fork ``argv`` (tool path first) with stdout/stderr to ``log``. RuntimeError when the zygote is gone."""
        with self._changed:
            rid = self._next
            self._next += 1
        try:
            req = {"id": rid, "argv": list(argv), "log": os.path.abspath(log), "cwd": os.getcwd(),
                   "env": dict(os.environ)}
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise RuntimeError(f"trace zygote is gone: {exc}") from None
        end = time.monotonic() + timeout_s
        with self._changed:
            while rid not in self._pids:
                if not self.alive() or time.monotonic() >= end:
                    raise RuntimeError("trace zygote did not fork the trace")
                self._changed.wait(0.05)
            return ZygoteJob(self, rid, self._pids[rid])

    def close(self) -> None:
        import contextlib
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            kill_tree(self.proc.pid)
            self.proc.wait()


_SHARED = {"zygote": None, "failed": None}


def shared():
    """This process's zygote, started on first use; None when forking is unavailable (not Linux), turned off
    (``MFU_TRACE_ZYGOTE=0``) or the zygote could not start (the reason in ``_SHARED["failed"]``)."""
    if _SHARED["zygote"] is not None and _SHARED["zygote"].alive():
        return _SHARED["zygote"]
    if _SHARED["failed"] or os.environ.get("MFU_TRACE_ZYGOTE", "1") == "0" or not sys.platform.startswith("linux"):
        return None
    try:
        _SHARED["zygote"] = Zygote()
    except (RuntimeError, OSError) as exc:
        _SHARED["failed"] = str(exc)
        return None
    return _SHARED["zygote"]


def start_tool(argv: list, log: str):
    """Start the Python tool ``argv`` (script path first) with stdout/stderr to ``log``: forked from the shared
    zygote when it runs, else a plain subprocess in its own session that dies with this process. Returns an object
    with ``pid``, ``poll()``, ``wait(timeout)`` (raises subprocess.TimeoutExpired) - a :class:`ZygoteJob` or a
    :class:`subprocess.Popen`; end it with :func:`stop`."""
    zygote = shared()
    if zygote is not None:
        try:
            return zygote.start(argv, log)
        except RuntimeError:
            pass
    import subprocess
    from mfulib.run.worker import die_with_parent
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable] + list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent)


def close_shared() -> None:
    if _SHARED["zygote"] is not None:
        _SHARED["zygote"].close()
        _SHARED["zygote"] = None


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.exit(serve())
