"""Every command in SKILL.md, README.md and kb/**/*.md runs, every flag and make variable they name exists, and
every field table matches the keys the tools write.

What is checked:

* **Shell blocks.** Every ```bash / ```sh / ```console fenced block of every doc is checked without running it:
  its placeholders have a test value, it installs nothing and does not run the suite, an npu block calls no make;
  the scripts, flags, targets and variables it names exist (below). The end-to-end tier (marker ``e2e``) runs the
  blocks of :data:`RUN_DOCS` only (the README's quick start and pipeline walk, SKILL.md's walk) on CPU, in order,
  as a user would type them into one terminal: each block is its own ``bash -e -o pipefail`` process that starts in
  the directory and with the exported variables the previous block of the same doc left (``cd`` carries over). The
  terminal starts in a temporary directory that stands for the checkout: a ``Makefile`` that includes the real one,
  symlinks to the checkout's other top-level entries (so ``python3 scripts/...`` and ``examples/...`` work), and
  ``work/<op>`` already run through ``make OP=<op> all`` (tests/pipelines.py builds it once per session; each doc
  gets a copy, so the checkout is never written to). Variables: ``$SKILL_DIR`` = the checkout, ``$KB_ROOT`` = its
  ``kb/``; the peak cache (``MFU_PEAK_CACHE_DIR``) is the session's (tests/conftest.py), ``MFU_SHARED_DATA`` the
  real case files of ../shared. Placeholders (:data:`PLACEHOLDERS`) stand for :data:`DOC_OP`; any other ``<...>``
  in a block that is not skip-marked fails (write a runnable value or mark the block). ``console`` blocks run their
  ``$ `` lines only.
* **Markers** on the line directly above a fence: ``<!-- doc-test: skip: <reason> -->`` (not run; the reason is
  required, an empty one fails) and ``<!-- doc-test: npu -->`` (run against the msprof TEST DOUBLE
  tests/fake_msprof: a fake CANN tree is ``ASCEND_HOME_PATH``, its ``set_env.sh`` replaces
  ``/usr/local/Ascend/ascend-toolkit/set_env.sh``, the double's ``msprof`` and ``npu-smi`` are on PATH, and every
  collector call gets ``--backend npu --unverified-ok`` appended: the double replaces msprof, not the device, so
  verify cannot run on "npu" here; the test checks a ``performance.json`` with ``backend: npu`` came out).
* **Flags exist.** Every ``--flag`` given to one of the project's scripts in a shell block or an inline code span
  (``scripts/<name>.py ... --flag``) is in that script's ``--help``; every other ``--flag`` a doc writes is in the
  ``--help`` of some script or in :data:`FOREIGN_FLAGS` (flags of other tools: msprof, ncu, pip, pytest, ray). A table
  under ``<!-- flags: <script>.py -->`` is checked against that script's ``--help``. Every ``make`` target and
  ``VAR=`` a doc gives make exists in the Makefile. A skip-marked block naming a script, target or variable that
  does not exist yet (a step still being built) is exempt and listed in the skip reason, nothing else.
* **Field tables.** A table under ``<!-- fields: <file> [<path>] -->`` lists backticked key names in its first
  column. Key source: tests/golden/work_dir_keys.json (the keys the real pipeline writes through the schema
  modules, pinned by tests/test_work_dir_schemas.py) for the files it pins, plus :data:`PENDING_KEYS` (contract
  keys a writer is still adding to pinned files; delete them once the golden file has them); for a file it
  does not pin yet (grid_search.json, probe.json) the writers' contract keys in :data:`CONTRACT_KEYS` - the
  golden file wins as soon as it has the file. Each documented key must exist (at
  ``<path>`` when given, dotted names ``a.b`` resolved below it); kb/ops/triton/guides/tooling/
  mfu_profiling_guide.md must document every key of every pinned path of performance.json, peak.json,
  mfu_decompose.json and grid_search.json.
"""
import functools
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

import pipelines
from pipelines import checkout_stand_in
from mfulib.schemas import grid_search_json as gsj

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "tests")
GOLDEN = os.path.join(ROOT, "tests", "golden", "work_dir_keys.json")
SHARED_DATA = os.environ.get("MFU_SHARED_DATA", os.path.join(os.path.dirname(ROOT), "shared", "data"))
DOCS = ["SKILL.md", "README.md"] + sorted(os.path.relpath(p, ROOT)
                                          for p in glob.glob(os.path.join(ROOT, "kb", "**", "*.md"), recursive=True))
PROFILING_GUIDE = os.path.join("kb", "ops", "triton", "guides", "tooling", "mfu_profiling_guide.md")
FULLY_DOCUMENTED = ("performance.json", "peak.json", "mfu_decompose.json", "grid_search.json")

# the docs whose shell blocks the end-to-end tier runs (every doc's blocks are checked statically)
RUN_DOCS = ["README.md", "SKILL.md"]
# the bundled operator the docs' placeholders stand for (a small MHA block: two parts, attn + proj, ~25 s on CPU)
DOC_OP = "5_MHABlock"
PLACEHOLDERS = {"<N>_<Op>": DOC_OP, "<Op>": DOC_OP, "<op>": DOC_OP, "<OP>": DOC_OP,
                "<工作目录>": f"work/{DOC_OP}", "<work>": f"work/{DOC_OP}"}
SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"

# flags of tools that are not this project's scripts, as the docs quote them (msprof, ncu, pip, pytest, git)
FOREIGN_FLAGS = {"--task-time", "--ai-core", "--aic-metrics", "--ascendcl", "--output", "--export", "--application",
                 "--csv", "--page", "--metrics", "--clock-control", "--cache-control", "--set", "--section",
                 "--target-processes", "--launch-skip", "--launch-count", "--kernel-name", "--kernel-id",
                 "--index-url", "--compare", "--sys-hardware-mem", "--l2", "--aic-mode", "--aic-freq",
                 "--type", "--summary-format", "--runtime-api", "--print-summary", "--replay-mode", "--query",
                 "--head", "--address"}  # the last two: ray start (README "Batch")

# the writers' contract: the keys of result files the golden file does not pin (yet)
CONTRACT_KEYS = {
    "grid_search.json": {"<top>": ["schema", "tool"] + list(gsj.TOP_KEYS), "best": list(gsj.BEST_KEYS),
                         "cost_s": list(gsj.COST_KEYS)},  # the schema module's own lists
    "probe.json": {"<top>": ["schema", "tool", "op_dir", "symbols", "scale_dims", "candidates", "appended",
                             "complete", "backup"],
                   "symbols[]": ["name", "kind", "positions", "values", "evidence", "scaled"],
                   "candidates[]": ["candidate_id", "source_case", "factors", "input_bytes", "gates", "verdict",
                                    "failed_gate", "new_case_id"],
                   "candidates[].gates[]": ["gate", "name", "ok", "detail", "value", "limit"]},
}

# contract keys a writer is adding to files the golden file already pins (PMU per case, bound and
# roofline per row and part, the cache regime): accepted in a field table while the golden file lacks them; once
# the writer is merged and the golden file regenerated they are checked like every other key (delete them here then)
PENDING_KEYS = {}  # empty: every contract key of the pinned files is in the golden file now

FENCE = re.compile(r"^\s*```+\s*([\w-]*)")
MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FIELDS = re.compile(r"^\s*<!--\s*fields:\s*(\S+)(?:\s+(\S+))?\s*-->\s*$")
FLAGS_TABLE = re.compile(r"^\s*<!--\s*flags:\s*(\S+\.py)\s*-->\s*$")
SHELL_LANGS = {"bash", "sh", "console", "shell"}
SCRIPT_RE = re.compile(r"(?:^|[\s/])((?:scripts|bench)/(?:ops_profiling/)?[\w]+\.py)")
FLAG_RE = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
PLACEHOLDER_RE = re.compile(r"<[A-Za-z_\u4e00-\u9fff][^<>\s]*>")


# ------------------------------------------------------------------------------------------------ parsing
class Doc:
    """One markdown file: its shell blocks (with markers), field tables, flag tables and inline code spans."""

    def __init__(self, rel: str, text: str = None):
        self.rel = rel
        if text is None:
            with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
                text = f.read()
        self.lines = text.splitlines()
        self.blocks, self.tables, self.flag_tables, self.problems, self.prose = [], [], [], [], []
        self._parse()

    def _parse(self):
        i, lines = 0, self.lines
        while i < len(lines):
            m = FENCE.match(lines[i])
            if m:
                lang, start = m.group(1).lower(), i
                j = i + 1
                while j < len(lines) and not re.match(r"^\s*```", lines[j]):
                    j += 1
                body = lines[i + 1:j]
                marker = MARKER.match(lines[i - 1]) if i > 0 else None
                if lang in SHELL_LANGS:
                    self.blocks.append({"line": start + 1, "lang": lang, "body": body,
                                        "marker": self._marker(marker, start)})
                elif marker:
                    self.problems.append(f"{self.rel}:{start}: a doc-test marker above a ```{lang} block "
                                         "(only bash/sh/console blocks run)")
                i = j + 1
                continue
            mk = MARKER.match(lines[i])
            if mk and not (i + 1 < len(lines) and FENCE.match(lines[i + 1])):
                self.problems.append(f"{self.rel}:{i + 1}: doc-test marker not directly above a fence")
            for regex, dest in ((FIELDS, self.tables), (FLAGS_TABLE, self.flag_tables)):
                fm = regex.match(lines[i])
                if fm:
                    rows = self._table(i + 1)
                    if not rows:
                        self.problems.append(f"{self.rel}:{i + 1}: `{lines[i].strip()}` is not directly above a "
                                             "table")
                    dest.append({"line": i + 1, "args": fm.groups(), "rows": rows})
            self.prose.append(lines[i])
            i += 1

    def _marker(self, m, fence_index):
        if not m:
            return None
        text = m.group(1)
        if text == "npu":
            return ("npu", None)
        sm = re.match(r"^skip\s*:?\s*(.*)$", text)
        if sm:
            if not sm.group(1).strip():
                self.problems.append(f"{self.rel}:{fence_index}: `doc-test: skip` without a reason "
                                     "(write `<!-- doc-test: skip: <why> -->`)")
            return ("skip", sm.group(1).strip())
        self.problems.append(f"{self.rel}:{fence_index}: unknown doc-test marker {text!r} "
                             "(use `skip: <reason>` or `npu`)")
        return ("unknown", text)

    def _table(self, start):
        """First-column backticked names of the markdown table starting at line index ``start``."""
        rows = []
        i = start
        while i < len(self.lines) and self.lines[i].lstrip().startswith("|"):
            cells = self.lines[i].strip().strip("|").split("|")
            first = cells[0]
            if not re.match(r"^\s*:?-{3,}", first) and i > start:  # not the header, not the separator
                rows.append((i + 1, re.findall(r"`([^`]+)`", first)))
            i += 1
        return rows


def commands(block) -> list:
    """The commands of a shell block, continuation lines joined (``console``: only the ``$ `` lines)."""
    body = block["body"]
    if block["lang"] == "console" and any(ln.lstrip().startswith("$ ") for ln in body):
        body = [ln.lstrip()[2:] for ln in body if ln.lstrip().startswith("$ ")]
    out, cur = [], ""
    for ln in body:
        if cur:
            cur += " " + ln.strip()
        else:
            cur = ln.strip()
        if cur.endswith("\\"):
            cur = cur[:-1]
            continue
        if cur and not cur.startswith("#"):
            out.append(cur)
        cur = ""
    if cur:
        out.append(cur)
    return out


def strip_comment(cmd: str, punctuation: bool = True) -> str:
    """A command without its trailing ``# comment`` (outside quotes); ``punctuation``: ``<``, ``>``, ``|``, ``;``,
    ``&``, ``(``, ``)`` become words of their own (for splitting at operators; False keeps ``<op>`` whole)."""
    try:
        lex = shlex.shlex(cmd, posix=True, punctuation_chars=punctuation)
        lex.commenters = "#"
        lex.whitespace_split = True
        return " ".join(shlex.quote(t) if re.search(r"\s", t) else t for t in lex)
    except ValueError:
        return cmd.split(" #")[0]


@functools.lru_cache(maxsize=None)
def all_docs():
    return tuple(Doc(rel) for rel in DOCS if os.path.exists(os.path.join(ROOT, rel)))


# ------------------------------------------------------------------------------------------------ knowledge
@functools.lru_cache(maxsize=None)
def script_help(name: str):
    """The ``--help`` text of ``name`` (``scripts/x.py``, ``bench/x.py``; None when the script does not exist)."""
    path = os.path.join(ROOT, name)
    if not os.path.exists(path):
        return None
    r = subprocess.run([sys.executable, path, "--help"], capture_output=True, text=True, timeout=120, cwd=HERE)
    assert r.returncode == 0, f"{name} --help: {r.stderr[-1000:]}"
    return r.stdout


@functools.lru_cache(maxsize=None)
def all_scripts():
    return tuple(sorted(os.path.relpath(p, ROOT)
                        for pat in ("scripts/*.py", "scripts/ops_profiling/*.py", "bench/*.py")
                        for p in glob.glob(os.path.join(ROOT, pat))))


@functools.lru_cache(maxsize=None)
def known_flags():
    flags = set()
    for s in all_scripts():
        flags |= set(FLAG_RE.findall(script_help(s) or ""))
    return flags


def help_flags(name: str) -> set:
    return set(FLAG_RE.findall(script_help(name) or ""))


@functools.lru_cache(maxsize=None)
def makefile_names():
    """(targets, variables) of the Makefile (variables: assigned, or read as $(VAR))."""
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        text = f.read()
    targets = set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, re.M))
    variables = set(re.findall(r"^([A-Z][A-Z0-9_]*)\s*(?:\?|:|\+)?=", text, re.M))
    variables |= set(re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", text))
    variables |= set(re.findall(r"\$\((?:if|filter|or|and)\s+\$?\(?([A-Z][A-Z0-9_]*)", text))
    return targets, variables


def schema_keys(file: str) -> dict:
    """{path: keys} of ``file``: the golden file when it pins the file, else the writers' contract."""
    with open(GOLDEN, encoding="utf-8") as f:
        golden = json.load(f)
    if file in golden:
        keys = {p: list(v) for p, v in golden[file].items()}
        for p, extra in PENDING_KEYS.get(file, {}).items():
            keys.setdefault(p, [])
            keys[p] += [k for k in extra if k not in keys[p]]
        return keys
    return CONTRACT_KEYS.get(file)


# ------------------------------------------------------------------------------------------------ checks
def script_uses(cmd: str) -> list:
    """[(script, flags)] for the project's scripts a command calls (one entry per ``&&``/``;``/``|`` segment)."""
    out = []
    for seg in re.split(r"&&|\|\||;|\|", cmd):
        m = SCRIPT_RE.search(seg)
        if m:
            out.append((m.group(1), set(FLAG_RE.findall(seg[m.end():]))))
    return out


def make_uses(cmd: str) -> list:
    """[(targets, variables)] of the ``make`` calls in a command."""
    out = []
    for seg in re.split(r"&&|\|\||;|\|", strip_comment(re.sub(r"<[^<>]*>", "X", cmd))):
        toks = seg.split()
        if "make" not in toks:
            continue
        toks = toks[toks.index("make") + 1:]
        variables = {t.split("=", 1)[0] for t in toks if re.match(r"^[A-Z][A-Z0-9_]*=", t)}
        targets = {t for t in toks if re.match(r"^[a-z][\w-]*$", t)}
        out.append((targets, variables))
    return out


def check_names(doc: Doc) -> list:
    """Problems with the scripts, flags, make targets and variables ``doc`` names."""
    problems = []
    targets, variables = makefile_names()
    # scripts not written yet, named by a skip-marked block of this doc: their inline mentions and the flags in
    # those blocks are exempt until the script exists (then everything is checked)
    pending_blocks = [b for b in doc.blocks if b["marker"] and b["marker"][0] == "skip"
                      and any(script_help(sc) is None for c in commands(b) for sc, _ in script_uses(c))]
    pending_scripts = {sc for b in pending_blocks for c in commands(b) for sc, _ in script_uses(c)
                       if script_help(sc) is None}
    pending_flags = {f for b in pending_blocks for ln in b["body"] for f in FLAG_RE.findall(ln)}
    pending_make = {n for b in pending_blocks for c in commands(b) for t, v in make_uses(c)
                    for n in t | {x + "=" for x in v}} - targets - {x + "=" for x in variables}
    inline = [(None, m) for ln in doc.prose for m in re.findall(r"`([^`]+)`", ln)]
    blocks = [(b, c) for b in doc.blocks for c in commands(b)]
    for block, cmd in blocks + inline:
        skipped = block is not None and block["marker"] and block["marker"][0] == "skip"
        where = f"{doc.rel}:{block['line']}" if block else doc.rel
        for script, flags in script_uses(cmd):
            if script_help(script) is None:
                if not skipped and script not in pending_scripts:
                    problems.append(f"{where}: `{cmd}` calls {script}, which does not exist")
                continue
            missing = flags - help_flags(script)
            if missing:
                problems.append(f"{where}: {script} has no {sorted(missing)} in its --help (`{cmd}`)")
        if block is None and not re.search(r"\bmake\s", cmd):
            continue
        for tgts, vs in make_uses(cmd):
            bad = sorted(tgts - targets) + sorted(v + "=" for v in vs - variables)
            bad = [n for n in bad if n not in pending_make]
            if bad and not skipped:
                problems.append(f"{where}: the Makefile has no {bad} (`{cmd}`)")
    for ln in doc.prose + [ln for b in doc.blocks for ln in b["body"]]:
        for flag in FLAG_RE.findall(ln):
            if flag not in known_flags() and flag not in FOREIGN_FLAGS and flag not in pending_flags:
                problems.append(f"{doc.rel}: {flag} is no flag of any script's --help (nor of a foreign tool "
                                f"listed in tests/test_docs.py FOREIGN_FLAGS): `{ln.strip()}`")
    for t in doc.flag_tables:
        (script,) = t["args"]
        script = [s for s in all_scripts() if s.endswith("/" + script) or s == script][0]
        have = help_flags(script)
        for line, names in t["rows"]:
            for name in names:
                for flag in FLAG_RE.findall(name):
                    if flag not in have:
                        problems.append(f"{doc.rel}:{line}: {flag} is not in {script} --help")
    return sorted(set(problems))


def _norm(path: str) -> str:
    """A pinned path without its list/dict steps: ``per_case[].impls.*`` -> ``per_case.impls``, ``<top>`` -> ``""``."""
    return "" if path in (None, "<top>") else path.replace("[]", "").replace(".*", "")


def resolve(keys: dict, path, name: str):
    """The (pinned path, key) a documented ``name`` (``key`` or dotted ``a.b[].key``) stands for below ``path``
    (None: anywhere in the file for an undotted name, the top level for a dotted one), or None when none has it."""
    parts = _norm(name).split(".")
    parent = ".".join(filter(None, [_norm(path)] + parts[:-1]))
    for g, names in keys.items():
        if _norm(g) == parent and parts[-1] in names:
            return g, parts[-1]
    if path is None and len(parts) == 1:
        for g, names in keys.items():
            if parts[-1] in names:
                return g, parts[-1]
    return None


def check_tables(doc: Doc, covered: dict) -> list:
    """Problems with ``doc``'s field tables; records the documented (file, path, key) in ``covered``."""
    problems = []
    for t in doc.tables:
        file, path = t["args"]
        keys = schema_keys(file)
        if keys is None:
            problems.append(f"{doc.rel}:{t['line']}: fields of {file}: no golden keys and no contract for it")
            continue
        if path is not None and path not in keys:
            problems.append(f"{doc.rel}:{t['line']}: {file} has no pinned path {path!r} (have {sorted(keys)})")
            continue
        if not any(names for _, names in t["rows"]):
            problems.append(f"{doc.rel}:{t['line']}: the fields table of {file} names no backticked key")
        for line, names in t["rows"]:
            for name in names:
                hit = resolve(keys, path, name)
                if hit is None:
                    problems.append(f"{doc.rel}:{line}: `{name}` is no key of {file}"
                                    f"{' at ' + path if path else ''} (keys: tests/golden/work_dir_keys.json, "
                                    "or the contract in tests/test_docs.py)")
                else:
                    covered.setdefault(file, set()).add(hit)
    return problems


# ------------------------------------------------------------------------------------------------ tests
def test_markers_and_tables_are_well_formed():
    problems = [p for d in all_docs() for p in d.problems]
    assert not problems, "\n".join(problems)


def test_the_parser_catches_what_it_must():
    """The checks can fail: an empty skip reason, a marker off its fence, an unknown flag, an unknown make variable,
    an undocumented key and a key that does not exist are all reported."""
    text = ("<!-- doc-test: skip: -->\n```bash\nls\n```\n<!-- doc-test: npu -->\n\n```bash\nls\n```\n"
            "```bash\npython3 $SKILL_DIR/scripts/peak_calib.py --no-such-flag -o p.json\nmake OP=x NO_SUCH_VAR=1 all\n"
            "```\n<!-- fields: peak.json nominal -->\n| key | meaning |\n|---|---|\n| `tflops` | x |\n"
            "| `no_such_key` | y |\n")
    doc = Doc("synthetic.md", text)
    assert any("without a reason" in p for p in doc.problems)
    assert any("not directly above a fence" in p for p in doc.problems)
    names = check_names(doc)
    assert any("--no-such-flag" in p and "scripts/peak_calib.py" in p for p in names)
    assert any("NO_SUCH_VAR=" in p for p in names)
    covered = {}
    tables = check_tables(doc, covered)
    assert any("no_such_key" in p for p in tables) and not any("`tflops`" in p for p in tables)
    assert ("nominal", "tflops") in covered["peak.json"]


@pytest.mark.parametrize("rel", DOCS)
def test_every_flag_target_and_variable_a_doc_names_exists(rel):
    (doc,) = [d for d in all_docs() if d.rel == rel] or [None]
    if doc is None:
        pytest.skip(f"{rel} does not exist")
    problems = check_names(doc)
    assert not problems, "\n".join(problems)


def test_field_tables_match_the_keys_the_tools_write():
    covered, problems = {}, []
    for d in all_docs():
        problems += check_tables(d, covered)
    guide = [d for d in all_docs() if d.rel == PROFILING_GUIDE]
    assert guide, f"{PROFILING_GUIDE} is missing"
    own = {}
    check_tables(guide[0], own)
    for file in FULLY_DOCUMENTED:
        keys = schema_keys(file)
        for path, names in keys.items():
            missing = sorted(k for k in names if (path, k) not in own.get(file, set()))
            if missing:
                problems.append(f"{PROFILING_GUIDE}: {file} {path}: undocumented keys {missing} (add them to a "
                                f"`<!-- fields: {file} {path} -->` table)")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------- running
@pytest.fixture(scope="session")
def doc_env(mha_all_checkout):
    """Environment and the session's fully-run work/<DOC_OP> (tests/pipelines.py) shared by every doc's terminal."""
    env = pipelines.pipeline_env(SKILL_DIR=ROOT, KB_ROOT=os.path.join(ROOT, "kb"))
    if os.path.isdir(SHARED_DATA):
        env["MFU_SHARED_DATA"] = SHARED_DATA
    return env, os.path.join(mha_all_checkout, "work")


def substitute(cmd: str) -> str:
    for k in sorted(PLACEHOLDERS, key=len, reverse=True):
        cmd = cmd.replace(k, PLACEHOLDERS[k])
    return cmd


def npu_env(tmp):
    sys.path.insert(0, HERE)
    from test_msprof_fake_end_to_end import make_fake_cann
    return make_fake_cann(tmp)


def block_problems(doc: Doc, b) -> list:
    """What keeps block ``b`` of ``doc`` from running in the test terminal, found without running it: placeholders
    without a test value, installs or a run of the suite, make in an npu block. Skip-marked blocks have none."""
    kind = b["marker"][0] if b["marker"] else "run"
    if kind in ("skip", "unknown"):
        return []
    cmds = [substitute(c) for c in commands(b)]
    left = [p for c in cmds for p in PLACEHOLDER_RE.findall(strip_comment(c, punctuation=False))]
    if left:
        return [f"{doc.rel}:{b['line']}: placeholders {left} have no test value (write a runnable value, one of "
                f"{sorted(PLACEHOLDERS)}, or mark the block skip with a reason)"]
    unsafe = [c for c in cmds if re.search(r"\bmake\b.*\b(setup|test)\b|\bpip3? install\b|\bpytest\b", c)]
    if unsafe:
        return [f"{doc.rel}:{b['line']}: {unsafe} installs packages or runs the test suite (which runs this test): "
                "mark the block `<!-- doc-test: skip: <reason> -->`"]
    if kind == "npu" and any(re.search(r"(^|\s)make\s", c) for c in cmds):
        return [f"{doc.rel}:{b['line']}: an npu block cannot call make (the double cannot verify); call the "
                "collector directly"]
    return []


def run_blocks(doc: Doc, env: dict, work_seed, tmp) -> list:
    """Run ``doc``'s blocks in one emulated terminal; returns the problems found."""
    term = tmp / "checkout"
    checkout_stand_in(term)
    shutil.copytree(work_seed, term / "work", symlinks=True)
    state = tmp / "state"
    state.mkdir()
    cwd_file, env_file = state / "cwd", state / "env"
    cwd_file.write_text(str(term))
    env_file.write_text("")
    problems = []
    fake = None
    for b in doc.blocks:
        kind = b["marker"][0] if b["marker"] else "run"
        if kind in ("skip", "unknown"):
            continue
        cmds = [substitute(c) for c in commands(b)]
        if any("shared/data" in c for c in cmds) and not os.path.isdir(SHARED_DATA):
            continue  # the real case files live in ../shared, absent here (as in tests/conftest.py shared_dir)
        found = block_problems(doc, b)
        if found:
            problems += found
            continue
        benv = dict(env)
        if kind == "npu":
            if fake is None:
                (tmp / "cann").mkdir()
                fake = npu_env(tmp / "cann")
            benv.update(fake)
            set_env = os.path.join(os.path.dirname(fake["ASCEND_HOME_PATH"]), "set_env.sh")
            cmds = [c.replace(SET_ENV, set_env) for c in cmds]
            cmds = [re.sub(r"(msprof_perf_summary\.py\b[^;&|]*)", r"\1 --backend npu --unverified-ok", c)
                    if "msprof_perf_summary.py" in c else c for c in cmds]
        script = "\n".join(cmds)
        # the fake CANN's variables win over what the previous blocks exported (PATH above all)
        forced = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in (fake or {}).items()) if kind == "npu" else ""
        wrapped = (f'cd "$(cat {shlex.quote(str(cwd_file))})"\n. {shlex.quote(str(env_file))}\n{forced}'
                   f"{script}\n"
                   f'__rc=$?; pwd > {shlex.quote(str(cwd_file))}; '
                   f'export -p | grep -vE "^declare -x (PWD|OLDPWD|SHLVL|_)=" > {shlex.quote(str(env_file))}; '
                   f"exit $__rc\n")
        t0 = time.monotonic()
        r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", wrapped], env=benv, capture_output=True,
                           text=True, timeout=600)
        print(f"{doc.rel}:{b['line']}: {time.monotonic() - t0:.1f} s")
        if r.returncode != 0:
            problems.append(f"{doc.rel}:{b['line']}: block failed (exit {r.returncode}):\n{script}\n--- stdout\n"
                            f"{r.stdout[-2500:]}\n--- stderr\n{r.stderr[-2500:]}")
            break  # later blocks depend on this one
        if kind == "npu" and any("msprof_perf_summary.py" in c for c in cmds):
            outs = [p for p in glob.glob(os.path.join(term, "**", "performance.json"), recursive=True)
                    if os.path.getmtime(p) >= t0 - 1]
            reps = []
            for p in outs:
                with open(p, encoding="utf-8") as f:
                    reps.append(json.load(f))
            if not any(rep.get("backend") == "npu" for rep in reps):
                problems.append(f"{doc.rel}:{b['line']}: the npu block wrote no performance.json with backend npu")
    return problems


@pytest.mark.parametrize("rel", DOCS)
def test_every_shell_block_of_a_doc_could_run_in_the_test_terminal(rel):
    (doc,) = [d for d in all_docs() if d.rel == rel] or [None]
    if doc is None:
        pytest.skip(f"{rel} does not exist")
    problems = [p for b in doc.blocks for p in block_problems(doc, b)]
    assert not problems, "\n".join(problems)


def test_block_checks_catch_a_placeholder_an_install_and_make_in_an_npu_block():
    text = ("```bash\nls <Nope>\n```\n```bash\npip install x\n```\n<!-- doc-test: npu -->\n```bash\n"
            "make OP=x all\n```\n<!-- doc-test: skip: not here -->\n```bash\npip install y <Nope>\n```\n")
    doc = Doc("synthetic.md", text)
    found = [block_problems(doc, b) for b in doc.blocks]
    assert [len(f) for f in found] == [1, 1, 1, 0]
    assert "<Nope>" in found[0][0] and "pip install" in found[1][0] and "npu block" in found[2][0]


@pytest.mark.e2e
@pytest.mark.parametrize("rel", RUN_DOCS)
def test_every_shell_block_of_a_doc_runs(rel, doc_env, tmp_path):
    (doc,) = [d for d in all_docs() if d.rel == rel] or [None]
    if doc is None:
        pytest.skip(f"{rel} does not exist")
    runnable = [b for b in doc.blocks if not (b["marker"] and b["marker"][0] == "skip")]
    if not runnable:
        pytest.skip(f"{rel}: no shell block to run ({len(doc.blocks)} marked skip)")
    if shutil.which("make") is None:
        pytest.skip("GNU make is not installed")
    env, seed = doc_env
    before = checkout_state()
    problems = run_blocks(doc, env, seed, tmp_path)
    assert not problems, "\n\n".join(problems)
    after = checkout_state()
    assert after == before, f"{rel}: its commands wrote into the checkout: {sorted(set(after) ^ set(before))}"


def checkout_state():
    """The checkout's untracked and ignored files (git; work/ included), to prove the doc commands wrote nothing
    there (edits of tracked files are left out: a developer may be editing while the test runs)."""
    if shutil.which("git") is None or not os.path.exists(os.path.join(ROOT, ".git")):
        return None
    r = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=ROOT,
                       capture_output=True, text=True)
    return sorted(ln for ln in r.stdout.splitlines() if ln[:2] in ("??", "!!")
                  and "__pycache__" not in ln and ".pytest_cache" not in ln)


def test_hints_in_messages_work_outside_the_checkout(tmp_path):
    """A WORK with a trailing slash gives no `work//prepare.json`, and the missing-file hints name the
    scripts by a path that exists from any directory (not `python3 scripts/...`)."""
    if shutil.which("make") is None:
        pytest.skip("GNU make is not installed")
    r = subprocess.run(["make", "-n", "-C", ROOT, "OP=5_MHABlock", f"WORK={tmp_path}/w/", "prepare"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"--dst {tmp_path}/w " in r.stdout + " " and "//" not in r.stdout.replace("://", "")
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from mfulib.core.errors import UserError
    from mfulib.schemas.peak_json import read_peak_json
    from mfulib.schemas.performance_json import load_report
    for reader, name in ((read_peak_json, "peak.json"), (load_report, "performance.json")):
        with pytest.raises(UserError) as e:
            reader(str(tmp_path / name))
        hinted = re.findall(r"python3 (\S+\.py)", str(e.value))
        assert hinted and all(os.path.isabs(p) and os.path.exists(p) for p in hinted), str(e.value)
