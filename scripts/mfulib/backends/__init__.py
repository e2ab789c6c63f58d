"""Device backends behind one interface (:class:`mfulib.backends.base.Backend`): npu (msprof), cuda
(torch.profiler/CUPTI), cpu (Triton interpreter + launch hook); :mod:`.runner` runs each case in a child process.

The registry maps a ``--backend`` name to its class. Callers ask the class for a capability
(:func:`backend_class` ``(name).runs_bf16``, ``.accelerator``, :func:`fp32_dot_is_tf32`, ...) or an object for a
method (:func:`get_backend`), never compare the name. More backends are registered by :func:`register`, or by the
environment variable :data:`PLUGINS_ENV` (``name=module:Class[,name=module:Class...]``; the module must be importable
in every process of a run, the collector's children included, which inherit the environment).

Selection (``--backend auto|<name>``, :func:`resolve_backend`): ``auto`` takes the first built-in backend whose
:meth:`~mfulib.backends.base.Backend.available` says yes, in the order npu (only when torch_npu imports and CANN is
set up - ``ASCEND_HOME_PATH`` - not merely because an ``msprof`` is on PATH), cuda, cpu; the reason is recorded.
"""
from __future__ import annotations

import importlib
import os

from mfulib.core.errors import UserError

NAMES = ("npu", "cuda", "cpu")  # the built-in backends, in the order --backend auto tries them
PLUGINS_ENV = "MFU_BACKEND_PLUGINS"
_REGISTERED: dict = {}


def register(name: str, cls) -> None:
    """Register ``cls`` (a :class:`~mfulib.backends.base.Backend` subclass) as backend ``name``. The class is bound
    to that name (``cls.name``; a subclass named so when it carries another name), so every record, cache key and
    check says the name it was asked by."""
    _REGISTERED[name] = cls if getattr(cls, "name", None) == name else type(cls.__name__, (cls,), {"name": name})


def _builtin(name: str):
    if name == "npu":
        from mfulib.backends.npu import NpuBackend
        return NpuBackend
    if name == "cuda":
        from mfulib.backends.cuda import CudaBackend
        return CudaBackend
    from mfulib.backends.cpu import CpuBackend
    return CpuBackend


def _plugins() -> dict:
    """{name: "module:Class"} of :data:`PLUGINS_ENV`; UserError for an entry that is not ``name=module:Class``."""
    out = {}
    for item in filter(None, (t.strip() for t in os.environ.get(PLUGINS_ENV, "").split(","))):
        name, _, target = item.partition("=")
        if not name or ":" not in target:
            raise UserError(f"{PLUGINS_ENV}={os.environ[PLUGINS_ENV]!r}: give name=module:Class entries separated "
                            "by commas")
        out[name.strip()] = target.strip()
    return out


def names() -> tuple:
    """Every backend name this process knows: the built-in ones, then the registered and plugged-in ones."""
    return tuple(dict.fromkeys(NAMES + tuple(_REGISTERED) + tuple(_plugins())))


def backend_class(name: str):
    """The class of backend ``name`` (capabilities are class attributes: nothing is created or probed).

    Raises UserError naming the choices for an unknown name, or for a plug-in that does not import."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name in NAMES:
        return _builtin(name)
    target = _plugins().get(name)
    if target is None:
        raise UserError(f"--backend {name!r}: choose auto, {', '.join(names())}")
    module, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"{PLUGINS_ENV}: backend {name!r} = {target} does not load ({type(exc).__name__}: "
                        f"{exc})") from exc
    register(name, cls)
    return _REGISTERED[name]


def backend_for_device(device) -> str:
    """The built-in backend whose torch device strings ``device`` is one of (``cuda:0`` -> cuda, ``npu:1`` -> npu,
    ``cpu`` -> cpu): for callers that hold a device string only. UserError for another device type."""
    kind = str(device).split(":")[0]
    for n in NAMES:
        if _builtin(n).device_string(0).split(":")[0] == kind:
            return n
    raise UserError(f"device {device!r}: no backend runs torch device type {kind!r}")


def get_backend(name: str, **opts):
    """The backend object for ``name`` (``npu`` accepts ``aic_metrics`` and ``msprof_path``)."""
    return backend_class(name)(**opts)


def fp32_dot_is_tf32(backend: str, dtype) -> bool:
    """Does an fp32 matmul (``tl.dot``) of a case of compute dtype ``dtype`` run as TF32 / HF32 on ``backend``?
    The one rule (:meth:`mfulib.backends.base.Backend.fp32_dot_is_reduced`); False for an unknown or empty name."""
    try:
        return bool(backend) and backend_class(backend).fp32_dot_is_reduced(dtype)
    except UserError:
        return False


def validates_only(backend, accelerator=None) -> bool:
    """Are numbers recorded by ``backend`` (a name from a JSON record) the kind that validate the pipeline only -
    the CPU interpreter's, never compared with accelerator numbers? ``accelerator``: the record's own device field
    (``device.accelerator``), which decides where given; else the registry; False for None or a name this process
    does not know."""
    if accelerator is not None:
        return not accelerator
    try:
        return bool(backend) and not backend_class(backend).accelerator
    except UserError:
        return False


def matrix_unit(backend) -> str:
    """The word for ``backend``'s matrix unit in reports (``cube`` on Ascend, else ``tensor``)."""
    try:
        return (backend and backend_class(backend).matrix_unit) or "tensor"
    except UserError:
        return "tensor"


def resolve_backend(name: str = "auto"):
    """Return (backend name, reason) for ``--backend``. Raises UserError when an explicit backend cannot run here,
    with the fix (:attr:`~mfulib.backends.base.Backend.unavailable_fix`)."""
    if name != "auto":
        cls = backend_class(name)
        if cls.accelerator:  # the host needs no probe: no torch import in the parent (2-3 s per step)
            ok, why = cls.available()
            if not ok:
                raise UserError(f"--backend {name}: {why} - {cls.unavailable_fix}")
        return name, f"--backend {name}"
    missing = []
    for n in NAMES:
        ok, why = _builtin(n).available()
        if ok:
            return n, "auto: " + (f"no {' and no '.join(missing)}; {why}" if missing else why)
        missing.append(f"{n.upper()} ({why})")
    raise UserError("--backend auto: no backend can run here: " + "; ".join(missing))


def device_string(backend: str, device_id: int = 0) -> str:
    """torch device string of device ``device_id`` of ``backend`` (``npu:0``, ``cuda:0``, ``cpu``)."""
    return backend_class(backend).device_string(device_id)


def prepare_process(backend: str) -> None:
    """Process set-up that must precede any Triton kernel definition: the interpreter where the backend has it."""
    backend_class(backend).prepare_process()


def device_identity(backend: str, index: int = 0) -> dict:
    """Identity of device ``index`` of ``backend``: ``backend``, ``index``, ``accelerator``, name, ``key``
    (``<backend>-<slug(name)>``: names the peak cache file, so two devices of one model share a calibration), core
    counts, memory, versions (:meth:`mfulib.backends.base.Backend.device_identity`)."""
    return get_backend(backend).device_identity(index)


def select_backend(requested: str = "auto", **opts):
    """(backend object, reason, environment facts) for ``--backend``; raises UserError with the fix.

    ``auto`` resolves first (:func:`resolve_backend`). A backend whose environment has its own checks
    (:meth:`~mfulib.backends.base.Backend.check`; npu: the CANN checks of :func:`mfulib.backends.npu.check_cann`,
    torch_npu being needed only by the child on the device) is asked by name with those checks alone. ``opts``
    (npu: ``aic_metrics``, ``msprof_path``) go to a backend that takes options.
    """
    cls = backend_class(requested) if requested != "auto" else None
    if cls is not None and cls.checks_environment:
        b = cls(**opts)
        return b, f"--backend {requested}", b.check()
    name, reason = resolve_backend(requested)
    cls = backend_class(name)
    b = cls(**(opts if cls.checks_environment else {}))
    return b, reason, b.check()
