"""Run Triton-Ascend operator files on CUDA and CPU: a documented compatibility layer.

Public generated ``ModelNew`` files for Ascend use standard ``triton.language`` in their kernels, but their host
code touches the NPU (reference/environment_notes.md, "Running Triton-Ascend implementations off the NPU"):
``torch.device("npu:0")``, ``.npu()``, ``torch.npu.is_available()``, ``import torch_npu`` and
``torch_npu.npu.npu_config.get_device_limit(0)["cube_core_num" / "vector_core_num"]`` to size persistent grids.

:func:`install` makes such files run unchanged on the target device:

* ``torch.utils.rename_privateuse1_backend("npu")`` so ``"npu"`` device strings parse;
* ``Tensor.to`` / ``Module.to`` / ``.npu()`` / tensor factory functions (``device=``) redirect npu devices to the
  target device;
* a stand-in ``torch.npu`` namespace (availability, device count, synchronize, seeding, cache calls);
* a stand-in ``torch_npu`` module whose ``get_device_limit`` / ``get_device_properties`` report **the real device's
  core counts** (CUDA: SMs as cube cores and 2 x SMs as vector cores, mirroring the 1:2 cube:vector ratio of A2;
  CPU: ``os.cpu_count()`` and twice that). Grid sizing changes MFU several-fold (environment notes: 2205 us with
  Ascend's 24/48 vs 502 us with 132/264 on an H200), so every count handed out is recorded in :data:`REPORT`.

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


def core_counts(device: str) -> dict:
    """Core counts reported to operator code for ``device`` ("cuda", "cuda:N", "cpu"), with their source."""
    import torch
    dev = torch.device(device)
    if dev.type == "cuda":
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        sms = int(props.multi_processor_count)
        return {"cube_core_num": sms, "vector_core_num": 2 * sms, "device_name": props.name,
                "source": f"torch.cuda.get_device_properties({idx}).multi_processor_count={sms}; vector = 2 x SMs"}
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
    if target.type == "cuda" and target.index is None:
        target = torch.device("cuda", torch.cuda.current_device())
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
        if target.type == "cuda":
            torch.cuda.synchronize(target)

    def limits(*_a, **_k):
        REPORT["device_limit_queries"] += 1
        return {"cube_core_num": counts["cube_core_num"], "vector_core_num": counts["vector_core_num"]}

    def props(*_a, **_k):
        REPORT["device_limit_queries"] += 1
        base = torch.cuda.get_device_properties(target) if target.type == "cuda" else None
        return types.SimpleNamespace(
            name=counts["device_name"], cube_core_num=counts["cube_core_num"],
            vector_core_num=counts["vector_core_num"],
            total_memory=getattr(base, "total_memory", 0), L2_cache_size=getattr(base, "L2_cache_size", 0))

    npu = types.ModuleType("torch.npu")
    npu.__doc__ = "mfulib.compat stand-in for torch.npu (redirects to %s)" % target
    npu.is_available = lambda: True
    npu.device_count = lambda: torch.cuda.device_count() if target.type == "cuda" else 1
    npu.current_device = lambda: target.index or 0
    npu.set_device = lambda *_a, **_k: None
    npu.synchronize = sync
    # torch.manual_seed() calls these for the renamed backend: seed the target device itself, never
    # torch.manual_seed again (that would recurse)
    npu.manual_seed = npu.manual_seed_all = (
        (lambda seed: torch.cuda.manual_seed_all(seed)) if target.type == "cuda" else (lambda seed: None))
    npu.empty_cache = lambda: torch.cuda.empty_cache() if target.type == "cuda" else None
    npu.get_device_name = lambda *_a, **_k: counts["device_name"]
    npu.get_device_properties = props
    npu.get_device_limit = limits
    npu.is_bf16_supported = lambda: True
    npu._is_in_bad_fork = lambda: False  # lets torch.manual_seed() seed the renamed backend without a warning
    npu.device = lambda *_a, **_k: torch.device(target)
    npu.current_stream = (lambda *_a, **_k: torch.cuda.current_stream(target)) if target.type == "cuda" else (lambda *_a, **_k: None)
    npu_config = types.ModuleType("torch_npu.npu.npu_config")
    npu_config.get_device_limit = limits
    npu.npu_config = npu_config
    npu.utils = types.SimpleNamespace(get_device_limit=limits, get_device_properties=props)
    torch.npu = npu
    sys.modules["torch.npu"] = npu

    # 4. torch_npu stand-in (only the host-side helpers generated implementations call)
    torch_npu = types.ModuleType("torch_npu")
    torch_npu.__doc__ = "mfulib.compat stand-in for torch_npu (no NPU here; see mfulib/compat.py)"
    torch_npu.__mfu_standin__ = True
    torch_npu.npu = npu
    for modname, mod in (("torch_npu", torch_npu), ("torch_npu.npu", npu), ("torch_npu.npu.npu_config", npu_config),
                         ("torch_npu.npu.utils", npu.utils)):
        sys.modules[modname] = mod
    REPORT["patched"].append("torch.npu and torch_npu stand-ins")
    _INSTALLED["device"] = device
    return REPORT
