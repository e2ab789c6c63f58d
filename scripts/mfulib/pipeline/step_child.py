"""A step's command as make's child that stops when make is stopped: SIGINT / SIGTERM / SIGHUP reach it once.

GNU make forwards no SIGINT to its children, and SIGTERM only to the shell of a recipe line: ``kill -INT <make
pid>`` left the step running to its end, ``kill -TERM`` left it running as an orphan. ``scripts/device_lock.py``
therefore runs the step's command through :func:`run_child`, which

* starts the command in its own process group, so a Ctrl-C (SIGINT to the terminal's foreground group: make, the
  shell, this process) reaches the step exactly once, forwarded as SIGINT - every step script turns it into its
  interrupted path (a partial report marked ``"complete": false`` where it has one, exit 130; docs/ARCHITECTURE.md
  #bad-input); a second signal is forwarded as SIGTERM, a third as SIGKILL;
* takes SIGTERM when the shell above it dies (Linux ``PR_SET_PDEATHSIG``), and gives the command the same, so
  neither outlives make;
* watches the nearest ``make`` above it (:func:`make_is_dying`, Linux /proc): make handling a fatal signal resets
  that signal's handler and blocks it while it waits for its children, which this process sees and answers as if
  the signal had come to it;
* forwards Ctrl-Z (SIGTSTP) as SIGSTOP and SIGCONT, so a suspended make suspends its step.

An interrupted step exits 128 + the signal's number (130 for SIGINT) whatever its command returned, so make writes
no stamp for it: the step is "not done" and the next make redoes it.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
FATAL = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WATCH_S = 0.5
MAKE_NAMES = ("make", "gmake")


def set_parent_death_signal(sig: int = signal.SIGTERM) -> None:
    """Have the kernel send ``sig`` to this process when its parent exits (Linux; a no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _proc_status(pid: int) -> dict:
    """{field: text} of /proc/<pid>/status, {} when unreadable."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        return {}


def make_ancestor(pid: int = None):
    """The pid of the nearest process above ``pid`` (default: this one) whose name is make or gmake, else None."""
    pid = os.getppid() if pid is None else pid
    for _ in range(16):
        st = _proc_status(pid)
        if not st:
            return None
        if st.get("Name") in MAKE_NAMES:
            return pid
        try:
            pid = int(st.get("PPid", "0"))
        except ValueError:
            return None
        if pid <= 1:
            return None
    return None


def _mask(st: dict, key: str) -> int:
    try:
        return int(st.get(key, "0"), 16)
    except ValueError:
        return 0


def make_is_dying(status: dict, caught_at_start: int):
    """The fatal signal make is handling, from its /proc status, else None: a signal of :data:`FATAL` that make
    caught when this step started (``caught_at_start``: its SigCgt mask then) and now neither catches nor lets in
    (GNU make's ``fatal_error_signal`` resets the handler, then waits for its children with the signal blocked)."""
    cgt, blk = _mask(status, "SigCgt"), _mask(status, "SigBlk")
    for sig in FATAL:
        bit = 1 << (int(sig) - 1)
        if caught_at_start & bit and not cgt & bit and blk & bit:
            return sig
    return None


class Supervisor:
    """The signal side of one step run: handlers, the make watcher and the child (see the module docstring)."""

    def __init__(self, err=None):
        self.err = err or sys.stderr
        self.child = None
        self.signals = []  # signals received, in order
        self._starting = False  # between fork and self.child: a signal is recorded, forwarded once it is known
        self._stop = threading.Event()

    def _forward(self, signum: int) -> None:
        self.signals.append(signum)
        if self.child is None:
            if self._starting:
                return
            raise KeyboardInterrupt(f"signal {signum}")  # still waiting for the lock: stop waiting
        n = len(self.signals)
        sent = signal.SIGINT if n == 1 else signal.SIGTERM if n == 2 else signal.SIGKILL
        if n == 1:
            step = os.environ.get("MFU_MAKE_STEP") or "the step"  # make names each step (Makefile: MFU_MAKE_STEP)
            self.err.write(f"\nstep {step} interrupted ({signal.Signals(signum).name}): stopping it (pid "
                           f"{self.child.pid}); it is not done, the next make redoes it\n")
            self.err.flush()
        try:
            os.killpg(self.child.pid, sent)
        except ProcessLookupError:
            pass

    def _suspend(self, signum, frame) -> None:
        if self.child is not None:
            try:
                os.killpg(self.child.pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        os.kill(os.getpid(), signal.SIGSTOP)

    def _resume(self, signum, frame) -> None:
        if self.child is not None:
            try:
                os.killpg(self.child.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def _watch(self, make_pid: int, caught: int) -> None:
        while not self._stop.wait(WATCH_S):
            st = _proc_status(make_pid)
            sig = make_is_dying(st, caught) if st else signal.SIGHUP  # make gone: as a hang-up
            if sig is not None:
                if not self.signals:  # a signal that reached this process too is forwarded already
                    os.kill(os.getpid(), sig)
                return

    def install(self) -> None:
        """Handlers for :data:`FATAL`, SIGTSTP, SIGCONT; the parent-death signal; the make watcher thread."""
        for sig in FATAL:
            signal.signal(sig, lambda s, f: self._forward(s))
        signal.signal(signal.SIGTSTP, self._suspend)
        signal.signal(signal.SIGCONT, self._resume)
        parent = os.getppid()
        set_parent_death_signal(signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the line above
            os.kill(os.getpid(), signal.SIGTERM)
        make_pid = make_ancestor()
        if make_pid is not None:
            caught = _mask(_proc_status(make_pid), "SigCgt")
            threading.Thread(target=self._watch, args=(make_pid, caught), daemon=True).start()

    def run(self, argv: list) -> int:
        """Run ``argv`` to its end; its exit status, 128 + N where it died of signal N or was interrupted."""
        def child_setup():
            os.setpgid(0, 0)
            set_parent_death_signal(signal.SIGTERM)
            for sig in FATAL + (signal.SIGTSTP, signal.SIGCONT):
                signal.signal(sig, signal.SIG_DFL)
        self._starting = True
        try:
            self.child = subprocess.Popen(argv, preexec_fn=child_setup)
        except OSError as exc:
            self.err.write(f"error: cannot run {argv[0]}: {exc.strerror}\n")
            return 127
        finally:
            self._starting = False
        if self.signals:  # a signal came between the fork and the assignment above
            got = self.signals.pop()
            self._forward(got)
        rc = self.child.wait()
        self._stop.set()
        if self.signals:
            return 128 + int(self.signals[0])
        return 128 - rc if rc < 0 else rc
