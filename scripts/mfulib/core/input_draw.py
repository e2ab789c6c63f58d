"""Where a case's inputs are drawn: get_input_groups() under a torch function mode.

:func:`input_draw` runs ``get_input_groups()`` under a torch function mode that keeps every *large floating-point* draw (at least :data:`DEVICE_DRAW_MIN_NUMEL` elements, no explicit generator) off
the global host random stream:

* on a CUDA device a large floating tensor created by a factory (``randn``, ``rand``, ``empty`` then
  ``uniform_``/``normal_``, ``zeros``...) is created **on the target device**, so its random values come from the
  device's own generator (Philox on CUDA), seeded by :func:`seed_everything` - hundreds of GB/s instead of
  torch's single-threaded host ``randn`` (~0.16 G elements/s measured on this project's CI host): zoo/1_BatchMatmul
  draws ~1.4 G input elements over its 13 cases, and its verify and collect steps took 45 and 44 s on the H200 for
  under 0.1 s of kernel time each before this change (an earlier session's run, not packed; after it: 11.4 and
  10.7 s, bench/RESULTS.md "Tool overhead per step");
* on the CPU (and for a large CPU tensor filled in place on any backend) the same draw uses a private CPU
  generator seeded with ``seed``, so the global stream is untouched there too;
* everything else - integer and bool tensors (lengths, indices, routing, masks), small floats, Python ``random``/
  numpy - is drawn on the host from the global stream seeded with ``seed``, exactly as before.

Why this split: the values that enter a FLOP count (docs/ARCHITECTURE.md#flops: realised lengths, mask density, routing
indices) are integers/bools or small tensors, and their host stream is now **the same on every backend and in the
FLOPs step** (which builds on the CPU, or with big floats on meta - :mod:`mfulib.flops.tracer`'s meta build mode
uses the same threshold and also leaves the global stream alone), because no large float draw consumes it
anywhere. The large float values are reproducible per device (same seed, same device model -> same values: CUDA's
Philox output depends on the launch configuration, i.e. the SM count) and are the ones verify and collect both use.
Consequences, by design: on the CPU a case whose first draws are large floats gets the same values as before (the
private stream starts at ``seed`` like the global one did), but an integer drawn *after* a large float now comes
from the global stream at an earlier position; on CUDA large floats differ from a host draw. A reference
that cannot run with device tensors (it mixes them with host tensors, calls ``.numpy()``) is drawn again on the
host (private stream for large floats, same integer stream); :attr:`BuiltCase.inputs_drawn` says which happened
and why. Limitation: a bool/integer input *derived* from a large float draw (``torch.rand(n) < p`` with n >= 2^20)
takes the device's values on CUDA, which a host-side FLOP count cannot reproduce (nor could it before: matmul
rounding differs between host and device).
"""
from __future__ import annotations

import functools
import os
import random


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and every device), numpy and random: refs in the wild do not seed themselves."""
    import torch
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
        np.random.seed(seed % (2 ** 32))
    except ImportError:  # pragma: no cover
        pass


DEVICE_DRAW_MIN_NUMEL = 1 << 20  # floating tensors this big are drawn off the host stream (= flopcount's meta threshold)
HOST_DRAW_ENV = "MFU_HOST_DRAW"  # "1": every input on the host (large floats: private stream) - the old cost, to compare
# meta: tests and tracing (shapes only). npu is left out until checked on hardware: there the collector's child runs
# under msprof, which would also profile the draw's kernels ahead of the first iteration marker
DEVICE_DRAW_TYPES = ("cuda", "meta")


# torch functions that create a tensor from a size (float by default unless listed in _INT_FACTORIES), and the
# random functions/methods that fill or derive one from their first tensor argument
_FACTORIES = ("randn", "rand", "empty", "zeros", "ones", "full", "empty_strided", "normal", "randint", "randperm")
_INT_FACTORIES = ("randint", "randperm")
_RANDOM_FROM_TENSOR = ("uniform_", "normal_", "bernoulli_", "exponential_", "cauchy_", "log_normal_", "geometric_",
                       "random_", "bernoulli", "normal", "rand_like", "randn_like", "multinomial", "poisson")


def off_host_stream(numel: int, generator=None) -> bool:
    """Whether a floating-point random draw of ``numel`` elements leaves the global host stream untouched in the
    timed draw (:func:`input_draw`): at least :data:`DEVICE_DRAW_MIN_NUMEL` elements and no explicit generator.
    The tracer's meta build (mfulib/flops/meta_build.py) asks the same question, so both see the same integer draws."""
    return numel >= DEVICE_DRAW_MIN_NUMEL and generator is None


def _numel(size) -> int:
    try:
        n = 1
        for d in size:
            n *= int(d)
        return n
    except (TypeError, ValueError):
        return 0


def _factory_size(name, args, kwargs):
    """The size a factory call asks for: ``f(2, 3)``, ``f((2, 3))``, ``f(size=...)``; randint's is its last
    positional sequence; ``normal(mean, std, size)`` only with floats for mean/std."""
    import torch
    if "size" in kwargs:
        return kwargs["size"]
    if name == "randint":
        seqs = [a for a in args if isinstance(a, (list, tuple, torch.Size))]
        return seqs[-1] if seqs else None
    if name == "normal":
        return args[2] if len(args) >= 3 and not isinstance(args[0], torch.Tensor) else None
    if not args:
        return None
    if isinstance(args[0], (list, tuple, torch.Size)):
        return args[0]
    if name in ("full", "empty_strided", "randperm"):
        return args[0] if name != "randperm" else (args[0],)
    ints = []
    for a in args:
        if isinstance(a, int) and not isinstance(a, bool):
            ints.append(a)
        else:
            break
    return ints or None


def _draw_target(func, args, kwargs):
    """(numel, floating?, is_factory) of the tensor a torch call creates from a size or fills/derives from its first
    tensor argument (random calls only); (0, False, False) for anything else."""
    import torch
    name = getattr(func, "__name__", "")
    first = args[0] if args else None
    if name in _FACTORIES and not isinstance(first, torch.Tensor):
        size = _factory_size(name, args, kwargs)
        if size is None:
            return 0, False, False
        dtype = kwargs.get("dtype")
        if dtype is None:
            if name in _INT_FACTORIES:
                floating = False
            elif name == "full":
                fill = args[1] if len(args) > 1 else kwargs.get("fill_value")
                floating = isinstance(fill, (float, complex)) or (isinstance(fill, torch.Tensor)
                                                                   and fill.is_floating_point())
            else:
                floating = torch.get_default_dtype().is_floating_point
        else:
            floating = dtype.is_floating_point or dtype.is_complex
        return _numel(size), floating, True
    if name in _RANDOM_FROM_TENSOR and isinstance(first, torch.Tensor):
        dtype = kwargs.get("dtype") or first.dtype
        return first.numel(), dtype.is_floating_point or dtype.is_complex, False
    return 0, False, False


@functools.lru_cache(maxsize=1)
def _draw_mode_class():
    import torch
    from torch.overrides import TorchFunctionMode  # a function mode: entering it imports no torch._dynamo

    class _InputDrawMode(TorchFunctionMode):
        """While get_input_groups() runs (module docstring): large floating factories go to ``target``; a large
        random draw on a CPU tensor uses a private generator seeded with ``seed``."""

        def __init__(self, target, seed):
            super().__init__()
            self.target = torch.device(target)
            self.private = torch.Generator().manual_seed(seed)
            self.on_device = 0
            self.private_draws = 0

        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            numel, floating, factory = _draw_target(func, args, kwargs)
            if not (floating and off_host_stream(numel, kwargs.get("generator"))):
                return func(*args, **kwargs)
            dev = kwargs.get("device")
            on_cpu = (dev is None or torch.device(dev).type == "cpu") if factory else args[0].device.type == "cpu"
            if factory and on_cpu and self.target.type != "cpu":
                kwargs["device"] = self.target
                kwargs.pop("pin_memory", None)
                self.on_device += 1
                return func(*args, **kwargs)
            name = getattr(func, "__name__", "")
            if not on_cpu or (factory and name not in ("randn", "rand", "normal")):
                return func(*args, **kwargs)  # a device tensor draws from its device; empty/zeros draw nothing
            # the private stream stands in for the global one during this call
            self.private_draws += 1
            saved = torch.default_generator.get_state()
            torch.default_generator.set_state(self.private.get_state())
            try:
                return func(*args, **kwargs)
            finally:
                self.private.set_state(torch.default_generator.get_state())
                torch.default_generator.set_state(saved)

    return _InputDrawMode


def draw_device_for(device) -> str:
    """Where large floating inputs are drawn for a case run on ``device``: the device itself for cuda (and meta),
    else (cpu, npu, or ``MFU_HOST_DRAW=1``) "cpu" (the private host stream)."""
    import torch
    dev = torch.device(device)
    if os.environ.get(HOST_DRAW_ENV) == "1" or dev.type not in DEVICE_DRAW_TYPES:
        return "cpu"
    return str(dev)


def input_draw(ref_mod, seed: int, device: str = "cpu"):
    """``(groups, how)``: ``ref_mod.get_input_groups()`` after :func:`seed_everything` with the draw split of the
    module docstring (large floats on :func:`draw_device_for` ``(device)``). ``how`` is "device:<dev>",
    "host" or "host (device draw failed: <error>)". A rejection (``ValueError("case rejected: ...")``) propagates
    at once; any other error under the device draw is retried on the host, whose errors propagate."""
    from mfulib.core.errors import rejection_reason
    target = draw_device_for(device)
    seed_everything(seed)
    mode = _draw_mode_class()(target, seed)
    if target == "cpu":
        with mode:
            return list(ref_mod.get_input_groups()), "host"
    try:
        with mode:
            groups = list(ref_mod.get_input_groups())
        return groups, f"device:{target}" if mode.on_device else "host"
    except Exception as exc:  # noqa: BLE001 - any failure under the device draw: the host draw decides
        if rejection_reason(exc) is not None:
            raise
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
    seed_everything(seed)
    with _draw_mode_class()("cpu", seed):
        return list(ref_mod.get_input_groups()), f"host (device draw failed: {why})"


