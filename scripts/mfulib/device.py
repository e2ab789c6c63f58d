"""Backend selection (``--backend auto|npu|cuda|cpu``) as DESIGN.md "Device backends" defines it.

``auto`` picks npu only when torch_npu imports and CANN is set up (``ASCEND_HOME_PATH``), not merely because an
``msprof`` is on PATH; then cuda when torch sees a GPU; else cpu (Triton interpreter). The reason is recorded.
"""
from __future__ import annotations

import os

from .errors import UserError

BACKENDS = ("auto", "npu", "cuda", "cpu")


def npu_ready():
    """(ok, why): torch_npu importable, an NPU visible and ASCEND_HOME_PATH set."""
    if not os.environ.get("ASCEND_HOME_PATH"):
        return False, "ASCEND_HOME_PATH is not set (CANN's set_env.sh not sourced)"
    try:
        import torch_npu  # noqa: F401
        import torch
    except Exception as exc:  # torch_npu absent or CANN libraries missing
        return False, f"torch_npu does not import ({type(exc).__name__}: {exc})"
    if not torch.npu.is_available():
        return False, "torch_npu imports but no NPU is available"
    return True, "torch_npu imports, an NPU is available and ASCEND_HOME_PATH is set"


def resolve_backend(name: str = "auto"):
    """Return (backend, reason). Raises UserError when an explicit backend cannot run here, with the fix."""
    if name not in BACKENDS:
        raise UserError(f"--backend {name!r}: choose one of {', '.join(BACKENDS)}")
    import torch
    if name == "npu":
        ok, why = npu_ready()
        if not ok:
            raise UserError(f"--backend npu: {why} - source <CANN>/set_env.sh and install torch_npu, "
                            "or use --backend cuda/cpu")
        return "npu", why
    if name == "cuda":
        if not torch.cuda.is_available():
            raise UserError("--backend cuda: torch sees no CUDA device - use --backend cpu (Triton interpreter)")
        return "cuda", "--backend cuda"
    if name == "cpu":
        return "cpu", "--backend cpu"
    ok, why = npu_ready()
    if ok:
        return "npu", "auto: " + why
    if torch.cuda.is_available():
        return "cuda", f"auto: no NPU ({why}); torch sees {torch.cuda.get_device_name(0)}"
    return "cpu", f"auto: no NPU ({why}) and no CUDA device: Triton interpreter on CPU"


def device_string(backend: str, device_id: int = 0) -> str:
    """torch device string for a backend and device index (``npu:0``, ``cuda:0``, ``cpu``)."""
    return "cpu" if backend == "cpu" else f"{backend}:{device_id}"


def prepare_process(backend: str) -> None:
    """Process set-up that must precede any Triton kernel definition: the interpreter on cpu."""
    if backend == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
