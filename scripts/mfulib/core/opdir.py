"""The operator work directory (docs/ARCHITECTURE.md#work-directory): file names, case access, building one case.

A work directory holds ``model.py`` (class Model + get_input_groups), ``model_new.py`` (class ModelNew),
``<Op>_perf_cases.jsonl`` (the cases the collector reads) and ``model.json`` (the same lines, for the reference's own
loader), plus the results of later steps. :meth:`OpDir.build_case` builds exactly one case: it stages the directory
in a temp dir whose case files hold only that case's line, so ``get_input_groups()`` allocates one case, not fifty,
and imports the operator files there with the cwd and ``sys.path`` they expect.

Inputs are drawn by :func:`mfulib.core.input_draw.input_draw` (large floats on the CUDA device or from a private host
stream; integers and small tensors from the global host stream - that module says why).
"""
from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field

from mfulib.core import cases as _cases
from mfulib.core.errors import UserError
# seed_everything: callers import it from here
from mfulib.core.input_draw import input_draw, seed_everything  # noqa: F401
from mfulib.core.jsonio import read_json
from mfulib.core.fmt import plural

MODEL_PY = "model.py"
MODEL_NEW_PY = "model_new.py"
MODEL_JSON = "model.json"
FLOPS_PY = "flops.py"
PREPARE_JSON = "prepare.json"
PERF_CASES_SUFFIX = "_perf_cases.jsonl"


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
            raise UserError(f"{self.cases_path}: no case {case_id} (it has {plural(len(cases), 'case')}, ids 0..{len(cases) - 1})")
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
        way. The inputs are drawn by :func:`mfulib.core.input_draw.input_draw` (large floats on ``device`` when it is an accelerator;
        recorded in ``inputs_drawn``), then every tensor is moved to ``device``. Exceptions from the operator files propagate (callers classify them
        with :func:`mfulib.core.errors.rejection_reason`). ``args`` given: use these inputs (already on ``device``)
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
