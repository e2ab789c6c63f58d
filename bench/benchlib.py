"""What the bench/ scripts share: running a command so that nothing it started outlives it, reading and writing a
JSON, and the state tar of a resumable bench (packed after each call, unpacked on a fresh machine).

:func:`run_tree` starts ``cmd`` in its own session and, on timeout, stops and kills its whole process tree with
:func:`mfulib.batch.job.kill_tree` (the batch's mechanism: the group and every descendant, whatever its session);
after a normal exit it kills what is left in the group. A plain ``subprocess.run(timeout=...)`` kills only the
direct child: on 2026-12-01 that left a probe's GPU-busy gate child running into the next device call, and the
kernel times measured there were 1.5-3x too long (bench/validation/h200, the ``call_note`` of ncu.json).
"""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))


def run_tree(cmd, timeout_s=None, env=None, cwd=None, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
             interrupt=None, grace_s=30.0):
    """Run ``cmd`` (list); returns (exit status or ``"timeout"``, stdout text or None, stderr text or None, wall s).

    ``stdout``/``stderr``: PIPE (captured, returned as text) or an open file (e.g. a log, stderr=STDOUT).
    ``interrupt``: a signal (e.g. ``signal.SIGINT``) sent to ``cmd``'s own process, not its group, at ``timeout_s``
    so that it can stop cleanly (mfu_batch.py kills its operators, writes its summary and exits 130); its exit
    status is returned when it exits within ``grace_s`` more seconds, else the tree is killed and "timeout"."""
    from mfulib.batch.job import kill_tree
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, text=True, env=env, cwd=cwd, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout_s)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
        if interrupt is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, interrupt)
            try:
                out, err = p.communicate(timeout=grace_s)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                pass
        if rc == "timeout":
            kill_tree(p)
            out, err = p.communicate()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)  # whatever the group left behind (a child nobody waited for)
    return rc, out, err, time.perf_counter() - t0


def load_json(path):
    """The JSON document at ``path``, or None when it is missing or not JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def save_json(path, obj):
    """Write ``obj`` to ``path`` atomically (:func:`mfulib.core.jsonio.write_json_atomic`)."""
    from mfulib.core.jsonio import write_json_atomic
    write_json_atomic(path, obj)


def unpack_state(tar_path: str, state: str) -> None:
    """Unpack a previous call's state tar into ``state`` (whatever the state folder was called there); files already
    in ``state`` are overwritten by the tar's. Raises RuntimeError for a tar without exactly one top folder."""
    tmp = tempfile.mkdtemp(prefix="bench_resume_")
    try:
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp, filter="data")
        tops = [d for d in os.listdir(tmp) if os.path.isdir(os.path.join(tmp, d))]
        if len(tops) != 1:
            raise RuntimeError(f"{tar_path}: expected one state folder in the tar, found {tops}")
        shutil.copytree(os.path.join(tmp, tops[0]), state, dirs_exist_ok=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def pack_state(tar_path: str, state: str, keep, extra=()) -> list:
    """Write ``tar_path`` (gzip) holding every file under ``state`` for which ``keep(relative path, bytes)`` is true,
    under the state folder's own name, plus the files ``extra`` at the tar's top. Returns the relative paths packed."""
    packed = []
    base = os.path.dirname(os.path.abspath(state))
    with tarfile.open(tar_path, "w:gz") as tar:
        for d, _dirs, files in os.walk(state):
            for f in sorted(files):
                path = os.path.join(d, f)
                rel = os.path.relpath(path, state)
                if keep(rel, os.path.getsize(path)):
                    tar.add(path, arcname=os.path.relpath(path, base))
                    packed.append(rel)
        for path in extra:
            tar.add(path, arcname=os.path.basename(path))
    return sorted(packed)
