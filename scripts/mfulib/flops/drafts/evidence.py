"""What a flops.py draft is built from (:mod:`mfulib.flops.drafts`): the reference's AST and the case file's names.

:func:`analyze_model` reads ``model.py`` (class Model) into :class:`ModelFeatures` - the names it calls, its ``@``
operators, identifiers and short string constants, and the Python arithmetic operators of ``forward()`` (as the aten
op names torch dispatches them to). :func:`launched_kernels` lists the ``@triton.jit`` kernels ``model_new.py``
launches as ``kernel[grid](...)``. :func:`read_case_view` gives the case file's input names, dtypes and shapes as a
:class:`CaseView` (the first case as the template, all cases for variations across them). Nothing here imports the
reference: it is only parsed.
"""
from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field

from mfulib.core import cases as _cases
from mfulib.core.definitions import FLOAT_DTYPES

@dataclass
class ModelFeatures:
    """What the reference's source shows: called names, @ count, identifiers/strings, lines of interest."""
    calls: dict = field(default_factory=dict)       # last attribute / function name -> [line numbers]
    matmul_ops: int = 0                              # "@" operators
    tokens: set = field(default_factory=set)         # identifiers, attribute names, string constants (lower case)
    source: str = ""
    doc_lines: set = field(default_factory=set)      # lines inside docstrings

    def called(self, *names) -> bool:
        return any(n in self.calls for n in names)

    def lines(self, *names) -> list:
        return sorted({ln for n in names for ln in self.calls.get(n, [])})

    def has_token(self, pattern: str) -> bool:
        rx = re.compile(pattern)
        return any(rx.search(t) for t in self.tokens)

    def token_lines(self, pattern: str) -> list:
        """Code lines (not comments, not docstrings) matching ``pattern``."""
        rx = re.compile(pattern, re.I)
        return [i for i, ln in enumerate(self.source.splitlines(), 1)
                if rx.search(ln) and not ln.strip().startswith("#") and i not in self.doc_lines]


def analyze_model(path: str) -> ModelFeatures:
    """Parse the reference; raises SyntaxError/OSError to the caller."""
    with open(path, encoding="utf-8-sig") as f:
        src = f.read()
    tree = ast.parse(src, filename=path)
    feats = ModelFeatures(source=src)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
            # Python's builtins on tensors are element-wise: sum([a, b, c]) adds, max(a, b) compares
            name = _BUILTINS.get(name, name) if isinstance(fn, ast.Name) else name
            if name:
                feats.calls.setdefault(name, []).append(node.lineno)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            feats.matmul_ops += 1
            feats.calls.setdefault("@", []).append(node.lineno)
        if isinstance(node, ast.Name):
            feats.tokens.add(node.id.lower())
        elif isinstance(node, ast.Attribute):
            feats.tokens.add(node.attr.lower())
        elif isinstance(node, ast.arg):
            feats.tokens.add(node.arg.lower())
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 40:
            feats.tokens.add(node.value.lower())
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            feats.doc_lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    # elementwise work written with Python operators (a + b, x * y, x ** 2) inside forward()
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "forward"):
        for node in ast.walk(fn):
            op = _BINOP_NAMES.get(type(getattr(node, "op", None))) if isinstance(node, (ast.BinOp, ast.AugAssign)) \
                else None
            if op:
                feats.calls.setdefault(op, []).append(node.lineno)
    return feats


_BUILTINS = {"sum": "add", "max": "maximum", "min": "minimum"}
_BINOP_NAMES = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow",
                ast.FloorDiv: "div", ast.Mod: "remainder"}


def launched_kernels(impl_path: str | None) -> list:
    """Triton kernels ``model_new.py`` launches (``@triton.jit`` functions called as ``kernel[grid](...)``), in
    source order; [] when there is no such file."""
    if not impl_path or not os.path.exists(impl_path):
        return []
    with open(impl_path, encoding="utf-8-sig") as f:
        tree = ast.parse(f.read(), filename=impl_path)
    jit = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                d = dec.func if isinstance(dec, ast.Call) else dec
                if (isinstance(d, ast.Attribute) and d.attr in ("jit", "autotune", "heuristics")) or \
                        (isinstance(d, ast.Name) and d.id in ("jit",)):
                    jit.add(node.name)
    launched = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id in jit:
            launched.append((node.lineno, node.func.value.id))
    out = []
    for _, name in sorted(launched):
        if name not in out:
            out.append(name)
    return out


@dataclass
class CaseView:
    """Names and shapes of the case file (first case as the template; all cases for variations)."""
    info: object
    all_infos: list
    cases: list

    def tensor(self, *patterns, floating=True, exclude=()):
        for pat in patterns:
            rx = re.compile(pat, re.I)
            for t in self.info.tensors:
                if rx.fullmatch(t.name) and t.name not in exclude and (t.dtype in FLOAT_DTYPES or not floating):
                    return t.name
        return None

    def floats(self):
        return [t.name for t in self.info.tensors if t.dtype in FLOAT_DTYPES]

    def attr(self, *patterns):
        for pat in patterns:
            rx = re.compile(pat, re.I)
            for name in self.info.attrs:
                if rx.search(name):
                    return name
        return None


def read_case_view(path: str) -> CaseView:
    cases = _cases.read_case_file(path)
    infos = [_cases.describe_case(c, i) for i, c in enumerate(cases)]
    return CaseView(infos[0], infos, cases)


def forward_params(source: str) -> list:
    """Names of ``Model.forward``'s parameters after ``self`` (positional, then keyword-only), [] when the
    reference has no class Model with forward() or does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"):
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "forward":
                a = fn.args
                return [p.arg for p in a.posonlyargs + a.args][1:] + [p.arg for p in a.kwonlyargs]
    return []


LSTM_PARAMS = ("input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout", "bidirectional",
               "proj_size")
"""nn.LSTM's constructor arguments in positional order (PyTorch docs, torch.nn.LSTM)."""


def lstm_construction(source: str) -> tuple:
    """({argument: literal value}, line, [arguments not literal]) of the first ``nn.LSTM(...)`` call in the
    reference ``source`` (positional and keyword arguments, named per :data:`LSTM_PARAMS`), or ({}, None, []) when
    there is none. An argument that is not a Python literal (``nn.LSTM(input_size, hidden, ...)`` from __init__'s
    parameters) is listed by name instead of guessed."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}, None, []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if (fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else "") != "LSTM":
            continue
        given = list(zip(LSTM_PARAMS, node.args)) + [(k.arg, k.value) for k in node.keywords if k.arg]
        known, unknown = {}, []
        for name, value in given:
            try:
                known[name] = ast.literal_eval(value)
            except ValueError:
                unknown.append(name)
        return known, node.lineno, unknown
    return {}, None, []
