"""The library's structure: no import cycle, one definition of each measurement term, one concept per module.

Read with ``ast`` from the sources (nothing imported), so a lazy import inside a function counts like a top-level one.
"""
import ast
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import freshness  # noqa: E402  (the import-statement parser: one for this graph and for freshness.import_closure)

SCRIPTS = os.path.join(ROOT, "scripts")
LIB = os.path.join(SCRIPTS, "mfulib")
PKG = "mfulib"


def lib_modules() -> dict:
    """{dotted module name: path} of every module of scripts/mfulib (packages as their __init__)."""
    out = {}
    for dirpath, _dirs, files in os.walk(LIB):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, f), SCRIPTS)[:-3].replace(os.sep, ".")
                out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(dirpath, f)
    return out


def parse(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def import_graph(modules: dict) -> dict:
    """{module: {intra-package modules it imports}}, every import statement (function-level ones included; the
    statements read by bench/freshness.py's imported_names, the parser its import_closure uses too)."""
    graph = {}
    for name, path in modules.items():
        here = name.split(".") if path.endswith("__init__.py") else name.split(".")[:-1]
        edges = set()
        for t in freshness.imported_names(path, here):
            if t.split(".")[0] != PKG:
                continue
            while t and t not in modules:  # "pkg.mod.attr" -> "pkg.mod"
                t = t.rpartition(".")[0]
            if t and t != name:
                edges.add(t)
        graph[name] = edges
    return graph


def find_cycle(graph: dict):
    """One cycle as a list of modules (first == last), or None."""
    color, stack = {}, []

    def visit(n):
        color[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if color.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in color:
                found = visit(m)
                if found:
                    return found
        color[n] = 2
        stack.pop()
        return None

    for n in sorted(graph):
        if n not in color:
            found = visit(n)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function_level_import(tmp_path):
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    # the graph builder sees imports inside functions: calib <-> decompose as it was before the split
    src = {"calib": "def check():\n    from .decompose import wrong_type\n", "decompose": "from . import calib\n"}
    mods = {}
    for n, text in src.items():
        (tmp_path / f"{n}.py").write_text(text)
        mods[f"{PKG}.{n}"] = str(tmp_path / f"{n}.py")
    assert find_cycle(import_graph(mods)) in (["mfulib.calib", "mfulib.decompose", "mfulib.calib"],
                                              ["mfulib.decompose", "mfulib.calib", "mfulib.decompose"])


def test_the_library_has_no_import_cycle_function_level_imports_included():
    modules = lib_modules()
    graph = import_graph(modules)
    assert len(graph) > 30 and sum(map(len, graph.values())) > 60  # the graph is really read
    assert "mfulib.schemas.flops_check_json" in graph["mfulib.collect.case_flops"]  # a function-level import
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_module_reaches_into_another_modules_private_names():
    bad = []
    for name, path in lib_modules().items():
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(PKG)):
                bad += [f"{name}: from {'.' * node.level}{node.module or ''} import {a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.endswith("__")]
    assert bad == []


# ------------------------------------------------------------------------------------------- one definition each

DEFINITIONS = "mfulib.core.definitions"
ONE_OWNER = {  # name -> module that alone defines it (function, class or module-level constant)
    "NOISE_MARGIN": DEFINITIONS, "actual_tflops": DEFINITIONS, "time_ns_at": DEFINITIONS, "mfu": DEFINITIONS,
    "mbu": DEFINITIONS, "peak_key": DEFINITIONS, "measured_peak_tflops": DEFINITIONS,
    "canonical_dtype": DEFINITIONS, "canonical_mode": DEFINITIONS, "DTYPE_CANON": DEFINITIONS,
    "MATH_MODES": DEFINITIONS, "HALF_DTYPES": DEFINITIONS, "FLOAT_DTYPES": DEFINITIONS,
    "is_number": DEFINITIONS, "is_positive": DEFINITIONS, "finite_or_none": DEFINITIONS,
    "cann_version": "mfulib.core.device", "device_identity": "mfulib.backends", "slug": "mfulib.core.device",
    "read_peak_json": "mfulib.schemas.peak_json", "check_peak": "mfulib.schemas.peak_json",
    "load_report": "mfulib.schemas.performance_json", "check_report_structure": "mfulib.schemas.performance_json",
    "check_kernel_parts": "mfulib.flops.kernel_parts", "wrong_type": "mfulib.schemas.common", "short_repr": "mfulib.core.errors",
}
BANNED = {"MFU_NOM_ERROR_MARGIN", "DTYPE_ALIASES", "_DTYPE_CANON", "_ITEMSIZE", "_is_num", "_num", "_positive",
          "_finite", "_cann_version", "_short"}  # the second spellings this test was written against


def all_sources():
    for dirpath, _dirs, files in os.walk(SCRIPTS):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                yield os.path.relpath(path, SCRIPTS)[:-3].replace(os.sep, "."), path


def defined_names(tree):
    """Names bound by def/class/assignment at module level, and constants assigned in class bodies (annotated
    fields of dataclasses, e.g. an ``mfu: bool`` option, are data, not definitions)."""
    out = []
    bodies = [(tree.body, True)] + [(n.body, False) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for body, top in bodies:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and top:
                out.append(node.name)
            elif isinstance(node, ast.Assign) or (isinstance(node, ast.AnnAssign) and top):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    out += [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]
    return out


def test_each_measurement_term_is_defined_once_in_its_owner_module():
    owners = {}
    for name, path in all_sources():
        for d in defined_names(parse(path)):
            owners.setdefault(d, []).append(name.replace(".__init__", ""))
    wrong = {n: owners.get(n) for n, mod in ONE_OWNER.items() if owners.get(n) != [mod]}
    assert wrong == {}
    assert {n: owners[n] for n in BANNED if n in owners} == {}


def _is_div(node, const):
    return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
            and node.right.value == const)


def test_one_tflops_formula_and_one_dtype_alias_table():
    formulas, alias_tables = [], []
    for name, path in all_sources():
        for node in ast.walk(parse(path)):
            # x / ns / 1e3, x / (ns * 1e-9) / 1e12, x / (tflops * 1e3): TFLOP/s and its inverse
            if (_is_div(node, 1e3) or _is_div(node, 1e12)) and isinstance(node.left, ast.BinOp) and \
                    isinstance(node.left.op, ast.Div):
                formulas.append(f"{name}:{node.lineno}")
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.BinOp) \
                    and isinstance(node.right.op, ast.Mult) and any(isinstance(s, ast.Constant) and s.value == 1e3
                                                                     for s in (node.right.left, node.right.right)):
                formulas.append(f"{name}:{node.lineno}")
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value in ("fp16", "bf16", "hf32")
                                                  for k in node.keys):
                alias_tables.append(f"{name}:{node.lineno}")
    assert [f.split(":")[0] for f in formulas] == [DEFINITIONS, DEFINITIONS]  # actual_tflops, time_ns_at
    assert [t.split(":")[0] for t in alias_tables] == [DEFINITIONS, DEFINITIONS]  # DTYPE_CANON, MODE_ALIASES



def _formats_a_percent(node) -> bool:
    """An f-string that is one value formatted as a percentage, nothing else: ``f"{v:.2%}"``, ``f"{v * 100:.1f}%"``
    (a sentence that quotes a percentage is not a formatter)."""
    if not isinstance(node, ast.JoinedStr):
        return False
    parts = node.values
    spec = lambda p: "".join(c.value for c in p.format_spec.values if isinstance(c, ast.Constant)) \
        if isinstance(p, ast.FormattedValue) and p.format_spec else ""
    return (len(parts) == 1 and spec(parts[0]).endswith("%")) or (
        len(parts) == 2 and spec(parts[0]).endswith("f") and isinstance(parts[1], ast.Constant)
        and parts[1].value == "%")


def test_one_percent_formatter_for_the_whole_tool():
    """No helper but mfulib.core.fmt.pct returns a ratio formatted as a percentage (or a dash when it is missing)."""
    helpers = []
    for name, path in all_sources():
        for fn in (n for n in ast.walk(parse(path)) if isinstance(n, (ast.FunctionDef, ast.Lambda))):
            body = [fn.body] if isinstance(fn, ast.Lambda) else [r.value for r in ast.walk(fn)
                                                                 if isinstance(r, ast.Return) and r.value]
            for value in body:
                branches = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
                if any(_formats_a_percent(b) for b in branches):
                    helpers.append(f"{name}:{getattr(fn, 'name', 'lambda')}")
    assert helpers == ["mfulib.core.fmt:pct"]

@pytest.mark.parametrize("spelling, canon", [
    ("float16", "float16"), ("fp16", "float16"), ("half", "float16"), ("torch.float16", "float16"),
    ("bfloat16", "bfloat16"), ("bf16", "bfloat16"), ("float32", "float32"), ("fp32", "float32"),
    ("float", "float32"), ("float64", "float64"), ("fp64", "float64"), ("double", "float64"), ("int8", "int8"),
    ("fp8_e4m3", "float8_e4m3fn"), ("float8_e5m2", "float8_e5m2")])
def test_every_case_file_dtype_spelling_has_one_canonical_name_and_peak_key(spelling, canon):
    from mfulib.core import definitions
    assert definitions.canonical_dtype(spelling) == canon == definitions.canonical_mode(spelling)
    assert definitions.peak_key(spelling, tf32=True) == ("tf32" if canon == "float32" else canon)


def test_tf32_and_hf32_are_one_peak_mode_and_the_formulas_follow_their_sources():
    from mfulib.core import definitions as d
    assert d.canonical_mode("hf32") == d.canonical_mode("TF32") == "tf32"
    assert d.actual_tflops(2e12, 1e9) == pytest.approx(2.0)  # 2e12 FLOP in 1 s = 2 TFLOP/s
    assert d.time_ns_at(2e12, 2.0) == pytest.approx(1e9)
    assert d.mfu(1.0, 4.0) == 0.25 and d.mfu(1.0, None) is None
    assert d.mbu(1e9, 1e9, 2.0) == pytest.approx(0.5)  # 1 GB in 1 s at 2 GB/s
    assert [d.above_peak(v) for v in (None, 1.0, 1.0 + d.NOISE_MARGIN, 1.04)] == [None, None, "warning", "error"]


# ------------------------------------------------------------------------------------------- one concept each

MAX_LINES = 500  # a library file over this holds more than one concept; split it
STEP_PACKAGES = ("core", "sources", "verify", "search", "flops", "collect", "peaks", "report", "batch", "run",
                 "backends", "schemas")


def test_every_module_opens_with_a_docstring_naming_its_concept():
    missing = [n for n, p in lib_modules().items() if len((ast.get_docstring(parse(p)) or "").split()) < 6]
    assert missing == []


def test_every_library_file_is_under_500_lines():
    sizes = {n: sum(1 for _ in open(p, encoding="utf-8")) for n, p in lib_modules().items()}
    assert len(sizes) > 60  # the whole library is scanned, not a hand-picked list
    assert {n: k for n, k in sizes.items() if k >= MAX_LINES} == {}


def test_the_library_is_grouped_by_pipeline_step():
    """Every module lives in a step subpackage; the package root holds only its face (__init__.py)."""
    top = [f for f in os.listdir(LIB) if f.endswith(".py")]
    assert top == ["__init__.py"]
    assert set(STEP_PACKAGES) <= {d for d in os.listdir(LIB) if os.path.isfile(os.path.join(LIB, d, "__init__.py"))}


def test_the_old_flat_names_stay_importable_as_the_same_modules():
    """A work directory's flops.py written before the subpackages (``from mfulib.flops_contract import ...``)."""
    import importlib
    import mfulib
    for old, new in mfulib.MOVED.items():
        assert importlib.import_module(f"mfulib.{old}") is importlib.import_module(f"mfulib.{new}"), old
    from mfulib.flops_contract import matmul_flops  # noqa: F401  the statement flops.py files use


def test_every_work_dir_json_has_one_schema_module():
    mods = lib_modules()
    for f in ("performance", "peak", "flops_check", "verify", "decompose"):
        assert f"{PKG}.schemas.{f}_json" in mods
