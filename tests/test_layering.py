"""The subpackages form layers: no package imports one that imports it back (function-level imports included), so
a newcomer can read the library bottom-up - core, then profiles / run / schemas, backends, the steps, the report."""
import ast
import collections
import os

from test_structure import find_cycle as cycle  # the one cycle finder, also the module graph's

LIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "mfulib")


def package_graph() -> dict:
    """{subpackage: {subpackages it imports}} read with ast from every module (nothing imported)."""
    graph = collections.defaultdict(set)
    for dirpath, _dirs, files in os.walk(LIB):
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), LIB).split(os.sep)
            if len(rel) == 1:
                continue  # the package's face (mfulib/__init__.py) names every subpackage by design
            with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
            for node in ast.walk(tree):
                names = [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else \
                    [a.name for a in node.names] if isinstance(node, ast.Import) else []
                for name in names:
                    parts = name.split(".")
                    if parts[0] == "mfulib" and len(parts) > 1 and parts[1] != rel[0]:
                        graph[rel[0]].add(parts[1])
    return graph


def test_the_cycle_finder_sees_a_package_cycle():
    assert cycle({"a": {"b"}, "b": {"a"}}) in (["a", "b", "a"], ["b", "a", "b"])
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_no_subpackage_imports_one_that_imports_it_back():
    graph = package_graph()
    assert {"backends", "collect", "flops", "search", "report"} <= set(graph)  # the graph is really read
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def test_core_imports_no_other_subpackage():
    assert package_graph().get("core", set()) == set()
