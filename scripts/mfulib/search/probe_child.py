"""The probe's child process for gates 3 and 4: verify a staged candidate, then time ModelNew on it.

A persistent worker (:func:`serve_main`, the request/reply protocol of :mod:`mfulib.run.worker`; the parent is
:class:`mfulib.search.probe_gates.GateWorker`): Python, ``import torch``, the device context and the compat layer are
set up once, then candidate after candidate is served. A request names a staged work directory whose case files hold
only the candidate (case 0); the reply carries ``verify`` (:func:`mfulib.verify.correctness.verify_case`: Model vs
ModelNew within verify's tolerance, dropout off; statuses pass | fail | rejected | oom | error; absent for ``time_only``
requests), ``verify_s``, and - when it passed - ``time``: ``{"runs_ms": [...], "time_ms": median, "status": "ok",
"wall_s"}`` or a status oom | error. An out-of-memory or error status retires the child after its reply (a sticky device
fault must not reach the next candidate). Timing (:func:`time_run`): one warm-up call (compilation), then the
wall time per call of back-to-back runs (:mod:`mfulib.core.wallclock`, the method stage 1 of the grid search ranks by
too) - this gate bounds the cost of later profiling and ranks the candidates; it is not the kernel time the collector
measures.
"""
from __future__ import annotations

import os
import statistics
import sys
import time


def _sync(device: str):
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elif device.startswith("npu"):
        torch.npu.synchronize()


def time_run(od, device: str, seed: int, max_ms: float, repeats: int) -> dict:
    """{"status": "ok", "time_ms", "runs_ms", "single_ms", "calls_per_run"} of ModelNew on case 0 of ``od``, or
    {"status": oom|error, "reason"}.

    One warm-up call (compilation), one synchronised call (``single_ms``, which sizes the runs), then up to
    ``repeats`` timed runs of ``calls_per_run`` back-to-back calls (:mod:`mfulib.core.wallclock`), stopped early once
    the time spent exceeds ``max_ms``; ``runs_ms`` are their wall times per call, ``time_ms`` their median. A single
    call over ``max_ms`` is the time (gate 4 fails on it; nothing more is run)."""
    import torch

    from mfulib.core import wallclock
    from mfulib.core.failures import classify
    from mfulib.core.opdir import in_directory
    built, n = None, None  # n: set once single calls ran, so an OOM after it is the run's, not the shape's
    try:
        built = od.build_case(0, impl="asc", seed=seed, device=device)
        with torch.no_grad(), in_directory(built.staging):  # entered once, as stage 1's runner does: not per call

            def call():
                built.model(*built.args)
            call()
            _sync(device)
            single, n = wallclock.size_burst(call, lambda: _sync(device))
            if single > max_ms:
                return {"status": "ok", "time_ms": single, "runs_ms": [single], "single_ms": single,
                        "calls_per_run": 1}
            runs, spent = [], single
            for _ in range(max(1, repeats)):
                runs.append(wallclock.burst_ms(call, lambda: _sync(device), n))
                spent += runs[-1] * n
                if spent > max_ms:
                    break
        return {"status": "ok", "time_ms": statistics.median(runs), "runs_ms": runs, "single_ms": single,
                "calls_per_run": n}
    except (Exception, SystemExit) as exc:
        status, msg = classify(exc, wallclock.oom_advice(n))
        return {"status": status, "reason": msg}
    finally:
        if built is not None:
            built.close()


RETIRE = ("oom", "error")


def handle(req: dict, device: str) -> dict:
    """One candidate (module docstring): the reply of one request."""
    from mfulib.backends import backend_class, backend_for_device
    from mfulib.run import interpreter
    from mfulib.core.opdir import OpDir
    from mfulib.verify.correctness import verify_case
    from mfulib.verify.slices import UNVERIFIED
    od = OpDir(req["op_dir"])
    reply = {}
    if not req.get("time_only"):
        t0 = time.monotonic()
        row = verify_case(od, 0, device=device, seed=req["seed"])
        if backend_class(backend_for_device(device)).interpreter:
            row["cpu_adaptations"] = interpreter.adaptations()
        reply.update(verify=row, verify_s=round(time.monotonic() - t0, 3))
        accepted = row.get("status") == UNVERIFIED and req.get("accept_unverified_reference")
        if row.get("status") != "pass" and not accepted:  # unverified: timed only with the user's flag
            return dict(reply, retire=row.get("status") in RETIRE)
    t0 = time.monotonic()
    timing = time_run(od, device, req["seed"], req["max_ms"], req.get("repeats", 3))
    timing["wall_s"] = round(time.monotonic() - t0, 3)
    return dict(reply, time=timing, retire=timing.get("status") in RETIRE)


def serve_main(device: str) -> int:
    """Entry point of the persistent child: ``python -c '... serve_main(device)' --request-fd R --reply-fd W``."""
    from mfulib.backends import backend_class, backend_for_device
    from mfulib.run.worker import die_with_parent
    die_with_parent()  # a killed probe never leaves a candidate running on the device
    interpreted = backend_class(backend_for_device(device)).interpreter
    if interpreted:
        os.environ["TRITON_INTERPRET"] = "1"
    from mfulib.run import compat
    from mfulib.run import interpreter
    from mfulib.run.worker import serve
    compat.install(device)
    if interpreted:
        interpreter.install_launch_hook()
    return serve(lambda req: handle(req, device), sys.argv[1:])
