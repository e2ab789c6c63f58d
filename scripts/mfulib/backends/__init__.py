"""Device backends behind one interface (:class:`mfulib.backends.base.Backend`): npu (msprof), cuda
(torch.profiler/CUPTI), cpu (Triton interpreter + launch hook); :mod:`.runner` runs each case in a child process."""
from __future__ import annotations

from mfulib.core.errors import UserError

NAMES = ("npu", "cuda", "cpu")


def get_backend(name: str, **opts):
    """The backend object for ``name`` (``npu`` accepts ``aic_metrics`` and ``msprof_path``)."""
    if name == "cpu":
        from mfulib.backends.cpu import CpuBackend
        return CpuBackend()
    if name == "cuda":
        from mfulib.backends.cuda import CudaBackend
        return CudaBackend()
    if name == "npu":
        from mfulib.backends.npu import NpuBackend
        return NpuBackend(**opts)
    raise UserError(f"--backend {name!r}: choose auto, npu, cuda or cpu")


def select_backend(requested: str = "auto", **npu_opts):
    """(backend object, reason, environment facts) for ``--backend``; raises UserError with the fix.

    ``npu`` explicitly: the CANN checks of :func:`mfulib.backends.npu.check_cann` (torch_npu is needed by the
    child on the device). ``auto``: npu only when torch_npu imports, an NPU is visible and CANN is set up
    (:func:`mfulib.core.device.resolve_backend`) - then the CANN checks must pass too - else cuda, else cpu.
    """
    if requested == "npu":
        b = get_backend("npu", **npu_opts)
        return b, "--backend npu", b.check()
    from mfulib.core.device import resolve_backend
    name, reason = resolve_backend(requested)
    b = get_backend(name, **(npu_opts if name == "npu" else {}))
    return b, reason, b.check()
