"""Layout C: parallel reference and implementation trees without case files - recognising and pairing the files.

Public agent kernel benchmarks (akg's aikgbench, KernelBench, MultiKernelBench) keep one operator per ``.py``:

* ``<ref root>/<rel>.py`` - ``class Model`` + ``get_inputs()`` (one case, e.g. ``static_shape/<cat>/<name>.py``)
  or ``get_inputs_dyn_list()`` (one case per entry, e.g. ``dynamic_shape/<cat>/<name>_var.py``), + optional
  ``get_init_inputs()`` (the constructor arguments of Model);
* ``<impl root>/<rel>.py`` - ``class ModelNew``, or a plain launcher function (``custom_op_triton_torch``,
  ``<name>_triton_torch``, ...) beside its ``@triton.jit`` kernels, taking the tensors ``Model.forward`` takes.

The two are paired by the relative path ``<rel>`` (:func:`discover_layout_c`; this module only parses files, it
never imports them). Preparing one pair (:func:`mfulib.sources.layoutc_workdir.build_work_files`, run by
:func:`mfulib.sources.prepare.prepare_layout_c`) writes the work directory (its files: docs/ARCHITECTURE.md):

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

import os

from mfulib.sources.discover import inspect_py, sibling_flops
from mfulib.core.errors import UserError

STATIC_FN = "get_inputs"
DYNAMIC_FN = "get_inputs_dyn_list"
LAUNCHER_SUFFIX = "_triton_torch"  # akg launcher names: custom_op_triton_torch, amin_triton_torch, ...
SKIP_DIRS = {"__pycache__", ".git"}


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
    flops = sibling_flops(os.path.join(ref_root, rel + ".py"))
    return {"layout": "C", "id": rel, "name": os.path.basename(rel), "ref": ref, "impl": impl, "flops": flops,
            "impl_kind": kind, "entry": name,
            "reasons": {"ref": f"{rel}.py under --ref-root: class Model + {reference_kind(info)} inputs "
                               f"({DYNAMIC_FN if reference_kind(info) == 'dynamic' else STATIC_FN}())",
                        "impl": f"same relative path under --impl-root: {why}"}}
