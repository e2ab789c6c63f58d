#!/usr/bin/env python3
"""Run one pipeline step's command under the device lock, saying who holds it while waiting, and stop it with make.

    device_lock.py --backend cpu --device 0 --work work/5_MHABlock -- python3 scripts/verify_op.py ...

The lock's scope comes from the backend (an accelerator: machine-wide per device; the CPU: per work directory),
its holder record names the pid, command and start time of the step holding it, and a waiting step prints that
record and a timer (mfulib/pipeline/device_lock.py). The command runs as a child that SIGINT / SIGTERM to make or
to its process group stop once; an interrupted step exits 128 + the signal, so make leaves it not done
(mfulib/pipeline/step_child.py). The Makefile runs verify, collect, peak, the probe, the search and (on the CPU)
the FLOPs check through it.
"""
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mfulib.core.cli import parser, run_main  # noqa: E402
from mfulib.core.errors import UserError  # noqa: E402


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--backend", default="auto", help="the step's --backend (decides the lock's scope)")
    ap.add_argument("--device", default="0", help="the physical device id the lock is named by (LOCK_DEVICE)")
    ap.add_argument("--work", default=".", help="the work directory (names the CPU lock; in the holder record)")
    ap.add_argument("--lock", default=None, help="this lock file instead of the one the scope names (DEVICE_LOCK)")
    ap.add_argument("--host-only", action="store_true",
                    help="take the lock only where the device is the host CPU (the FLOPs check: a host-only tracer)")
    ap.add_argument("command", nargs="+", help="the step's command, after --")
    args = ap.parse_args(argv)
    from mfulib.pipeline import device_lock as dl
    from mfulib.pipeline.step_child import Supervisor
    sup = Supervisor()
    sup.install()
    path, scope = dl.lock_scope(args.backend, args.device, args.work)
    if args.lock:
        path = args.lock
    if args.host_only and scope == "device":
        return sup.run(args.command)
    try:
        fd = dl.acquire(path, scope)
    except OSError as exc:
        raise UserError(str(exc.strerror or exc)) from exc
    try:
        dl.write_holder(path, shlex.join(args.command), args.work)
        return sup.run(args.command)
    finally:
        dl.clear_holder(path, os.getpid())
        os.close(fd)


if __name__ == "__main__":
    run_main(main)
