"""The probe's child process for gates 3 and 4: verify one staged candidate, then time one ModelNew run.

Runs in its own process (a crash, a hang or an out-of-memory of one candidate never takes the probe with it) on a
staged work directory whose case files hold only the candidate (case 0). Writes JSON lines to ``spec["out"]``:
``{"verify": row}`` (:func:`mfulib.verify.verify_case`: Model vs ModelNew within verify's tolerance, dropout off,
statuses pass | fail | rejected | oom | error), then, when it passed, ``{"time": {"runs_ms": [...], "time_ms":
median, "status": "ok"}}`` or a status oom | error. Timing: one warm-up call (compilation), then up to
``spec["repeats"]`` calls, stopped early once their sum exceeds ``spec["max_ms"]``; each call is bracketed by a
device synchronize (wall clock of one synchronised run - this gate bounds the cost of later profiling, it is not
the kernel time the collector measures).
"""
from __future__ import annotations

import json
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


def _emit(out, obj):
    out.write(json.dumps(obj, default=str) + "\n")
    out.flush()


def time_run(od, device: str, seed: int, max_ms: float, repeats: int) -> dict:
    """{"status": "ok", "time_ms", "runs_ms"} of ModelNew on case 0 of ``od``, or {"status": oom|error, "reason"}."""
    import torch

    from .failures import classify
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


def child_main(spec_path: str) -> None:
    """Entry point: ``python -c 'from mfulib.probe_child import child_main; child_main(spec)'``."""
    with open(spec_path) as f:
        spec = json.load(f)
    device = spec["device"]
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    from . import compat, interpreter
    from .opdir import OpDir
    from .verify import verify_case
    compat.install(device)
    if device == "cpu":
        interpreter.install_launch_hook()
    od = OpDir(spec["op_dir"])
    with open(spec["out"], "a", encoding="utf-8") as out:
        row = verify_case(od, 0, device=device, seed=spec["seed"])
        if device == "cpu":
            row["cpu_adaptations"] = interpreter.adaptations()
        _emit(out, {"verify": row})
        if row.get("status") == "pass":
            _emit(out, {"time": time_run(od, device, spec["seed"], spec["max_ms"], spec.get("repeats", 3))})


if __name__ == "__main__":  # pragma: no cover - run through -c by mfulib.probe
    child_main(sys.argv[1])
