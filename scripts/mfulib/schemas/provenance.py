"""What a report was made from (``made_from``), the one shape every work-directory report records, and the one
judgement of whether a report is still current (:func:`judge`).

Every step's report (verify.json, flops_check.json, probe.json, grid_search.json, performance.json, peak.json,
mfu_decompose.json; report.html in a comment on its second line) carries, beside the provenance header of
:func:`mfulib.core.jsonio.provenance` (tool and tool_version, ``versions`` {python, torch, triton, ...}, ``device``,
command line, time), the block ``made_from`` (:func:`made_from`):

``files``     {path relative to the report's directory: sha256 hex of the bytes the step read, or None when absent}
``settings``  {option: value}: the step's options that change its result (paths and verbosity left out), JSON values
``by_make``   true when make's step rule ran the step (make exports ``MFU_MAKE_STEP=<step>`` to its step recipes)
``tool``      {version, content_sha256}: the package version and a sha256 over the tool's own source files
              (scripts/**/*.py, sorted by path), so a report names the exact code that made it even without git

:func:`judge` compares a report with the files it names: a file whose sha256 differs (or that is gone) makes the
report **stale**; a changed input that is itself a report of a failed step makes it **refused** (a step must not
build on it); a recorded input that is a report with its own ``made_from`` is judged too (performance.json is stale
when the verify.json it read changed, even if decompose reads only performance.json). A report made under another
torch / Triton / torch_npu version (``versions``) is stale as well. A report without ``made_from`` (made before this
record existed) is judged current: nothing is known against it.
"""
from __future__ import annotations

import functools
import json
import os

from mfulib import __version__
from mfulib.core.jsonio import sha256, versions
from mfulib.core.paths import SCRIPTS_DIR

KEY = "made_from"
#: the environment variable make's step rules export to the step's script: its value is the step's name
MAKE_ENV = "MFU_MAKE_STEP"
#: the versions whose change makes a report stale (the packages that compute the results)
JUDGED_VERSIONS = ("torch", "triton", "torch_npu")
#: argparse destinations that never change a result: where files are, how much is printed
NOT_SETTINGS = frozenset({"op_dir", "dir", "output_dir", "output", "keep_prof", "flops_tool", "peak_json", "html",
                          "plot", "quiet", "verbose", "q", "o", "from_json", "cache_dir"})
#: the marker of report.html's record: ``<!-- made_from {json} -->`` on its second line (:func:`html_record`)
HTML_MARK = "made_from"
#: the longest chain of reports judged through each other's records (verify.json -> performance.json -> decompose)
MAX_DEPTH = 4


@functools.lru_cache(maxsize=1)
def tool_identity() -> dict:
    """{version, content_sha256} of the tool: the package version and a sha256 over the relative path and bytes of
    every ``.py`` file under scripts/ (sorted), computed once per process (~300 files, a few ms)."""
    h = __import__("hashlib").sha256()
    for dirpath, dirs, files in os.walk(SCRIPTS_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, SCRIPTS_DIR).encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return {"version": __version__, "content_sha256": h.hexdigest()}


def _jsonable(value):
    """``value`` as it reads back from JSON (tuples become lists, objects their str), so records compare equal."""
    return json.loads(json.dumps(value, default=lambda o: sorted(o) if isinstance(o, (set, frozenset)) else str(o)))


def settings_of(args, drop=()) -> dict:
    """{option: value} of an argparse namespace (or a dataclass / dict) without :data:`NOT_SETTINGS` and ``drop``,
    sorted by name, values made JSON (a tuple becomes a list, an object its str)."""
    items = args if isinstance(args, dict) else vars(args) if hasattr(args, "__dict__") else \
        {k: getattr(args, k) for k in args.__dataclass_fields__}
    return {k: _jsonable(items[k]) for k in sorted(items) if k not in NOT_SETTINGS and k not in drop}


def made_from(base_dir: str, files, settings: dict, step: str | None = None) -> dict:
    """The ``made_from`` block of a report written in ``base_dir``: ``files`` (paths, absolute or relative to
    ``base_dir``; a missing one is recorded as None), ``settings`` (JSON values), ``by_make`` (true when
    ``$MFU_MAKE_STEP`` names ``step``), ``tool`` (:func:`tool_identity`)."""
    base = os.path.abspath(base_dir)
    rec = {}
    for p in files:
        if not p:
            continue
        full = p if os.path.isabs(p) else os.path.join(base, p)
        rec[os.path.relpath(os.path.abspath(full), base)] = sha256(full) if os.path.isfile(full) else None
    return {"files": rec, "settings": _jsonable(dict(settings)),
            "by_make": bool(step) and os.environ.get(MAKE_ENV) == step, "tool": tool_identity()}


def judge(doc: dict, base_dir: str, failed=None, _depth: int = 0) -> list:
    """The reasons the report ``doc`` (read from a file in ``base_dir``) is no longer current, each
    {file, why, refuse}: ``refuse`` True where the changed input is a failed step's report (``failed(path)``
    returns why it failed, else None; without ``failed`` nothing is refused). An empty list: current (or nothing
    recorded). ``why`` reads as a sentence ending, e.g. ``"verify.json changed since this report was made"``."""
    rec = doc.get(KEY) if isinstance(doc, dict) else None
    out = []
    if isinstance(doc, dict) and _depth == 0:
        now, then = versions(), doc.get("versions") or {}
        for name in JUDGED_VERSIONS:
            if then.get(name) and now.get(name) and then[name] != now[name]:
                out.append({"file": None, "why": f"made under {name} {then[name]}, now {now[name]}", "refuse": False})
    if not isinstance(rec, dict) or not isinstance(rec.get("files"), dict):
        return out
    for rel, digest in rec["files"].items():
        path = os.path.join(base_dir, rel)
        if digest is None:
            if os.path.exists(path):
                out.append({"file": rel, "why": f"{rel} appeared since this report was made", "refuse": False})
            continue
        if not os.path.isfile(path):
            out.append({"file": rel, "why": f"{rel} is gone since this report was made", "refuse": False})
            continue
        if sha256(path) != digest:
            bad = failed(path) if failed else None
            out.append({"file": rel, "refuse": bool(bad),
                        "why": f"{rel} changed since this report was made" + (f" and now records a failed step "
                                                                               f"({bad})" if bad else "")})
            continue
        if rel.endswith(".json") and _depth < MAX_DEPTH:
            try:
                with open(path, encoding="utf-8-sig") as f:
                    inner = json.load(f)
            except (OSError, ValueError):
                continue
            for issue in judge(inner, os.path.dirname(path), failed, _depth + 1):
                out.append({**issue, "why": f"{rel} is stale: {issue['why']}", "root": issue.get("root", issue["why"])})
    return out


def stale_reasons(issues) -> list:
    """The ``why`` texts of :func:`judge`'s issues (what a report's ``stale`` field and the screen show), each once,
    in the order found: one changed file reached through several reports is one reason, told by its shortest chain
    (``performance.json is stale: grid_search.json changed ...``, not also through mfu_decompose.json)."""
    best = {}
    for i in issues:
        root = i.get("root", i["why"])
        if root not in best or len(i["why"]) < len(best[root]):
            best[root] = i["why"]
    return list(dict.fromkeys(best[i.get("root", i["why"])] for i in issues))


def refusals(issues) -> list:
    """The ``why`` texts of the issues that refuse (a changed input that is a failed step's report), each once."""
    return list(dict.fromkeys(i["why"] for i in issues if i["refuse"]))


def html_record(path: str):
    """The ``made_from`` an HTML report recorded on its second line (``<!-- made_from {json} -->``), wrapped as a
    document for :func:`judge` ({"made_from": ...}); None when absent or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            f.readline()
            line = f.readline().strip()
    except (OSError, UnicodeDecodeError):
        return None
    prefix = f"<!-- {HTML_MARK} "
    if not (line.startswith(prefix) and line.endswith("-->")):
        return None
    try:
        return {KEY: json.loads(line[len(prefix):-3])}
    except ValueError:
        return None
