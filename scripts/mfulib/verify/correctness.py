"""Correctness of ModelNew against Model, per case, with tolerances by dtype (checked before anything is timed).

Metric: normalised max error ``max|out - ref| / max(max|ref|, 1e-6)`` per output tensor, compared with the
tolerance of the case's compute dtype. Stated tolerances (:data:`TOLERANCE`):

* float16 1e-2, bfloat16 2e-2: half-precision outputs round at 2^-11 / 2^-8 relative; accumulation-order
  differences add a few ulps;
* float32 1e-4 where fp32 matmuls are exact (CPU, Triton interpreter, NPU), 1e-2 where an fp32 ``tl.dot`` runs as
  TF32 (10-bit mantissa; CUDA by default, :func:`mfulib.backends.fp32_dot_is_tf32`) - recorded as ``tf32``.

A case that the reference or the implementation rejects (``ValueError("case rejected: ...")``) is reported as
``rejected`` with the reason, one that runs out of memory as ``oom``, any other exception as ``error``
(:func:`mfulib.core.failures.classify`, shared with the collector) - except a reference that runs out of memory on
the whole case: ModelNew then runs it whole and the reference on slices (:mod:`mfulib.verify.slices`; status
``unverified`` when no slice rule fits). Each compared row says how in ``verified_by``: ``full`` (the whole output),
``batch_slice``, ``head_slice`` or ``row_slice``. On cpu the Triton interpreter runs under the launch
hook the collector uses (:func:`mfulib.run.interpreter.install_launch_hook`); each row lists the adaptations its case
needed in ``cpu_adaptations`` (on every backend that interprets Triton).
"""
from __future__ import annotations

import os
import traceback

from mfulib.backends import backend_for_device, fp32_dot_is_tf32, get_backend
from mfulib.core.paths import SCRIPTS_DIR
from mfulib.core.errors import REJECT_PREFIX
from mfulib.core.failures import classify
from mfulib.core.opdir import clone_tensors, tensors_in

TOLERANCE = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-4, "float64": 1e-7}
TOLERANCE_TF32 = 1e-2
DISABLE_DROPOUT_ENV = "MFU_DISABLE_DROPOUT"


def tolerance(dtype: str, backend: str) -> tuple:
    """(tolerance, note) for a compute dtype on a backend (note ``tf32`` where its fp32 matmuls run as TF32)."""
    if fp32_dot_is_tf32(backend, dtype):
        return TOLERANCE_TF32, "tf32"
    return TOLERANCE.get(dtype or "float32", 1e-4), "exact"


def compare_outputs(ref_out, impl_out, tol: float) -> dict:
    """Compare two outputs (tensor or nested list/tuple of tensors). Returns ok, max_norm_err, where."""
    import torch
    refs, impls = tensors_in(ref_out), tensors_in(impl_out)
    if len(refs) != len(impls):
        return {"ok": False, "reason": f"{len(impls)} output tensors, reference has {len(refs)}"}
    worst = 0.0
    for i, (r, o) in enumerate(zip(refs, impls)):
        if tuple(r.shape) != tuple(o.shape):
            return {"ok": False, "reason": f"output {i}: shape {tuple(o.shape)} != reference {tuple(r.shape)}"}
        # compare where the tensors live (a 16x4096x4096 output is 2 GB in float64 on the host)
        r64, o64 = r.detach().to(torch.float64), o.detach().to(r.device, torch.float64)
        if r64.numel() == 0:
            continue
        if torch.isnan(o64).any() and not torch.isnan(r64).any():
            return {"ok": False, "reason": f"output {i}: NaN where the reference is finite", "max_norm_err": float("nan")}
        finite = torch.isfinite(r64) & torch.isfinite(o64)
        scale = max(float(r64[finite].abs().max()) if finite.any() else 0.0, 1e-6)
        err = float((o64[finite] - r64[finite]).abs().max()) / scale if finite.any() else 0.0
        worst = max(worst, err)
    return {"ok": worst <= tol, "max_norm_err": worst, "tol": tol,
            "reason": None if worst <= tol else f"max normalised error {worst:.3g} > tolerance {tol:g}"}


def verify_case(opdir, case_id: int, device: str = "cpu", seed: int = 0, backend: str | None = None) -> dict:
    """Run Model and ModelNew on one case of an :class:`~mfulib.core.opdir.OpDir` and compare.

    Returns ``{"case", "status": pass|fail|rejected|error, "reason", "max_norm_err", "tol", "dtype",
    "inputs_drawn", ...}`` (``inputs_drawn``: :func:`mfulib.core.input_draw.input_draw`'s account - "host", "device:cuda:0",
    or "host (device draw failed: ...)"). Both implementations run on the same inputs (one draw).
    Dropout: ``MFU_DISABLE_DROPOUT=1`` is set for the call; operators with dropout honour it (README).
    ``backend``: the backend name the tolerance is judged for (None: the one of ``device``,
    :func:`mfulib.backends.backend_for_device`).
    """
    import torch
    info = opdir.describe(case_id)
    be = get_backend(backend or backend_for_device(device))
    tol, note = tolerance(info.compute_dtype, be.name)
    row = {"case": case_id, "dtype": info.compute_dtype, "shape": info.shape_str, "tol": tol, "tol_mode": note}
    old = os.environ.get(DISABLE_DROPOUT_ENV)
    os.environ[DISABLE_DROPOUT_ENV] = "1"
    built = []
    try:
        outs, pristine, ref_oom = {}, None, None
        for impl in ("ref", "asc"):
            try:
                # inputs are built once; the implementation gets an untouched copy (a forward that writes into its
                # inputs cannot leak into the other side)
                b = opdir.build_case(case_id, impl=impl, seed=seed, device=device, args=pristine)
                built.append(b)
                if impl == "ref":
                    pristine = clone_tensors(b.args)
                    row["inputs_drawn"] = b.inputs_drawn  # where the inputs were drawn (mfulib.core.input_draw)
                if impl == "asc" and hasattr(b.model, "load_state_dict"):
                    _share_weights(built[0].model, b.model)
                with torch.no_grad():
                    outs[impl] = b.run()
                be.sync()
            except (Exception, SystemExit) as exc:  # rejection / oom / error (sys.exit() in operator code too)
                status, msg = classify(exc)
                if status == "oom" and impl == "ref" and pristine is not None:
                    ref_oom = msg  # the whole reference does not fit: verified on slices below (mfulib.verify.slices)
                    break
                side = "reference" if impl == "ref" else "implementation"
                if status == "rejected":  # "case rejected: <reason>" -> "<side>: <reason>"
                    msg = msg[len(REJECT_PREFIX):].strip()
                row.update(status=status, reason=f"{side}: {msg}")
                if status == "error":
                    row["traceback"] = traceback.format_exc(limit=6)
                return row
        if ref_oom is not None:
            from mfulib.verify.slices import verify_on_slices
            return verify_on_slices(opdir, case_id, built[0], pristine, device, seed, be, tol, row, ref_oom,
                                    _share_weights, compare_outputs)
        cmp = compare_outputs(outs["ref"], outs["asc"], tol)
        row.update(status="pass" if cmp["ok"] else "fail", reason=cmp.get("reason"),
                   max_norm_err=cmp.get("max_norm_err"), verified_by="full")
        return row
    finally:
        for b in built:
            b.close()
        if old is None:
            os.environ.pop(DISABLE_DROPOUT_ENV, None)
        else:
            os.environ[DISABLE_DROPOUT_ENV] = old


def _share_weights(ref_model, impl_model):
    """Give ModelNew the reference's parameters when both declare the same state (names and shapes), as
    benchmark harnesses do; otherwise each keeps the weights it built from the same seed."""
    try:
        rs, is_ = ref_model.state_dict(), impl_model.state_dict()
    except Exception:
        return
    if rs and rs.keys() == is_.keys() and all(rs[k].shape == is_[k].shape for k in rs):
        impl_model.load_state_dict(rs)


# ------------------------------------------------------------------------------------------ isolated runs
# A forward that segfaults, calls os._exit() or hangs must not take the other cases with it (bad-input policy):
# the cases run in a child process that appends one JSON line per finished case; the parent watches it with a
# per-case timeout and restarts a child after the case that killed or hung the last one. A case that ran out of
# memory, or raised an error that may have left a sticky device fault, ends its child after its row
# (RETIRE_STATUSES): the next case starts in a fresh one. Every child shares one Triton compile cache with the
# collector's workers (mfulib.run.worker.child_env).
RETIRE_STATUSES = ("oom", "error")

def child_main(spec_path: str) -> None:
    """Entry point of the child: run the cases of ``spec`` in order, one ``start``/``row`` line each."""
    import json
    with open(spec_path) as f:
        spec = json.load(f)
    backend = get_backend(spec["backend"])
    backend.prepare_process()
    from mfulib.run import compat
    from mfulib.run import interpreter
    from mfulib.core.opdir import OpDir
    compat.install(spec["device"])
    if backend.interpreter:  # the collector's launch hook (interpreter adaptations), installed before any kernel
        interpreter.install_launch_hook()
    od = OpDir(spec["op_dir"])
    with open(spec["out"], "a", encoding="utf-8") as out:
        for case_id in spec["cases"]:
            out.write(json.dumps({"start": case_id}) + "\n")
            out.flush()
            interpreter.reset()
            try:
                row = verify_case(od, case_id, device=spec["device"], seed=spec["seed"], backend=backend.name)
            except BaseException as exc:  # SystemExit from operator code included
                if isinstance(exc, KeyboardInterrupt):
                    raise
                status, msg = classify(exc)
                row = {"case": case_id, "status": status, "reason": msg}
            if backend.interpreter:
                row["cpu_adaptations"] = interpreter.adaptations()
            out.write(json.dumps({"row": row}, default=str) + "\n")
            out.flush()
            if row.get("status") in RETIRE_STATUSES:  # the parent restarts a fresh child for the remaining cases
                return
            backend.empty_cache()


def verify_isolated(op_dir: str, case_ids: list, device: str, seed: int = 0, case_timeout_s: float = 600.0,
                    progress=None, backend: str | None = None) -> list:
    """Verify ``case_ids`` in child processes; a crash or a hang is recorded for its case and the rest go on.

    ``backend``: the backend name (None: the one of ``device``, :func:`mfulib.backends.backend_for_device`).
    Returns one row per case (see :func:`verify_case`); statuses add ``crashed`` and ``timeout``.
    """
    import json
    import subprocess
    import sys
    import tempfile
    import time

    from mfulib.run.worker import child_env
    scripts = SCRIPTS_DIR
    rows, remaining = {}, list(case_ids)
    tmp = tempfile.mkdtemp(prefix="mfu_verify_")
    try:
        while remaining:
            out = os.path.join(tmp, f"rows{len(rows)}.jsonl")
            spec = os.path.join(tmp, "spec.json")
            with open(spec, "w") as f:
                json.dump({"op_dir": op_dir, "cases": remaining, "device": device, "seed": seed, "out": out,
                           "backend": backend or backend_for_device(device)}, f)
            # TMPDIR: the child's staging dirs live under ``tmp``, so a killed child leaves nothing behind; its
            # stderr goes to a file (a pipe read only at the end would block a chatty child: a false "timeout")
            err_path = os.path.join(tmp, f"stderr{len(rows)}.log")
            with open(err_path, "w") as err_file:
                child = subprocess.Popen([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                                          "from mfulib.verify.correctness import child_main; child_main(sys.argv[2])", scripts,
                                          spec], stdout=subprocess.DEVNULL, stderr=err_file,
                                         env=dict(child_env(os.environ), TMPDIR=tmp))
            current, since, seen, retired = None, time.monotonic(), 0, False
            while True:
                rc = child.poll()
                text = open(out).read() if os.path.exists(out) else ""
                lines = text.split("\n")[:-1]  # complete lines only: the last one may be half-written
                for line in lines[seen:]:
                    msg = json.loads(line)
                    if "start" in msg:
                        current, since = msg["start"], time.monotonic()
                    else:
                        rows[msg["row"]["case"]] = msg["row"]
                        remaining.remove(msg["row"]["case"])
                        current = None
                        retired = msg["row"].get("status") in RETIRE_STATUSES
                        since = time.monotonic()  # the next case (or the child's exit) has its own limit
                        if progress:
                            progress(msg["row"])
                seen = len(lines)
                if rc is not None:
                    break
                if time.monotonic() - since > case_timeout_s:  # a case, or the start-up before the first one
                    child.kill()
                    child.wait()
                    rc = "timeout"
                    break
                time.sleep(0.05)
            with open(err_path, errors="replace") as f:
                err = f.read().strip().splitlines()[-3:]
            if current is None and remaining and rc is not None and not (retired and rc == 0):
                current = remaining[0]  # died (or hung) before it could say which case started
            if current is not None and current in remaining:
                if rc == "timeout":
                    row = {"case": current, "status": "timeout",
                           "reason": f"no result within --case-timeout-s {case_timeout_s:g} s (killed)"}
                else:
                    row = {"case": current, "status": "crashed",
                           "reason": f"the process died during this case (exit status {rc})"
                                     + (f": {' | '.join(err)}" if err else "")}
                info = None
                try:
                    from mfulib.core.opdir import OpDir
                    info = OpDir(op_dir).describe(current)
                except Exception:
                    pass
                if info is not None:
                    row.update(dtype=info.compute_dtype, shape=info.shape_str)
                rows[current] = row
                remaining.remove(current)
                if progress:
                    progress(row)
    finally:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return [rows[c] for c in case_ids if c in rows]
