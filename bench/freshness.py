#!/usr/bin/env python3
"""Freshness by content: hashes of the measured tree, recorded with each pack, and whether a section's code changed.

A pack records, when it is measured, :func:`source_stamp`: ``tree_sha256`` (sha256 over the sorted relative paths
and bytes of every source file under :data:`ROOTS`, per root) and ``modules`` ({relative path: sha256 of the
file's *normalised* content}). The normalisation (:func:`normalised`) drops what moving a file changes and the
code does not: import statements, docstrings, comments, blank lines and the module's own path. So the house move
(64 flat modules into subpackages, every import line rewritten) leaves every module's hash as it was, and a file
found under another path with the same hash is the same code: renames are followed by matching hashes, not paths.

:func:`stale_modules` judges a section: each module it measures (path prefixes declared by ``bench/make_results.py``)
whose normalised hash today is not among the pack's hashes has changed since the pack. A pack older than these
hashes carries only ``git_commit``; :func:`pack_hashes` then computes the same hashes from ``git show
<commit>:<path>`` of that commit, and returns None (freshness unknown) when the commit is not in this clone - a CI
clone without the history is never an error.

The device copy's ``.git`` can be stale (two packs' commits were asserted by hand notes for that reason), so the
driver computes the tree hash before the device call and passes it as ``MFU_TREE_SHA256``; the device re-computes
it over the tree it runs and the pack records both and whether they agree.

  python3 bench/freshness.py                 # the measured tree's hash here (pass it as MFU_TREE_SHA256=...)
  python3 bench/freshness.py --stale PACK    # per stage of a pack directory: the measured modules changed since
"""
import argparse
import ast
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tokenize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the measured tree: the tool, the bundled operators (code and case files) and the bench drivers
ROOTS = ("scripts", "examples", "bench", "Makefile")
SOURCE_EXT = (".py", ".sh", ".json", ".jsonl")
SKIP_DIRS = ("bench/validation", "__pycache__")  # the packs themselves, byte-compiled files
SELF = "<self>"
#: version of :func:`normalised`; hashes recorded under another version are not compared (recomputed from git)
METHOD = 1
#: module hashes of the commits old packs name (they carry no hashes of their own), for clones without history
CACHE = os.path.join(ROOT, "bench", "validation", "source_hashes.json")
#: a library module named in a string (``mfulib.flops.contract``, ``scripts/mfulib/flops/contract.py``): a message
#: naming where a rule lives, rewritten by every move and measuring nothing
LIBRARY_PATH = re.compile(r"(?:scripts/)?\bmfulib(?:[./][A-Za-z_]\w*)*(?:\.py)?")
LIBRARY = "<mfulib>"


def is_source(rel):
    """Whether repository-relative path ``rel`` (``/``-separated) is a measured source file."""
    if rel == "Makefile":
        return True
    if not rel.startswith(tuple(r + "/" for r in ROOTS)) or any(s in rel.split("/") or rel.startswith(s + "/")
                                                                 for s in SKIP_DIRS):
        return False
    return rel.endswith(SOURCE_EXT)


def source_files(root=ROOT):
    """Sorted repository-relative paths of the measured sources under ``root`` (a checkout)."""
    out = []
    for top in ROOTS:
        path = os.path.join(root, top)
        if os.path.isfile(path):
            out.append(top)
            continue
        for d, dirs, files in os.walk(path):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for name in files:
                rel = os.path.relpath(os.path.join(d, name), root).replace(os.sep, "/")
                if is_source(rel):
                    out.append(rel)
    return sorted(out)


def _dropped_lines(text):
    """1-based line numbers of import statements and docstrings (module, class, function) in Python ``text``."""
    tree = ast.parse(text)
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            lines.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def _strip_comments(text):
    """``text`` without its comments (located by the tokenizer, so a ``#`` inside a string stays)."""
    lines = text.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
    return "\n".join(lines)


def normalised(rel, data):
    """The content of file ``rel`` (bytes ``data``) as hashed per module: for Python, without import statements,
    docstrings, comments, blank lines and trailing blanks, with the module's own path and dotted name replaced by
    ``<self>``; other files (and Python that does not parse) as they are."""
    if not rel.endswith(".py"):
        return data
    try:
        text = data.decode("utf-8")
        drop = _dropped_lines(text)
        kept = [line for i, line in enumerate(text.splitlines(), 1) if i not in drop]
        text = _strip_comments("\n".join(kept) + "\n")
    except (SyntaxError, UnicodeDecodeError, tokenize.TokenError, ValueError):
        return data
    mod = rel[:-3]
    names = {rel, rel.split("/", 1)[-1], mod.replace("/", "."), mod.split("/", 1)[-1].replace("/", ".")}
    for name in sorted(names, key=len, reverse=True):
        text = text.replace(name, SELF)
    text = LIBRARY_PATH.sub(LIBRARY, text)
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip()).encode("utf-8")


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def hashes(read, paths):
    """{"tree_sha256": {root: sha256 over sorted (path, bytes) of that root}, "modules": {path: normalised sha256}}
    for the files ``paths`` read by ``read(path) -> bytes``."""
    trees, modules = {}, {}
    for rel in sorted(paths):
        data = read(rel)
        top = rel.split("/", 1)[0]
        h = trees.setdefault(top, hashlib.sha256())
        h.update(rel.encode("utf-8") + b"\0" + str(len(data)).encode() + b"\0" + data)
        modules[rel] = sha256(normalised(rel, data))
    return {"tree_sha256": {k: v.hexdigest() for k, v in sorted(trees.items())}, "modules": modules}


def tree_hashes(root=ROOT):
    """:func:`hashes` of the checkout at ``root`` as it is on disk (never its ``.git``)."""
    def read(rel):
        with open(os.path.join(root, rel), "rb") as f:
            return f.read()
    return hashes(read, source_files(root))


def tree_digest(h):
    """One sha256 over the per-root tree hashes of :func:`hashes` (what ``MFU_TREE_SHA256`` carries)."""
    return sha256(json.dumps(h["tree_sha256"], sort_keys=True).encode())


def source_stamp(root=ROOT, expected=None):
    """What a pack records about the tree it measured: ``tree_sha256`` (one digest), ``tree_sha256_by_root``,
    ``modules`` (normalised hashes), and, when ``expected`` (or ``MFU_TREE_SHA256``) was computed before the device
    call, ``tree_sha256_expected`` and ``tree_matches_expected``."""
    h = tree_hashes(root)
    out = {"method": METHOD, "tree_sha256": tree_digest(h), "tree_sha256_by_root": h["tree_sha256"],
           "modules": h["modules"]}
    expected = expected if expected is not None else os.environ.get("MFU_TREE_SHA256")
    if expected:
        out.update(tree_sha256_expected=expected, tree_matches_expected=expected == out["tree_sha256"])
    return out


def _git(root, *args, **kw):
    return subprocess.run(["git", "-C", root, *args], capture_output=True, **kw)


def commit_hashes(commit, root=ROOT):
    """:func:`hashes` of the measured sources at ``commit`` (``git cat-file``, the same bytes as ``git show
    <commit>:<path>``; a symbolic link as the file it points to), or None when this clone lacks the commit (a shallow CI clone: freshness unknown)."""
    if not commit or _git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return None
    ls = _git(root, "ls-tree", "-r", commit)
    if ls.returncode != 0:
        return None
    entries = {}  # path -> (mode, object id); a symbolic link is read as the file it points to, as on disk
    for line in ls.stdout.decode().splitlines():
        meta, rel = line.split("\t", 1)
        mode, _, oid = meta.split()
        entries[rel] = (mode, oid)
    blobs = _blobs(root, [oid for _, oid in entries.values()])

    def read(rel, depth=0):
        mode, oid = entries[rel]
        if mode != "120000":
            return blobs[oid]
        target = os.path.normpath(os.path.join(os.path.dirname(rel), blobs[oid].decode())).replace(os.sep, "/")
        if target not in entries or depth > 8:
            raise SystemExit(f"error: {commit}:{rel} links to {target}, which that commit lacks")
        return read(target, depth + 1)
    return hashes(read, [p for p in entries if is_source(p)])


def _blobs(root, oids):
    """{object id: bytes} read in one ``git cat-file --batch`` (answers: "<oid> blob <size>\\n<bytes>\\n")."""
    out = _git(root, "cat-file", "--batch", input="".join(o + "\n" for o in oids).encode()).stdout
    blobs, pos = {}, 0
    while pos < len(out):
        nl = out.index(b"\n", pos)
        oid, _, size = out[pos:nl].split()
        blobs[oid.decode()] = out[nl + 1:nl + 1 + int(size)]
        pos = nl + 2 + int(size)
    return blobs


def _cache(cache_path=CACHE):
    """The committed cache's document when it holds hashes of this :data:`METHOD`, else {} (absent, unreadable or
    of another method)."""
    try:
        with open(cache_path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    return doc if doc.get("method") == METHOD else {}


def cached_commit_modules(commit, cache_path=CACHE):
    """{path: normalised hash} of ``commit`` from the committed cache (written by ``--cache``), else None."""
    for key, mods in (_cache(cache_path).get("commits") or {}).items():
        if commit and (key.startswith(commit) or commit.startswith(key)):
            return mods
    return None


def pack_hashes(stage, root=ROOT, cache_path=CACHE):
    """The normalised module hashes of the tree a packed stage (or batch call) measured, or None (freshness
    unknown): the pack's own ``source.modules``, else those of its ``git_commit`` from the cache or from git."""
    src = (stage or {}).get("source") or {}
    if src.get("modules") and src.get("method") == METHOD:
        return src["modules"]
    commit = (stage or {}).get("git_commit")
    mods = cached_commit_modules(commit, cache_path)
    if mods is None:
        h = commit_hashes(commit, root)
        mods = None if h is None else h["modules"]
    return mods


def tree_modules(tree, cache_path=CACHE):
    """{path: normalised hash} of the measured tree whose :func:`tree_digest` is ``tree`` (what a resumed pack's part
    records as the tree that measured it), from the committed cache (``--cache-trees``), else None (unknown)."""
    commit = (_cache(cache_path).get("trees") or {}).get(tree)
    return cached_commit_modules(commit, cache_path) if commit else None


def find_tree_commits(trees, root=ROOT, depth=400):
    """{tree digest: commit} for the digests ``trees`` found among the last ``depth`` commits of HEAD (each commit's
    measured sources hashed from git, newest first); digests not found are left out."""
    want, found = set(trees) - {None}, {}
    log = _git(root, "log", "--format=%H", f"-{depth}", text=True)
    for c in (log.stdout.split() if log.returncode == 0 else []):
        if not want - set(found):
            break
        h = commit_hashes(c, root)
        d = h and tree_digest(h)
        if d in want and d not in found:
            found[d] = c
    return found


def write_cache(commits, root=ROOT, cache_path=CACHE, trees=None):
    """Compute (from git) the module hashes of ``commits`` and write them to the cache, so that a clone without
    those commits still judges the packs that carry only a commit; ``trees`` ({tree digest: commit}, the commits
    included) is merged into the cache's ``trees`` map (:func:`tree_modules`). Returns the commits written."""
    doc = _cache(cache_path)
    have, have_trees = doc.get("commits") or {}, dict(doc.get("trees") or {}, **(trees or {}))
    for c in sorted(set(commits) | set((trees or {}).values())):
        h = commit_hashes(c, root)
        if h is None:
            raise SystemExit(f"error: commit {c} is not in this clone; run --cache in a full clone")
        have[c] = h["modules"]
    doc = {"about": "normalised module hashes (bench/freshness.py) of the commits that packs without a 'source' "
                    "record name, and the commit of each measured tree a resumed pack's parts name; computed from "
                    "git by `python3 bench/freshness.py --cache / --cache-trees`, never typed",
           "method": METHOD, "commits": dict(sorted(have.items())), "trees": dict(sorted(have_trees.items()))}
    with open(cache_path + ".tmp", "w") as f:
        json.dump(doc, f, indent=0, sort_keys=True)
        f.write("\n")
    os.replace(cache_path + ".tmp", cache_path)
    return sorted(have)


#: where the tool's library lives (``scripts/mfulib``): :func:`import_closure` follows imports of it
LIBRARY_ROOT = "scripts"


def _module_file(name, root):
    """Repository-relative path of module ``name`` (dotted) under :data:`LIBRARY_ROOT`, a package's ``__init__.py``;
    None when it is not a file of this checkout (the standard library, torch, ...)."""
    base = os.path.join(root, LIBRARY_ROOT, *name.split("."))
    for path in (os.path.join(base, "__init__.py"), base + ".py"):
        if os.path.isfile(path):
            return os.path.relpath(path, root).replace(os.sep, "/")
    return None


def imported_names(path, package):
    """Dotted names the Python file ``path`` imports anywhere in its code (module level and inside functions, where
    the tool imports lazily): ``import a.b`` gives a.b; ``from P import x`` gives P and P.x (x may be a submodule);
    a relative import is resolved from ``package`` (the parts of the module's own package - a package's
    ``__init__``: the package itself). Raises OSError / SyntaxError for an unreadable file."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = list(package)[:len(package) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def import_closure(entry, root=ROOT):
    """Sorted repository-relative paths of every library module (under :data:`LIBRARY_ROOT`) that script ``entry``
    (repository-relative) imports, directly or through other library modules, at any depth and wherever the import
    statement stands - what the script's results can depend on besides itself. Every package on the way is included
    (importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py``). Static: an import by a computed name
    (``importlib.import_module(f"...")``) is not seen - a test imports the closure and checks that nothing outside
    it was loaded. Raises OSError / SyntaxError for an unreadable entry."""
    seen, todo = set(), [entry]
    while todo:
        rel = todo.pop()
        package = rel[len(LIBRARY_ROOT) + 1:-3].split("/")[:-1] if rel.startswith(LIBRARY_ROOT + "/") else []
        for name in imported_names(os.path.join(root, rel), package):
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                rel = _module_file(".".join(parts[:i]), root)
                if rel and rel not in seen:
                    seen.add(rel)
                    todo.append(rel)
    return sorted(seen)


def stale_modules(measured, then, now, exclude=()):
    """Paths of ``now`` ({path: hash}) under the prefixes ``measured``, except those in ``exclude``, whose hash is
    not among ``then``'s values (changed or new since the pack; a moved file with the same normalised content is
    not stale), sorted."""
    old = set(then.values())
    return sorted(p for p, h in now.items() if p.startswith(tuple(measured)) and p not in exclude and h not in old)


def pack_commits(pack_dirs):
    """The commits named by the packs (stages and batch calls) in ``pack_dirs`` that record no source hashes."""
    out = set()
    for d in pack_dirs:
        for name in sorted(os.listdir(d)):
            if name.endswith(".json"):
                with open(os.path.join(d, name)) as f:
                    doc = json.load(f)
                runs = [doc] + list(((doc.get("result") or {}) if isinstance(doc.get("result"), dict) else {})
                                    .get("calls") or [])
                out.update(r["git_commit"] for r in runs if r.get("git_commit") and not (r.get("source") or {})
                           .get("modules"))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=ROOT, help="checkout to hash (default: this one)")
    p.add_argument("--commit", help="hash the measured sources of this commit (git show) instead of the files")
    p.add_argument("--cache", metavar="PACK_DIR", action="append", help="write bench/validation/source_hashes.json "
                   "for the commits of PACK_DIR's packs that record no source hashes (repeatable)")
    p.add_argument("--cache-trees", metavar="PACK_JSON", action="append", help="write into the cache the commit "
                   "(found in git history) and module hashes of each tree that PACK_JSON's referee operators name "
                   "as the trees of their parts (repeatable)")
    args = p.parse_args(argv)
    if args.cache_trees:
        trees = set()
        for path in args.cache_trees:
            with open(path) as f:
                for op in ((json.load(f).get("result") or {}).get("ops") or []):
                    trees.update(op.get("trees") or [])
        found = find_tree_commits(trees, args.root)
        write_cache([], args.root, trees=found)
        for t in sorted(trees - set(found)):
            print(f"note: tree {t[:12]}: no commit in the last 400 has it (left unknown)")
        print(f"wrote {CACHE}: {len(found)} trees")
        return 0
    if args.cache:
        done = write_cache(sorted(pack_commits(args.cache)), args.root)
        print(f"wrote {CACHE}: {len(done)} commits")
        return 0
    h = commit_hashes(args.commit, args.root) if args.commit else tree_hashes(args.root)
    if h is None:
        print(f"error: commit {args.commit} is not in this clone", file=sys.stderr)
        return 2
    print(tree_digest(h))
    return 0


if __name__ == "__main__":
    sys.exit(main())
