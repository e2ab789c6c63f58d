"""docs/ARCHITECTURE.md and docs/sources.md stay true to the code: every library module they name exists, and every
``docs/<page>.md#<anchor>`` the code, the tests or the docs cite is an anchor of that page."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "scripts", "mfulib")
PAGES = ("ARCHITECTURE.md", "sources.md")
SUBPACKAGES = sorted(d for d in os.listdir(LIB) if os.path.isfile(os.path.join(LIB, d, "__init__.py")))


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _anchors(page):
    return set(re.findall(r'<a id="([\w-]+)"></a>', _read(os.path.join(ROOT, "docs", page))))


def test_every_library_module_the_architecture_names_exists():
    text = _read(os.path.join(ROOT, "docs", "ARCHITECTURE.md"))
    named = set(re.findall(r"`(%s)/(\w+\.py)`" % "|".join(SUBPACKAGES), text))
    for row in re.finditer(r"^\| `(\w+)` \|[^|]*\|([^|]*)\|", text, re.M):  # the subpackage table: main modules
        if row.group(1) in SUBPACKAGES:
            named |= {(row.group(1), m) for m in re.findall(r"`(\w+\.py)`", row.group(2))}
    assert len(named) > 40, "the module names were not found: has the table's layout changed?"
    missing = sorted(f"{sub}/{mod}" for sub, mod in named if not os.path.isfile(os.path.join(LIB, sub, mod)))
    assert missing == []


def test_every_cited_anchor_exists():
    anchors = {page: _anchors(page) for page in PAGES}
    assert all(anchors.values())
    files = glob.glob(os.path.join(ROOT, "scripts", "**", "*.py"), recursive=True)
    files += glob.glob(os.path.join(ROOT, "tests", "**", "*.py"), recursive=True)
    files += [os.path.join(ROOT, "tests", *t) for t in (("fake_msprof", "msprof"), ("fake_msprof", "npu-smi"),
                                                        ("fake_ncu", "ncu"))]
    files += [os.path.join(ROOT, "docs", p) for p in PAGES] + [os.path.join(ROOT, "README.md")]
    cites = re.compile(r"(?:docs/)?(ARCHITECTURE\.md|sources\.md)#([\w-]+)")
    broken = sorted({f"{os.path.relpath(f, ROOT)}: {page}#{a}" for f in files
                     for page, a in cites.findall(_read(f)) if a not in anchors[page]})
    assert broken == []
