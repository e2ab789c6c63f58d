"""Find reference, implementation and cases by content (step 1; docs/ARCHITECTURE.md#inputs).

A reference is a ``.py`` defining ``class Model`` (+ ``get_input_groups``), an implementation a ``.py`` defining
``class ModelNew``, a case file a ``.json``/``.jsonl`` whose every line is an object with an ``inputs`` list.
Artifacts (``verify_result*.json``, ``perf_result*.json``, the tool's own outputs) are excluded by name first and
then by content, because relying on either alone misses new artifact kinds or changed artifact formats.

Layouts (docs/ARCHITECTURE.md#inputs, docs/sources.md#benchmark-formats): **A** - one verify directory (or an op root
holding ``output/iter_<n>/verify``) with ``<Op>_torch.py``, ``<Op>_torch.json``, one or two ``<Op>_triton_*.py``;
**B** - a benchmark level dir (``<N>_<Op>.py`` + ``<N>_<Op>.json``, possibly split over several dirs, e.g. references
in the project and case data in ../shared) and a generated-code dir (``<N>_<Op>_<suffix>.py``), paired by ``<N>_``.
"""
from __future__ import annotations

import ast
import fnmatch
import glob
import os
import re
from dataclasses import dataclass, field

from mfulib.core.cases import case_file_verdict
from mfulib.core.errors import UserError
from mfulib.core.jsonio import sha256

# artifacts by name (first pass); the tool's own outputs included so a re-run never mistakes them for cases
EXCLUDE_PATTERNS = (
    "verify_result*.json", "perf_result*.json", "performance.json", "prepare.json", "probe.json",
    "grid_search.json", "flops_check.json", "peak.json", "mfu_decompose.json", "*_all_case.json", "batch_summary.json",
    "*.bak*",
)
KERNEL_DECORATOR = re.compile(r"\b(jit|autotune|heuristics)\b")  # @triton.jit, @triton.autotune(...), @jit
ITER_DIR = re.compile(r"^iter_(\d+)$")
ID_PREFIX = re.compile(r"^(\d+)_")
# implementation preference (SKILL.md step 1): *_triton_optimized.py > unique *_triton*.py > *_generated*.py / others
IMPL_SUFFIXES_SEEN = ("_generated", "_triton_optimized", "_generated_code", "_triton_ascend_impl",
                      "_optimized_code", "_code", "_triton_baseline")


def read_source(path) -> str:
    try:
        with open(path, encoding="utf-8-sig") as f:
            return f.read()
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None


@dataclass
class PyInfo:
    """What a .py file defines (by AST, without importing it: references may import torch_npu)."""
    path: str
    classes: set = field(default_factory=set)
    functions: set = field(default_factory=set)
    error: str | None = None
    kernels: set = field(default_factory=set)  # functions decorated with triton.jit / autotune / heuristics
    # public plain functions (not kernels, no leading "_"): name -> (required positional, positional, *args?)
    launchers: dict = field(default_factory=dict)

    @property
    def kind(self) -> str | None:
        if "ModelNew" in self.classes:
            return "implementation"
        if "Model" in self.classes:
            return "reference"
        if "flops" in self.functions:
            return "flops"
        return None


def inspect_py(path) -> PyInfo:
    info = PyInfo(path)
    try:
        tree = ast.parse(read_source(path), filename=path)
    except (SyntaxError, UnicodeDecodeError, ValueError, UserError) as exc:
        info.error = f"{type(exc).__name__}: {exc}"
        return info
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            info.classes.add(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            info.functions.add(node.name)
            decorators = [ast.unparse(d) for d in node.decorator_list]
            if any(KERNEL_DECORATOR.search(d) for d in decorators):
                info.kernels.add(node.name)
            elif not node.name.startswith("_"):
                a = node.args
                positional = len(a.posonlyargs) + len(a.args)
                info.launchers[node.name] = (positional - len(a.defaults), positional, a.vararg is not None)
    return info


def sibling_flops(ref: str):
    """``<reference stem>_flops.py`` beside the reference ``ref`` when it defines ``flops()`` (as the bundled and
    layout-C operators ship theirs), else None: the forms that pair a reference copy it in as flops.py."""
    path = os.path.splitext(ref)[0] + "_flops.py" if ref else None
    return path if path and os.path.isfile(path) and "flops" in inspect_py(path).functions else None


def is_artifact_name(name: str, include_all_case: bool = False) -> bool:
    for pat in EXCLUDE_PATTERNS:
        if pat == "*_all_case.json" and include_all_case:
            continue
        if fnmatch.fnmatch(name, pat):
            return True
    return False


@dataclass
class DirScan:
    """Files of one directory sorted by what their content says they are."""
    directory: str
    references: list = field(default_factory=list)
    implementations: list = field(default_factory=list)
    flops: list = field(default_factory=list)
    cases: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # (path, why)


def scan_dir(directory, include_all_case=False) -> DirScan:
    scan = DirScan(os.path.abspath(directory))
    for path in sorted(glob.glob(os.path.join(directory, "*"))):
        name = os.path.basename(path)
        if not os.path.isfile(path):
            continue
        if name.endswith(".py"):
            info = inspect_py(path)
            kind = info.kind
            if info.error:
                scan.skipped.append((path, f"not parseable Python ({info.error})"))
            elif kind == "reference":
                scan.references.append(path)
            elif kind == "implementation":
                scan.implementations.append(path)
            elif kind == "flops":
                scan.flops.append(path)
        elif name.endswith((".json", ".jsonl")):
            if is_artifact_name(name, include_all_case):
                scan.skipped.append((path, "artifact by name"))
            else:
                ok, why = case_file_verdict(path)
                if ok:
                    scan.cases.append(path)
                else:
                    scan.skipped.append((path, f"not a case file by content: {why}"))
    return scan


def _stem(path):
    return os.path.splitext(os.path.basename(path))[0]


def _dedupe_by_content(paths):
    seen, out = {}, []
    for p in paths:
        h = sha256(p)
        if h not in seen:
            seen[h] = p
            out.append(p)
    return out


def choose_implementation(impls, variant="optimized", where=""):
    """Pick the implementation by SKILL.md step 1's order; returns (path, reason). Raises UserError listing candidates.

    variant "optimized" (default): ``*_triton_optimized.py`` > the unique ``*_triton*.py`` > the unique
    ``*_generated*.py`` / other variant. variant "baseline": ``*_triton_baseline.py``.
    """
    impls = _dedupe_by_content(impls)
    names = [os.path.basename(p) for p in impls]
    if not impls:
        raise UserError(f"{where}: no implementation (.py with class ModelNew) found - pass --impl explicitly")
    if variant == "baseline":
        base = [p for p in impls if _stem(p).endswith("_triton_baseline")]
        if len(base) == 1:
            return base[0], "--variant baseline: the *_triton_baseline.py file"
        raise UserError(f"{where}: --variant baseline needs exactly one *_triton_baseline.py, found {len(base)} "
                        f"among {names}")
    if len(impls) == 1:
        return impls[0], "the only file with class ModelNew"
    opt = [p for p in impls if _stem(p).endswith("_triton_optimized")]
    if len(opt) == 1:
        return opt[0], "*_triton_optimized.py preferred over the other variants " + str(names)
    tri = [p for p in impls if "_triton" in _stem(p) and not _stem(p).endswith("_triton_baseline")]
    if len(tri) == 1:
        return tri[0], "the unique *_triton*.py (baseline excluded) among " + str(names)
    gen = [p for p in impls if "_generated" in _stem(p)]
    if not tri and len(gen) == 1:
        return gen[0], "the unique *_generated*.py among " + str(names)
    raise UserError(f"{where}: several implementations and no rule picks one: {names} - pass --impl <file> "
                    "(or --variant baseline for the *_triton_baseline.py)")


def _choose_one(paths, what, where, prefer_stem=None, skipped=()):
    paths = _dedupe_by_content(paths)
    if len(paths) == 1:
        return paths[0], "the only " + what
    if prefer_stem:
        same = [p for p in paths if _stem(p) in prefer_stem]
        if len(same) == 1:
            return same[0], f"same name as {sorted(prefer_stem)}"
    if not paths:
        seen = "; ".join(f"{os.path.basename(p)}: {why}" for p, why in skipped)
        raise UserError(f"{where}: no {what} found{' (looked at ' + seen + ')' if seen else ''} - pass it explicitly")
    raise UserError(f"{where}: several different {what}s {[os.path.basename(p) for p in paths]} - pass one explicitly")


def find_verify_dir(src, iteration=None):
    """``src`` itself, or ``src/output/iter_<n>/verify`` with the highest n (or ``iteration``)."""
    out = os.path.join(src, "output")
    iters = {}
    if os.path.isdir(out):
        for name in os.listdir(out):
            m = ITER_DIR.match(name)
            if m and os.path.isdir(os.path.join(out, name, "verify")):
                iters[int(m.group(1))] = os.path.join(out, name, "verify")
    if iteration is not None:
        if iteration not in iters:
            raise UserError(f"{src}: no output/iter_{iteration}/verify (iterations present: {sorted(iters) or 'none'})")
        return iters[iteration], f"--iter {iteration}"
    if iters:
        n = max(iters)
        return iters[n], f"highest iteration iter_{n} of {sorted(iters)}"
    return os.path.abspath(src), "--src is the verify directory"


def discover_layout_a(src, iteration=None, variant="optimized"):
    """Layout A: returns dict(ref, cases, impl, reasons, skipped, verify_dir)."""
    if not os.path.isdir(src):
        raise UserError(f"{src}: --src directory not found")
    vdir, why_dir = find_verify_dir(src, iteration)
    scan = scan_dir(vdir)
    if not scan.references and os.path.abspath(vdir) != os.path.abspath(src):
        root = scan_dir(src)  # the op root holds the same reference/cases (either copy will do)
        scan.references, scan.cases = scan.references or root.references, scan.cases or root.cases
    ref, why_ref = _choose_one(scan.references, "reference (.py with class Model)", vdir)
    ref_stems = {_stem(ref), _stem(ref).replace("_torch", "")}
    cases, why_cases = _choose_one(scan.cases, "case file", vdir, prefer_stem=ref_stems, skipped=scan.skipped)
    impl, why_impl = choose_implementation(scan.implementations, variant, vdir)
    flops = scan.flops[0] if len(scan.flops) == 1 else None
    return {"layout": "A", "verify_dir": vdir, "ref": ref, "cases": cases, "impl": impl, "flops": flops,
            "reasons": {"verify_dir": why_dir, "ref": why_ref, "cases": why_cases, "impl": why_impl},
            "skipped": scan.skipped}


def op_id(path):
    m = ID_PREFIX.match(os.path.basename(path))
    return int(m.group(1)) if m else None


def discover_layout_b(bench_dirs, gen_dir, ids=None, include_all_case=False, variant="optimized"):
    """Layout B: returns (pairs, missing) where pairs is a list of dicts like layout A's and missing lists the
    benchmark ids with no implementation (skipped). ``ids=None`` means all ids."""
    bench_dirs = [bench_dirs] if isinstance(bench_dirs, str) else list(bench_dirs)
    for d in bench_dirs + [gen_dir]:
        if not os.path.isdir(d):
            raise UserError(f"{d}: directory not found (--bench / --gen)")
    refs, cases, flops, unparsed = {}, {}, {}, {}
    for d in bench_dirs:
        scan = scan_dir(d, include_all_case)
        for p, why in scan.skipped:
            if p.endswith(".py") and op_id(p) is not None:
                unparsed.setdefault(op_id(p), []).append(f"{os.path.basename(p)}: {why}")
        for p in scan.references:
            refs.setdefault(op_id(p), []).append(p)
        for p in scan.cases:
            cases.setdefault(op_id(p), []).append(p)
        for p in scan.flops:
            flops.setdefault(op_id(p), []).append(p)
    gscan = scan_dir(gen_dir)
    impls = {}
    for p in gscan.implementations:
        impls.setdefault(op_id(p), []).append(p)
    bench_ids = sorted(i for i in refs if i is not None)
    wanted = sorted(set(bench_ids) | set(unparsed)) if ids is None else list(ids)
    pairs, missing = [], []
    for i in wanted:
        try:
            pair = _pair_one(i, refs, cases, flops, impls, unparsed, bench_dirs, bench_ids, gen_dir, variant)
        except UserError as exc:
            if ids is not None:
                raise
            pairs.append({"layout": "B", "id": i, "name": f"id {i}", "error": str(exc)})  # --all goes on
            continue
        if pair is None:
            missing.append(i)
        else:
            pairs.append(pair)
    return pairs, missing


def _pair_one(i, refs, cases, flops, impls, unparsed, bench_dirs, bench_ids, gen_dir, variant):
    """The layout-B pair for id ``i``; None when the generated dir has no implementation for it."""
    if i not in refs:
        broken = f" (unreadable: {'; '.join(unparsed[i])})" if i in unparsed else ""
        raise UserError(f"--id {i}: no reference {i}_*.py with class Model in {bench_dirs}{broken} "
                        f"(ids present: {bench_ids})")
    if i not in impls:
        return None
    case_by_stem = {_stem(c): c for c in cases.get(i, [])}
    with_json = [r for r in refs[i] if _stem(r) in case_by_stem]
    if len(with_json) == 1:
        ref, why_ref = with_json[0], "the reference variant with a same-named .json"
        case, why_case = case_by_stem[_stem(ref)], "same name as the reference"
    elif len(refs[i]) == 1 and len(cases.get(i, [])) == 1:
        ref, case = refs[i][0], cases[i][0]
        why_ref, why_case = "the only reference with this id", "the only case file with this id"
    else:
        raise UserError(f"id {i}: cannot pair references {[os.path.basename(r) for r in refs[i]]} with case files "
                        f"{[os.path.basename(c) for c in cases.get(i, [])]} in {bench_dirs} - the reference to use "
                        "needs a same-named .json (case data kept elsewhere: add its folder to --bench with ':')")
    impl, why_impl = choose_implementation(impls[i], variant, f"{gen_dir} (id {i})")
    f = [p for p in flops.get(i, []) if _stem(p).startswith(_stem(ref))]
    return {"layout": "B", "id": i, "name": _stem(ref), "ref": ref, "cases": case, "impl": impl,
            "flops": f[0] if len(f) == 1 else None,
            "reasons": {"ref": why_ref, "cases": why_case, "impl": why_impl}}
