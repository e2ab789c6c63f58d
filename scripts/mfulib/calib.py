"""Measured peaks (step 5): per-dtype GEMM throughput and memory bandwidth of the device this process runs on.

The idea is mamf-finder's (stas00/ml-engineering ``compute/accelerator/benchmarks/mamf-finder.py``): the
*achievable* matmul peak is the best throughput ``torch.mm`` reaches over a set of shapes, timed per iteration with
device events after a cache flush. mamf-finder walks a brute-force grid for hours; here a dozen seed shapes are
refined by a coordinate hill climb (steps 2048 -> 256 on m, n, k) until a time budget runs out, which finds the
same plateau in seconds (``bench/bench_peak_calib.py`` checks it against a >= 100-shape sweep).

Method, per math mode (``float16``, ``bfloat16``, ``float32`` with TF32/HF32 off, ``tf32`` = fp32 inputs with
TF32 (CUDA) / HF32 (NPU) allowed, ``int8`` via ``torch._int_mm`` where it runs):

* one shape = ``A[m, k] @ B[k, n]`` on random normal data (zeros run faster than real data; device notes saw
  +13% on an H200), warmed up, then timed iteration by iteration: flush the last-level cache by writing a buffer
  of ``max(256 MiB, 4 x L2)`` (outside the timed region), record a start event, launch, record an end event;
* per shape the statistic is the **median** iteration time; ``tflops = 2*m*n*k / median_ns / 1e3``;
* the peak is the best shape's median, after the three best shapes are re-timed with more iterations (so a lucky
  noisy median does not set the ceiling).

Bandwidth: a device-to-device copy of a large buffer (``dst.copy_(src)``), counting bytes read + bytes written,
median over iterations (the "large device copy" of the device notes' method).

On CPU the same code times torch's CPU GEMM with ``time.perf_counter_ns`` on small shapes in a few seconds; the
result is labelled as CPU numbers and is never comparable with accelerator numbers (DESIGN.md, "cpu" backend).

Results are cached per device (``peak-<device key>.json`` under the cache directory) so that many operators reuse
one calibration; a cached result is reused only when the device key, software versions, method version and dtype
set match and it is younger than ``max_age_days``.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

from .device import resolve_backend
from .errors import UserError
from .jsonio import ensure_writable_dir, provenance, read_json, write_json_atomic

SCHEMA = 1
TOOL = "peak_calib"
METHOD_VERSION = 1  # bump when the measurement changes meaning (invalidates caches)

# math modes: key -> (torch dtype name of A and B, what is measured)
MATH_MODES = ("bfloat16", "float16", "float32", "tf32", "int8")
DTYPE_ALIASES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
                 "half": "float16", "fp32": "float32", "float32": "float32", "float": "float32",
                 "tf32": "tf32", "hf32": "tf32", "int8": "int8"}
DEFAULT_MODES = MATH_MODES

MIB = 1 << 20
FLUSH_MIN_BYTES = 256 * MIB  # KernelBench / mamf-finder flush size; >= 4 x L2 of an H200 (60 MB)

# Budget shares per task (unused time rolls over to the next task). fp32 is ~15x slower per FLOP on an H200, so
# it gets a larger share for the same number of shapes.
_TASK_WEIGHT = {"bfloat16": 0.22, "float16": 0.20, "float32": 0.24, "tf32": 0.14, "int8": 0.12, "bandwidth": 0.08}

# Seed shapes (m, n, k) for accelerators. Square powers of two (the usual benchmark), tall-k shapes (the best
# measured bf16 shapes: 2048x2048x13312 on an H100 in the ml-engineering MAMF table; 4096x4096x12288 on an H200
# in reference/peers_and_anchors.md) and rectangular ones (1024x9216x14336, the H200 fp8 best there).
ACCEL_SEEDS = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 8192), (4096, 4096, 12288),
               (4096, 4096, 16384), (2048, 2048, 13312), (8192, 8192, 4096), (2048, 8192, 8192),
               (8192, 2048, 8192), (6144, 6144, 6144), (3072, 3072, 12288), (1024, 9216, 14336),
               (5120, 5120, 10240), (4608, 4608, 9216))
CPU_SEEDS = ((256, 256, 256), (512, 512, 512), (512, 512, 2048), (1024, 256, 1024), (1024, 1024, 1024))
ACCEL_STEPS = (2048, 1024, 512, 256)
CPU_STEPS = (256, 128)

# Known harmless native output. CANN prints one "tiling struct ... is conflict" warning per GEMM tiling lookup
# (skill spec, step 5): hundreds of lines that bury the result table. Matched case-insensitively per line.
NOISE_PATTERNS = (r"tiling struct.*is conflict",)


# --------------------------------------------------------------------------------------------------------------
# backends and devices


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


def slug(text: str) -> str:
    """``"NVIDIA H200"`` -> ``"nvidia-h200"`` (file-name safe)."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "unknown"


def device_identity(backend: str, index: int = 0) -> dict:
    """Identity of device ``index`` of ``backend``: name, key (``<backend>-<slug(name)>``), cores, memory, versions.

    ``key`` names the cache file; two devices of the same model share a calibration.
    """
    import torch
    ident = {"backend": backend, "index": index, "accelerator": backend != "cpu"}
    if backend == "cuda":
        p = torch.cuda.get_device_properties(index)
        ident.update(name=p.name, capability=f"{p.major}.{p.minor}", multiprocessor_count=p.multi_processor_count,
                     total_memory_bytes=int(p.total_memory),
                     l2_cache_bytes=getattr(p, "L2_cache_size", None),
                     uuid=str(getattr(p, "uuid", "")) or None,
                     cuda_runtime=torch.version.cuda)
        smi = _nvidia_smi_query(index, "driver_version,clocks.max.sm")
        ident["driver"] = smi.get("driver_version")
        if smi.get("clocks.max.sm"):
            ident["max_sm_clock_mhz"] = float(smi["clocks.max.sm"])
    elif backend == "npu":
        name = torch.npu.get_device_name(index)
        p = torch.npu.get_device_properties(index)
        ident.update(name=name, soc_name=name, cube_core_num=getattr(p, "cube_core_num", None),
                     vector_core_num=getattr(p, "vector_core_num", None),
                     total_memory_bytes=getattr(p, "total_memory", None),
                     l2_cache_bytes=getattr(p, "L2_cache_size", None),
                     cann=_cann_version(), torch_npu=getattr(sys.modules.get("torch_npu"), "__version__", None))
    else:
        ident.update(name=_cpu_model(), threads=torch.get_num_threads(), logical_cpus=os.cpu_count(),
                     note="CPU numbers (torch CPU GEMM), not an accelerator; never compare them with NPU/GPU numbers")
    ident["key"] = f"{backend}-{slug(ident['name'])}"
    return ident


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _cann_version():
    home = os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME")
    if not home:
        return None
    for name in ("version.cfg", "version.info"):
        for base in (home, os.path.join(home, "compiler")):
            path = os.path.join(base, name)
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    for line in f:
                        if "version" in line.lower() and "=" in line:
                            return line.split("=", 1)[1].strip()
            except OSError:
                continue
    return home


_SMI_FIELDS = ("clocks.sm", "clocks.max.sm", "clocks.mem", "power.draw", "power.limit", "temperature.gpu",
               "clocks_throttle_reasons.active")


def _nvidia_smi_query(index: int, fields: str) -> dict:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = subprocess.run([exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", str(index)],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    vals = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    names = fields.split(",")
    return {n: v for n, v in zip(names, vals) if v and "not supported" not in v.lower()}


def read_clocks(backend: str, index: int = 0) -> dict:
    """Clocks and power as the vendor tool reports them (strings, units in the keys' documentation):
    nvidia-smi ``clocks.*`` MHz, ``power.*`` W, ``temperature.gpu`` C; npu-smi ``Key : Value`` lines that mention a
    frequency or power. Returns {} where no tool answers."""
    if backend == "cuda":
        got = _nvidia_smi_query(index, ",".join(_SMI_FIELDS))
        if not got:  # older drivers reject unknown fields: retry without the throttle reasons
            got = _nvidia_smi_query(index, ",".join(_SMI_FIELDS[:-1]))
        return {k.replace(".", "_") + ("_mhz" if k.startswith("clocks.") and "throttle" not in k else
                                        "_w" if k.startswith("power") else "_c" if k.startswith("temp") else ""): v
                for k, v in got.items()}
    if backend == "npu":
        exe = shutil.which("npu-smi")
        if not exe:
            return {}
        try:
            out = subprocess.run([exe, "info", "-t", "common", "-i", str(index)], capture_output=True, text=True,
                                 timeout=10)
        except (OSError, subprocess.SubprocessError):
            return {}
        res = {}
        for line in out.stdout.splitlines():
            if ":" in line:
                k, v = (s.strip() for s in line.split(":", 1))
                if re.search(r"freq|power|temp", k, re.I):
                    res[k] = v
        return res
    return {}


# --------------------------------------------------------------------------------------------------------------
# math modes


@contextlib.contextmanager
def math_mode(dev: Device, mode: str):
    """Set the backend's fp32 matmul precision for ``mode`` and restore it afterwards.

    ``float32``: TF32 (CUDA: ``torch.backends.cuda.matmul.fp32_precision``, or ``allow_tf32`` on torch < 2.9) / HF32
    (NPU: ``torch.npu.matmul.allow_hf32``) off; ``tf32``: on. Other modes leave the settings as they are. Yields a
    description of the setting.
    """
    torch = dev.torch
    if mode not in ("float32", "tf32") or dev.backend == "cpu":
        yield {"float16": "fp16 inputs (backend default accumulation)",
               "bfloat16": "bf16 inputs (backend default accumulation)",
               "float32": "fp32 (CPU: IEEE)", "int8": "int8 inputs, int32 output (torch._int_mm)"}.get(mode, mode)
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


def _operands(dev: Device, mode: str, m: int, n: int, k: int):
    torch = dev.torch
    if mode == "int8":
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=dev.device)
        b = torch.randint(-128, 128, (k, n), dtype=torch.int8, device=dev.device)
        return a, b
    dtype = getattr(torch, "float32" if mode == "tf32" else mode)
    return (torch.randn(m, k, dtype=dtype, device=dev.device), torch.randn(k, n, dtype=dtype, device=dev.device))


def _gemm_fn(dev: Device, mode: str, a, b):
    torch = dev.torch
    if mode == "int8":
        return lambda: torch._int_mm(a, b)
    out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=dev.device)
    return lambda: torch.mm(a, b, out=out)


# --------------------------------------------------------------------------------------------------------------
# timing


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
    est_ns = max(min(probe), 1.0)
    iters = int(min(max_iters, max(min_iters, math.ceil(target_ms * 1e6 / est_ns))))
    if max_ms is not None:
        iters = max(3, min(iters, int(max_ms * 1e6 / est_ns)))
    cool_down(dev, sum(probe))
    t0 = time.perf_counter()
    times = time_iterations(dev, fn, iters, flush)
    cool_down(dev, (time.perf_counter() - t0) * 1e9)
    return {"median_ns": statistics.median(times), "min_ns": min(times), "max_ns": max(times), "iters": iters}


def cool_down(dev: Device, busy_ns: float) -> None:
    """Idle as long as the device was just busy (duty cycle <= 50%) on accelerators.

    Why: under sustained GEMM load an H200 hits its 700 W cap (nvidia-smi throttle reason 0x4, SW power cap) and
    drops its clocks ~15%, so back-to-back shapes of a long sweep are timed slower than the same kernels in the
    collector's short bursts (seen on the H200: 8192^3 bf16 at 788 TFLOP/s in a 15-iteration profiled burst vs
    672-692 sustained). Short timed bursts separated by idle time keep every measurement in the burst regime the
    operators are measured in.
    """
    if dev.backend != "cpu" and busy_ns > 0:
        time.sleep(min(busy_ns * 1e-9, 0.25))


def measure_gemm(dev: Device, mode: str, m: int, n: int, k: int, target_ms: float = 20.0, **kw) -> dict:
    """Time ``A[m,k] @ B[k,n]`` in ``mode``; returns the shape, timing and ``tflops`` = 2*m*n*k / median_ns / 1e3.

    For int8 the figure is tera-operations per second (TOPS) under the same key. Raises whatever the library raises
    for an unsupported mode/shape (callers record it).
    """
    a, b = _operands(dev, mode, m, n, k)
    fn = _gemm_fn(dev, mode, a, b)
    t = measure_fn(dev, fn, target_ms, **kw)
    del a, b, fn
    flop = 2.0 * m * n * k
    return {"m": m, "n": n, "k": k, "tflops": flop / t["median_ns"] / 1e3, **t}


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


# --------------------------------------------------------------------------------------------------------------
# search


def neighbours(shape, step: int, lo: int, hi: int):
    """Shapes one ``step`` away from ``shape`` along m, n or k, within [lo, hi]."""
    m, n, k = shape
    out = []
    for dm, dn, dk in ((step, 0, 0), (-step, 0, 0), (0, step, 0), (0, -step, 0), (0, 0, step), (0, 0, -step)):
        s = (m + dm, n + dn, k + dk)
        if all(lo <= v <= hi for v in s):
            out.append(s)
    return out


class Sweep:
    """Timed GEMM shapes of one math mode, best first on demand. ``measure(shape)`` times a shape once.

    Shapes whose operands exceed ``max_operand_bytes`` or whose FLOPs exceed ``max_flop`` are not run; past
    ``deadline`` (``time.monotonic()``) nothing is run, and a shape that the best rate so far says would overrun the
    deadline is skipped (the first shape of a sweep always runs, with at least 3 iterations).
    """

    def __init__(self, dev: Device, mode: str, target_ms: float, max_operand_bytes: int, max_flop: float,
                 deadline: float = math.inf, on_result=None, timer=None):
        self.dev, self.mode, self.target_ms = dev, mode, target_ms
        # timer(m, n, k, target_ms=..., **kw) -> result dict; tests pass a synthetic one
        self.timer = timer or (lambda m, n, k, **kw: measure_gemm(dev, mode, m, n, k, **kw))
        self.max_operand_bytes, self.max_flop = max_operand_bytes, max_flop
        self.deadline = deadline
        self.results = {}
        self.errors = {}
        self.on_result = on_result

    def fits(self, shape) -> bool:
        m, n, k = shape
        item = 1 if self.mode == "int8" else (4 if self.mode in ("float32", "tf32") else 2)
        out_item = 4 if self.mode in ("int8", "float32", "tf32") else 2
        return ((m * k + k * n) * item + m * n * out_item <= self.max_operand_bytes
                and 2.0 * m * n * k <= self.max_flop)

    def measure(self, shape):
        shape = tuple(int(v) for v in shape)
        if shape in self.results or shape in self.errors or not self.fits(shape):
            return self.results.get(shape)
        left_ms = (self.deadline - time.monotonic()) * 1e3
        max_ms = None
        if self.results:
            if left_ms <= 0:
                return None
            rate = max(r["tflops"] for r in self.results.values())  # TFLOP/s = FLOP per ns / 1e3
            est_ms = 2.0 * shape[0] * shape[1] * shape[2] / (rate * 1e3) / 1e6
            if est_ms * 6 > left_ms:  # 2 warm-up + 3 timed iterations + set-up would overrun
                return None
            max_ms = left_ms / 2 if math.isfinite(left_ms) else None
        try:
            r = self.timer(*shape, target_ms=self.target_ms, max_ms=max_ms)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # unsupported mode/shape, OOM: recorded, the sweep goes on
            self.errors[shape] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if self.dev is not None and self.dev.backend == "cuda" and "out of memory" in str(exc).lower():
                self.dev.torch.cuda.empty_cache()
            return None
        self.results[shape] = r
        if self.on_result:
            self.on_result(self, r)
        return r

    def best(self, n: int = 1):
        return sorted(self.results.values(), key=lambda r: -r["tflops"])[:n]


def hill_climb(sweep: Sweep, seeds, steps, lo: int, hi: int) -> None:
    """Measure ``seeds``, then move to the best neighbour along m/n/k with each step size until nothing improves
    or ``time.monotonic()`` passes ``sweep.deadline``. Seeds run until one succeeds even past the deadline, so every
    mode that runs at all gets a number."""
    deadline = sweep.deadline
    for s in seeds:
        if time.monotonic() > deadline and sweep.results:
            return
        sweep.measure(s)
    if not sweep.results:
        return
    for step in steps:
        while time.monotonic() < deadline:
            cur = sweep.best()[0]
            cur_shape = (cur["m"], cur["n"], cur["k"])
            for nb in neighbours(cur_shape, step, lo, hi):
                if time.monotonic() > deadline:
                    return
                sweep.measure(nb)
            new = sweep.best()[0]
            if (new["m"], new["n"], new["k"]) == cur_shape:
                break


def confirm_best(sweep: Sweep, top: int = 3, target_ms: float = 60.0) -> dict:
    """Re-time the ``top`` best shapes with more iterations; returns the best confirmed result.

    Taking the max of many noisy medians favours a lucky one; the confirmation run sets the reported peak.
    """
    best = None
    for r in sweep.best(top):
        max_ms = max(target_ms, 3 * r["median_ns"] / 1e6)
        again = sweep.timer(r["m"], r["n"], r["k"], target_ms=target_ms, max_iters=200, max_ms=max_ms)
        again["sweep_tflops"] = r["tflops"]
        if best is None or again["tflops"] > best["tflops"]:
            best = again
    return best


# --------------------------------------------------------------------------------------------------------------
# the calibration


def default_budget_s(backend: str) -> float:
    """Default time budget for the measurements: 18 s on accelerators (under 30 s with start-up), 4 s on CPU."""
    return 4.0 if backend == "cpu" else 18.0


def parse_modes(text: str) -> list:
    """``"bf16,fp16,fp32,tf32,int8"`` -> canonical math modes (order kept, duplicates dropped)."""
    out = []
    for tok in filter(None, (t.strip().lower() for t in (text or "").split(","))):
        if tok not in DTYPE_ALIASES:
            raise UserError(f"--dtypes: unknown {tok!r}; choose from bf16, fp16, fp32, tf32 (HF32 on NPU), int8")
        if DTYPE_ALIASES[tok] not in out:
            out.append(DTYPE_ALIASES[tok])
    if not out:
        raise UserError("--dtypes: empty; e.g. --dtypes bf16,fp16,fp32")
    return out


def calibrate(backend: str, index: int = 0, modes=DEFAULT_MODES, budget_s: float | None = None,
              bandwidth: bool = True, progress=None, nominal=None) -> dict:
    """Measure the peaks of device ``index`` of ``backend``; returns the body of peak.json (no provenance).

    ``progress(text)`` is called after every measured shape. ``nominal`` is the nominal-peak dict recorded beside
    the measured ones (see :func:`nominal_block`). Ctrl-C stops the sweep; what was measured is returned with
    ``"interrupted": true``.
    """
    t0 = time.monotonic()
    budget_s = default_budget_s(backend) if budget_s is None else float(budget_s)
    dev = Device(backend, index)
    ident = dev.identity()
    cpu = backend == "cpu"
    total_mem = ident.get("total_memory_bytes") or 0
    if cpu:
        max_operand_bytes, max_flop, lo, hi = 256 * MIB, 2 * 1024 ** 3 * 2, 128, 2048
        seeds, steps, target_ms = CPU_SEEDS, CPU_STEPS, 5.0
    else:
        # operands at most 1/4 of device memory (and 8 GiB); one iteration at most ~5 TFLOP (fp32 ~0.1 s on an H200)
        max_operand_bytes = int(min(8 * 1024 ** 3, total_mem / 4 or 8 * 1024 ** 3))
        max_flop, lo, hi = 5e12, 256, 32768
        seeds, steps, target_ms = ACCEL_SEEDS, ACCEL_STEPS, 15.0
    clocks_before = dev.clocks()
    result = {"backend": backend, "accelerator": not cpu, "device": ident,
              "label": (f"{ident['name']} ({backend}:{index})" if not cpu else
                        f"CPU {ident['name']} (torch CPU GEMM, {ident.get('threads')} threads) - not an accelerator"),
              "method": method_block(dev, target_ms), "measured": {}, "peak_tflops": {}, "errors": {},
              "budget_s": budget_s, "interrupted": False}
    tasks = list(modes) + (["bandwidth"] if bandwidth else [])
    weights = {t: _TASK_WEIGHT[t] for t in tasks}
    interrupted = False
    try:
        _warm_up(dev, 0.3 if not cpu else 0.05)
        for i, task in enumerate(tasks):
            left = budget_s - (time.monotonic() - t0)
            share = left * weights[task] / sum(weights[t] for t in tasks[i:])
            deadline = time.monotonic() + max(share, 0.0)
            t_task = time.monotonic()
            if task == "bandwidth":
                nbytes = 64 * MIB if cpu else int(min(2 * 1024 ** 3, (total_mem or 8 * 1024 ** 3) / 8))
                try:
                    bw = measure_bandwidth(dev, nbytes)
                    bw["elapsed_s"] = time.monotonic() - t_task
                    result["bandwidth"] = bw
                    result["bandwidth_gbps"] = bw["gbps"]
                except Exception as exc:
                    result["errors"]["bandwidth"] = f"{type(exc).__name__}: {exc}"
                if progress:
                    progress(f"bandwidth: {result.get('bandwidth_gbps', float('nan')):.0f} GB/s")
                continue
            if task == "tf32" and cpu:
                result["errors"][task] = ("not applicable: torch CPU GEMM has no TF32 mode; fp32 cases use the "
                                          "float32 peak")
                continue
            try:
                with math_mode(dev, task) as desc:
                    # keep ~15% of the share for re-timing the best three shapes
                    sweep = Sweep(dev, task, target_ms, max_operand_bytes, max_flop,
                                  deadline=deadline - 0.15 * max(share, 0.0),
                                  on_result=(lambda sw, r: progress(_progress_text(sw, r))) if progress else None)
                    hill_climb(sweep, seeds, steps, lo, hi)
                    if not sweep.results:
                        first = next(iter(sweep.errors.values()), "no shape fitted the budget")
                        result["errors"][task] = f"not measured: {first}"
                        continue
                    best = confirm_best(sweep, top=3, target_ms=2 * target_ms)
            except UserError as exc:
                result["errors"][task] = str(exc)
                continue
            result["measured"][task] = {
                "peak_tflops": best["tflops"], "unit": "TOPS" if task == "int8" else "TFLOP/s",
                "best_shape": {"m": best["m"], "n": best["n"], "k": best["k"]}, "confirm": best,
                "math_mode": desc, "n_shapes": len(sweep.results), "elapsed_s": time.monotonic() - t_task,
                "shapes": sorted(sweep.results.values(), key=lambda r: -r["tflops"]),
                "shape_errors": {"x".join(map(str, s)): e for s, e in sweep.errors.items()}}
            result["peak_tflops"][task] = best["tflops"]
    except KeyboardInterrupt:
        interrupted = True
    finally:
        dev.release()
    result["interrupted"] = interrupted
    result["clocks_before"], result["clocks_after"] = clocks_before, dev.clocks()
    result["elapsed_s"] = time.monotonic() - t0
    if nominal:
        result["nominal"] = nominal
        _fractions(result)
    return result


def _progress_text(sweep: Sweep, r: dict) -> str:
    b = sweep.best()[0]
    return (f"{sweep.mode}: {len(sweep.results)} shapes, best {b['tflops']:.1f} @ {b['m']}x{b['n']}x{b['k']}"
            f" (last {r['m']}x{r['n']}x{r['k']} {r['tflops']:.1f})")


def _warm_up(dev: Device, seconds: float):
    """Run GEMMs for ``seconds`` so clocks leave idle (an H200 idles at 345 MHz SM; device notes)."""
    torch = dev.torch
    dtype = torch.float32 if dev.backend == "cpu" else torch.bfloat16
    n = 512 if dev.backend == "cpu" else 4096
    a = torch.randn(n, n, dtype=dtype, device=dev.device)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(10):
            torch.mm(a, a)
        dev.synchronize()


def method_block(dev: Device, target_ms: float) -> dict:
    return {"method_version": METHOD_VERSION,
            "gemm": "torch.mm(A[m,k], B[k,n], out=C) on torch.randn data (int8: torch._int_mm on randint)",
            "timing": ("device events per iteration (torch.%s.Event)" % dev.backend) if dev.backend != "cpu"
            else "time.perf_counter_ns per iteration (CPU ops are synchronous)",
            "cache_flush": f"zero a {dev.flush_bytes // MIB} MiB buffer before every timed iteration (untimed)",
            "per_shape_statistic": "median iteration time after warm-up; tflops = 2*m*n*k / median_ns / 1e3",
            "peak": "max over shapes after re-timing the best 3 with more iterations",
            "search": "seed shapes + coordinate hill climb on m, n, k within the time budget",
            "target_timed_ms_per_shape": target_ms,
            "idea": "mamf-finder (stas00/ml-engineering compute/accelerator/benchmarks/mamf-finder.py)"}


def nominal_block(ident: dict) -> dict:
    """Nominal (datasheet / formula) dense peaks for the device, from :mod:`mfulib.peaks`, recorded beside the
    measured ones: ``{"tflops": {mode: value}, "bandwidth_gbps": value|None, "source": text}``."""
    try:
        from . import peaks
    except ImportError as exc:  # pragma: no cover - the module is part of the package
        return {"tflops": {}, "bandwidth_gbps": None, "source": f"mfulib.peaks unavailable ({exc})"}
    return peaks.nominal_for_identity(ident)


def _fractions(result: dict) -> None:
    nom = (result.get("nominal") or {}).get("tflops") or {}
    for mode, m in result["measured"].items():
        if nom.get(mode):
            m["fraction_of_nominal"] = m["peak_tflops"] / nom[mode]
    nbw = (result.get("nominal") or {}).get("bandwidth_gbps")
    if nbw and result.get("bandwidth"):
        result["bandwidth"]["fraction_of_nominal"] = result["bandwidth_gbps"] / nbw


# --------------------------------------------------------------------------------------------------------------
# cache


def default_cache_dir() -> str:
    """``$MFU_PEAK_CACHE_DIR``, else ``$XDG_CACHE_HOME/triton-mfu-analyzer``, else ``~/.cache/triton-mfu-analyzer``."""
    if os.environ.get("MFU_PEAK_CACHE_DIR"):
        return os.environ["MFU_PEAK_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "triton-mfu-analyzer")


def cache_path(cache_dir: str, ident: dict) -> str:
    return os.path.join(cache_dir, f"peak-{ident['key']}.json")


def _software(ident: dict) -> dict:
    """What must match for a cached calibration to be reused (device key + software + method)."""
    from .jsonio import versions
    v = versions()
    return {"key": ident.get("key"), "torch": v.get("torch"), "cuda_runtime": ident.get("cuda_runtime"),
            "driver": ident.get("driver"), "cann": ident.get("cann"), "torch_npu": ident.get("torch_npu"),
            "threads": ident.get("threads"), "method_version": METHOD_VERSION}


def load_cached(path: str, ident: dict, modes, bandwidth: bool, max_age_days: float):
    """The cached peak.json body at ``path`` if still valid for ``ident``/``modes``, else (None, reason)."""
    if not os.path.exists(path):
        return None, "no cached calibration"
    try:
        cached = read_json(path)
    except (OSError, ValueError) as exc:
        return None, f"unreadable cache ({exc})"
    try:
        check_peak(cached, path)
    except UserError as exc:  # valid JSON of the wrong structure: measure again (the run overwrites it)
        return None, f"cache ignored: {exc}"
    measured = cached.get("measured", {})
    if not isinstance(measured, dict) or not isinstance(cached.get("errors", {}), dict) or not all(
            isinstance(m, dict) and _positive(m.get("peak_tflops")) for m in measured.values()):
        return None, f"cache ignored: {path}: measured/errors are not objects {{mode: {{peak_tflops, ...}}}}"
    if cached.get("schema") != SCHEMA or cached.get("interrupted"):
        return None, "cache from another schema or an interrupted run"
    if cached.get("software") != _software(ident):
        return None, "device/software/method changed since the cached calibration"
    missing = [m for m in modes if m not in cached.get("measured", {}) and m not in cached.get("errors", {})]
    if missing or (bandwidth and "bandwidth_gbps" not in cached and "bandwidth" not in cached.get("errors", {})):
        return None, f"cache lacks {missing or ['bandwidth']}"
    try:
        created = _dt.datetime.fromisoformat(cached["created_at"])
        age_days = (_dt.datetime.now(_dt.timezone.utc) - created).total_seconds() / 86400
    except (KeyError, ValueError, TypeError):
        return None, "cache has no creation time"
    if age_days > max_age_days:
        return None, f"cache is {age_days:.1f} days old (> {max_age_days:g})"
    return cached, f"cached calibration from {cached['created_at']} ({age_days:.1f} days old)"


def check_output_path(output: str) -> None:
    """UserError unless ``output`` can be written as a file (not a directory; folder creatable and writable).
    Called before measuring so a bad -o costs no measurement."""
    if os.path.isdir(output):
        raise UserError(f"-o {output}: is a directory - give a file name, e.g. -o {os.path.join(output, 'peak.json')}")
    ensure_writable_dir(os.path.dirname(os.path.abspath(output)), f"-o {output}")


def run_calibration(output: str, backend: str = "auto", index: int = 0, modes=DEFAULT_MODES,
                    budget_s: float | None = None, bandwidth: bool = True, cache: str = "use",
                    cache_dir: str | None = None, max_age_days: float = 14.0, progress=None,
                    filter_noise: bool | None = None, log=print) -> dict:
    """Calibrate (or reuse the per-device cache) and write peak.json to ``output``; returns what was written.

    ``cache``: ``use`` (reuse a valid cached result, else measure and store), ``refresh`` (measure and store),
    ``off`` (measure, leave the cache alone). ``filter_noise``: drop known-harmless native warnings from fds 1/2
    while measuring (None: on the NPU only, where CANN prints them).

    Raises UserError before anything is measured for a budget that is not a finite number > 0, a max age that is
    NaN or negative, or an ``output`` that cannot be written (a directory, below a file, not writable).
    """
    if budget_s is not None and not (isinstance(budget_s, (int, float)) and math.isfinite(budget_s) and budget_s > 0):
        raise UserError(f"--budget-s {budget_s}: must be > 0 seconds and finite (e.g. --budget-s 20)")
    if not max_age_days >= 0:  # NaN fails too
        raise UserError(f"--max-age-days {max_age_days}: must be >= 0 (inf: any age)")
    check_output_path(output)
    be, why = resolve_backend(backend)
    ident = device_identity(be, index)
    cache_dir = cache_dir or default_cache_dir()
    cpath = cache_path(cache_dir, ident)
    cached, reason = (None, "cache off") if cache != "use" else load_cached(cpath, ident, modes, bandwidth,
                                                                           max_age_days)
    head = provenance(TOOL, SCHEMA, device=ident)
    if cached is not None:
        log(f"peak_calib: reusing {cpath}: {reason} (--cache refresh re-measures)")
        body = {k: v for k, v in cached.items() if k not in head}
        out = {**head, **body, "cache": {"hit": True, "path": cpath, "reason": reason,
                                          "measured_at": cached.get("created_at"),
                                          "measured_by": cached.get("command_line")}}
        write_json_atomic(output, out)
        return out
    log(f"peak_calib: backend {be} ({why}); device {ident['name']}; measuring ({reason})")
    nominal = nominal_block(ident)
    with native_noise_filter(enabled=(be == "npu") if filter_noise is None else filter_noise) as noise:
        body = calibrate(be, index, modes, budget_s, bandwidth, progress, nominal)
    out = {**head, "backend_reason": why, **body, "software": _software(ident),
           "noise_filtered": noise.summary(),
           "cache": {"hit": False, "path": cpath if cache != "off" else None, "reason": reason}}
    write_json_atomic(output, out)
    if cache != "off" and not out["interrupted"]:
        try:
            write_json_atomic(cpath, {k: v for k, v in out.items() if k != "cache"})
        except OSError as exc:  # a read-only home must not fail the run
            log(f"peak_calib: could not write the cache {cpath}: {exc}")
    return out


# --------------------------------------------------------------------------------------------------------------
# native noise filter


class NativeNoiseFilter:
    """Filter known-harmless lines that native libraries print to file descriptors 1 and 2.

    CANN writes its "tiling struct ... is conflict" warnings from C++ straight to the fds, so Python-level
    redirection cannot catch them. While active, fds 1 and 2 point at pipes; a reader thread forwards every line
    that matches none of ``patterns`` to the original fd at once (progress bars included) and counts the rest.
    """

    def __init__(self, patterns=NOISE_PATTERNS, enabled: bool = True):
        self.patterns = [re.compile(p, re.I) for p in patterns]
        self.enabled = enabled
        self.counts = {p.pattern: 0 for p in self.patterns}
        self._saved, self._threads = {}, []

    def summary(self) -> dict:
        return {"enabled": self.enabled, "patterns": list(self.counts), "lines_dropped": dict(self.counts),
                "why": "known-harmless native warnings (CANN tiling struct conflicts) unrelated to GEMM peaks"}

    def _noise(self, line: str) -> bool:
        for p in self.patterns:
            if p.search(line):
                self.counts[p.pattern] += 1
                return True
        return False

    def _pump(self, rfd: int, out_fd: int):
        buf = b""
        while True:
            chunk = os.read(rfd, 65536)
            if not chunk:
                break
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                line, buf = buf[: nl + 1], buf[nl + 1:]
                if not self._noise(line.decode("utf-8", "replace")):
                    os.write(out_fd, line)
            cr = buf.rfind(b"\r")  # progress bars redraw with \r: forward them without waiting for a newline
            if cr >= 0:
                os.write(out_fd, buf[: cr + 1])
                buf = buf[cr + 1:]
        if buf and not self._noise(buf.decode("utf-8", "replace")):
            os.write(out_fd, buf)
        os.close(rfd)

    @staticmethod
    def _flush_python_streams():
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()

    def __enter__(self):
        if not self.enabled:
            return self
        self._flush_python_streams()
        for fd in (1, 2):
            saved = os.dup(fd)
            r, w = os.pipe()
            os.dup2(w, fd)
            os.close(w)
            t = threading.Thread(target=self._pump, args=(r, saved), daemon=True)
            t.start()
            self._saved[fd] = saved
            self._threads.append(t)
        return self

    def __exit__(self, *exc):
        if not self.enabled:
            return False
        self._flush_python_streams()
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)  # closes the pipe's last write end: the pump sees EOF
        for t in self._threads:
            t.join(timeout=5)
        for saved in self._saved.values():
            os.close(saved)
        self._saved, self._threads = {}, []
        return False


def native_noise_filter(enabled: bool = True, patterns=NOISE_PATTERNS) -> NativeNoiseFilter:
    return NativeNoiseFilter(patterns, enabled)


# --------------------------------------------------------------------------------------------------------------
# reading peak.json


def peak_key(dtype: str, tf32: bool = False) -> str:
    """The peak.json key for a case's compute dtype: ``float32`` with TF32/HF32 in use -> ``tf32``."""
    from .cases import canonical_dtype
    d = canonical_dtype(dtype)
    return "tf32" if d == "float32" and tf32 else d


def measured_peak_tflops(peak: dict, dtype: str, tf32: bool = False):
    """(tflops, key) measured for ``dtype`` in a peak.json dict; tflops is None when that mode was not measured."""
    key = peak_key(dtype, tf32)
    return (peak.get("peak_tflops") or {}).get(key), key


def read_peak_json(path: str) -> dict:
    """Read and check a peak.json; raises UserError naming the file, the field and the fix.

    Checked: a JSON object from peak_calib (``tool``, ``peak_tflops``); ``peak_tflops`` {mode: TFLOP/s > 0 or
    null}; ``bandwidth_gbps`` > 0 or null; ``nominal`` {tflops: {mode: number or null}, ...} where given."""
    if not os.path.exists(path):
        raise UserError(f"{path}: not found - run `python3 scripts/peak_calib.py -o {path}` on this device first")
    try:
        peak = read_json(path)
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON ({exc}) - re-run peak_calib.py") from None
    check_peak(peak, path)
    return peak


def check_peak(peak, path: str) -> None:
    """The checks of :func:`read_peak_json` on an already-read document (UserError naming ``path`` and field)."""
    from .decompose import wrong_type  # decompose imports this module
    if not isinstance(peak, dict):
        raise wrong_type(path, "the document", peak, "a JSON object written by peak_calib.py",
                         "pass the file peak_calib.py -o wrote")
    if peak.get("tool") != TOOL or "peak_tflops" not in peak:
        raise UserError(f"{path}: not a peak_calib.py result (no tool=peak_calib / peak_tflops) - "
                        "pass the file peak_calib.py -o wrote")
    schema = peak.get("schema", 0)
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise UserError(f"{path}: schema is {schema!r}, not an integer - re-run peak_calib.py")
    if schema > SCHEMA:
        raise UserError(f"{path}: schema {peak.get('schema')} is newer than this tool ({SCHEMA}) - update the tool")
    fix = "re-run peak_calib.py (or fix the file)"
    pt = peak["peak_tflops"]
    if not isinstance(pt, dict):
        raise wrong_type(path, "peak_tflops", pt, "an object {mode: TFLOP/s}", fix)
    fields = {f"peak_tflops.{k}": v for k, v in pt.items()}
    fields["bandwidth_gbps"] = peak.get("bandwidth_gbps")
    for field, v in fields.items():
        if v is not None and not _positive(v):
            raise wrong_type(path, field, v, "a measured peak > 0 (or null: not measured)", fix)
    nominal = peak.get("nominal")
    if nominal is not None:
        ntf = nominal.get("tflops") if isinstance(nominal, dict) else None
        if not isinstance(nominal, dict) or not (ntf is None or isinstance(ntf, dict)):
            raise wrong_type(path, "nominal", nominal, "an object {tflops: {mode: TFLOP/s}, source}", fix)
        for k, v in (ntf or {}).items():
            if v is not None and not _positive(v):
                raise wrong_type(path, f"nominal.tflops.{k}", v, "a nominal peak > 0 (or null)", fix)


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
