"""CUDA backend: torch.profiler with CUDA activity (CUPTI) gives every kernel's device duration by name.

Compiled Triton (3.6 on the project's H200) reports each kernel to CUPTI under its Python function name, so no
launch hook is needed. The child profiles warmup + repeats iterations, each in ``record_function("mfu::iter::<i>")``
and ended by ``torch.cuda.synchronize()``, and exports a chrome trace; the priming call (compilation, autotuning)
runs before the profiler starts.

Attribution of a kernel to an iteration (:func:`trace_launches`), in order of preference:

1. its ``correlation`` id -> the runtime/driver launch call (``cudaLaunchKernel``, ``cuLaunchKernelEx``) -> the
   host time of that call -> the ``mfu::iter`` range that contains it (a kernel launched before a range, e.g. a
   cache flush, is never attributed to it even if it runs on the device inside the range);
2. its ``External id`` -> the host op that launched it -> that op's range;
3. its device start inside the ``gpu_user_annotation`` copy of the range.

Completeness: a launch call inside a range whose correlation id has no device record is a lost kernel record
(``lost_by_iter``); a kernel record with a zero timestamp or duration is invalid (:mod:`mfulib.profiles.kernels`).
Device memcpy/memset records are not kernels: they are reported as a flag, not added to kernel time.

PMU counters per kernel come from one more run of the same child under Nsight Compute
(:mod:`mfulib.backends.ncu_pmu`).
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections import Counter

from mfulib.backends.base import (Backend, iteration_ranges, launches_from_trace, load_trace_events, range_of, setting)

KERNEL_CATS = ("kernel",)
COPY_CATS = ("gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
LAUNCH_API_RE = re.compile(r"LaunchKernel|LaunchCooperativeKernel|^cuLaunch", re.I)


def _arg(e, key):
    v = (e.get("args") or {}).get(key)
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def trace_launches(trace_path, events=None):
    """Kernel rows of a CUDA-backend chrome trace, tagged with iterations; see the module docstring.

    ``events``: the trace's events when already loaded (:func:`mfulib.backends.base.load_trace`). Rows also carry
    the launch configuration CUPTI records (``grid``, ``block``, ``registers``, ``shared_memory``) and the
    ``correlation`` / ``external_id`` links. Returns ``(rows, info)``; ``info``: ``lost_by_iter`` {iteration:
    launches without a kernel record}, ``lost_launches`` [host ns of every such launch, inside a range or not],
    ``attribution`` {method: count}, ``copies_by_iter`` {iteration: memcpy/memset ns}, ``flags``, ``problems``.
    """
    events = load_trace_events(trace_path) if events is None else events
    ranges = iteration_ranges(events, cats=("user_annotation",))
    gpu_ranges = iteration_ranges(events, cats=("gpu_user_annotation",))
    runtime = {}
    host_by_ext = {}
    for e in events:
        cat = e.get("cat")
        if cat in RUNTIME_CATS and _arg(e, "correlation") is not None:
            runtime[_arg(e, "correlation")] = e
        elif cat in ("cpu_op", "user_annotation") and _arg(e, "External id") is not None:
            host_by_ext.setdefault(_arg(e, "External id"), e)
    rows, seen, how = [], set(), Counter()
    copies = Counter()
    for e in events:
        cat = e.get("cat")
        if cat not in KERNEL_CATS and cat not in COPY_CATS:
            continue
        corr, ext = _arg(e, "correlation"), _arg(e, "External id")
        if corr is not None and corr in runtime:
            it, method = range_of(runtime[corr]["ts_ns"], ranges), "correlation"
            seen.add(corr)
        elif ext is not None and ext in host_by_ext and ext > 0:
            it, method = range_of(host_by_ext[ext]["ts_ns"], ranges), "external id"
        else:
            it, method = range_of(e["ts_ns"], gpu_ranges), "device time"
        how[method] += 1
        if cat in COPY_CATS:
            if it is not None:
                copies[it] += e["dur_ns"]
            continue
        args = e.get("args") or {}
        rows.append({"name": str(e.get("name", "")), "start_ns": e["ts_ns"], "duration_ns": e["dur_ns"],
                     "iteration": it, "kind": "kernel", "stream": _arg(e, "stream"),
                     "phase": "iteration" if it is not None else "other", "grid": args.get("grid"),
                     "block": args.get("block"), "registers": args.get("registers per thread"),
                     "shared_memory": args.get("shared memory"), "correlation": corr, "external_id": ext})
    lost = Counter()
    lost_launches = []
    for corr, rt in runtime.items():
        if corr not in seen and LAUNCH_API_RE.search(str(rt.get("name", ""))):
            lost_launches.append(rt["ts_ns"])
            it = range_of(rt["ts_ns"], ranges)
            if it is not None:
                lost[it] += 1
    rows.sort(key=lambda r: (r["start_ns"] or 0))
    flags = []
    if copies:
        flags.append(f"device memcpy/memset inside iterations ({dict(copies)} ns by iteration): not counted as "
                     "kernel time")
    return rows, {"iteration_ranges": len(ranges), "lost_by_iter": dict(lost), "lost_launches": sorted(lost_launches),
                  "attribution": dict(how),
                  "copies_by_iter": dict(copies), "flags": flags, "problems": []}


class CudaBackend(Backend):
    name = "cuda"
    timing_method = "torch.profiler.cupti.kernel_duration"
    persistent_worker = True  # one worker per operator, replaced after a crash/hang/OOM (runner.py)
    torch_namespace = "cuda"
    reduced_fp32_matmul = "TF32"
    visible_devices_var = "CUDA_VISIBLE_DEVICES"
    clock_tool = "nvidia-smi"
    matrix_counter = "tensor_inst_executed"  # ncu's tensor-pipe instruction count; FLOPs per instruction: PTX ISA
    matrix_counter_documented = True

    def nominal_bandwidth(self, identity):
        from mfulib.core.nominal_peaks import nominal_for_identity
        return nominal_for_identity(identity).get("bandwidth_gbps"), "CUDA datasheet (mfulib.core.nominal_peaks)"

    @classmethod
    def fp32_dot_is_reduced(cls, dtype) -> bool:
        """fp32 cases run ``tl.dot`` as TF32 (10-bit mantissa): Triton's default ``input_precision`` on CUDA,
        unless ``TRITON_F32_DEFAULT=ieee`` (triton/language/semantic.py reads it for ``tl.dot``)."""
        return dtype == "float32" and os.environ.get("TRITON_F32_DEFAULT", "tf32") != "ieee"

    @classmethod
    def available(cls):
        import torch
        if not torch.cuda.is_available():
            return False, "torch sees no CUDA device"
        return True, f"torch sees {torch.cuda.get_device_name(0)}"

    @staticmethod
    def discover_devices():
        """The GPUs ``nvidia-smi -L`` lists (none without nvidia-smi)."""
        if not shutil.which("nvidia-smi"):
            return [], None
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        return [str(i) for i in range(sum(1 for ln in out.splitlines() if ln.startswith("GPU ")))], "nvidia-smi -L"

    def identity_fields(self, index: int) -> dict:
        import torch
        from mfulib.core.device import nvidia_smi_query
        p = torch.cuda.get_device_properties(index)
        out = dict(name=p.name, capability=f"{p.major}.{p.minor}", multiprocessor_count=p.multi_processor_count,
                   total_memory_bytes=int(p.total_memory), l2_cache_bytes=getattr(p, "L2_cache_size", None),
                   uuid=str(getattr(p, "uuid", "")) or None, cuda_runtime=torch.version.cuda)
        smi = nvidia_smi_query(index, "driver_version,clocks.max.sm")
        out["driver"] = smi.get("driver_version")
        if smi.get("clocks.max.sm"):
            out["max_sm_clock_mhz"] = float(smi["clocks.max.sm"])
        return out

    def read_clocks(self, index: int = 0) -> dict:
        from mfulib.core.device import nvidia_smi_clocks
        return nvidia_smi_clocks(index)

    def fp8_gemm_support(self, index: int = 0):
        """``torch._scaled_mm`` on capability >= 8.9 (Ada sm_89 / Hopper sm_90 fp8 tensor cores)."""
        import torch
        if not (hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm")):
            return False, f"not available: this torch ({torch.__version__}) lacks float8_e4m3fn / torch._scaled_mm"
        cap = torch.cuda.get_device_capability(index)
        if tuple(cap) < (8, 9):
            return False, (f"not available: capability {cap[0]}.{cap[1]} < 8.9 (fp8 tensor cores: Ada sm_89, "
                           "Hopper sm_90 and later)")
        return True, "torch._scaled_mm (fp8 e4m3 x e4m3, scale tensors 1.0, bf16 out)"

    def fp32_matmul_mode(self, allow: bool):
        """TF32 on/off through ``torch.backends.cuda.matmul.fp32_precision`` ("tf32" | "ieee", torch >= 2.9;
        mixing it with the legacy ``allow_tf32`` raises, so the new API where it exists, the legacy flag before)."""
        import torch
        obj = torch.backends.cuda.matmul
        if hasattr(obj, "fp32_precision"):
            attr, value = "fp32_precision", ("tf32" if allow else "ieee")
        else:
            attr, value = "allow_tf32", allow
        return setting(obj, attr, value, f"fp32 inputs, TF32 {'allowed' if allow else 'off'} "
                                         f"(torch.backends.cuda.matmul.{attr}={value!r})")

    def child_env(self, env):
        env = dict(env)
        env.pop("TRITON_INTERPRET", None)
        return env

    def launches(self, attempt_dir, report, n_iters):
        return launches_from_trace(report, trace_launches)

    def setup(self, spec):
        import torch
        from mfulib.run import compat
        torch.cuda.set_device(torch.device(spec["device"]))
        compat.install(spec["device"])
        self.pmu_nvtx = spec.get("pmu_nvtx")

    def iteration(self, index: int):
        """The ``mfu::iter::<i>`` range; under ncu (spec ``pmu_nvtx``) also an NVTX push/pop range that ncu's
        ``--nvtx-include <range>/`` selects, so only the iterations' launches are profiled."""
        rng = super().iteration(index)
        name = getattr(self, "pmu_nvtx", None)
        if not name:
            return rng
        import torch
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(torch.cuda.nvtx.range(name))
        except Exception:  # noqa: BLE001 - a torch without NVTX: ncu's name filter takes over (NcuPmu)
            pass
        stack.enter_context(rng)
        return stack

    def identity(self, spec):
        import torch
        idx = torch.device(spec["device"]).index or 0
        ident = self.device_identity(idx)
        clocks = self.read_clocks(idx)
        if clocks.get("clocks_max_sm_mhz"):
            ident["max_sm_clock_mhz"] = clocks["clocks_max_sm_mhz"]
        ident["triton_f32_default"] = os.environ.get("TRITON_F32_DEFAULT", "tf32 (Triton default)")
        return ident

    def session(self, spec):
        # CPU + CUDA (CUPTI) activities through the Kineto profiler torch.profiler.profile wraps (see cpu.py)
        from torch.autograd.profiler import profile
        return profile(use_kineto=True, use_cpu=True, use_device="cuda")

    def finish(self, spec, session):
        session.export_chrome_trace(spec["trace_path"])
        return {"trace_path": spec["trace_path"]}
