"""Correctness of ModelNew against Model, per case, with tolerances by dtype (checked before anything is timed).

Metric: normalised max error ``max|out - ref| / max(max|ref|, 1e-6)`` per output tensor, compared with the
tolerance of the case's compute dtype. Stated tolerances (:data:`TOLERANCE`):

* float16 1e-2, bfloat16 2e-2: half-precision outputs round at 2^-11 / 2^-8 relative; accumulation-order
  differences add a few ulps;
* float32 1e-4 where fp32 matmuls are exact (CPU, Triton interpreter, NPU), 1e-2 on CUDA, where Triton's
  ``tl.dot`` on fp32 inputs uses TF32 (10-bit mantissa) by default (environment notes) - recorded as ``tf32``.

A case that the reference or the implementation rejects (``ValueError("case rejected: ...")``) is reported as
``rejected`` with the reason; any other exception is ``error``.
"""
from __future__ import annotations

import os
import traceback

from .errors import rejection_reason
from .opdir import clone_tensors

TOLERANCE = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-4, "float64": 1e-7}
TOLERANCE_TF32 = 1e-2
DISABLE_DROPOUT_ENV = "MFU_DISABLE_DROPOUT"


def tolerance(dtype: str, device: str) -> tuple:
    """(tolerance, note) for a compute dtype on a device type."""
    if dtype == "float32" and str(device).startswith("cuda") and os.environ.get("TRITON_F32_DEFAULT", "tf32") != "ieee":
        return TOLERANCE_TF32, "tf32"
    return TOLERANCE.get(dtype or "float32", 1e-4), "exact"


def _tensors(out):
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _tensors(v)]
    return []


def compare_outputs(ref_out, impl_out, tol: float) -> dict:
    """Compare two outputs (tensor or nested list/tuple of tensors). Returns ok, max_norm_err, where."""
    import torch
    refs, impls = _tensors(ref_out), _tensors(impl_out)
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


def verify_case(opdir, case_id: int, device: str = "cpu", seed: int = 0) -> dict:
    """Run Model and ModelNew on one case of an :class:`~mfulib.opdir.OpDir` and compare.

    Returns ``{"case", "status": pass|fail|rejected|error, "reason", "max_norm_err", "tol", "dtype", ...}``.
    Dropout: ``MFU_DISABLE_DROPOUT=1`` is set for the call; operators with dropout honour it (README).
    """
    import torch
    info = opdir.describe(case_id)
    tol, note = tolerance(info.compute_dtype, device)
    row = {"case": case_id, "dtype": info.compute_dtype, "shape": info.shape_str, "tol": tol, "tol_mode": note}
    old = os.environ.get(DISABLE_DROPOUT_ENV)
    os.environ[DISABLE_DROPOUT_ENV] = "1"
    built = []
    try:
        outs, pristine = {}, None
        for impl in ("ref", "asc"):
            try:
                # inputs are built once; the implementation gets an untouched copy (a forward that writes into its
                # inputs cannot leak into the other side)
                b = opdir.build_case(case_id, impl=impl, seed=seed, device=device, args=pristine)
                built.append(b)
                if impl == "ref":
                    pristine = clone_tensors(b.args)
                if impl == "asc" and hasattr(b.model, "load_state_dict"):
                    _share_weights(built[0].model, b.model)
                with torch.no_grad():
                    outs[impl] = b.run()
                if str(device).startswith("cuda"):
                    torch.cuda.synchronize()
            except Exception as exc:  # classify: rejection vs crash
                reason = rejection_reason(exc)
                side = "reference" if impl == "ref" else "implementation"
                if reason is not None:
                    row.update(status="rejected", reason=f"{side}: {reason}")
                else:
                    row.update(status="error", reason=f"{side}: {type(exc).__name__}: {exc}",
                               traceback=traceback.format_exc(limit=6))
                return row
        cmp = compare_outputs(outs["ref"], outs["asc"], tol)
        row.update(status="pass" if cmp["ok"] else "fail", reason=cmp.get("reason"),
                   max_norm_err=cmp.get("max_norm_err"))
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
