"""The probe's child process for gates 3 and 4: verify a staged candidate, then time ModelNew on it.

A persistent worker (:func:`serve_main`, the request/reply protocol of :mod:`mfulib.run.worker`; the parent is
:class:`mfulib.search.probe_gates.GateWorker`): Python, ``import torch``, the device context and the compat layer are
set up once, then candidate after candidate is served. A request names a staged work directory whose case files hold
only the candidate (case 0); the reply carries ``verify`` (:func:`mfulib.verify.correctness.verify_case`: Model vs
ModelNew within verify's tolerance, dropout off; statuses pass | fail | rejected | oom | error; absent for ``time_only``
requests), ``verify_s``, and - when it passed - ``time``: ``{"runs_ms": [...], "time_ms": median, "status": "ok",
"wall_s"}`` or a status oom | error. An out-of-memory or error status retires the child after its reply (a sticky device
fault must not reach the next candidate). Timing: one warm-up call (compilation), then up to ``repeats`` calls, stopped
early once their sum exceeds ``max_ms``; each call is bracketed by a device synchronize (wall clock of one synchronised
run - this gate bounds the cost of later profiling, it is not the kernel time the collector measures).
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
    """{"status": "ok", "time_ms", "runs_ms"} of ModelNew on case 0 of ``od``, or {"status": oom|error, "reason"}."""
    import torch

    from mfulib.core.failures import classify
    built = None
    try:
        built = od.build_case(0, impl="asc", seed=seed, device=device)
        runs = []
        with torch.no_grad():
            built.run()
            _sync(device)
            for _ in range(max(1, repeats)):
                t0 = time.perf_counter()
                built.run()
                _sync(device)
                runs.append((time.perf_counter() - t0) * 1e3)
                if sum(runs) > max_ms:
                    break
        return {"status": "ok", "time_ms": statistics.median(runs), "runs_ms": runs}
    except (Exception, SystemExit) as exc:
        status, msg = classify(exc)
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
