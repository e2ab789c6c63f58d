"""Timing one GEMM or one device copy: device events per iteration after a cache flush (step 5's measurement).

The method is mamf-finder's (stas00/ml-engineering ``compute/accelerator/benchmarks/mamf-finder.py``): one shape =
``A[m, k] @ B[k, n]`` on random normal data (zeros run faster than real data; device notes saw +13% on an H200),
warmed up, then timed iteration by iteration: flush the last-level cache by writing a buffer of
``max(256 MiB, 4 x L2)`` (outside the timed region), record a start event, launch, record an end event. The per-shape
statistic is the median iteration time; throughput is :func:`mfulib.core.definitions.actual_tflops` of ``2*m*n*k``.
:class:`Device` is the small interface this needs (events, synchronize, flush) on cuda, npu and cpu (host clock).

GEMM per math mode (:func:`gemm_call`): ``torch.mm`` for the float modes; int8 ``torch._int_mm`` (CUDA, CPU) or
``torch_npu.npu_quant_matmul`` (NPU, scale 1.0, bf16 out); fp8 e4m3 ``torch._scaled_mm`` (CUDA capability >= 8.9,
scale tensors 1.0, bf16 out). The layout of B matters for the low-precision paths: on the H200 ``torch._int_mm``
ran 99-129 TOPS with B row-major [k, n] and 707-979 TOPS with B column-major (``randint(n, k).t()``), and
``torch._scaled_mm`` requires B column-major (bench/probe_lowp_gemm.py, notes/H200_FACTS.md, 2026-12-01), so B's
layout is a parameter (``"row"``: contiguous [k, n]; ``"col"``: the transpose of a contiguous [n, k]).
"""
from __future__ import annotations

import contextlib
import math
import statistics
import time

from mfulib.core.definitions import actual_tflops
from mfulib.core.device import device_identity, read_clocks
from mfulib.core.errors import UserError

MIB = 1 << 20
FLUSH_MIN_BYTES = 256 * MIB  # KernelBench / mamf-finder flush size; >= 4 x L2 of an H200 (60 MB)


class Device:
    """The small interface the measurement needs: events, synchronize, cache flush, identity.

    ``backend`` is ``cuda``, ``npu`` or ``cpu``; ``index`` the device index. On CPU the "events" are host
    timestamps (CPU torch ops are synchronous).
    """

    def __init__(self, backend: str, index: int = 0):
        import torch
        self.torch = torch
        self.backend = backend
        self.index = index
        if backend in ("cuda", "npu"):
            self.mod = getattr(torch, backend)
            self.mod.set_device(index)
            self.device = torch.device(backend, index)
        else:
            self.mod = None
            self.device = torch.device("cpu")
        self._flush_buf = None
        self.flush_bytes = self._flush_size()
        # "burst": idle after every timed burst (duty cycle <= 50%, :func:`cool_down`); "sustained": back to back
        self.regime = "burst"
        self.busy_ns = 0.0  # device time of every timed and warm-up iteration so far (for the duty cycle)

    # ---- timing
    def synchronize(self):
        if self.mod is not None:
            self.mod.synchronize()

    def event(self):
        if self.mod is not None:
            return self.mod.Event(enable_timing=True)
        return _HostEvent()

    @staticmethod
    def elapsed_ns(start, end) -> float:
        if isinstance(start, _HostEvent):
            return float(end.t_ns - start.t_ns)
        return start.elapsed_time(end) * 1e6  # elapsed_time is in ms

    # ---- cache flush
    def _flush_size(self) -> int:
        l2 = self.l2_bytes() or 0
        if self.backend == "cpu":
            return max(32 * MIB, 4 * l2)  # larger than any LLC seen on CI machines; keeps CPU runs quick
        return max(FLUSH_MIN_BYTES, 4 * l2)

    def flush(self):
        """Evict the last-level cache by writing ``flush_bytes`` (mamf-finder/KernelBench: zero a 256 MiB buffer)."""
        if self._flush_buf is None:
            self._flush_buf = self.torch.empty(self.flush_bytes // 4, dtype=self.torch.int32, device=self.device)
        self._flush_buf.zero_()

    def release(self):
        self._flush_buf = None

    # ---- identity
    def l2_bytes(self):
        if self.mod is None:
            return None
        props = self.mod.get_device_properties(self.index)
        return getattr(props, "L2_cache_size", None) or getattr(props, "l2_cache_size", None)

    def identity(self) -> dict:
        """Device description recorded in peak.json: name, key, core counts, memory, versions."""
        return device_identity(self.backend, self.index)

    def clocks(self) -> dict:
        """Current clocks/power where readable (nvidia-smi, npu-smi); {} otherwise. Never raises."""
        return read_clocks(self.backend, self.index)


class _HostEvent:
    __slots__ = ("t_ns",)

    def __init__(self):
        self.t_ns = 0

    def record(self, *_a):
        self.t_ns = time.perf_counter_ns()


@contextlib.contextmanager
def math_mode(dev: Device, mode: str):
    """Set the backend's fp32 matmul precision for ``mode`` and restore it afterwards.

    ``float32``: TF32 (CUDA: ``torch.backends.cuda.matmul.fp32_precision``, or ``allow_tf32`` on torch < 2.9) / HF32
    (NPU: ``torch.npu.matmul.allow_hf32``) off; ``tf32``: on. Other modes leave the settings as they are. Yields a
    description of the setting.
    """
    torch = dev.torch
    if mode in ("int8", "float8_e4m3fn"):
        yield low_precision_support(dev, mode)[1]
        return
    if mode not in ("float32", "tf32") or dev.backend == "cpu":
        yield {"float16": "fp16 inputs (backend default accumulation)",
               "bfloat16": "bf16 inputs (backend default accumulation)",
               "float32": "fp32 (CPU: IEEE)"}.get(mode, mode)
        return
    allow = mode == "tf32"
    if dev.backend == "cuda":
        obj, label = torch.backends.cuda.matmul, "TF32"
        # torch >= 2.9: fp32_precision ("tf32" | "ieee"); mixing it with the legacy allow_tf32 raises, so use the new
        # API where it exists and the legacy flag before that
        if hasattr(obj, "fp32_precision"):
            attr, value = "fp32_precision", ("tf32" if allow else "ieee")
        else:
            attr, value = "allow_tf32", allow
        where = f"torch.backends.cuda.matmul.{attr}={value!r}"
    else:
        obj, attr, value, label = getattr(getattr(torch, "npu", None), "matmul", None), "allow_hf32", allow, "HF32"
        if obj is None or not hasattr(obj, attr):
            raise UserError(f"torch.npu.matmul.{attr} is missing in this torch_npu - cannot measure the {mode} mode")
        where = f"torch.npu.matmul.allow_hf32={allow}"
    old = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield f"fp32 inputs, {label} {'allowed' if allow else 'off'} ({where})"
    finally:
        setattr(obj, attr, old)


# B layouts each math mode is timed with, best first to try; the calibration probes them and keeps the fastest
B_LAYOUTS = {"int8": ("col", "row"), "float8_e4m3fn": ("col",)}
DEFAULT_B_LAYOUT = "row"


def b_layouts(mode: str) -> tuple:
    """The B layouts worth timing for ``mode`` (``"row"`` = contiguous [k, n], ``"col"`` = [n, k] transposed)."""
    return B_LAYOUTS.get(mode, (DEFAULT_B_LAYOUT,))


def low_precision_support(dev: Device, mode: str):
    """(ok, why) for the int8 / fp8 GEMM paths on ``dev``; float modes are always (True, ...).

    int8: ``torch._int_mm`` on CUDA and CPU (CPU: torch's reference kernel, not a matrix unit),
    ``torch_npu.npu_quant_matmul`` on the NPU (Ascend API reference: x1, x2 int8 ND, scale float32 [1],
    output_dtype bfloat16 on Atlas A2; not yet run on hardware by this tool). fp8 e4m3: ``torch._scaled_mm`` on CUDA
    devices of capability >= 8.9 (Ada / Hopper fp8 tensor cores); nowhere else.
    """
    torch = dev.torch
    if mode == "int8":
        if dev.backend == "npu":
            tnpu = _torch_npu()
            if tnpu is None or not hasattr(tnpu, "npu_quant_matmul"):
                return False, "not available: torch_npu.npu_quant_matmul is missing in this torch_npu"
            return True, "torch_npu.npu_quant_matmul (int8 x int8, scale 1.0, bf16 out) - untested on hardware"
        if not hasattr(torch, "_int_mm"):
            return False, f"not available: this torch ({torch.__version__}) has no torch._int_mm"
        return True, "torch._int_mm (int8 x int8 -> int32)"
    if mode == "float8_e4m3fn":
        if dev.backend != "cuda":
            where = ("the Ascend cube dtypes this tool measures are fp16/bf16, fp32 (HF32 off/on) and int8"
                     if dev.backend == "npu" else
                     "a CPU has no fp8 matrix unit (torch's CPU torch._scaled_mm is a software path, no hardware peak)")
            return False, f"not available on {dev.backend}: fp8 is measured only on CUDA capability >= 8.9; {where}"
        if not (hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm")):
            return False, f"not available: this torch ({torch.__version__}) lacks float8_e4m3fn / torch._scaled_mm"
        cap = torch.cuda.get_device_capability(dev.index)
        if tuple(cap) < (8, 9):
            return False, (f"not available: capability {cap[0]}.{cap[1]} < 8.9 (fp8 tensor cores: Ada sm_89, "
                           "Hopper sm_90 and later)")
        return True, "torch._scaled_mm (fp8 e4m3 x e4m3, scale tensors 1.0, bf16 out)"
    return True, "torch.mm"


def _torch_npu():
    try:
        import torch_npu
    except Exception:  # absent, or CANN libraries missing
        return None
    return torch_npu


def _operands(dev: Device, mode: str, m: int, n: int, k: int, b_layout: str = DEFAULT_B_LAYOUT):
    """A[m, k] and B[k, n] (B column-major for ``b_layout="col"``) on the device, random data of ``mode``."""
    torch = dev.torch
    bshape = (n, k) if b_layout == "col" else (k, n)
    if mode == "int8":
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=dev.device)
        b = torch.randint(-128, 128, bshape, dtype=torch.int8, device=dev.device)
    elif mode == "float8_e4m3fn":
        a = torch.randn(m, k, device=dev.device).to(torch.float8_e4m3fn)
        b = torch.randn(*bshape, device=dev.device).to(torch.float8_e4m3fn)
    else:
        dtype = getattr(torch, "float32" if mode == "tf32" else mode)
        a, b = torch.randn(m, k, dtype=dtype, device=dev.device), torch.randn(*bshape, dtype=dtype, device=dev.device)
    return a, (b.t() if b_layout == "col" else b)


def gemm_call(dev: Device, mode: str, a, b):
    """A zero-argument callable computing ``a @ b`` in ``mode`` (see the module docstring for the paths)."""
    torch = dev.torch
    if mode == "int8":
        if dev.backend == "npu":
            tnpu = _torch_npu()
            scale = torch.ones(1, dtype=torch.float32, device=dev.device)
            return lambda: tnpu.npu_quant_matmul(a, b, scale, output_dtype=torch.bfloat16)
        return lambda: torch._int_mm(a, b)
    if mode == "float8_e4m3fn":
        one = torch.tensor(1.0, dtype=torch.float32, device=dev.device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=dev.device)
    return lambda: torch.mm(a, b, out=out)


def time_iterations(dev: Device, fn, iters: int, flush: bool = True) -> list:
    """Per-iteration device time (ns) of ``fn``: flush (untimed), start event, ``fn()``, end event; one sync at the end.

    Each iteration has its own event pair (mamf-finder), so the flush never enters the timed region.
    """
    starts = [dev.event() for _ in range(iters)]
    ends = [dev.event() for _ in range(iters)]
    for i in range(iters):
        if flush:
            dev.flush()
        starts[i].record()
        fn()
        ends[i].record()
    dev.synchronize()
    return [dev.elapsed_ns(s, e) for s, e in zip(starts, ends)]


def measure_fn(dev: Device, fn, target_ms: float, min_iters: int = 5, max_iters: int = 60, warmup: int = 2,
               flush: bool = True, max_ms: float | None = None) -> dict:
    """Warm ``fn`` up, pick an iteration count so that the timed work is about ``target_ms``, time it.

    ``max_ms`` caps the timed work (fewer iterations, never fewer than 3) for slow shapes near a deadline.
    Returns ``{"median_ns", "min_ns", "max_ns", "iters"}``; the iteration times are not kept (a sweep has hundreds).
    """
    probe = time_iterations(dev, fn, max(1, warmup), flush)  # first call includes library heuristics: discarded
    dev.busy_ns += sum(probe)
    est_ns = max(min(probe), 1.0)
    iters = int(min(max_iters, max(min_iters, math.ceil(target_ms * 1e6 / est_ns))))
    if max_ms is not None:
        iters = max(3, min(iters, int(max_ms * 1e6 / est_ns)))
    cool_down(dev, sum(probe))
    t0 = time.perf_counter()
    times = time_iterations(dev, fn, iters, flush)
    dev.busy_ns += sum(times)
    cool_down(dev, (time.perf_counter() - t0) * 1e9)
    return {**spread_stats(times), "iters": iters}


def spread_stats(times) -> dict:
    """Median, min, max, p10, p90 of iteration times (ns) and ``spread = (p90 - p10) / median``.

    Percentiles are :func:`statistics.quantiles` deciles (``method="inclusive"``); with one time the spread is 0.
    """
    med = statistics.median(times)
    if len(times) >= 2:
        dec = statistics.quantiles(times, n=10, method="inclusive")
        p10, p90 = dec[0], dec[8]
    else:
        p10 = p90 = times[0]
    return {"median_ns": med, "min_ns": min(times), "max_ns": max(times), "p10_ns": p10, "p90_ns": p90,
            "spread": (p90 - p10) / med if med > 0 else None}


def cool_down(dev: Device, busy_ns: float) -> None:
    """Idle as long as the device was just busy (duty cycle <= 50%) on accelerators.

    Why: under sustained GEMM load an H200 hits its 700 W cap (nvidia-smi throttle reason 0x4, SW power cap) and
    drops its clocks ~15%, so back-to-back shapes of a long sweep are timed slower than the same kernels in the
    collector's short bursts (seen on the H200: 8192^3 bf16 at 788 TFLOP/s in a 15-iteration profiled burst vs
    672-692 sustained). Short timed bursts separated by idle time keep every measurement in the burst regime the
    operators are measured in. ``dev.regime == "sustained"`` skips the idle time (back-to-back load).
    """
    if dev.backend != "cpu" and dev.regime == "burst" and busy_ns > 0:
        time.sleep(min(busy_ns * 1e-9, 0.25))


def measure_gemm(dev: Device, mode: str, m: int, n: int, k: int, target_ms: float = 20.0,
                 b_layout: str = DEFAULT_B_LAYOUT, **kw) -> dict:
    """Time ``A[m,k] @ B[k,n]`` in ``mode`` with B in ``b_layout``; returns the shape, timing and ``tflops`` =
    2*m*n*k / median_ns / 1e3.

    For int8 the figure is tera-operations per second (TOPS) under the same key. Raises whatever the library raises
    for an unsupported mode/shape/layout (callers record it).
    """
    a, b = _operands(dev, mode, m, n, k, b_layout)
    fn = gemm_call(dev, mode, a, b)
    t = measure_fn(dev, fn, target_ms, **kw)
    del a, b, fn
    return {"m": m, "n": n, "k": k, "b_layout": b_layout, "tflops": actual_tflops(2.0 * m * n * k, t["median_ns"]),
            **t}


def measure_bandwidth(dev: Device, nbytes: int, target_ms: float = 30.0) -> dict:
    """Device-to-device copy of ``nbytes``: ``gbps`` = 2 * nbytes (read + write) / median_ns.

    No flush: the buffers are many times the cache. GB/s here is 1e9 bytes per second.
    """
    torch = dev.torch
    n = nbytes // 4
    src = torch.randn(n, dtype=torch.float32, device=dev.device)
    dst = torch.empty_like(src)
    t = measure_fn(dev, lambda: dst.copy_(src), target_ms, min_iters=5, max_iters=50, warmup=2, flush=False)
    moved = 2 * n * 4
    return {"bytes_per_iter": moved, "buffer_bytes": n * 4, "gbps": moved / t["median_ns"], **t,
            "method": "dst.copy_(src) of one buffer, bytes read + bytes written per iteration, median of iterations"}
