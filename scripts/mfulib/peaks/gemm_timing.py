"""Timing one GEMM or one device copy: device events per iteration after a cache flush (step 5's measurement).

The method is mamf-finder's (stas00/ml-engineering ``compute/accelerator/benchmarks/mamf-finder.py``): one shape =
``A[m, k] @ B[k, n]`` on random normal data (zeros run faster than real data: +13% on an H200 when measured),
warmed up, then timed iteration by iteration: flush the last-level cache by writing a buffer of
``max(256 MiB, 4 x L2)`` (outside the timed region), record a start event, launch, record an end event. The per-shape
statistic is the median iteration time; throughput is :func:`mfulib.core.definitions.actual_tflops` of ``2*m*n*k``.
:class:`Bench` holds one run's state; events, synchronisation and the flush write are the backend's
(:class:`mfulib.backends.base.Backend`: device events on cuda and npu, the host clock on cpu).

GEMM per math mode (:func:`gemm_call`): ``torch.mm`` for the float modes; int8 ``torch._int_mm`` (CUDA, CPU) or
``torch_npu.npu_quant_matmul`` (NPU, scale 1.0, bf16 out); fp8 e4m3 ``torch._scaled_mm`` (CUDA capability >= 8.9,
scale tensors 1.0, bf16 out). The layout of B matters for the low-precision paths: on the H200 ``torch._int_mm``
ran 132.5 TOPS with B row-major [k, n] and 1,018.6 TOPS with B column-major (``randint(n, k).t()``; bench/RESULTS.md,
"Peaks: int8 and fp8"), and ``torch._scaled_mm`` requires B column-major (bench/probe_lowp_gemm.py times both), so B's
layout is a parameter (``"row"``: contiguous [k, n]; ``"col"``: the transpose of a contiguous [n, k]).
"""
from __future__ import annotations

import contextlib
import math
import statistics
import time

from mfulib.backends.flush import CacheFlush
from mfulib.core.definitions import MIB
from mfulib.core.definitions import actual_tflops

FLUSH_MIN_BYTES = 256 * MIB  # KernelBench / mamf-finder flush size; >= 4 x L2 of an H200 (60 MB)


def flush_bytes(l2_bytes, accelerator: bool) -> int:
    """Calibration's flush size (its policy: always flushed): ``max(256 MiB, 4 x L2)`` on accelerators, ``max(32
    MiB, 4 x L2)`` on the host (larger than any LLC seen on CI machines; keeps CPU runs quick)."""
    return max(FLUSH_MIN_BYTES if accelerator else 32 * MIB, 4 * (l2_bytes or 0))


class Bench:
    """One calibration run on device ``index`` of ``backend`` (a :class:`mfulib.backends.base.Backend`): the device,
    its cache flush (:class:`mfulib.backends.flush.CacheFlush`, :func:`flush_bytes`), the load regime and the busy
    time so far. Timing, synchronisation, identity and clocks are the backend's."""

    def __init__(self, backend, index: int = 0):
        import torch
        self.torch = torch
        self.backend = backend
        self.index = index
        backend.set_device(index)
        self.device = torch.device(backend.device_string(index))
        self.flush_bytes = flush_bytes(backend.l2_bytes(index), backend.accelerator)
        self._flush = None
        # "burst": idle after every timed burst (duty cycle <= 50%, :func:`cool_down`); "sustained": back to back
        self.regime = "burst"
        self.busy_ns = 0.0  # device time of every timed and warm-up iteration so far (for the duty cycle)

    def flush(self):
        """Evict the last-level cache by writing ``flush_bytes`` (the buffer is made on first use)."""
        if self._flush is None:
            self._flush = CacheFlush(self.backend, self.device, self.flush_bytes)
        self._flush.flush()

    def release(self):
        self._flush = None

    def identity(self) -> dict:
        """Device description recorded in peak.json: name, key, core counts, memory, versions."""
        return self.backend.device_identity(self.index)

    def clocks(self) -> dict:
        """Current clocks/power where readable (nvidia-smi, npu-smi); {} otherwise. Never raises."""
        return self.backend.read_clocks(self.index)


@contextlib.contextmanager
def math_mode(dev: Bench, mode: str):
    """Set the backend's fp32 matmul precision for ``mode`` and restore it afterwards.

    ``float32``: the reduced-precision fp32 mode (:attr:`mfulib.backends.base.Backend.reduced_fp32_matmul`: TF32
    on CUDA, HF32 on the NPU) off; ``tf32``: on (:meth:`~mfulib.backends.base.Backend.fp32_matmul_mode`). Other
    modes, and backends without such a mode, leave the settings as they are. Yields a description of the setting.
    """
    if mode in ("int8", "float8_e4m3fn"):
        yield low_precision_support(dev, mode)[1]
        return
    if mode not in ("float32", "tf32") or dev.backend.reduced_fp32_matmul is None:
        yield {"float16": "fp16 inputs (backend default accumulation)",
               "bfloat16": "bf16 inputs (backend default accumulation)",
               "float32": "fp32 (CPU: IEEE)"}.get(mode, mode)
        return
    with dev.backend.fp32_matmul_mode(mode == "tf32") as desc:
        yield desc


# B layouts each math mode is timed with, best first to try; the calibration probes them and keeps the fastest
B_LAYOUTS = {"int8": ("col", "row"), "float8_e4m3fn": ("col",)}
DEFAULT_B_LAYOUT = "row"


def b_layouts(mode: str) -> tuple:
    """The B layouts worth timing for ``mode`` (``"row"`` = contiguous [k, n], ``"col"`` = [n, k] transposed)."""
    return B_LAYOUTS.get(mode, (DEFAULT_B_LAYOUT,))


def low_precision_support(dev: Bench, mode: str):
    """(ok, why) for the int8 / fp8 GEMM paths of ``dev``'s backend; float modes are always (True, ...).

    int8: :meth:`~mfulib.backends.base.Backend.int8_gemm_support` (``torch._int_mm`` on CUDA and CPU - CPU: torch's
    reference kernel, not a matrix unit - ``torch_npu.npu_quant_matmul`` on the NPU). fp8 e4m3:
    :meth:`~mfulib.backends.base.Backend.fp8_gemm_support` (``torch._scaled_mm`` on CUDA devices of capability >=
    8.9, Ada / Hopper fp8 tensor cores; nowhere else).
    """
    if mode == "int8":
        return dev.backend.int8_gemm_support()
    if mode == "float8_e4m3fn":
        return dev.backend.fp8_gemm_support(dev.index)
    return True, "torch.mm"


def _operands(dev: Bench, mode: str, m: int, n: int, k: int, b_layout: str = DEFAULT_B_LAYOUT):
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


def gemm_call(dev: Bench, mode: str, a, b):
    """A zero-argument callable computing ``a @ b`` in ``mode`` (see the module docstring for the paths)."""
    torch = dev.torch
    if mode == "int8":
        return dev.backend.int8_gemm(a, b)
    if mode == "float8_e4m3fn":
        one = torch.tensor(1.0, dtype=torch.float32, device=dev.device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=dev.device)
    return lambda: torch.mm(a, b, out=out)


def time_iterations(dev: Bench, fn, iters: int, flush: bool = True) -> list:
    """Per-iteration device time (ns) of ``fn``: flush (untimed), start event, ``fn()``, end event; one sync at the end.

    Each iteration has its own event pair (mamf-finder), so the flush never enters the timed region.
    """
    backend = dev.backend
    starts = [backend.event() for _ in range(iters)]
    ends = [backend.event() for _ in range(iters)]
    for i in range(iters):
        if flush:
            dev.flush()
        starts[i].record()
        fn()
        ends[i].record()
    backend.sync()
    return [backend.elapsed_ns(s, e) for s, e in zip(starts, ends)]


def measure_fn(dev: Bench, fn, target_ms: float, min_iters: int = 5, max_iters: int = 60, warmup: int = 2,
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


def cool_down(dev: Bench, busy_ns: float) -> None:
    """Idle as long as the device was just busy (duty cycle <= 50%) on accelerators.

    Why: under sustained GEMM load an H200 hits its 700 W cap (nvidia-smi throttle reason 0x4, SW power cap) and
    drops its clocks ~15%, so back-to-back shapes of a long sweep are timed slower than the same kernels in the
    collector's short bursts (seen on the H200: 8192^3 bf16 at 788 TFLOP/s in a 15-iteration profiled burst vs
    672-692 sustained). Short timed bursts separated by idle time keep every measurement in the burst regime the
    operators are measured in. ``dev.regime == "sustained"`` skips the idle time (back-to-back load), and so does a
    backend without power-capped clocks (:attr:`~mfulib.backends.base.Backend.idle_between_bursts`).
    """
    if dev.backend.idle_between_bursts and dev.regime == "burst" and busy_ns > 0:
        time.sleep(min(busy_ns * 1e-9, 0.25))


def measure_gemm(dev: Bench, mode: str, m: int, n: int, k: int, target_ms: float = 20.0,
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


def measure_bandwidth(dev: Bench, nbytes: int, target_ms: float = 30.0) -> dict:
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
