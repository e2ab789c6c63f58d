"""Layout C: parallel reference and implementation trees without case files (DESIGN.md "Inputs").

Public agent kernel benchmarks (akg's aikgbench, KernelBench, MultiKernelBench; reference/
benchmark_operator_conventions.md, "Layouts seen") keep one operator per ``.py``:

* ``<ref root>/<rel>.py`` - ``class Model`` + ``get_inputs()`` (one case, e.g. ``static_shape/<cat>/<name>.py``)
  or ``get_inputs_dyn_list()`` (one case per entry, e.g. ``dynamic_shape/<cat>/<name>_var.py``), + optional
  ``get_init_inputs()`` (the constructor arguments of Model);
* ``<impl root>/<rel>.py`` - ``class ModelNew``, or a plain launcher function (``custom_op_triton_torch``,
  ``<name>_triton_torch``, ...) beside its ``@triton.jit`` kernels, taking the tensors ``Model.forward`` takes.

The two are paired by the relative path ``<rel>``. Preparing one pair (:func:`prepare_pair`) writes the work
directory of DESIGN.md "Work directory":

* the case file, from one seeded call of ``get_inputs()`` / ``get_inputs_dyn_list()``: each forward argument
  becomes a ``tensor`` entry (shape, dtype; integer tensors also ``"range": [min, max]`` of the draw), a
  ``tensor_list`` (a list/tuple of tensors) or an ``attr`` (any other value), named after ``Model.forward``'s
  parameters; dynamic cases carry ``"dyn_index"`` (their entry of the list);
* ``model.py`` = the reference verbatim + an appended ``get_input_groups()`` that calls the original
  ``get_inputs()`` (the tool seeds first), so value domains (indices, masks) survive, and for each case line
  picks the draw whose shapes/dtypes/attrs match it (the ``dyn_index`` entry first). A line that matches no draw
  (shapes changed after prepare, e.g. by the shape search) is drawn from the line itself: floats ``randn``, ints
  uniform in the line's ``range``, bools fair coin flips, with a warning on stderr;
* ``model_new.py`` = the implementation verbatim; a function implementation gets an appended ``class ModelNew``
  whose ``forward(*inputs)`` calls the function.

``.cuda()`` / ``.npu()`` calls inside ``get_inputs()`` are neutralised while it runs (tensors are built on the
host, as NPUKernelBench references build them; the harness moves them). Raises UserError naming the file and the
fix for everything a user can correct.
"""
from __future__ import annotations

import inspect
import os

from mfulib.sources.discover import inspect_py, read_source, sha256
from mfulib.core.errors import UserError

STATIC_FN = "get_inputs"
DYNAMIC_FN = "get_inputs_dyn_list"
LAUNCHER_SUFFIX = "_triton_torch"  # akg launcher names: custom_op_triton_torch, amin_triton_torch, ...
WRAPPER_MARK = "# ---- added by triton-mfu-analyzer prepare_op_dir.py (layout C)"
SKIP_DIRS = {"__pycache__", ".git"}

# Helpers shared by prepare (writing the case lines) and the reference wrapper (matching them at run time): one
# definition, executed here and appended to model.py, so both sides compute the same signature.
RUNTIME_SRC = r'''
import contextlib as _mfu_contextlib
import json as _mfu_json
import math as _mfu_math
import os as _mfu_os
import sys as _mfu_sys

import torch as _mfu_torch


@_mfu_contextlib.contextmanager
def _mfu_on_host():
    """While the original get_inputs() runs: Tensor.cuda()/.npu() return the tensor itself (built on the host)."""
    saved = {n: getattr(_mfu_torch.Tensor, n) for n in ("cuda", "npu") if hasattr(_mfu_torch.Tensor, n)}
    for n in ("cuda", "npu"):
        setattr(_mfu_torch.Tensor, n, lambda self, *a, **k: self)
    try:
        yield
    finally:
        for n in ("cuda", "npu"):
            if n in saved:
                setattr(_mfu_torch.Tensor, n, saved[n])
            else:
                delattr(_mfu_torch.Tensor, n)


def _mfu_dtype(t):
    return str(t.dtype).replace("torch.", "")


def _mfu_entry(value, name, with_range=True):
    """One case-file input entry for a forward argument (benchmark case format)."""
    T = _mfu_torch.Tensor
    if isinstance(value, T):
        ent = {"name": name, "type": "tensor", "required": True, "dtype": _mfu_dtype(value),
               "shape": [int(d) for d in value.shape]}
        if with_range and value.numel() and value.device.type != "meta" and not value.is_floating_point() \
                and not value.is_complex() and value.dtype != _mfu_torch.bool:
            ent["range"] = [int(value.min().item()), int(value.max().item())]
        return ent
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, T) for v in value):
        return {"name": name, "type": "tensor_list", "required": True, "dtype": _mfu_dtype(value[0]),
                "shapes": [[int(d) for d in v.shape] for v in value]}
    if value is None:
        return {"name": name, "type": "attr", "required": False, "dtype": "none", "value": None}
    for kind, types in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if isinstance(value, types):
            return {"name": name, "type": "attr", "required": True, "dtype": kind, "value": value}
    if isinstance(value, (list, tuple)):
        try:
            plain = _mfu_json.loads(_mfu_json.dumps(list(value)))
            return {"name": name, "type": "attr", "required": True, "dtype": "list", "value": plain}
        except (TypeError, ValueError):
            pass
    return {"name": name, "type": "attr", "required": True, "dtype": "object", "value": repr(value)}


def _mfu_case(group, names, with_range=True):
    """A case line ({"inputs": [...]}) for one forward argument list; names beyond ``names`` are input<i>."""
    return {"inputs": [_mfu_entry(v, names[i] if i < len(names) else "input%d" % i, with_range)
                       for i, v in enumerate(group)]}


def _mfu_signature(case):
    """What identifies a case: per input its type, shape(s), dtype and (attrs) value - names and ranges ignored."""
    sig = []
    for ent in case["inputs"]:
        kind = ent.get("type", "tensor")
        if kind == "tensor":
            sig.append((kind, tuple(ent.get("shape") or ()), ent.get("dtype")))
        elif kind == "tensor_list":
            sig.append((kind, tuple(tuple(s) for s in ent["shapes"]), ent.get("dtype")))
        else:
            sig.append((kind, _mfu_json.dumps(ent.get("value"), sort_keys=True)))
    return tuple(sig)


def _mfu_draw_tensor(shape, dtype_name, rng):
    dtype = getattr(_mfu_torch, dtype_name)
    if dtype == _mfu_torch.bool:
        return _mfu_torch.rand(shape) < 0.5
    if dtype.is_floating_point:
        return _mfu_torch.randn(shape, dtype=dtype)
    lo, hi = rng if rng else (0, 1)
    return _mfu_torch.randint(int(lo), int(hi) + 1, tuple(shape), dtype=dtype)


def _mfu_draw_case(case, where):
    """Forward arguments drawn from a case line itself (a line no get_inputs() draw matches)."""
    out = []
    for ent in case["inputs"]:
        kind = ent.get("type", "tensor")
        if kind == "tensor":
            out.append(_mfu_draw_tensor(ent["shape"], ent["dtype"], ent.get("range")))
        elif kind == "tensor_list":
            out.append([_mfu_draw_tensor(s, ent["dtype"], None) for s in ent["shapes"]])
        elif ent.get("dtype") == "object":
            raise ValueError("case rejected: input %r of this case is a Python object (%s) that only the "
                             "original get_inputs() can build, and the case's shapes match none of its draws (%s)"
                             % (ent.get("name"), ent.get("value"), where))
        else:
            out.append(ent.get("value"))
    return out


def _mfu_as_group(value):
    """One forward argument list from what get_inputs() (or one get_inputs_dyn_list() entry) returns: a list or
    tuple is the argument list, anything else (a lone tensor) is the only argument."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _mfu_pick_groups(case_path, draws):
    """One forward argument list per line of ``case_path``: the matching draw, else one drawn from the line."""
    with open(case_path, encoding="utf-8-sig") as f:
        cases = [_mfu_json.loads(line) for line in f if line.strip()]
    sigs = [_mfu_signature(_mfu_case(g, [], with_range=False)) for g in draws]
    groups = []
    for n, case in enumerate(cases):
        sig = _mfu_signature(case)
        idx = case.get("dyn_index")
        if isinstance(idx, int) and 0 <= idx < len(draws) and sigs[idx] == sig:
            groups.append(draws[idx])
        elif sig in sigs:
            groups.append(draws[sigs.index(sig)])
        else:
            print("warning: %s line %d matches no draw of the reference's own inputs function; its inputs are "
                  "drawn from the line (floats randn, ints in its range, bools 50/50)" % (case_path, n + 1),
                  file=_mfu_sys.stderr)
            groups.append(_mfu_draw_case(case, "%s line %d" % (case_path, n + 1)))
    return groups
'''

_RT: dict = {}


def _runtime(name: str):
    """The helper ``name`` of :data:`RUNTIME_SRC` (the same helpers the wrapper carries), executed on first use:
    it imports torch, which discovery and ``--check`` never need."""
    if not _RT:
        exec(compile(RUNTIME_SRC, "<mfulib.sources.layoutc runtime>", "exec"), _RT)
    return _RT[name]


def on_host():
    """Context manager: while it is open, Tensor.cuda()/.npu() return the tensor itself (built on the host)."""
    return _runtime("_mfu_on_host")()


def case_line(group, names, with_range=True) -> dict:
    """The case-file line of one forward argument list ``group`` (parameter ``names``)."""
    return _runtime("_mfu_case")(group, names, with_range)


def case_signature(case) -> tuple:
    """The shapes/dtypes/attrs signature a case line is matched by."""
    return _runtime("_mfu_signature")(case)


def as_group(value) -> list:
    """A get_inputs() result as one forward argument list."""
    return _runtime("_mfu_as_group")(value)

REF_WRAPPER = '''

{mark}: the tool's interface ----
# The original get_inputs() above is kept; the tool seeds torch/numpy/random before calling get_input_groups().
# Cases: model.json beside this file (written by prepare from one seeded {fn}() call).
{runtime}

_MFU_ORIGINAL_GET_INIT_INPUTS = globals().get("get_init_inputs")


def get_input_groups():
    """One forward argument list per line of model.json (beside this file),
    built by the original {fn}()."""
    with _mfu_on_host():
        draws = {draws}
    case_path = _mfu_os.path.join(_mfu_os.path.dirname(_mfu_os.path.abspath(__file__)), "model.json")
    return _mfu_pick_groups(case_path, draws)


def get_init_inputs():
    """Model's constructor arguments: the original get_init_inputs() ([] when it has none); with several case
    lines, one copy per line, so the per-case reading of the tool always gets these arguments."""
    init = list(_MFU_ORIGINAL_GET_INIT_INPUTS()) if _MFU_ORIGINAL_GET_INIT_INPUTS else []
    case_path = _mfu_os.path.join(_mfu_os.path.dirname(_mfu_os.path.abspath(__file__)), "model.json")
    with open(case_path, encoding="utf-8-sig") as f:
        n = sum(1 for line in f if line.strip())
    return [list(init) for _ in range(n)] if n > 1 else init
'''

IMPL_WRAPPER = '''

{mark}: class ModelNew around {entry}() ----
import torch as _mfu_torch


class ModelNew(_mfu_torch.nn.Module):
    """forward(*inputs) = {entry}(*inputs): the function takes Model.forward's inputs.

    Model's constructor arguments (get_init_inputs()) are accepted and not used: the function hard-codes what
    they set (prepare.json records them under generated.init_inputs)."""

    def __init__(self, *init_args, **init_kwargs):
        super().__init__()

    def forward(self, *inputs):
        return {entry}(*inputs)
'''


def reference_kind(info):
    """"dynamic" (get_inputs_dyn_list), "static" (get_inputs) or None for a parsed reference."""
    if DYNAMIC_FN in info.functions:
        return "dynamic"
    if STATIC_FN in info.functions:
        return "static"
    return None


def is_layout_c_reference(path) -> bool:
    """True for a .py with class Model and get_inputs()/get_inputs_dyn_list() (no case file needed)."""
    info = inspect_py(path)
    return not info.error and "Model" in info.classes and reference_kind(info) is not None


def choose_entry(info, entry=None):
    """The launcher function of a function implementation: (name, why). Raises UserError listing candidates.

    Candidates are public top-level functions that are not Triton kernels. ``entry`` given: that one. Else the
    unique ``*_triton_torch``; else the unique candidate named after the file; else the unique candidate taking
    arguments (akg files also hold argument-less helpers such as ``get_npu_properties()``).
    """
    path = info.path
    if entry:
        if entry not in info.launchers:
            raise UserError(f"{path}: --entry {entry}: no public non-kernel function of that name "
                            f"(candidates: {sorted(info.launchers) or 'none'})")
        return entry, "--entry"
    cands = sorted(info.launchers)
    tt = [c for c in cands if c.endswith(LAUNCHER_SUFFIX)]
    if len(tt) == 1:
        return tt[0], f"the only *{LAUNCHER_SUFFIX} function"
    stem = os.path.splitext(os.path.basename(path))[0]
    named = [c for c in (tt or cands) if stem in c]
    if len(named) == 1:
        return named[0], f"the only launcher named after the file ({stem})"
    with_args = [c for c in (tt or cands) if info.launchers[c][1] > 0 or info.launchers[c][2]]
    if len(with_args) == 1:
        return with_args[0], "the only public non-kernel function taking arguments"
    raise UserError(f"{path}: no class ModelNew and no single launcher function among {cands or 'none'} - "
                    "pass --entry <function> (the function taking Model.forward's tensors), or define "
                    "class ModelNew")


def implementation_kind(path, entry=None):
    """("class", None, why) for a ModelNew file, ("function", name, why) for a launcher beside Triton kernels.
    Raises UserError naming the file when it is neither."""
    info = inspect_py(path)
    if info.error:
        raise UserError(f"{path}: cannot parse the implementation ({info.error})")
    if "ModelNew" in info.classes:
        return "class", None, "defines class ModelNew"
    if not info.kernels:
        raise UserError(f"{path}: no class ModelNew and no @triton.jit kernel - an implementation defines "
                        "class ModelNew(nn.Module), or Triton kernels plus a launcher function taking "
                        "Model.forward's tensors")
    name, why = choose_entry(info, entry)
    return "function", name, why


# ---------------------------------------------------------------------------------------------------------------
# discovery
# ---------------------------------------------------------------------------------------------------------------

def norm_rel(rel: str) -> str:
    """``./static_shape/matmul/x.py`` -> ``static_shape/matmul/x`` (the pairing key)."""
    rel = os.path.normpath(rel.strip()).replace(os.sep, "/")
    return rel[:-3] if rel.endswith(".py") else rel


def _walk_py(root, skip_root=None):
    skip = os.path.realpath(skip_root) if skip_root else None
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith(".")
                         and os.path.realpath(os.path.join(d, x)) != skip)
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(d, name)


def discover_layout_c(ref_root, impl_root, rels=None, entry=None):
    """Pair ``<ref root>/<rel>.py`` references with ``<impl root>/<rel>.py`` implementations.

    Returns (pairs, missing): pairs are dicts (layout, id = rel, name, ref, impl, flops, reasons) or, under
    ``rels=None`` (--all), dicts with "error" for a pair that cannot be used; missing lists the rels of
    references without an implementation. ``rels`` given: exactly those, any problem raises UserError.
    A ``<rel>_flops.py`` beside the reference (defining flops()) is shipped as flops.py.
    """
    for what, d in (("--ref-root", ref_root), ("--impl-root", impl_root)):
        if not d or not os.path.isdir(d):
            raise UserError(f"{what} {d}: directory not found")
    wanted = None if rels is None else [norm_rel(r) for r in rels]
    paths = (_walk_py(ref_root, skip_root=impl_root) if wanted is None else   # --id: read only those files
             [p for p in (os.path.join(ref_root, r + ".py") for r in wanted) if os.path.isfile(p)])
    refs, broken = {}, {}
    for path in paths:
        info = inspect_py(path)
        rel = norm_rel(os.path.relpath(path, ref_root))
        if info.error:
            broken[rel] = f"not parseable Python ({info.error})"
        elif "Model" in info.classes and "ModelNew" not in info.classes:
            refs[rel] = (path, info)
    if wanted is None:
        wanted = sorted(set(refs) | set(broken))
    pairs, missing = [], []
    for rel in wanted:
        try:
            pair = _pair_c(rel, refs, broken, ref_root, impl_root, entry)
        except UserError as exc:
            if rels is not None:
                raise
            pairs.append({"layout": "C", "id": rel, "name": rel, "error": str(exc)})
            continue
        if pair is None:
            if rels is not None:
                raise UserError(f"--id {rel}: no implementation {os.path.join(impl_root, rel + '.py')} - the "
                                "implementation tree must hold the same relative path as the reference")
            missing.append(rel)
        else:
            pairs.append(pair)
    return pairs, missing


def _pair_c(rel, refs, broken, ref_root, impl_root, entry):
    if rel not in refs:
        if rel in broken:
            raise UserError(f"{os.path.join(ref_root, rel + '.py')}: {broken[rel]}")
        base = os.path.basename(rel)
        same = sorted(norm_rel(os.path.relpath(p, ref_root)) for p in _walk_py(ref_root, skip_root=impl_root)
                      if os.path.splitext(os.path.basename(p))[0] == base)
        hint = f" (a file of that name is at: {same})" if same else ""
        raise UserError(f"--id {rel}: no reference {rel}.py with class Model under --ref-root {ref_root}{hint} - "
                        "give the path relative to --ref-root, e.g. static_shape/<category>/<name>")
    ref, info = refs[rel]
    if reference_kind(info) is None:
        fix = ("it reads a case file: use --bench/--gen or --ref/--cases/--impl"
               if "get_input_groups" in info.functions else "define get_inputs() or get_inputs_dyn_list()")
        raise UserError(f"{ref}: class Model but neither {STATIC_FN}() nor {DYNAMIC_FN}() - {fix}")
    impl = os.path.join(impl_root, rel + ".py")
    if not os.path.isfile(impl):
        return None
    kind, name, why = implementation_kind(impl, entry)
    flops = os.path.join(ref_root, rel + "_flops.py")
    flops = flops if os.path.isfile(flops) and "flops" in inspect_py(flops).functions else None
    return {"layout": "C", "id": rel, "name": os.path.basename(rel), "ref": ref, "impl": impl, "flops": flops,
            "impl_kind": kind, "entry": name,
            "reasons": {"ref": f"{rel}.py under --ref-root: class Model + {reference_kind(info)} inputs "
                               f"({DYNAMIC_FN if reference_kind(info) == 'dynamic' else STATIC_FN}())",
                        "impl": f"same relative path under --impl-root: {why}"}}


# ---------------------------------------------------------------------------------------------------------------
# sampling the reference and writing the work directory
# ---------------------------------------------------------------------------------------------------------------

def _forward_names(model_cls):
    try:
        params = list(inspect.signature(model_cls.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def sample_reference(ref, seed=0):
    """Import ``ref`` in its own directory, seed, and call its get_init_inputs() and get_inputs() /
    get_inputs_dyn_list(). Returns dict(kind, groups, init, names, n_params, param_names). Raises UserError
    naming the file when the reference cannot be imported or its functions fail."""
    from mfulib.core.opdir import import_file, in_directory, seed_everything
    info = inspect_py(ref)
    if info.error:
        raise UserError(f"{ref}: cannot parse the reference ({info.error})")
    if "Model" not in info.classes:
        raise UserError(f"{ref}: no `class Model` - the reference must define class Model(nn.Module)")
    kind = reference_kind(info)
    if kind is None:
        raise UserError(f"{ref}: neither {STATIC_FN}() nor {DYNAMIC_FN}() - without a case file the reference "
                        f"must build its inputs with one of them (or pass --cases with a get_input_groups() ref)")
    fn = DYNAMIC_FN if kind == "dynamic" else STATIC_FN
    step = "import"
    ref_abs = os.path.abspath(ref)
    try:
        with in_directory(os.path.dirname(ref_abs)):
            mod = import_file(ref_abs, "layoutc_ref")
            seed_everything(seed)
            step = f"{fn}()"
            with on_host():
                raw = getattr(mod, fn)()
            groups = [as_group(g) for g in raw] if kind == "dynamic" else [as_group(raw)]
            step = "get_init_inputs()"
            init = list(mod.get_init_inputs()) if hasattr(mod, "get_init_inputs") else []
            step = f"Model(*get_init_inputs())"
            seed_everything(seed)
            model = mod.Model(*init)
    except UserError:
        raise
    except Exception as exc:
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").startswith("torch_npu"):
            raise UserError(f"{ref}: {step} needs torch_npu (an NPU-only reference) - run prepare on the NPU host, "
                            "where its inputs can be built") from None
        raise UserError(f"{ref}: {step} failed ({type(exc).__name__}: {exc}) - the reference must run on this "
                        "host to describe its inputs (no case file in layout C)") from None
    if not groups:
        raise UserError(f"{ref}: {fn}() returned no case")
    params = [n for n, _ in model.named_parameters()] + [n for n, b in model.named_buffers() if b is not None] \
        if hasattr(model, "named_parameters") else []
    return {"kind": kind, "fn": fn, "groups": groups, "init": init, "names": _forward_names(mod.Model),
            "param_names": params}


def case_lines(sample):
    """The case lines of a sampled reference (validated in the benchmark format)."""
    from mfulib.core import cases as _cases
    out = []
    for i, g in enumerate(sample["groups"]):
        line = case_line(g, sample["names"])
        if sample["kind"] == "dynamic":
            line["dyn_index"] = i
        _cases.validate_case(line, f"{sample['fn']}() entry {i}", None)
        out.append(line)
    return out


def check_function_impl(impl, entry, sample, ref):
    """Refuse a function implementation that cannot stand in for Model: Model holds parameters/buffers (the
    function never receives them), or the function's arity does not fit forward's inputs."""
    if sample["param_names"]:
        names = ", ".join(sample["param_names"][:6]) + (" ..." if len(sample["param_names"]) > 6 else "")
        raise UserError(f"{impl}: {entry}() is a plain function, but {os.path.basename(ref)}'s Model has "
                        f"{len(sample['param_names'])} parameters/buffers ({names}) that a function never receives "
                        "- write the implementation as class ModelNew(nn.Module) that creates the same weights "
                        "(the tool seeds identically before building Model and ModelNew)")
    required, positional, varargs = inspect_py(impl).launchers[entry]
    n = {len(g) for g in sample["groups"]}
    bad = [k for k in n if k < required or (k > positional and not varargs)]
    if bad:
        raise UserError(f"{impl}: {entry}() takes {required}..{'any' if varargs else positional} positional "
                        f"arguments, but {sample['fn']}() of {ref} gives forward {sorted(n)} - the function must "
                        "take exactly Model.forward's inputs, in order")


def build_work_files(pair, seed=0):
    """Texts of the work directory for a layout-C pair: (texts {name: text}, info part for prepare.json)."""
    from mfulib.core.opdir import MODEL_JSON, MODEL_NEW_PY, MODEL_PY, PERF_CASES_SUFFIX
    from mfulib.core.cases import dump_case_lines
    ref, impl = pair["ref"], pair["impl"]
    sample = sample_reference(ref, seed)
    if pair["impl_kind"] == "function":
        check_function_impl(impl, pair["entry"], sample, ref)
    lines = case_lines(sample)
    body = dump_case_lines(lines)
    ref_src = read_source(ref)
    ref_text = ref_src.rstrip("\n") + "\n" + REF_WRAPPER.format(
        mark=WRAPPER_MARK, fn=sample["fn"], runtime=RUNTIME_SRC,
        draws=(f"[_mfu_as_group(g) for g in {DYNAMIC_FN}()]" if sample["kind"] == "dynamic"
               else f"[_mfu_as_group({STATIC_FN}())]"))
    impl_src = read_source(impl)
    if pair["impl_kind"] == "function":
        impl_text = impl_src.rstrip("\n") + "\n" + IMPL_WRAPPER.format(mark=WRAPPER_MARK, entry=pair["entry"])
    else:
        impl_text = impl_src
    op = pair["name"]
    texts = {MODEL_PY: ref_text, MODEL_NEW_PY: impl_text, op + PERF_CASES_SUFFIX: body, MODEL_JSON: body}
    import hashlib
    digest = {k: hashlib.sha256(v.encode("utf-8")).hexdigest() for k, v in texts.items()}
    wrappers = {
        MODEL_PY: {"wraps": os.path.abspath(ref), "wraps_sha256": sha256(ref), "sha256": digest[MODEL_PY],
                   "adds": ["get_input_groups()", "get_init_inputs()"], "inputs_from": sample["fn"] + "()",
                   "picks": "per case line the draw with the same shapes/dtypes/attrs (dyn_index first)"},
        MODEL_NEW_PY: ({"wraps": os.path.abspath(impl), "wraps_sha256": sha256(impl), "sha256": digest[MODEL_NEW_PY],
                        "adds": ["class ModelNew"], "entry": pair["entry"],
                        "calls": f"{pair['entry']}(*forward inputs)"}
                       if pair["impl_kind"] == "function" else
                       {"copied": os.path.abspath(impl), "sha256": digest[MODEL_NEW_PY],
                        "note": "defines class ModelNew itself; copied verbatim"}),
    }
    generated = {"cases": {"from": sample["fn"] + "()", "seed": seed, "n_cases": len(lines),
                           "input_names": "Model.forward's parameters" if sample["names"] else "input<i>",
                           "sha256": digest[op + PERF_CASES_SUFFIX]},
                 "init_inputs": _json_safe(sample["init"])}
    return texts, {"wrappers": wrappers, "generated": generated, "n_cases": len(lines)}


def _json_safe(values):
    import json
    try:
        return json.loads(json.dumps(values))
    except (TypeError, ValueError):
        return [repr(v) for v in values]
