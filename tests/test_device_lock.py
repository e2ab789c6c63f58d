"""The device lock (mfulib/pipeline/device_lock.py) and a step's signals (mfulib/pipeline/step_child.py).

Unit tier: the lock's scope per backend, stale holder records, the waiting lines (fake clock), make's dying state
read from /proc status masks. End-to-end tier (through make, with a stand-in Python whose step scripts only print
and sleep, so each test takes seconds): a step waiting for a held lock names its holder; SIGINT to make's process
group, SIGINT to make alone and SIGTERM to make alone each stop the running step, make exits non-zero and the step
is not done.
"""
import fcntl
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from mfulib.pipeline import device_lock as dl
from mfulib.pipeline.step_child import make_is_dying

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------------------------------ unit tier


def test_cpu_locks_are_per_work_directory_and_accelerator_locks_per_device(tmp_path):
    a, b = tmp_path / "a" / "op", tmp_path / "b" / "op"  # two checkouts, one operator name
    for d in (a, b):
        d.mkdir(parents=True)
    la, scope = dl.lock_scope("cpu", "0", str(a), tmpdir=str(tmp_path))
    lb, _ = dl.lock_scope("cpu", "0", str(b), tmpdir=str(tmp_path))
    assert scope == "workdir" and la != lb and os.path.dirname(la) == str(tmp_path)
    assert dl.lock_scope("cpu", "5", str(a), tmpdir=str(tmp_path))[0] == la  # the CPU has no device index
    link = tmp_path / "link"
    link.symlink_to(a)
    assert dl.lock_scope("cpu", "0", str(link), tmpdir=str(tmp_path))[0] == la  # the real path names it
    for backend in ("cuda", "npu"):
        path, scope = dl.lock_scope(backend, "3", str(a), tmpdir=str(tmp_path))
        assert (path, scope) == (str(tmp_path / "triton-mfu-analyzer-device3.lock"), "device")
        assert dl.lock_scope(backend, "3", str(b), tmpdir=str(tmp_path))[0] == path  # machine-wide


def test_a_holder_record_of_a_dead_pid_is_stale_and_removed(tmp_path):
    lock = str(tmp_path / "x.lock")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with open(dl.holder_path(lock), "w") as f:
        json.dump({"pid": dead.pid, "command": "old", "since": "then"}, f)
    assert dl.read_holder(lock) == "stale" and not os.path.exists(dl.holder_path(lock))
    rec = dl.write_holder(lock, "python3 verify_op.py --op-dir w", str(tmp_path))
    assert dl.read_holder(lock)["pid"] == os.getpid() == rec["pid"]
    dl.clear_holder(lock, os.getpid() + 1)  # not ours: kept
    assert os.path.exists(dl.holder_path(lock))
    dl.clear_holder(lock, os.getpid())
    assert not os.path.exists(dl.holder_path(lock))


def test_a_wait_names_the_holder_and_prints_a_line_every_10_s_without_a_terminal(tmp_path):
    lock = str(tmp_path / "x.lock")
    held = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # another open file description: the second open below must wait for it
    dl.write_holder(lock, "python3 peak_calib.py -o w/peak.json", "/some/work")
    now = [100.0]

    def sleep(s):
        now[0] += s
        if now[0] >= 125.0:  # the holder ends after 25 s
            os.close(held)
    out = io.StringIO()
    fd = dl.acquire(lock, "device", out=out, clock=lambda: now[0], sleep=sleep, tty=False)
    os.close(fd)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"waiting for this machine's device lock {lock}: held by pid {os.getpid()} since ")
    assert lines[0].endswith("work dir /some/work: python3 peak_calib.py -o w/peak.json")
    assert [ln.strip() for ln in lines[1:-1]] == [f"still waiting for {lock}: 10 s", f"still waiting for {lock}: 20 s"]
    assert lines[-1].strip() == "got this machine's device lock after 25 s"


def test_a_free_lock_is_taken_silently(tmp_path):
    out = io.StringIO()
    os.close(dl.acquire(str(tmp_path / "x.lock"), "workdir", out=out, tty=False))
    assert out.getvalue() == ""


def test_make_is_dying_when_it_stopped_catching_a_fatal_signal_and_blocks_it():
    caught = 0x1814207  # GNU make 4.3's SigCgt at work: SIGHUP, SIGINT, SIGTERM (bits 0, 1, 14) among them
    assert make_is_dying({"SigCgt": "0000000001814207", "SigBlk": "0000000000010000"}, caught) is None
    # in fatal_error_signal(SIGINT): the handler reset to SIG_DFL (bit 1 gone from SigCgt), SIGINT blocked
    assert make_is_dying({"SigCgt": "0000000001814205", "SigBlk": "0000000000010002"}, caught) == signal.SIGINT
    sigterm = 1 << 14
    assert make_is_dying({"SigCgt": f"{caught & ~sigterm:016x}", "SigBlk": f"{sigterm:016x}"}, caught) \
        == signal.SIGTERM
    assert make_is_dying({"SigCgt": "0000000001814205", "SigBlk": "0"}, caught) is None  # not blocked: not in there
    assert make_is_dying({"SigCgt": "0", "SigBlk": "2"}, 0) is None  # never caught it: nothing changed


# ------------------------------------------------------------------------------------------------ through make

# PY for make: device_lock.py runs for real; every other script prints its name and, for verify, sleeps
FAKE_PY = """#!/bin/sh
case "$*" in *--check*) echo ok; exit 0;; esac
case "$1" in -c|*/device_lock.py) exec "%s" "$@";; esac
case "$1" in */verify_op.py) echo $$ > "$STEP_PID"; echo "STEP verify running"; exec sleep "$STEP_S";; esac
exit 0
"""


def _as_from_a_shell():
    """make started as from an interactive shell: SIGINT and SIGTERM at their defaults and let in. GNU make keeps
    ignoring a signal ignored at its start, so a disposition or mask the test process may carry (a pytest-xdist
    worker after earlier tests) would reach make: a fresh clone's run once saw make finish its step as if no SIGINT
    had come (the cause was not pinned down; this rules the inherited state out)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def fake_make(tmp_path, step_s=30):
    if shutil.which("make") is None:
        pytest.skip("GNU make is not installed")
    py = tmp_path / "py"
    py.write_text(FAKE_PY % sys.executable)
    py.chmod(0o755)
    work = tmp_path / "w"
    work.mkdir()
    for name in ("prepare.json", "model.py", "model_new.py"):
        (work / name).write_text("{}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k not in ("MFLAGS", "BACKEND")}
    env.update(STEP_PID=str(tmp_path / "step.pid"), STEP_S=str(step_s))
    argv = [shutil.which("make"), "-C", ROOT, "OP=zoo/2_Softmax", f"WORK={work}", f"PY={py}", "BACKEND=cpu",
            "verify"]
    return work, argv, env


@pytest.mark.e2e
def test_a_step_waiting_for_a_held_lock_names_the_holder_and_runs_once_it_is_free(tmp_path):
    work, argv, env = fake_make(tmp_path, step_s=0)
    lock, _ = dl.lock_scope("cpu", "0", str(work), tmpdir=os.environ["TMPDIR"])
    held = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    dl.write_holder(lock, "python3 peak_calib.py -o other/peak.json", "/elsewhere")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    first = ""
    try:
        for line in proc.stdout:
            if line.startswith("waiting for"):
                first = line
                break
    finally:
        os.close(held)
        dl.clear_holder(lock, os.getpid())
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, first + rest
    assert f"this work directory's CPU lock {lock}: held by pid {os.getpid()} since " in first, first + rest
    assert first.rstrip().endswith("work dir /elsewhere: python3 peak_calib.py -o other/peak.json"), first
    assert "got this work directory's CPU lock after" in rest and "STEP verify running" in rest
    assert (work / ".state" / "verify.ok").exists() and not os.path.exists(dl.holder_path(lock))


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["SIGINT to the process group", "SIGINT to make", "SIGTERM to make"])
def test_a_signal_to_make_stops_the_running_step_which_is_then_not_done(tmp_path, how):
    from mfulib.pipeline import workdir_state
    work, argv, env = fake_make(tmp_path)
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True, preexec_fn=_as_from_a_shell)
    out = []
    for line in proc.stdout:
        out.append(line)
        if line.startswith("STEP verify running"):
            break
    time.sleep(1.0)  # the lock wrapper's make watcher polls every 0.5 s: let it read make's state before
    if how == "SIGINT to the process group":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGINT if how == "SIGINT to make" else signal.SIGTERM)
    rest, _ = proc.communicate(timeout=60)
    text = "".join(out) + rest
    assert proc.returncode != 0 and time.monotonic() - t0 < 25, text  # the 30 s step did not run to its end
    assert "interrupted (SIG" in text and "step verify interrupted (SIG" in text, text
    assert not (work / ".state" / "verify.ok").exists() and not (work / ".state" / "verify.failed").exists()
    rows = {r["step"]: r for r in workdir_state.step_states(str(work), ("ok", ""))}
    assert rows["verify"]["state"] != "done", rows["verify"]
    step_pid = int((tmp_path / "step.pid").read_text())
    for _ in range(20):  # no step left running as an orphan
        if not dl.pid_alive(step_pid):
            break
        time.sleep(0.1)
    assert not dl.pid_alive(step_pid), text
