"""A warm start for the probe's gate-2 traces: the standard library's forkserver imports torch once, then forks a
child per trace.

Gate 2 runs ``--flops-tool`` (``check_flops.py --tracer-only``) once per candidate. As a fresh process each run pays
``import torch`` (~2 s on a 2-core CI box) and ``torch._dynamo`` (~4 s more: torch's ``FlopCounterMode`` dispatch
is wrapped in ``torch._disable_dynamo``, which imports dynamo on first use) before it traces anything; the H200
batch's probe spent 7-12 s per candidate there. ``multiprocessing``'s forkserver start method
(https://docs.python.org/3/library/multiprocessing.html#contexts-and-start-methods) runs one fresh server process that imports :data:`PRELOAD` once (without running a
torch op, starting a Python thread or creating a device context) and forks each child from it. Each child is
what the subprocess was: its own process and session (killable as a group), stdout/stderr to the job's log,
``sys.argv`` = the tool's command line, the tool run as ``__main__`` in the caller's working directory and
environment, its exit status reported (negative: killed by that signal). Isolation is the same - a trace that
crashes, hangs or exhausts memory takes only its child - and so are the verdicts: the child runs the same tool with
the same arguments.

What the forkserver does not do, and this module does by hand:

* the caller's environment at the time of the request (the server forks with its own, that of its start):
  :func:`_child` applies it;
* a process's end (``multiprocessing`` joins the threads and flushes stdout/stderr, but runs no ``atexit`` handler
  and does not collect garbage): :func:`_exit_like_an_interpreter`;
* the trace's process group dying with the caller: the server outlives its caller while a child runs (every child
  holds the caller's end of the server's "alive" pipe) and never kills its children, so :func:`_guard_group`
  forks a small guard into the trace's group that SIGKILLs the group when the caller's end of the child's
  ``multiprocessing.parent_process().sentinel`` closes (the caller died). The child itself also dies with the
  server (PR_SET_PDEATHSIG, :func:`mfulib.run.worker.die_with_parent`, set once the child runs: a server killed
  in the moment between its fork and that call leaves the child running), should the server be killed alone
  (what the tool started then lives on, as with a plain subprocess whose parent is killed; the job reports
  status 255, and the next trace starts a fresh server);
* a limit on the server's start: :func:`shared` waits ``ready_timeout_s`` for it to fork a no-op child, else
  the traces are plain subprocesses (a server stuck in its preload is left; it ends once that import returns).

As with every forkserver or spawn child, the caller's ``__main__`` must be safe to import (its work under
``if __name__ == "__main__":``): each child imports the caller's main module as ``__mp_main__`` before the tool
runs (multiprocessing's preparation of a forkserver child; the ``"__main__"`` preload does not spare it on Python
3.11, whose server looks for another key of the preparation data), so a caller's top level runs once per trace.
``max_shape_probe.py`` has none (a few imports). :func:`shared` gives this process's context (None where forking is not available or the server
did not come up: the caller then starts a plain subprocess). The forkserver is one per process, shared with any
other forkserver use in it, and ends when its caller exits.
"""
from __future__ import annotations

import os
import sys
import threading

ENV = "MFU_TRACE_ZYGOTE"  # "0": every trace a plain subprocess
PRELOAD = ["__main__", "torch", "torch._dynamo", "torch.utils.flop_counter"]  # ImportError: skipped by the server
READY_TIMEOUT_S = 120.0
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")  # read by torch's CPU libraries at load


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


# ------------------------------------------------------------------------------------------------ child side
def _child(argv: list, log: str, env: dict, threads: int | None = None) -> None:
    """The forked child's target: become the tool's process. ``multiprocessing`` has already set the caller's
    working directory and ``sys.path``; ``env``: the caller's environment when it asked (with
    :func:`thread_env` applied for ``threads``); ``threads``: torch's intra-op CPU threads in this child
    (``torch.set_num_threads``: torch was imported by the server, so its OpenMP pool would otherwise take the
    server's default, one thread per core). The objects inherited from the server are frozen first (``gc.freeze``,
    which the gc documentation advises for a process forked without exec): the collections of the tool's run and
    of its end then scan what the tool made, not torch's whole heap (``bench/bench_trace_zygote.py`` times a
    trace). Ends with SystemExit (the tool's status, which ``multiprocessing``
    makes the exit code)."""
    import gc
    gc.freeze()  # the server's preloaded heap (torch): no collection here scans it, the exit's included
    os.environ.clear()
    os.environ.update(env)
    if threads:
        try:
            import torch
        except ImportError:  # the server could not preload it: the tool imports it afresh and reads thread_env
            pass
        else:
            torch.set_num_threads(int(threads))
    os.setsid()
    from mfulib.run.worker import die_with_parent
    die_with_parent()  # the forkserver is the parent
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)
    _guard_group()  # after the dup2: the guard holds the log, not the caller's stdout
    import runpy
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    code = 0
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # noqa: BLE001 - reported as an interpreter does: the traceback, then status 1
        import traceback
        traceback.print_exc()
        code = 1
    _exit_like_an_interpreter()
    sys.exit(code)


def _guard_group() -> None:
    """Fork a guard into the calling child's process group: it SIGKILLs the group once the caller that started the
    child dies (EOF on ``multiprocessing.parent_process().sentinel``, whose write end only the caller holds), and
    dies with the child otherwise (PR_SET_PDEATHSIG). A process, not a thread, so that neither a tool holding the GIL
    nor one replacing signal handlers can delay it; it is one more child of the trace until the trace ends."""
    import multiprocessing
    import signal
    sentinel, child = multiprocessing.parent_process().sentinel, os.getpid()
    if os.fork() != 0:
        return
    try:
        from mfulib.run.worker import die_with_parent
        die_with_parent()
        if os.getppid() == child:  # else the child ended before the prctl
            while os.read(sentinel, 4096):  # blocks; b"" once the caller's end is closed
                pass
            os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(0)


def _exit_like_an_interpreter() -> None:
    """What a Python process does at its end and a ``multiprocessing`` child skips (it leaves by ``os._exit``):
    wait for the tool's non-daemon threads, run its ``atexit`` handlers, and collect the garbage so that files it
    left open are flushed and closed (CPython's ``Py_FinalizeEx`` order: threading shutdown, atexit, then module
    teardown). Without it a tool writing its result from an atexit hook or an unclosed file leaves it missing or
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


def _ready() -> None:
    """A no-op child: :func:`shared` forks it once to know that the server has preloaded and forks."""


# ------------------------------------------------------------------------------------------------ caller side
class ZygoteJob:
    """One forked trace: ``pid``, ``poll()`` / ``wait(timeout)`` like :class:`subprocess.Popen` (exit status,
    negative for a signal; ``wait`` raises ``subprocess.TimeoutExpired``); end it with :func:`stop`. ``proc``: its
    ``multiprocessing`` process. Raises OSError, EOFError or RuntimeError when the server cannot fork it."""

    def __init__(self, ctx, argv: list, log: str, threads: int | None = None):
        self.proc = ctx.Process(target=_child, args=(list(argv), os.path.abspath(log), thread_env(threads), threads),
                                name="mfu-trace")
        self.proc.start()
        self.pid = self.proc.pid

    def poll(self):
        return self.proc.exitcode

    def wait(self, timeout=None):
        import subprocess
        self.proc.join(timeout)
        if self.proc.exitcode is None:
            raise subprocess.TimeoutExpired(f"forked trace {self.pid}", timeout)
        return self.proc.exitcode


_SHARED = {"zygote": None, "failed": None, "jobs": []}


def shared(ready_timeout_s: float = READY_TIMEOUT_S):
    """This process's forkserver context, started (and its preload done) on first use; None when forking is
    unavailable (not Linux), turned off (``MFU_TRACE_ZYGOTE=0``) or the server did not fork a no-op child within
    ``ready_timeout_s`` (the reason in ``_SHARED["failed"]``)."""
    if _SHARED["zygote"] is not None:
        return _SHARED["zygote"]
    if _SHARED["failed"] or os.environ.get(ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return None
    import multiprocessing
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    answer = []

    def probe():  # in a thread: Process.start() waits for the server's preload without a timeout
        try:
            p = ctx.Process(target=_ready, name="mfu-trace-ready")
            p.start()
            p.join()
            answer.append(p.exitcode)
        except (OSError, EOFError, RuntimeError) as exc:
            answer.append(f"{type(exc).__name__}: {exc}")

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(ready_timeout_s)
    if answer != [0]:
        why = f"no fork within {ready_timeout_s:g} s" if not answer else (
            answer[0] if isinstance(answer[0], str) else f"its no-op child exited {answer[0]}")
        _SHARED["failed"] = f"trace forkserver did not start: {why}"
        return None
    _SHARED["zygote"] = ctx
    return ctx


def thread_env(threads: int | None = None) -> dict:
    """This process's environment, with the OpenMP / MKL / OpenBLAS thread counts set to ``threads`` when given
    (what a tool started with it, and anything it starts, reads at import)."""
    env = dict(os.environ)
    if threads:
        env.update({k: str(int(threads)) for k in THREAD_VARS})
    return env


def start_tool(argv: list, log: str, threads: int | None = None):
    """Start the Python tool ``argv`` (script path first) with stdout/stderr to ``log``: forked from the shared
    forkserver when it runs, else a plain subprocess in its own session that dies with this process. ``threads``
    (None: torch's default, one per core): the tool's intra-op CPU threads - several traces at once, each with a
    thread per core, oversubscribe the host (``bench/bench_trace_threads.py``). Returns an object with ``pid``,
    ``poll()``, ``wait(timeout)`` (raises subprocess.TimeoutExpired) - a :class:`ZygoteJob` or a
    :class:`subprocess.Popen`; end it with :func:`stop`."""
    ctx = shared()
    if ctx is not None:
        try:
            job = ZygoteJob(ctx, argv, log, threads)
        except (OSError, EOFError, RuntimeError):
            pass
        else:
            _SHARED["jobs"] = [j for j in _SHARED["jobs"] if j.poll() is None] + [job]
            return job
    import subprocess
    from mfulib.run.worker import die_with_parent
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable] + list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent,
                                env=thread_env(threads))


def close_shared() -> None:
    """:func:`stop` every forked trace still running and forget the context (a later :func:`shared` reuses the
    idle server, which ends with this process)."""
    for job in _SHARED["jobs"]:
        stop(job)
    _SHARED.update(zygote=None, jobs=[])
