"""Triton kernels in the interpreter (``TRITON_INTERPRET=1``) as compiled Triton runs them: the one launch hook.

verify_op.py's child (:func:`mfulib.verify.correctness.child_main`) and the collector's cpu backend
(:meth:`mfulib.backends.cpu.CpuBackend.setup`) both call :func:`install_launch_hook`, so a case verifies and is timed
under the same adaptations. Every adaptation a launch needed is recorded; :func:`adaptations` returns them (reset
per case with :func:`reset`) and they land in ``verify.json`` (``cases[i].cpu_adaptations``) and in the collector's
per-case record (``per_case[i].impls.<impl>.cpu_adaptations``). Kinds:

* ``float_args_as_fp32`` - Python float kernel arguments become fp32 scalars, as compiled Triton
  passes them (Triton's "Python float -> fp32" argument specialisation). Triton 3.8/3.9's interpreter passes them as
  plain Python floats, so ``SCALE.to(tl.float16)`` in a kernel fails with ``AttributeError: 'float' object has no
  attribute 'to'`` (README "Running Triton-Ascend code in the CPU path").
* ``autotune_first_config`` - ``@triton.autotune`` with several configs benchmarks them through the GPU
  driver (``driver.active.get_benchmarker()``), which the interpreter lacks (``RuntimeError: 0 active drivers``). The
  interpreter runs the **first** config left after the kernel's own pruning (``early_config_prune`` /
  ``perf_model``), no benchmark; the record names the kernel, the config and how many there were. Interpreter
  timings would not rank configs for an accelerator anyway; on npu/cuda autotuning is untouched.
* ``block_ptr`` - a kernel whose source uses ``tl.make_block_ptr`` ran in an interpreter that still has
  block pointers (triton 3.8.0, the version ``.ci/run`` and ``make setup`` install on a machine without Triton;
  README "Running Triton-Ascend code"). Triton 3.9 removed them ("Block pointers have been removed in favor of the
  tensor descriptor API"); there the launch raises :class:`~mfulib.core.errors.CaseRejected` naming the kernel, the
  installed version and the fix, so the case is ``rejected`` with that reason, never a crash (recorded with
  ``supported: false``).

Each launch is also wrapped in ``torch.profiler.record_function("triton::<kernel name>")`` (Triton 3.9's interpreter
calls no ``launch_enter_hook``): the cpu backend's timed rows (mfulib/backends/cpu.py); outside a profiler it costs
a few microseconds per launch.
"""
from __future__ import annotations

import functools
import inspect
import threading

BLOCK_PTR_REMOVED = "Block pointers have been removed"
BLOCK_PTR_TRITON = "3.8.0"  # newest triton whose interpreter still runs tl.make_block_ptr (tried: 3.8.0 yes, 3.9.0 no)

#: the torch.profiler range each interpreted kernel launch is wrapped in: "triton::<kernel name>" (the CPU backend reads
#: kernel names and times from these ranges)
TRITON_RANGE_PREFIX = "triton::"
_STATE = threading.local()
_RECORD: dict = {}  # (kind, kernel) -> record dict, in first-seen order
_INSTALLED = {"done": False}


def summary(rows) -> list:
    """One line per (kind, kernel) over the ``cpu_adaptations`` lists of ``rows`` (verify.json cases), sorted."""
    seen = {}
    for row in rows:
        for a in row.get("cpu_adaptations") or []:
            extra = f": first of {a['configs']} configs, {a['config'].split(', num_warps')[0]}" \
                if a["kind"] == "autotune_first_config" else ""
            seen[(a["kind"], a["kernel"])] = f"{a['kind']} ({a['kernel']}{extra})"
    return [seen[k] for k in sorted(seen)]


def reset() -> None:
    """Forget the adaptations recorded so far (call before each case)."""
    _RECORD.clear()


def adaptations():
    """The adaptations the launches since :func:`reset` needed (list of dicts with ``kind``, ``kernel``,
    ``detail``, ``launches``), or None when the hook is not installed (not interpreting)."""
    if not _INSTALLED["done"]:
        return None
    return [dict(r) for r in _RECORD.values()]


def _note(kind: str, kernel: str, detail: str, **extra) -> None:
    key = (kind, kernel)
    rec = _RECORD.get(key)
    if rec is None:
        _RECORD[key] = rec = {"kind": kind, "kernel": kernel, "detail": detail, "launches": 0, **extra}
    rec["launches"] += 1


@functools.lru_cache(maxsize=None)
def block_ptr_supported() -> bool:
    """True when the installed Triton's ``tl.make_block_ptr`` is not the 3.9 stub that raises."""
    import triton.language.core as core
    try:
        return BLOCK_PTR_REMOVED not in inspect.getsource(core.make_block_ptr)
    except (OSError, TypeError):  # no source available: assume the feature is there, the launch will tell
        return True


def _kernel_source(fn) -> str:
    try:
        return inspect.getsource(fn.fn)
    except (OSError, TypeError, AttributeError):
        return ""


def _block_ptr_rejection(kernel: str):
    import triton

    from mfulib.core.errors import CaseRejected
    return CaseRejected(
        f"kernel {kernel} uses tl.make_block_ptr, which the installed triton {triton.__version__} interpreter no "
        f"longer runs ({BLOCK_PTR_REMOVED}): on cpu install triton=={BLOCK_PTR_TRITON} in the environment that runs "
        "the CPU path (README 'Running Triton-Ascend code'), or run this case on an accelerator (--backend npu/cuda)")


def _note_block_ptr_rejected(kernel: str) -> None:
    import triton
    _note("block_ptr", kernel, f"rejected: the triton {triton.__version__} interpreter has no tl.make_block_ptr "
          f"(triton {BLOCK_PTR_TRITON} has)", supported=False)


def install_launch_hook() -> bool:
    """Install the interpreter adaptations and the launch ranges (module docstring); idempotent.

    Returns False (and changes nothing) when Triton is not interpreting, i.e. ``TRITON_INTERPRET`` was not ``1``
    when ``triton`` was imported. Raises ImportError when Triton is not installed.
    """
    import os

    import triton.runtime.interpreter as interp
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    if _INSTALLED["done"]:
        return True
    from torch.profiler import record_function

    cls = interp.InterpretedFunction
    orig_run = cls.run
    sources: dict = {}

    def run(self, *args, **kwargs):
        if kwargs.get("warmup"):
            return orig_run(self, *args, **kwargs)
        name = self.__name__
        if name not in sources:
            sources[name] = "make_block_ptr" in _kernel_source(self)
        uses_block_ptr = sources[name]
        if uses_block_ptr and not block_ptr_supported():
            _note_block_ptr_rejected(name)
            raise _block_ptr_rejection(name)
        _STATE.floats = 0
        try:
            with record_function(TRITON_RANGE_PREFIX + name):
                out = orig_run(self, *args, **kwargs)
        except Exception as exc:  # a helper @jit function using block pointers: same rejection
            if BLOCK_PTR_REMOVED in str(exc):
                _note_block_ptr_rejected(name)
                raise _block_ptr_rejection(name) from exc
            raise
        if _STATE.floats:
            _note("float_args_as_fp32", name, "Python float kernel arguments passed as fp32 scalars, as compiled "
                  "Triton does (the interpreter passes plain floats)", float_args=_STATE.floats)
        if uses_block_ptr:
            import triton
            _note("block_ptr", name, f"tl.make_block_ptr run by the triton {triton.__version__} interpreter",
                  supported=True)
        return out
    run._mfu_hooked = True
    cls.run = run

    orig_cvt = getattr(interp, "_implicit_cvt", None)
    if orig_cvt is not None:
        import numpy as np
        import triton.language as tl

        def implicit_cvt(arg):
            if isinstance(arg, float):
                _STATE.floats = getattr(_STATE, "floats", 0) + 1
                return tl.tensor(interp.TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
            return orig_cvt(arg)
        interp._implicit_cvt = implicit_cvt

    _install_autotune_first_config()
    _INSTALLED["done"] = True
    return True


def _install_autotune_first_config() -> None:
    from triton.runtime.autotuner import Autotuner
    orig_prune, orig_run = Autotuner.prune_configs, Autotuner.run

    def prune_configs(self, kwargs):
        pruned = orig_prune(self, kwargs)
        self._mfu_n_configs = len(pruned)
        return pruned[:1]

    def run(self, *args, **kwargs):
        out = orig_run(self, *args, **kwargs)
        n = getattr(self, "_mfu_n_configs", len(self.configs))
        if len(self.configs) > 1:  # one config: nothing was chosen for it (autotune's own single-config path)
            _note("autotune_first_config", self.base_fn.__name__,
                  f"@triton.autotune: the first of {n} configs ran, none benchmarked (the interpreter has no driver "
                  "to time them)", configs=n, config=str(self.best_config))
        return out
    Autotuner.prune_configs = prune_configs
    Autotuner.run = run
