"""Run Triton-Ascend operator files on CUDA and CPU: a documented compatibility layer.

Public generated ``ModelNew`` files for Ascend use standard ``triton.language`` in their kernels, but their host
code touches the NPU (README "Running Triton-Ascend implementations on CUDA and CPU"):
``torch.device("npu:0")``, ``.npu()``, ``torch.npu.is_available()``, ``import torch_npu`` and
``torch_npu.npu.npu_config.get_device_limit(0)["cube_core_num" / "vector_core_num"]`` to size persistent grids.

:func:`install` makes such files run unchanged on the target device:

* ``torch.utils.rename_privateuse1_backend("npu")`` so ``"npu"`` device strings parse;
* ``Tensor.to`` / ``Module.to`` / ``.npu()`` / tensor factory functions (``device=``) redirect npu devices to the
  target device;
* a stand-in ``torch.npu`` namespace (availability, device count, synchronize, seeding, cache calls);
* a stand-in ``torch_npu`` module whose ``get_device_limit`` / ``get_device_properties`` (and Triton's
  ``driver.active.utils.get_device_properties()["num_aicore" / "num_vectorcore"]``) report **the real device's
  core counts** (CUDA: SMs as cube cores and 2 x SMs as vector cores, mirroring the 1:2 cube:vector ratio of A2;
  CPU: ``os.cpu_count()`` and twice that). Grid sizing changes MFU (a grid sized for Ascend's 24 cube cores
  leaves most of an H200's 132 SMs idle; bench/RESULTS.md, "The MHA example's GEMM under ncu": 482 TFLOP/s with one
  program per SM, 587 with one per tile), so every count handed out is recorded in :data:`REPORT`.

On a real NPU (``torch_npu`` importable) nothing is patched. Install it in the process that runs the operator,
before the operator files are imported; it is process-global and meant for the collector's child processes,
tests and the verification runner.
"""
from __future__ import annotations

import functools
import os
import sys
import types

REPORT: dict = {}
_INSTALLED = {"device": None}

_FACTORIES = ("empty", "zeros", "ones", "full", "rand", "randn", "randint", "randperm", "arange", "linspace",
              "tensor", "as_tensor", "empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
              "randn_like", "randint_like", "empty_strided", "eye")


def device_runtime(device):
    """The torch device module of ``device`` (``torch.get_device_module``: ``torch.cuda`` for a CUDA or ROCm
    device) when it is a device with its own runtime - device properties, streams, caches, seeds - else None (the
    host, whose ops are synchronous)."""
    import torch
    mod = torch.get_device_module(torch.device(device))
    return mod if hasattr(mod, "get_device_properties") else None


def core_counts(device: str) -> dict:
    """Core counts reported to operator code for ``device`` ("cuda", "cuda:N", "cpu"), with their source."""
    import torch
    dev = torch.device(device)
    rt = device_runtime(dev)
    if rt is not None:
        idx = dev.index if dev.index is not None else rt.current_device()
        props = rt.get_device_properties(idx)
        sms = int(props.multi_processor_count)
        return {"cube_core_num": sms, "vector_core_num": 2 * sms, "device_name": props.name,
                "source": f"torch.{dev.type}.get_device_properties({idx}).multi_processor_count={sms}; "
                          "vector = 2 x SMs"}
    n = os.cpu_count() or 1
    return {"cube_core_num": n, "vector_core_num": 2 * n, "device_name": "cpu",
            "source": f"os.cpu_count()={n}; vector = 2 x cores"}


def _npu_available() -> bool:
    try:
        import torch_npu  # noqa: F401
        import torch
        return bool(torch.npu.is_available())
    except Exception:
        return False


def install(device: str = "cpu") -> dict:
    """Install the layer for ``device`` (``"cuda"``, ``"cuda:0"``, ``"cpu"``); returns :data:`REPORT`.

    Idempotent for the same device; raises RuntimeError if asked for a second, different device in one process.
    """
    import torch
    if _INSTALLED["device"] is not None:
        if _INSTALLED["device"] != device:
            raise RuntimeError(f"compat layer already installed for {_INSTALLED['device']}, not {device}")
        return REPORT
    if _npu_available():
        REPORT.update({"active": False, "reason": "torch_npu is importable and an NPU is available: no patching"})
        _INSTALLED["device"] = device
        return REPORT
    target = torch.device(device)
    rt = device_runtime(target)  # None on the host
    if rt is not None and target.index is None:
        target = torch.device(target.type, rt.current_device())
    counts = core_counts(str(target))
    REPORT.update({"active": True, "target_device": str(target), "cube_core_num": counts["cube_core_num"],
                   "vector_core_num": counts["vector_core_num"], "core_count_source": counts["source"],
                   "device_limit_queries": 0, "patched": []})

    # 1. "npu" device strings parse (privateuse1 renamed once per process)
    try:
        if torch._C._get_privateuse1_backend_name() in ("privateuse1", "privateuseone"):
            torch.utils.rename_privateuse1_backend("npu")
            REPORT["patched"].append("rename_privateuse1_backend('npu')")
    except Exception as exc:  # pragma: no cover - torch without the API
        REPORT["patched"].append(f"rename_privateuse1_backend failed: {exc}")

    def map_device(d):
        if d is None:
            return d
        if isinstance(d, torch.device):
            return target if d.type in ("npu", "privateuseone") else d
        if isinstance(d, str) and d.split(":")[0] == "npu":
            return target
        if isinstance(d, int):  # .to(0) / .cuda(0) style index
            return target
        return d

    def fix_args(args, kwargs):
        if "device" in kwargs:
            kwargs["device"] = map_device(kwargs["device"])
        args = tuple(map_device(a) if (isinstance(a, torch.device) or (isinstance(a, str) and a.startswith("npu")))
                     else a for a in args)
        return args, kwargs

    # 2. Tensor.to / Module.to / factories redirect npu devices
    orig_tensor_to = torch.Tensor.to

    @functools.wraps(orig_tensor_to)
    def tensor_to(self, *args, **kwargs):
        args, kwargs = fix_args(args, kwargs)
        return orig_tensor_to(self, *args, **kwargs)
    torch.Tensor.to = tensor_to

    orig_module_to = torch.nn.Module.to

    @functools.wraps(orig_module_to)
    def module_to(self, *args, **kwargs):
        args, kwargs = fix_args(args, kwargs)
        return orig_module_to(self, *args, **kwargs)
    torch.nn.Module.to = module_to

    torch.Tensor.npu = lambda self, *a, **k: orig_tensor_to(self, target, non_blocking=k.get("non_blocking", False))
    torch.nn.Module.npu = lambda self, *a, **k: orig_module_to(self, target)
    torch.Tensor.is_npu = property(lambda self: self.device == target or self.device.type == target.type)
    REPORT["patched"].append("Tensor.to/Module.to/.npu()/Tensor.is_npu")

    # torch caches its list of factory functions (for `with torch.device(...)` / set_default_device) on first use:
    # fill that cache with the originals first, or the meta-device context would meet our wrappers and allocate
    try:
        from torch.utils._device import _device_constructors
        _device_constructors()
    except Exception:  # pragma: no cover - older torch without the helper
        pass
    for name in _FACTORIES:
        fn = getattr(torch, name, None)
        if fn is None:
            continue

        def make(fn):
            @functools.wraps(fn)
            def factory(*args, **kwargs):
                if "device" in kwargs:
                    kwargs["device"] = map_device(kwargs["device"])
                return fn(*args, **kwargs)
            return factory
        setattr(torch, name, make(fn))
    REPORT["patched"].append("torch factory functions (device=)")

    # 3. torch.npu stand-in
    def sync(*_a, **_k):
        if rt is not None:
            rt.synchronize(target)

    def limits(*_a, **_k):
        REPORT["device_limit_queries"] += 1
        return {"cube_core_num": counts["cube_core_num"], "vector_core_num": counts["vector_core_num"]}

    def props(*_a, **_k):
        REPORT["device_limit_queries"] += 1
        base = rt.get_device_properties(target) if rt is not None else None
        return types.SimpleNamespace(
            name=counts["device_name"], cube_core_num=counts["cube_core_num"],
            vector_core_num=counts["vector_core_num"],
            total_memory=getattr(base, "total_memory", 0), L2_cache_size=getattr(base, "L2_cache_size", 0))

    npu = types.ModuleType("torch.npu")
    npu.__doc__ = "mfulib.run.compat stand-in for torch.npu (redirects to %s)" % target
    npu.is_available = lambda: True
    npu.device_count = lambda: rt.device_count() if rt is not None else 1
    npu.current_device = lambda: target.index or 0
    npu.set_device = lambda *_a, **_k: None
    npu.synchronize = sync
    # torch.manual_seed() calls these for the renamed backend: seed the target device itself, never
    # torch.manual_seed again (that would recurse)
    npu.manual_seed = npu.manual_seed_all = (
        (lambda seed: rt.manual_seed_all(seed)) if rt is not None else (lambda seed: None))
    npu.empty_cache = lambda: rt.empty_cache() if rt is not None else None
    npu.get_device_name = lambda *_a, **_k: counts["device_name"]
    npu.get_device_properties = props
    npu.get_device_limit = limits
    npu.is_bf16_supported = lambda: True
    npu._is_in_bad_fork = lambda: False  # lets torch.manual_seed() seed the renamed backend without a warning
    npu.device = lambda *_a, **_k: torch.device(target)
    npu.current_stream = ((lambda *_a, **_k: rt.current_stream(target)) if rt is not None
                          else (lambda *_a, **_k: None))
    npu_config = types.ModuleType("torch_npu.npu.npu_config")
    npu_config.get_device_limit = limits
    npu.npu_config = npu_config
    npu.utils = types.SimpleNamespace(get_device_limit=limits, get_device_properties=props)
    torch.npu = npu
    sys.modules["torch.npu"] = npu

    # 4. torch_npu stand-in (only the host-side helpers generated implementations call)
    torch_npu = types.ModuleType("torch_npu")
    torch_npu.__doc__ = "mfulib.run.compat stand-in for torch_npu (no NPU here; see mfulib/run/compat.py)"
    torch_npu.__mfu_standin__ = True
    torch_npu.npu = npu
    for modname, mod in (("torch_npu", torch_npu), ("torch_npu.npu", npu), ("torch_npu.npu.npu_config", npu_config),
                         ("torch_npu.npu.utils", npu.utils)):
        sys.modules[modname] = mod
    REPORT["patched"].append("torch.npu and torch_npu stand-ins")
    REPORT["patched"].append(_triton_device_properties(target, counts))
    _INSTALLED["device"] = device
    return REPORT


class _InterpreterDriver:
    """Stand-in for ``triton.runtime.driver.active`` under the interpreter, which has no driver (``0 active
    drivers``): only the host-side queries Triton-Ascend code makes (``utils.get_device_properties``, the current
    device). Any other attribute (compiling, benchmarking) raises AttributeError naming the reason."""

    def __init__(self, properties):
        self.utils = types.SimpleNamespace(get_device_properties=properties)

    def get_current_device(self):
        return 0

    def get_active_torch_device(self):
        import torch
        return torch.device("cpu")

    def __getattr__(self, name):
        raise AttributeError(f"triton.runtime.driver.active.{name}: the Triton interpreter has no driver; "
                           "mfulib.run.compat answers only utils.get_device_properties()")


def _triton_device_properties(target, counts) -> str:
    """Triton-Ascend code also sizes grids from ``triton.runtime.driver.active.utils.get_device_properties(
    torch.npu.current_device())["num_aicore" / "num_vectorcore"]`` (triton-ascend's driver keys; used so in
    vllm-ascend ``vllm_ascend/ops/triton/triton_utils.py`` and sgl-kernel-npu ``triton_utils.py``). Answer those
    keys with the same counts as ``get_device_limit`` (recorded in ``device_limit_queries``): on CUDA added to the
    real driver's dict, under the interpreter from a stand-in driver. Returns the line for ``REPORT["patched"]``;
    never raises (a Triton without these internals keeps its own behaviour, and the line says so)."""
    try:
        from triton.runtime import driver as triton_driver
    except Exception as exc:  # no triton: nothing to adapt
        return f"triton driver properties not adapted ({type(exc).__name__}: {exc})"
    extra = {"num_aicore": counts["cube_core_num"], "num_vectorcore": counts["vector_core_num"]}
    try:
        if device_runtime(target) is not None:  # a compiled Triton driver: add the Ascend keys to its answers
            utils = triton_driver.active.utils
            orig = utils.get_device_properties

            def cuda_props(device_index=None, *_a, **_k):
                REPORT["device_limit_queries"] += 1
                idx = target.index if device_index is None else int(device_index)
                return dict(orig(idx), **extra)
            utils.get_device_properties = cuda_props
            return "triton driver.active.utils.get_device_properties: + num_aicore/num_vectorcore"
        if os.environ.get("TRITON_INTERPRET") == "1" and triton_driver._active is None:
            try:
                triton_driver.active  # noqa: B018 - a real driver (if any) stays
                return "triton driver properties not adapted: a Triton driver is active"
            except RuntimeError:
                pass

            def cpu_props(*_a, **_k):
                REPORT["device_limit_queries"] += 1
                return dict(extra, multiprocessor_count=counts["cube_core_num"])
            triton_driver.set_active(_InterpreterDriver(cpu_props))
            return "triton driver.active: interpreter stand-in answering utils.get_device_properties"
    except Exception as exc:  # noqa: BLE001 - descriptive adaptation, never fatal
        return f"triton driver properties not adapted ({type(exc).__name__}: {exc})"
    return "triton driver properties not adapted: not interpreting and not CUDA"
