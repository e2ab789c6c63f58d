"""CPU backend: Triton kernels in the interpreter (``TRITON_INTERPRET=1``), timed by a launch hook.

torch.profiler does not see interpreted kernels (the interpreter runs a kernel as host numpy code, not as one profiled
op or device kernel; docs/ARCHITECTURE.md#backends), so the launch hook that verify_op.py shares
(:func:`mfulib.run.interpreter.install_launch_hook`) wraps ``triton.runtime.interpreter.InterpretedFunction.run`` - the
one call every interpreted launch goes through (``kernel[grid](...)`` and the autotuner alike; Triton 3.9's interpreter
calls no ``launch_enter_hook``) - in ``record_function("triton::<kernel name>")``, so each launch becomes a timed row of
the same profiler that records the iteration ranges and the torch ops. Torch ops become rows as the outermost ``aten::``
ops of an iteration that do work (view/alloc-only ops such as ``aten::view`` or ``aten::empty`` launch no kernel on a
device and are left out); the interpreter's own tensor copies sit inside the ``triton::`` range and are part of that
launch.

The numbers are CPU-interpreter numbers: they validate the pipeline and are never compared with accelerator
numbers. bf16 cases are not run (Triton 3.9's interpreter returns garbage for bf16, 3.7/3.8 raise).

The same hook adapts what the interpreter runs differently from compiled Triton (float arguments as fp32 scalars,
``@triton.autotune`` without a driver, ``tl.make_block_ptr``) and records what each case needed
(:mod:`mfulib.run.interpreter`).
"""
from __future__ import annotations

import os
import platform

from mfulib.profiles.kernels import FLUSH_KERNEL
from mfulib.run.interpreter import TRITON_RANGE_PREFIX, install_launch_hook
from mfulib.backends.base import (PRIME_RANGE, Backend, iteration_ranges, launches_from_trace,
                                  load_trace_events, range_of)

# ops that only describe, view or allocate memory: no device kernel behind them on NPU/CUDA
VIEW_OR_ALLOC_OPS = frozenset({
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided",
    "aten::view", "aten::view_as", "aten::reshape", "aten::_reshape_alias", "aten::_unsafe_view", "aten::transpose",
    "aten::t", "aten::permute", "aten::expand", "aten::expand_as", "aten::as_strided", "aten::slice", "aten::select",
    "aten::squeeze", "aten::unsqueeze", "aten::flatten", "aten::unflatten", "aten::split", "aten::split_with_sizes",
    "aten::chunk", "aten::unbind", "aten::narrow", "aten::alias", "aten::detach", "aten::detach_",
    "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg", "aten::contiguous", "aten::to", "aten::type_as",
    "aten::result_type", "aten::size", "aten::stride", "aten::dim", "aten::set_", "aten::movedim",
    "aten::swapaxes", "aten::numpy_T", "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense",
    "aten::broadcast_to", "aten::unfold", "aten::_nested_tensor_from_mask_left_aligned", "aten::lift",
    "aten::record_stream", "aten::is_same_size", "aten::_has_compatible_shallow_copy_type"})

BF16_REASON = ("bfloat16 case: the Triton interpreter cannot run bf16 (triton 3.9 silently returns garbage, 3.7/3.8 "
               "raise) - run it on an accelerator (--backend npu/cuda)")


def _nest(events):
    """Parent index of each event (same thread, time containment); events sorted by (tid, ts, -dur)."""
    parent = [None] * len(events)
    stack = []
    last_tid = object()
    for i, e in enumerate(events):
        if e.get("tid") != last_tid:
            stack, last_tid = [], e.get("tid")
        end = e["ts_ns"] + e["dur_ns"]
        while stack and not (events[stack[-1]]["ts_ns"] <= e["ts_ns"] and end <= events[stack[-1]]["ts_ns"] +
                             events[stack[-1]]["dur_ns"]):
            stack.pop()
        parent[i] = stack[-1] if stack else None
        stack.append(i)
    return parent


def trace_launches(trace_path):
    """Kernel rows of a CPU-backend chrome trace: triton launches (every phase, incl. the priming call and the
    harness kernels) and the outermost working ``aten::`` ops, each tagged with its iteration (None outside).

    Returns ``(rows, info)``; rows are in start order with ``kind`` ``triton`` or ``torch`` and ``phase``.
    """
    events = [e for e in load_trace_events(trace_path) if e.get("cat") in ("cpu_op", "user_annotation")]
    events.sort(key=lambda e: (str(e.get("tid")), e["ts_ns"], -e["dur_ns"]))
    parent = _nest(events)
    works = [e.get("cat") == "cpu_op" and e.get("name") not in VIEW_OR_ALLOC_OPS for e in events]
    for i in range(len(events) - 1, -1, -1):  # children follow parents: propagate "does work" upwards
        if works[i] and parent[i] is not None:
            works[parent[i]] = True
    ranges = iteration_ranges(events)
    prime = [(e["ts_ns"], e["ts_ns"] + e["dur_ns"], "prime") for e in events if e.get("name") == PRIME_RANGE]
    rows = []
    for i, e in enumerate(events):
        name = str(e.get("name", ""))
        is_triton = e.get("cat") == "user_annotation" and name.startswith(TRITON_RANGE_PREFIX)
        if not is_triton and e.get("cat") != "cpu_op":
            continue
        p, inside_op = parent[i], False
        while p is not None:  # an op inside a triton launch or inside another op is not a row of its own
            pe = events[p]
            if pe.get("cat") == "cpu_op" or str(pe.get("name", "")).startswith(TRITON_RANGE_PREFIX):
                inside_op = True
                break
            p = parent[p]
        if inside_op or (not is_triton and not works[i]):
            continue
        it = range_of(e["ts_ns"], ranges)
        phase = "iteration" if it is not None else ("prime" if range_of(e["ts_ns"], prime) is not None else "other")
        rows.append({"name": name[len(TRITON_RANGE_PREFIX):] if is_triton else name, "start_ns": e["ts_ns"],
                     "duration_ns": e["dur_ns"], "iteration": it, "kind": "triton" if is_triton else "torch",
                     "phase": phase})
    rows.sort(key=lambda r: r["start_ns"])
    return rows, {"iteration_ranges": len(ranges), "lost_by_iter": {}, "problems": [], "flags": [],
                  "attribution": "launch-hook ranges and torch ops nested in mfu::iter ranges"}


class CpuBackend(Backend):
    name = "cpu"
    timing_method = "triton_interpreter.launch_hook+torch.profiler.cpu"
    profile_prime = True
    persistent_worker = True  # one worker per operator, replaced after a crash/hang/OOM (runner.py)
    accelerator = False
    interpreter = True
    runs_bf16 = False
    bf16_skip_reason = BF16_REASON
    matrix_unit = None
    verify_max_input_mb = 1.0  # the interpreter is slow: larger cases are verified on an accelerator
    calib_budget_s = 4.0  # torch CPU GEMM on small shapes: a few seconds
    idle_between_bursts = False  # no power-capped clocks to protect
    fp8_note = ("fp8 is measured only on CUDA capability >= 8.9; a CPU has no fp8 matrix unit (torch's CPU "
                "torch._scaled_mm is a software path, no hardware peak)")

    @classmethod
    def available(cls):
        return True, "Triton interpreter on CPU"

    @classmethod
    def device_string(cls, device_id: int = 0) -> str:
        return "cpu"

    def identity_fields(self, index: int) -> dict:
        import torch
        from mfulib.core.device import cpu_model
        return {"name": cpu_model(), "threads": torch.get_num_threads(), "logical_cpus": os.cpu_count(),
                "note": "CPU numbers (torch CPU GEMM), not an accelerator; never compare them with NPU/GPU numbers"}

    def write_flush(self, buf) -> None:
        """A torch fill of the buffer, recorded under the flush kernel's name as the launch hook records an
        interpreted launch (``triton::mfu_harness_flush_kernel``), so the trace shows it as the harness's own
        launch; an interpreted kernel would cost ~2.5 ms per program, far over the peak calibration's budget."""
        from torch.profiler import record_function
        with record_function(TRITON_RANGE_PREFIX + FLUSH_KERNEL):
            buf.fill_(1.0)

    def child_env(self, env):
        env = dict(env)
        env["TRITON_INTERPRET"] = "1"
        return env

    def launches(self, attempt_dir, report, n_iters):
        return launches_from_trace(report, trace_launches)

    def setup(self, spec):
        os.environ["TRITON_INTERPRET"] = "1"
        from mfulib.run import compat
        compat.install(self.device_string())
        install_launch_hook()

    def identity(self, spec):
        ident = self.device_identity(0)
        ident.update(machine=platform.machine(), executor="Triton interpreter (TRITON_INTERPRET=1)",
                     note="CPU-interpreter numbers: never compared with accelerator numbers")
        return ident

    def session(self, spec):
        # torch.autograd.profiler.profile is the Kineto profiler that torch.profiler.profile wraps; the wrapper's
        # start does hasattr(torch, "_inductor"), which imports inductor (~2.6 s per child on the CI machine)
        from torch.autograd.profiler import profile
        return profile(use_kineto=True, use_cpu=True)

    def finish(self, spec, session):
        session.export_chrome_trace(spec["trace_path"])
        return {"trace_path": spec["trace_path"]}
