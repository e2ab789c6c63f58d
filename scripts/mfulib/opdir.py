"""The operator work directory (DESIGN.md, "Work directory"): file names, case access, building one case.

A work directory holds ``model.py`` (class Model + get_input_groups), ``model_new.py`` (class ModelNew),
``<Op>_perf_cases.jsonl`` (the cases the collector reads) and ``model.json`` (the same lines, for the reference's own
loader), plus the results of later steps. :meth:`OpDir.build_case` builds exactly one case: it stages the directory
in a temp dir whose case files hold only that case's line, so ``get_input_groups()`` allocates one case, not fifty,
and imports the operator files there with the cwd and ``sys.path`` they expect.

Where the inputs are drawn (:func:`input_draw`, issue 13): ``get_input_groups()`` runs under a torch function mode that
keeps every *large floating-point* draw (at least :data:`DEVICE_DRAW_MIN_NUMEL` elements, no explicit generator) off
the global host random stream:

* on a CUDA device a large floating tensor created by a factory (``randn``, ``rand``, ``empty`` then
  ``uniform_``/``normal_``, ``zeros``...) is created **on the target device**, so its random values come from the
  device's own generator (Philox on CUDA), seeded by :func:`seed_everything` - hundreds of GB/s instead of
  torch's single-threaded host ``randn`` (~0.16 G elements/s measured on this project's CI host): zoo/1_BatchMatmul
  draws ~1.4 G input elements over its 13 cases, and its verify and collect steps took 45 and 44 s on the H200 for
  under 0.1 s of kernel time each (bench/results/h200-2026-12-01/tool_overhead.md);
* on the CPU (and for a large CPU tensor filled in place on any backend) the same draw uses a private CPU
  generator seeded with ``seed``, so the global stream is untouched there too;
* everything else - integer and bool tensors (lengths, indices, routing, masks), small floats, Python ``random``/
  numpy - is drawn on the host from the global stream seeded with ``seed``, exactly as before.

Why this split: the values that enter a FLOP count (DESIGN.md, "FLOPs": realised lengths, mask density, routing
indices) are integers/bools or small tensors, and their host stream is now **the same on every backend and in the
FLOPs step** (which builds on the CPU, or with big floats on meta - :mod:`mfulib.flopcount`'s meta build mode
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

import contextlib
import functools
import glob
import importlib.util
import os
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass, field

from . import cases as _cases
from .errors import UserError
from .jsonio import read_json

MODEL_PY = "model.py"
MODEL_NEW_PY = "model_new.py"
MODEL_JSON = "model.json"
FLOPS_PY = "flops.py"
PREPARE_JSON = "prepare.json"
PERF_CASES_SUFFIX = "_perf_cases.jsonl"


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
            if not (floating and numel >= DEVICE_DRAW_MIN_NUMEL) or kwargs.get("generator") is not None:
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
    from .errors import rejection_reason
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


def clone_tensors(obj):
    """Copy every tensor inside nested lists/tuples/dicts (other values are shared)."""
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, tuple):
        return tuple(clone_tensors(o) for o in obj)
    if isinstance(obj, list):
        return [clone_tensors(o) for o in obj]
    if isinstance(obj, dict):
        return {k: clone_tensors(v) for k, v in obj.items()}
    return obj


def tensors_in(obj) -> list:
    """Every tensor inside ``obj`` (a tensor or nested lists/tuples/dicts), depth first, in order."""
    import torch
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in tensors_in(o)]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in tensors_in(v)]
    return []


def to_device(obj, device):
    """Move every tensor inside nested lists/tuples/dicts to ``device`` (tuple-wrapped groups keep their form)."""
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, tuple):
        return tuple(to_device(o, device) for o in obj)
    if isinstance(obj, list):
        return [to_device(o, device) for o in obj]
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


@contextlib.contextmanager
def in_directory(path):
    """cwd = ``path`` and ``path`` first on sys.path, both restored afterwards."""
    old_cwd = os.getcwd()
    sys.path.insert(0, str(path))
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        try:
            sys.path.remove(str(path))
        except ValueError:
            pass


_MODULE_COUNTER = [0]


def import_file(path, hint="opfile"):
    """Import a .py file under a unique module name (the same file may be staged many times)."""
    _MODULE_COUNTER[0] += 1
    name = f"_mfu_{hint}_{_MODULE_COUNTER[0]}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception:
        sys.modules.pop(name, None)
        raise
    return mod


@dataclass
class BuiltCase:
    """One case ready to run: ``model(*args)`` is one iteration. ``staging`` is removed by :meth:`close`."""
    case_id: int
    impl: str
    model: object
    args: list
    seed: int
    init_args: list = field(default_factory=list)
    staging: str | None = None
    module: object = None
    inputs_drawn: str | None = None  # input_draw()'s ``how``; None when the caller passed ``args``

    def run(self):
        """One forward call (cwd = the staging dir, as the operator files expect)."""
        with in_directory(self.staging):
            return self.model(*self.args)

    def close(self):
        if self.staging and os.path.isdir(self.staging):
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None


def normalize_group(group):
    """One element of get_input_groups() as the forward argument list.

    ``[x, a]`` and ``(x, a)`` both mean forward(x, a); a 1-tuple wrapping a list/tuple (7_ConvStandard2d style
    ``[(x, in_ch, ...)]``) is passed as one argument, exactly as the benchmark harness calls it.
    """
    if isinstance(group, (list, tuple)):
        return list(group)
    return [group]


class OpDir:
    """A prepared operator work directory. Raises UserError when a required file is missing."""

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))
        if not os.path.isdir(self.path):
            raise UserError(f"{self.path}: work directory not found - run prepare_op_dir.py (make prepare) first")
        self.model_py = os.path.join(self.path, MODEL_PY)
        self.model_new_py = os.path.join(self.path, MODEL_NEW_PY)
        self.model_json = os.path.join(self.path, MODEL_JSON)
        self.flops_py = os.path.join(self.path, FLOPS_PY)
        self.prepare_json = os.path.join(self.path, PREPARE_JSON)
        self._cases = None

    def file(self, name):
        return os.path.join(self.path, name)

    @property
    def cases_path(self) -> str:
        """``<Op>_perf_cases.jsonl`` (preferred), else ``model.json``."""
        found = sorted(glob.glob(os.path.join(self.path, "*" + PERF_CASES_SUFFIX)))
        if len(found) > 1:
            raise UserError(f"{self.path}: several *{PERF_CASES_SUFFIX} files {found} - keep one")
        if found:
            return found[0]
        if os.path.exists(self.model_json):
            return self.model_json
        raise UserError(f"{self.path}: no *{PERF_CASES_SUFFIX} or model.json - run prepare_op_dir.py first")

    @property
    def op_name(self) -> str:
        base = os.path.basename(self.cases_path)
        return base[: -len(PERF_CASES_SUFFIX)] if base.endswith(PERF_CASES_SUFFIX) else os.path.basename(self.path)

    def prepare_info(self) -> dict:
        return read_json(self.prepare_json) if os.path.exists(self.prepare_json) else {}

    def case_file_names(self) -> list:
        """Every file name in the work dir that holds the case lines (the perf cases, model.json, aliases)."""
        names = {os.path.basename(self.cases_path), MODEL_JSON}
        names.update(self.prepare_info().get("case_file_aliases", []))
        return sorted(n for n in names if os.path.exists(self.file(n)))

    def read_cases(self) -> list:
        if self._cases is None:
            self._cases = _cases.read_case_file(self.cases_path)
        return self._cases

    def describe(self, case_id: int) -> _cases.CaseInfo:
        cases = self.read_cases()
        if not 0 <= case_id < len(cases):
            raise UserError(f"{self.cases_path}: no case {case_id} (it has {len(cases)} cases, ids 0..{len(cases) - 1})")
        return _cases.describe_case(cases[case_id], case_id)

    def describe_all(self) -> list:
        return [_cases.describe_case(c, i) for i, c in enumerate(self.read_cases())]

    def stage(self, case_id: int) -> str:
        """A temp copy of the work dir (symlinks) whose case files contain only case ``case_id``."""
        self.describe(case_id)
        line = _cases.dump_case_lines([self.read_cases()[case_id]])
        case_names = set(self.case_file_names())
        staging = tempfile.mkdtemp(prefix=f"mfu_case{case_id}_")
        for name in os.listdir(self.path):
            src = os.path.join(self.path, name)
            if name in case_names:
                with open(os.path.join(staging, name), "w", encoding="utf-8") as f:
                    f.write(line)
            elif name.endswith(".py") or not os.path.isdir(src):
                os.symlink(src, os.path.join(staging, name))
        return staging

    def _init_inputs(self, staged_mod, case_id):
        """get_init_inputs() of the reference: ``[]`` or the constructor args; when it returns one list per case
        line (detected on the full case file: as many lists as cases, N > 1), the list of ``case_id``."""
        if not hasattr(staged_mod, "get_init_inputs"):
            return []
        n = len(self.read_cases())
        if n > 1:
            with in_directory(self.path):
                full = import_file(self.model_py, "model_init").get_init_inputs()
            if isinstance(full, (list, tuple)) and len(full) == n and all(isinstance(x, (list, tuple)) for x in full):
                return list(full[case_id])
        return list(staged_mod.get_init_inputs())

    def build_case(self, case_id: int, impl: str = "ref", seed: int = 0, device: str = "cpu",
                   args: list | None = None) -> BuiltCase:
        """Build case ``case_id`` for ``impl`` ("ref" = Model from model.py, "asc" = ModelNew from model_new.py).

        Inputs always come from the reference's get_input_groups() (seeded with ``seed`` first); the model is
        constructed after re-seeding with ``seed`` so Model and ModelNew draw identical weights when built the same
        way. The inputs are drawn by :func:`input_draw` (large floats on ``device`` when it is an accelerator;
        recorded in ``inputs_drawn``), then every tensor is moved to ``device``. Exceptions from the operator files propagate (callers classify them
        with :func:`mfulib.errors.rejection_reason`). ``args`` given: use these inputs (already on ``device``)
        instead of calling get_input_groups() again - building a 1 GB case on the host twice costs seconds.
        """
        if impl not in ("ref", "asc"):
            raise ValueError(f"impl must be 'ref' or 'asc', not {impl!r}")
        for p in (self.model_py,) + ((self.model_new_py,) if impl == "asc" else ()):
            if not os.path.exists(p):
                raise UserError(f"{p}: missing - run prepare_op_dir.py first")
        staging = self.stage(case_id)
        try:
            with in_directory(staging):
                ref_mod = import_file(os.path.join(staging, MODEL_PY), "model")
                if not hasattr(ref_mod, "get_input_groups"):
                    raise UserError(f"{self.model_py}: no get_input_groups() - the reference must define it")
                how = None
                if args is None:
                    groups, how = input_draw(ref_mod, seed, device)
                    if not groups:
                        raise UserError(f"{self.model_py}: get_input_groups() returned no case for case {case_id}")
                    args = to_device(normalize_group(groups[0]), device)
                init = self._init_inputs(ref_mod, case_id)
                mod = ref_mod if impl == "ref" else import_file(os.path.join(staging, MODEL_NEW_PY), "model_new")
                cls_name = "Model" if impl == "ref" else "ModelNew"
                cls = getattr(mod, cls_name, None)
                if cls is None:
                    where = self.model_py if impl == "ref" else self.model_new_py
                    raise UserError(f"{where}: no class {cls_name}")
                seed_everything(seed)
                model = cls(*init)
                if hasattr(model, "to"):
                    model = model.to(device)
                if hasattr(model, "eval"):
                    model.eval()
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return BuiltCase(case_id, impl, model, args, seed, init, staging, mod, how)
