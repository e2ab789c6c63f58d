"""Adapt source files into a work directory (step 1): model.py, model_new.py, <Op>_perf_cases.jsonl,
model.json, prepare.json (+ flops.py when the source ships a checked one).

Why two case files: the collector reads ``<Op>_perf_cases.jsonl``; the reference, renamed ``model.py``, reads
``model.json`` when it derives its case path from ``splitext(__file__)``. Hard-coded case names in the reference
or implementation (``"1_BatchMatmul.json"``) are rewritten to ``model.json``; an implementation that derives the path
from its own ``__file__`` gets a ``model_new.json`` alias. Sources are never modified. The directory is built in a
temp sibling and renamed into place, so a failure leaves nothing half-written; a ``--dst`` that already holds
files is replaced only with ``force=True``, after being moved to ``<dst>.bak-<timestamp>``.

prepare.json records what the directory was built from: ``request`` (the source form and choices given on the
command line: layout, --src/--iter/--variant, --bench/--gen/--id, ...), ``sources`` {ref|cases|impl|flops: {path,
sha256}} (the files they resolved to) and ``choices`` (why each file was picked); :mod:`mfulib.pipeline.workdir_state`
compares them with a later command line to decide whether step 1 must be redone.
"""
from __future__ import annotations

import ast
import datetime as _dt
import os
import re
import shutil
import tempfile

from mfulib.core import cases as _cases
from mfulib.sources.discover import inspect_py, read_source
from mfulib.core.errors import UserError
from mfulib.core.jsonio import current_umask, provenance, write_json_atomic, write_text_atomic
from mfulib.core.opdir import MODEL_JSON, MODEL_NEW_PY, MODEL_PY, PERF_CASES_SUFFIX, PREPARE_JSON, FLOPS_PY
from mfulib.pipeline.workdir_state import source_record

SCHEMA = 1


def op_name_for(ref_path) -> str:
    """``<Op>_torch.py`` -> ``<Op>``; ``<N>_<Op>.py`` -> ``<N>_<Op>``."""
    stem = os.path.splitext(os.path.basename(ref_path))[0]
    return re.sub(r"_torch$", "", stem)


def validate_reference(path):
    info = inspect_py(path)
    if info.error:
        raise UserError(f"{path}: cannot parse the reference ({info.error})")
    if "Model" not in info.classes:
        raise UserError(f"{path}: no `class Model` - the reference must define class Model(nn.Module)")
    if "get_input_groups" not in info.functions:
        raise UserError(f"{path}: no get_input_groups() - the reference must build its cases with get_input_groups()")


def validate_implementation(path):
    info = inspect_py(path)
    if info.error:
        raise UserError(f"{path}: cannot parse the implementation ({info.error})")
    if "ModelNew" not in info.classes:
        raise UserError(f"{path}: no `class ModelNew` - the implementation must define class ModelNew(nn.Module)")


def _json_literals(source):
    """String constants ending in .json/.jsonl in a module, and whether it derives a path from __file__."""
    tree = ast.parse(source)
    lits = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value.endswith((".json", ".jsonl"))}
    uses_splitext_file = bool(re.search(r"splitext\([^)]*__file__", source))
    return lits, uses_splitext_file


def rewrite_case_paths(source, case_names):
    """Replace string literals whose basename is one of ``case_names`` by the same path ending in model.json.
    Returns (new_source, [(old, new)])."""
    lits, _ = _json_literals(source)
    changes = []
    for lit in sorted(lits):
        if os.path.basename(lit) in case_names and os.path.basename(lit) != MODEL_JSON:
            new = lit[: len(lit) - len(os.path.basename(lit))] + MODEL_JSON
            for q in ('"', "'"):
                source = source.replace(f"{q}{lit}{q}", f"{q}{new}{q}")
            changes.append((lit, new))
    return source, changes


def _is_inside(child, parent) -> bool:
    child, parent = os.path.realpath(child), os.path.realpath(parent)
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def check_dst(dst, source_dirs, source_files=()):
    """Refuse a --dst that is inside a source directory or that contains a source file (``--force`` would move
    it into the backup). Symlinks are resolved on both sides: a linked source counts where its file lives."""
    if os.path.exists(dst) and not os.path.isdir(dst):
        raise UserError(f"--dst {dst} is an existing file, not a directory - choose a work directory path")
    dirs = set()
    for d in source_dirs:
        if d:
            dirs.update({os.path.abspath(d), os.path.realpath(d)})
    for f in source_files:
        if f:
            dirs.update({os.path.dirname(os.path.abspath(f)), os.path.dirname(os.path.realpath(f))})
    for d in sorted(dirs):
        if _is_inside(dst, d):
            raise UserError(f"--dst {dst} is inside the source directory {d}: sources are never modified - "
                            "choose a work directory outside it (e.g. work/<Op>)")
    for f in source_files:
        for path in {os.path.abspath(f), os.path.realpath(f)} if f else ():
            if _is_inside(path, dst):
                raise UserError(f"--dst {dst} contains the source {path}: replacing it would move the sources - "
                                "choose a work directory outside them (e.g. work/<Op>)")


def prepare_explicit(ref, cases, impl, dst, force=False, flops=None, layout="explicit", reasons=None,
                     extra_source_dirs=(), seed_note=None, request=None):
    """Build the work directory ``dst`` from explicit files. Returns the prepare.json dict (``request``: the
    command line's source form and choices, recorded as given).

    Raises UserError (nothing written) on a missing file, a .py without its class, a bad case line, ``dst`` inside
    a source dir, or ``dst`` holding files without ``force``.
    """
    for what, p in (("--ref", ref), ("--cases", cases), ("--impl", impl)):
        if not p or not os.path.isfile(p):
            raise UserError(f"{what} {p}: file not found")
    validate_reference(ref)
    validate_implementation(impl)
    case_list = _cases.read_case_file(cases)  # validates every line, names file:line
    lines = _cases.case_line_texts(cases)
    if len(lines) != len(case_list):  # pragma: no cover - both come from the same reader
        raise UserError(f"{cases}: could not split the file into its {len(case_list)} case lines")
    dst = os.path.abspath(dst)
    check_dst(dst, list(extra_source_dirs), [ref, cases, impl, flops])

    op = op_name_for(ref)
    case_names = {os.path.basename(cases), os.path.splitext(os.path.basename(ref))[0] + ".json",
                  os.path.splitext(os.path.basename(impl))[0] + ".json", op + ".json"}
    ref_src, ref_changes = rewrite_case_paths(read_source(ref), case_names)
    impl_src, impl_changes = rewrite_case_paths(read_source(impl), case_names)
    _, impl_splitext = _json_literals(impl_src)
    aliases = ["model_new.json"] if impl_splitext else []

    body = "\n".join(lines) + "\n"
    texts = {MODEL_PY: ref_src, MODEL_NEW_PY: impl_src}
    texts.update({name: body for name in [op + PERF_CASES_SUFFIX, MODEL_JSON] + aliases})
    sources = source_record({"ref": ref, "cases": cases, "impl": impl, "flops": flops})
    info = provenance("prepare_op_dir.py", SCHEMA)
    info.update({
        "op": op, "layout": layout, "work_dir": dst, "n_cases": len(case_list), "request": request,
        "sources": sources,
        "choices": reasons or {}, "files": {"reference": MODEL_PY, "implementation": MODEL_NEW_PY,
                                            "cases": op + PERF_CASES_SUFFIX, "reference_cases": MODEL_JSON,
                                            "flops": FLOPS_PY if flops else None},
        "case_file_aliases": aliases,
        "rewrites": {"model.py": ref_changes, "model_new.py": impl_changes},
    })
    return write_work_dir(dst, texts, {FLOPS_PY: flops} if flops else {}, info, force)


def write_work_dir(dst, texts, copies, info, force=False):
    """Write the work directory ``dst`` in one step: ``texts`` ({file name: text}), ``copies`` ({file name: source
    path}) and ``info`` as prepare.json. Built in a temp sibling and renamed into place; an existing non-empty
    ``dst`` is replaced only with ``force`` after being moved to ``<dst>.bak-<timestamp>`` (recorded in
    ``info["backup_of_previous"]``). Returns ``info``. Raises UserError when ``dst`` holds files and not ``force``.
    """
    parent = os.path.dirname(dst)
    os.makedirs(parent, exist_ok=True)
    backup = None
    if os.path.exists(dst) and os.listdir(dst):
        if not force:
            raise UserError(f"--dst {dst} already holds files ({', '.join(sorted(os.listdir(dst))[:6])}...) - "
                            "pass --force to replace it (the old directory is kept as a backup)")
    tmp = tempfile.mkdtemp(prefix=os.path.basename(dst) + ".tmp-", dir=parent)
    try:
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes it 0700: the work dir gets the mode a mkdir would
        for name, text in texts.items():
            write_text_atomic(os.path.join(tmp, name), text)
        for name, src in copies.items():
            shutil.copyfile(src, os.path.join(tmp, name))
        if os.path.exists(dst):
            if os.listdir(dst):
                stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
                backup = f"{dst}.bak-{stamp}"
                n = 1
                while os.path.exists(backup):  # two re-runs within one second
                    backup, n = f"{dst}.bak-{stamp}-{n}", n + 1
                os.rename(dst, backup)
                info["backup_of_previous"] = backup
            else:
                os.rmdir(dst)
        write_json_atomic(os.path.join(tmp, PREPARE_JSON), info)
        os.rename(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if backup and not os.path.exists(dst):
            os.rename(backup, dst)
        raise
    return info


def prepare_layout_c(pair, dst, force=False, seed=0, extra_source_dirs=(), layout="C", request=None):
    """Build the work directory ``dst`` for a layout-C pair (texts from :mod:`mfulib.sources.layoutc_workdir`): the
    case file from a seeded call of the reference's get_inputs() / get_inputs_dyn_list(), model.py = reference +
    get_input_groups() wrapper, model_new.py = implementation (+ a ModelNew wrapper around a launcher function),
    flops.py when a ``<rel>_flops.py`` sits beside the reference. ``pair`` is a dict from
    :func:`mfulib.sources.layoutc.discover_layout_c` (or the explicit form: ref, impl, impl_kind, entry, name, flops,
    reasons). Returns the prepare.json dict. Raises UserError (nothing written) as :func:`prepare_explicit` does,
    and when the reference cannot run or a function implementation cannot stand in for Model.
    """
    from mfulib.sources import layoutc_workdir
    ref, impl, flops = pair["ref"], pair["impl"], pair.get("flops")
    for what, p in (("--ref", ref), ("--impl", impl)):
        if not p or not os.path.isfile(p):
            raise UserError(f"{what} {p}: file not found")
    dst = os.path.abspath(dst)
    check_dst(dst, list(extra_source_dirs), [ref, impl, flops])
    texts, part = layoutc_workdir.build_work_files(pair, seed)
    op = pair["name"]
    sources = source_record({"ref": ref, "impl": impl, "flops": flops})
    info = provenance("prepare_op_dir.py", SCHEMA)
    info.update({
        "op": op, "layout": layout, "work_dir": dst, "n_cases": part["n_cases"], "request": request,
        "sources": sources,
        "choices": dict(pair.get("reasons") or {}, cases=f"written from {part['generated']['cases']['from']} "
                                                          f"(seed {seed}); no case file in layout C"),
        "files": {"reference": MODEL_PY, "implementation": MODEL_NEW_PY, "cases": op + PERF_CASES_SUFFIX,
                  "reference_cases": MODEL_JSON, "flops": FLOPS_PY if flops else None},
        "case_file_aliases": [], "rewrites": {"model.py": [], "model_new.py": []},
        "relative_path": pair.get("id"), "implementation_kind": pair["impl_kind"], "entry": pair.get("entry"),
        "wrappers": part["wrappers"], "generated": part["generated"],
    })
    return write_work_dir(dst, texts, {FLOPS_PY: flops} if flops else {}, info, force)
