"""The device lock: one timed step at a time per device, and a wait that says who holds it.

make runs verify, collect, peak, the probe and the search (and, where the device is the host CPU, the FLOPs check)
under this lock (``scripts/device_lock.py``), so a GEMM calibration never shares the device with a timed case, also
across makes. Its scope comes from the backend the step will run on (:func:`lock_scope`):

* an accelerator (npu, cuda, a plug-in with ``accelerator = True``): machine-wide, one lock per physical device,
  ``$TMPDIR/triton-mfu-analyzer-device<N>.lock`` (``N``: the Makefile's ``LOCK_DEVICE``, default ``DEVICE_ID``);
* the CPU backend: one lock per work directory, ``$TMPDIR/triton-mfu-analyzer-cpu-<name>-<hash>.lock`` (hash of the
  work directory's real path): the steps of one operator still take turns, but unrelated checkouts and operators on
  one machine do not queue behind each other (CPU numbers only validate the pipeline: docs/ARCHITECTURE.md#backends).

``--backend auto`` is resolved without importing torch (a step pays that itself): an accelerator is assumed when
the npu or cuda backend finds a device the way the batch does (``discover_devices``: ``/dev/davinci<N>`` with CANN
set up, ``nvidia-smi -L``). Where torch then falls back to the CPU, the lock is the machine-wide one: a step may
queue behind another checkout, never share a device with one.

Beside the lock lies its holder record ``<lock>.holder.json`` (:func:`write_holder`): ``pid``, ``command``,
``since`` (ISO 8601 local time), ``work``. A waiting step prints it, then a timer (:func:`acquire`); a record whose
pid is dead is stale (the lock itself is released by the kernel when its holder exits) and is removed.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import sys
import time

from mfulib.core.jsonio import write_json_atomic

PREFIX = "triton-mfu-analyzer"
TTY_REFRESH_S = 1.0  # the one refreshed timer line on a terminal
LOG_EVERY_S = 10.0  # a line this often where stderr is not a terminal (make's log, a batch's op.log)
POLL_S = 0.25


def _is_accelerator(backend: str) -> bool:
    """Is ``backend`` (a --backend value) an accelerator? ``auto``: one is found without importing torch."""
    from mfulib.backends import NAMES, backend_class  # the registry, no torch import
    if backend != "auto":
        return bool(backend_class(backend).accelerator)
    for name in NAMES:
        cls = backend_class(name)
        if cls.accelerator and cls.discover_devices()[0]:
            if name != "npu" or os.environ.get("ASCEND_HOME_PATH"):  # npu needs CANN set up (resolve_backend)
                return True
    return False


def lock_scope(backend: str, device: str, work: str, tmpdir: str = None) -> tuple:
    """(lock path, scope) for a step on ``backend`` (a --backend value), physical ``device``, work directory
    ``work``; scope is ``"device"`` (machine-wide) or ``"workdir"`` (CPU). ``tmpdir``: default ``$TMPDIR`` or /tmp.
    Raises UserError for an unknown backend name (from the registry)."""
    tmpdir = tmpdir or os.environ.get("TMPDIR") or "/tmp"
    if _is_accelerator(backend):
        return os.path.join(tmpdir, f"{PREFIX}-device{device}.lock"), "device"
    real = os.path.realpath(work)
    digest = hashlib.sha256(real.encode()).hexdigest()[:12]
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in os.path.basename(real))[:40]
    return os.path.join(tmpdir, f"{PREFIX}-cpu-{name}-{digest}.lock"), "workdir"


def holder_path(lock: str) -> str:
    return lock + ".holder.json"


def pid_alive(pid) -> bool:
    """Does process ``pid`` exist (signal 0; a process of another user counts as alive)?"""
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError, TypeError) as exc:
        return isinstance(exc, PermissionError)
    return True


def write_holder(lock: str, command: str, work: str) -> dict:
    """Write the holder record of ``lock`` for this process; returns it."""
    rec = {"pid": os.getpid(), "command": command, "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "since_epoch_s": time.time(), "work": os.path.realpath(work) if work else None}
    write_json_atomic(holder_path(lock), rec)
    return rec


def read_holder(lock: str):
    """The holder record of ``lock`` (dict), ``"stale"`` when its pid is dead (the record is then removed), None
    when there is none or it cannot be read."""
    path = holder_path(lock)
    try:
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or not pid_alive(rec.get("pid")):
        clear_holder(lock, None)
        return "stale"
    return rec


def clear_holder(lock: str, pid) -> None:
    """Remove the holder record of ``lock`` - only when it names ``pid`` (None: whatever it names)."""
    path = holder_path(lock)
    if pid is not None:
        try:
            with open(path, encoding="utf-8") as f:
                if json.load(f).get("pid") != pid:
                    return
        except (OSError, ValueError, AttributeError):
            return
    try:
        os.unlink(path)
    except OSError:
        pass


def describe_holder(rec, now_s: float) -> str:
    """One line for a holder record from :func:`read_holder`: who, since when, which work directory."""
    if rec is None or rec == "stale":
        why = "its holder record was stale (dead pid) and is cleared" if rec else "no holder record"
        return f"held by a process that left {why}"
    cmd = str(rec.get("command") or "?")
    cmd = cmd if len(cmd) <= 100 else cmd[:97] + "..."
    age = now_s - rec["since_epoch_s"] if isinstance(rec.get("since_epoch_s"), (int, float)) else None
    return (f"held by pid {rec.get('pid')} since {rec.get('since')}" + (f" ({age:.0f} s ago)" if age is not None
            else "") + (f", work dir {rec['work']}" if rec.get("work") else "") + f": {cmd}")


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise
    return True


def acquire(lock: str, scope: str, out=None, clock=time.monotonic, sleep=time.sleep, tty=None) -> int:
    """Open and lock ``lock`` exclusively (blocking); returns the open fd, which holds the lock until closed or the
    process ends. While another process holds it, ``out`` (default stderr) gets one line naming the holder
    (:func:`describe_holder`; again when the holder changes) and a timer: one line refreshed in place on a terminal
    (``tty``: default ``out.isatty()``), a line every :data:`LOG_EVERY_S` seconds otherwise. ``clock`` / ``sleep``:
    seconds (tests pass fakes). Raises OSError when the lock file cannot be created (the message names it)."""
    out = out or sys.stderr
    tty = out.isatty() if tty is None else tty
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise OSError(exc.errno, f"device lock {lock}: {exc.strerror} - set DEVICE_LOCK=<path> (make) to a "
                                 "writable file, or TMPDIR") from exc
    if _try_lock(fd):
        return fd
    t0 = clock()
    last_rec, timer_shown, next_line = object(), False, t0 + (TTY_REFRESH_S if tty else LOG_EVERY_S)
    what = "this machine's device lock" if scope == "device" else "this work directory's CPU lock"
    while True:
        rec = read_holder(lock)
        if rec != last_rec:
            if timer_shown:
                out.write("\n")
                timer_shown = False
            out.write(f"waiting for {what} {lock}: {describe_holder(rec, time.time())}\n")
            out.flush()
            last_rec = rec
        sleep(POLL_S)
        if _try_lock(fd):
            waited = clock() - t0
            out.write(("\r" if timer_shown else "") + f"got {what} after {waited:.0f} s{' ' * 20}\n")
            out.flush()
            return fd
        now = clock()
        if now >= next_line:
            if tty:
                out.write(f"\r  waiting {now - t0:.0f} s (Ctrl-C stops)")
                timer_shown = True
            else:
                out.write(f"  still waiting for {lock}: {now - t0:.0f} s\n")
            out.flush()
            next_line = now + (TTY_REFRESH_S if tty else LOG_EVERY_S)
