"""The backend interface (docs/ARCHITECTURE.md#backends) and what the CUDA and CPU backends share.

A backend runs ``ModelNew`` (or ``Model``) on one case for warmup + repeats iterations **in a child process** (see
:mod:`mfulib.backends.runner`) and turns what its profiler recorded into a kernel table: one row per kernel launch
with ``name``, ``start_ns``, ``duration_ns``, ``iteration`` (None outside the timed iterations) and any PMU columns.

Two sides, two processes:

* parent (collector) side: :meth:`Backend.check` (environment, with the fix in the message), :meth:`command`
  (how the child is started: plain, or under ``msprof``), :meth:`child_env`, :meth:`launches` (parse the profile
  the child left into tagged rows + problems);
* child side: :meth:`setup` (device, compatibility layer, launch hooks), :meth:`identity`, :meth:`sync`,
  :meth:`session` (the profiler around the timed window), :meth:`iteration` (the marker around one iteration),
  :meth:`finish` (write the profile).

Iterations are delimited from the data: each is wrapped in ``record_function("mfu::iter::<i>")`` (CUDA/CPU; the
profiler records the range) or bracketed by marker-kernel launches (NPU, where msprof has no such range in the
CSVs); the kernel-name sequence must then repeat once per iteration (:func:`mfulib.profiles.kernels.summarize`).
"""
from __future__ import annotations

import bisect
import contextlib
import decimal
import gzip
import json
import os
import re
import time

ITER_RANGE_PREFIX = "mfu::iter::"
PRIME_RANGE = "mfu::prime"
_ITER_RE = re.compile(r"^mfu::iter::(\d+)$")


class Backend:
    """Base class; subclasses set ``name``, ``timing_method`` and override what differs.

    Callers branch on the capabilities below (class attributes, readable from :func:`mfulib.backends.backend_class`
    without creating a backend or importing torch) and call the methods, never on the backend's name.
    """

    name = "base"
    timing_method = None
    profile_prime = False  # is the priming call inside the profiled window (it never counts either way)
    markers = False  # launch marker kernels around iterations (backends whose profiler has no ranges)
    persistent_worker = False  # cases run one after another in a kept worker process (runner.py), not one child each
    # ---- capabilities
    accelerator = True  # False: numbers validate the pipeline only, never compared with accelerator numbers
    interpreter = False  # Triton kernels run in the Triton interpreter (TRITON_INTERPRET=1)
    runs_bf16 = True  # False: bf16 cases are skipped (:attr:`bf16_skip_reason` says why)
    bf16_skip_reason = None
    torch_namespace = None  # "cuda" / "npu": torch.<namespace> has Event, synchronize, memory stats; None: host
    reduced_fp32_matmul = None  # "TF32" / "HF32": what an fp32 matmul may run as on this device; None: IEEE only
    matrix_unit = "tensor"  # the word for the matrix unit in reports ("cube" on Ascend)
    verify_max_input_mb = None  # verify's default input cap in MB (the interpreter is slow); None: no cap
    calib_budget_s = 18.0  # peak_calib's default time budget (accelerators: under 30 s with start-up)
    idle_between_bursts = True  # calibration idles after each timed burst (power-capped clocks to protect)
    native_noise = False  # the runtime prints known-harmless native warnings that peak_calib filters
    visible_devices_var = None  # the environment variable that restricts the visible devices (batch workers)
    device_id_var = None  # the environment variable that names the device id in a child process, if any
    unavailable_fix = "use --backend cpu (Triton interpreter)"  # said when --backend <name> cannot run here
    checks_environment = False  # check() verifies a tool chain (and takes options): asked instead of available()
    clock_tool = None  # the vendor tool :meth:`read_clocks` asks ("nvidia-smi", "npu-smi"); None: no clocks
    pmu_in_profile = False  # PMU counters come in the profile's own tables (msprof), not from a separate pass (ncu)
    matrix_counter = None  # the hardware counter of matrix instructions/FLOPs, if any (executed FLOPs)
    matrix_counter_documented = False  # a public source says what matrix_counter counts (else it is not used)

    # ---------------------------------------------------------------- capability rules
    @classmethod
    def fp32_dot_is_reduced(cls, dtype) -> bool:
        """Does an fp32 ``tl.dot`` / matmul of a case of compute dtype ``dtype`` run in the reduced-precision mode
        (:attr:`reduced_fp32_matmul`) by default? The one home of this rule: verify's tolerance, the performance
        record's ``tf32`` flag and the peak a case is judged against all ask it. Base: never."""
        return False

    @classmethod
    def available(cls):
        """(ok, why): can this backend run in this process? ``--backend auto`` takes the first that can."""
        return False, f"{cls.name}: not probed"

    @staticmethod
    def discover_devices() -> tuple:
        """(device ids, how they were found) of the devices present on this host, without importing torch (batch
        workers: one per device); ids [] when none is found this way."""
        return [], None

    @classmethod
    def device_string(cls, device_id: int = 0) -> str:
        """The torch device string of device ``device_id`` (``cuda:0``)."""
        return f"{cls.torch_namespace or cls.name}:{device_id}"

    @classmethod
    def prepare_process(cls) -> None:
        """Process set-up that must precede any Triton kernel definition (the interpreter's switch)."""
        if cls.interpreter:
            os.environ["TRITON_INTERPRET"] = "1"

    # ---------------------------------------------------------------- device facts (parent or child)
    def torch_module(self):
        """``torch.cuda`` / ``torch.npu`` (the device namespace), or None on the host."""
        if self.torch_namespace is None:
            return None
        import torch
        return getattr(torch, self.torch_namespace)

    def device_identity(self, index: int = 0) -> dict:
        """Identity of device ``index``: the common fields of :func:`mfulib.backends.device_identity` plus what
        :meth:`identity_fields` reads (name, cores, memory, versions)."""
        from mfulib.core.device import slug
        ident = {"backend": self.name, "index": index, "accelerator": self.accelerator}
        ident.update(self.identity_fields(index))
        ident["key"] = f"{self.name}-{slug(ident.get('name', 'unknown'))}"
        return ident

    def identity_fields(self, index: int) -> dict:
        return {"name": self.name}

    def read_clocks(self, index: int = 0) -> dict:
        """Clocks and power as the vendor tool reports them (:mod:`mfulib.core.device`); {} where none answers."""
        return {}

    def memory_free_bytes(self, index: int = 0):
        """Free device memory in bytes (``torch.<namespace>.mem_get_info``), None on the host (the host memory check
        covers it)."""
        if self.torch_namespace is None:
            return None
        return int(self.torch_module().mem_get_info(index)[0])

    def nominal_bandwidth(self, identity: dict) -> tuple:
        """(GB/s, source) of the device's datasheet memory bandwidth for ``identity``
        (:meth:`device_identity`); (None, None) where none is known. The search's gate 5 uses it without a
        measured peak.json."""
        return None, None

    def complete_identity(self, device: dict, env_facts: dict, device_id: int) -> None:
        """Fill what a case run's device record lacks from the run-level environment facts (in place); the
        collector calls it once per run. Default: nothing to add."""

    def l2_bytes(self, index: int = 0):
        """Last-level cache size in bytes from the device properties, or None."""
        mod = self.torch_module()
        if mod is None:
            return None
        props = mod.get_device_properties(index)
        return getattr(props, "L2_cache_size", None) or getattr(props, "l2_cache_size", None)

    def empty_cache(self) -> None:
        """Give cached device memory back (after an out-of-memory or before a large case)."""
        mod = self.torch_module()
        if mod is not None and hasattr(mod, "empty_cache"):
            mod.empty_cache()

    def set_device(self, index: int) -> None:
        mod = self.torch_module()
        if mod is not None:
            mod.set_device(index)

    def event(self):
        """A timing event with ``record()``: the device's own (``torch.<ns>.Event(enable_timing=True)``), or a
        host clock event where the device is the host (ops are synchronous there)."""
        mod = self.torch_module()
        return mod.Event(enable_timing=True) if mod is not None else HostEvent()

    @staticmethod
    def elapsed_ns(start, end) -> float:
        """Nanoseconds between two events of :meth:`event`."""
        if isinstance(start, HostEvent):
            return float(end.t_ns - start.t_ns)
        return start.elapsed_time(end) * 1e6  # elapsed_time is in ms

    @property
    def event_timing(self) -> str:
        """How :meth:`event` times (recorded in peak.json's method block)."""
        if self.torch_namespace is None:
            return "time.perf_counter_ns per iteration (CPU ops are synchronous)"
        return f"device events per iteration (torch.{self.torch_namespace}.Event)"

    def fp32_matmul_mode(self, allow: bool):
        """Context manager: fp32 matmuls in :attr:`reduced_fp32_matmul` mode (``allow``) or IEEE; yields the
        setting's description. Raises UserError where the switch is missing. Base: no such mode."""
        return contextlib.nullcontext("fp32 (IEEE)")

    # ---------------------------------------------------------------- low-precision GEMM paths (peak calibration)
    fp8_note = "fp8 is measured only on CUDA capability >= 8.9"  # why this backend has no fp8 GEMM peak

    def int8_gemm_support(self):
        """(ok, why) of :meth:`int8_gemm`: ``torch._int_mm`` (int8 x int8 -> int32) where this torch has it."""
        import torch
        if not hasattr(torch, "_int_mm"):
            return False, f"not available: this torch ({torch.__version__}) has no torch._int_mm"
        return True, "torch._int_mm (int8 x int8 -> int32)"

    def int8_gemm(self, a, b):
        """A zero-argument callable computing the int8 product ``a @ b``."""
        import torch
        return lambda: torch._int_mm(a, b)

    def fp8_gemm_support(self, index: int = 0):
        """(ok, why) of an fp8 e4m3 GEMM (``torch._scaled_mm``) on device ``index``. Base: none."""
        return False, f"not available on {self.name}: {self.fp8_note}"

    def write_flush(self, buf) -> None:
        """Write every element of ``buf`` (the cache-flush buffer of :class:`mfulib.backends.flush.CacheFlush`)
        with the collector's named flush kernel, which profilers attribute to the harness, never to operators."""
        from mfulib.backends.harness import flush_kernel_write
        flush_kernel_write(buf)

    # ---------------------------------------------------------------- parent side
    def check(self, args=None) -> dict:
        """Environment checks before any case runs; returns facts to record, raises UserError with the fix."""
        return {}

    def child_env(self, env: dict) -> dict:
        return dict(env)

    def command(self, child_cmd: list, attempt_dir: str, opts: dict) -> list:
        """The argv that starts the child (``child_cmd`` runs the case)."""
        return list(child_cmd)

    def launches(self, attempt_dir: str, report: dict, n_iters: int):
        """(rows, info) from the profile the child left; ``info["lost_by_iter"]`` counts launches without a
        kernel record per iteration, ``info["problems"]``/``info["flags"]`` say what else was seen.

        Every backend (cpu, cuda, npu) overrides this: the base class has no profile format of its own."""
        raise TypeError(f"{type(self).__name__} does not parse profiles: a backend must override launches()")

    # ---------------------------------------------------------------- child side
    def setup(self, spec: dict) -> None:
        """Prepare the child process for ``spec["device"]`` (before the operator files are imported)."""

    def identity(self, spec: dict) -> dict:
        return {"backend": self.name}

    def sync(self) -> None:
        """Wait for the device (``torch.<namespace>.synchronize()``; nothing to wait for on the host)."""
        mod = self.torch_module()
        if mod is not None:
            mod.synchronize()

    def session(self, spec: dict):
        """Context manager around the profiled window; yields an object passed to :meth:`finish`."""
        return contextlib.nullcontext()

    def iteration(self, index: int):
        """Context manager around iteration ``index`` (the marker the profiler records)."""
        from torch.profiler import record_function
        return record_function(f"{ITER_RANGE_PREFIX}{index}")

    def finish(self, spec: dict, session) -> dict:
        """After the session: write the profile (trace file) and return what to add to the child report."""
        return {}


@contextlib.contextmanager
def setting(obj, attr: str, value, description: str):
    """Set ``obj.attr = value`` for the duration of the block (the old value restored after); yields
    ``description``."""
    old = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield description
    finally:
        setattr(obj, attr, old)


class HostEvent:
    """A host-clock stand-in for a device timing event (``record()`` takes ``time.perf_counter_ns``)."""
    __slots__ = ("t_ns",)

    def __init__(self):
        self.t_ns = 0

    def record(self, *_a):
        self.t_ns = time.perf_counter_ns()


# ------------------------------------------------------------------------------------------- chrome traces


def load_trace(path):
    """``(events, top)`` of a torch.profiler chrome trace (``.json`` or gzip-compressed ``.json.gz``, detected by
    its magic bytes): complete events (``"ph": "X"``) with exact integer ``ts_ns``/``dur_ns``, and the top-level
    object without ``traceEvents`` (``deviceProperties``, ``schemaVersion``, ...; {} for a bare event list).

    Timestamps are read as decimals (``5117234754077.308`` us needs 16 digits), so no float rounding enters.
    Raises ValueError for a file that is not JSON.
    """
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")) as f:
        data = json.load(f, parse_float=decimal.Decimal)
    events = data.get("traceEvents", data) if isinstance(data, dict) else data
    top = {k: v for k, v in data.items() if k != "traceEvents"} if isinstance(data, dict) else {}
    out = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        ts, dur = e.get("ts"), e.get("dur")
        if ts is None:
            continue
        e = dict(e)
        e["ts_ns"] = int(decimal.Decimal(ts) * 1000)
        e["dur_ns"] = int(decimal.Decimal(dur) * 1000) if dur is not None else 0
        out.append(e)
    return out, top


def load_trace_events(path):
    """The complete events of :func:`load_trace` (a chrome trace, ``.json`` or ``.json.gz``)."""
    return load_trace(path)[0]


def iteration_ranges(events, cats=("user_annotation",)):
    """Sorted ``[(start_ns, end_ns, index)]`` of the ``mfu::iter::<i>`` ranges among events of ``cats``."""
    out = []
    for e in events:
        if e.get("cat") in cats:
            m = _ITER_RE.match(str(e.get("name", "")))
            if m:
                out.append((e["ts_ns"], e["ts_ns"] + e["dur_ns"], int(m.group(1))))
    return sorted(out)


def range_of(t_ns, ranges):
    """Index of the range containing ``t_ns`` (ranges sorted, non-overlapping), else None."""
    if t_ns is None or not ranges:
        return None
    j = bisect.bisect_right([r[0] for r in ranges], t_ns) - 1
    if j >= 0 and ranges[j][0] <= t_ns <= ranges[j][1]:
        return ranges[j][2]
    return None


def launches_from_trace(report: dict, parse):
    """``parse(trace_path)`` for the trace the child reported, or a problem when it wrote none."""
    path = report.get("trace_path")
    if not path or not os.path.exists(path):
        return [], {"problems": [f"the child wrote no trace ({path})"], "flags": [], "lost_by_iter": {}}
    return parse(path)


def lost_problems(info: dict, warmup: int, n_iters: int) -> list:
    """Problems for the measured iterations from ``info["lost_by_iter"]`` (launches with no kernel record)."""
    lost = {int(k): v for k, v in (info.get("lost_by_iter") or {}).items() if warmup <= int(k) < n_iters and v}
    if not lost:
        return []
    return [f"{sum(lost.values())} kernel launch(es) in measured iterations {sorted(lost)} have no kernel record "
            "(profiler buffer not drained or records dropped)"]
