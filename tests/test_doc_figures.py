"""Figures in the docs are of two kinds, and each says which: measured here, or quoted.

* **measured here**: the figure is followed by a pack reference ``[pack: <path>#<key>]`` (optionally ``x<factor>``
  for a unit change, e.g. ``x100`` for a fraction written as a percentage); the test resolves the key in the
  committed pack and checks that the figure, at the precision written, is that number;
* **quoted**: the figure is followed by ``[quoted: <source>]`` (a datasheet, the spec's 910B figures, a paper).

Docs scanned: README.md, SKILL.md, kb/**/*.md, docs/*.md. A line that states a throughput, bandwidth or percentage
of an H200 or a 910B without a pack reference or a quoted source fails: a device figure cannot be left untagged.
"""
import glob
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = sorted(["README.md", "SKILL.md"] + [os.path.relpath(p, ROOT) for p in
                                          glob.glob(os.path.join(ROOT, "kb", "**", "*.md"), recursive=True)
                                          + glob.glob(os.path.join(ROOT, "docs", "*.md"))])
REF = re.compile(r"\[pack: (?P<path>[\w./-]+)#(?P<key>(?:[^\[\]]|\[[^\]]*\])+?)(?: x(?P<factor>[0-9.e+-]+))?\]")
QUOTED = re.compile(r"\[quoted: [^\]]+\]")
NUM = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
DEVICE = re.compile(r"H200|910B")
FIGURE = re.compile(r"\d(?:[\d,.]*\d)? ?(?:TFLOP/s|TOPS|GB/s|TB/s|%)")


def resolve(doc, key):
    """The value at dotted ``key`` in ``doc``: ``name``, a list index, or ``name[k=v,...]`` (the first element of
    the list ``name`` whose fields k equal v, compared as text)."""
    for seg in re.findall(r"[^.\[]+(?:\[[^\]]*\])?", key):
        m = re.fullmatch(r"([^\[]+)(?:\[([^\]]*)\])?", seg)
        name, sel = m.group(1), m.group(2)
        doc = doc[int(name)] if isinstance(doc, list) else doc[name]
        if sel is not None:
            want = dict(kv.split("=", 1) for kv in sel.split(","))
            hits = [x for x in doc if all(str(x.get(k)) == v for k, v in want.items())]
            if not hits:
                raise KeyError(f"no element of {name} with {want}")
            doc = hits[0]
    return doc


def references():
    """(doc, line number, figure text, pack path, key, factor) of every pack reference in the docs."""
    out = []
    for rel in DOCS:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                start = 0
                for m in REF.finditer(line):
                    nums = NUM.findall(QUOTED.sub("", line[start:m.start()]))
                    out.append((rel, i, nums[-1] if nums else None, m.group("path"), m.group("key"),
                                float(m.group("factor") or 1)))
                    start = m.end()
    return out


REFS = references()


def test_the_docs_carry_pack_references():
    assert len(REFS) >= 10, "the measured figures of README / SKILL / kb carry pack references"


@pytest.mark.parametrize("rel, line, figure, path, key, factor", REFS,
                         ids=[f"{r[0]}:{r[1]}:{r[4][:40]}" for r in REFS])
def test_a_measured_figure_is_the_number_of_its_pack(rel, line, figure, path, key, factor):
    assert figure is not None, f"{rel}:{line}: [pack: {path}#{key}] follows no figure"
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        value = resolve(json.load(f), key)
    assert isinstance(value, (int, float)), f"{rel}:{line}: {path}#{key} is {value!r}, not a number"
    written = float(figure.replace(",", ""))
    decimals = len(figure.split(".")[1]) if "." in figure else 0
    assert abs(value * factor - written) <= 0.5 * 10 ** -decimals + 1e-9, \
        f"{rel}:{line}: the doc says {figure}, {path}#{key} gives {value * factor:.{decimals + 2}f}"


def test_every_device_figure_says_whether_it_is_measured_or_quoted():
    bad = []
    for rel in DOCS:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if DEVICE.search(line) and FIGURE.search(line) and not (REF.search(line) or QUOTED.search(line)):
                    bad.append(f"{rel}:{i}: {line.strip()[:120]}")
    assert not bad, "device figures without [pack: ...] or [quoted: ...]:\n" + "\n".join(bad)


def test_resolve_selects_by_index_and_by_fields():
    doc = {"rows": [{"mode": "bf16", "n": 1, "v": 2.5}, {"mode": "fp8", "n": 2, "v": 7}]}
    assert resolve(doc, "rows.1.v") == 7 and resolve(doc, "rows[mode=bf16].v") == 2.5
    assert resolve(doc, "rows[mode=fp8,n=2].v") == 7
    with pytest.raises(KeyError):
        resolve(doc, "rows[mode=int8].v")
