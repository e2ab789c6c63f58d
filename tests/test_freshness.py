"""bench/freshness.py: content hashes that follow moves, and a pack's hashes read from git when it records none.

* a module moved into a subpackage whose only change is its import lines (and the paths it names) keeps its hash;
  a changed line of code changes it;
* hashes computed from ``git show`` of a commit equal those of the same files on disk (symbolic links read as their
  target), a commit this clone lacks gives None (freshness unknown), and the house move of this repository
  (64 flat modules into subpackages) alone makes no module stale.
"""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import freshness  # noqa: E402

FLAT = b'''"""Old home: mfulib/calib.py."""
from .errors import UserError
from . import gemm_timing


def peak(x):
    # the best of three
    if x <= 0:
        raise UserError("see mfulib.calib.peak")
    return max(gemm_timing.run(x) for _ in range(3))
'''
MOVED = b'''"""New home: mfulib/peaks/calib.py, one concept."""
from ..core.errors import UserError
from . import (
    gemm_timing,
)


def peak(x):
    if x <= 0:
        raise UserError("see mfulib.peaks.calib.peak")  # moved
    return max(gemm_timing.run(x) for _ in range(3))
'''
CHANGED = MOVED.replace(b"range(3)", b"range(5)")


def h(rel, data):
    return freshness.sha256(freshness.normalised(rel, data))


def test_a_move_that_rewrites_only_imports_and_paths_keeps_the_hash_and_a_code_change_does_not():
    old = h("scripts/mfulib/calib.py", FLAT)
    assert h("scripts/mfulib/peaks/calib.py", MOVED) == old
    assert h("scripts/mfulib/peaks/calib.py", CHANGED) != old
    then = {"scripts/mfulib/calib.py": old}
    now = {"scripts/mfulib/peaks/calib.py": h("scripts/mfulib/peaks/calib.py", MOVED),
           "scripts/mfulib/peaks/new.py": h("scripts/mfulib/peaks/new.py", b"X = 1\n"),
           "bench/other.py": "0" * 64}
    assert freshness.stale_modules(["scripts/"], then, now) == ["scripts/mfulib/peaks/new.py"]  # new code counts
    assert freshness.stale_modules(["scripts/"], then, now, exclude=("scripts/mfulib/peaks/new.py",)) == []
    assert h("Makefile", b"a:\n\tb\n") != h("Makefile", b"a:\n\tc\n")  # other files by their bytes


def _git(cwd, *args):
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def test_hashes_from_git_equal_the_files_and_a_missing_commit_is_unknown(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts" / "mfulib").mkdir(parents=True)
    (repo / "examples").mkdir()
    (repo / "scripts" / "mfulib" / "calib.py").write_bytes(FLAT)
    (repo / "examples" / "op.py").write_bytes(b"def f():\n    return 1\n")
    os.symlink("op.py", repo / "examples" / "op_link.py")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "flat")
    first = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    disk = freshness.tree_hashes(str(repo))
    git = freshness.commit_hashes(first, str(repo))
    assert git == disk and disk["modules"]["examples/op_link.py"] == disk["modules"]["examples/op.py"]
    (repo / "scripts" / "mfulib" / "calib.py").unlink()
    (repo / "scripts" / "mfulib" / "peaks").mkdir()
    (repo / "scripts" / "mfulib" / "peaks" / "calib.py").write_bytes(MOVED)
    now = freshness.tree_hashes(str(repo))
    assert now["tree_sha256"] != disk["tree_sha256"]  # the tree hash is of bytes: a move changes it
    assert freshness.stale_modules(["scripts/"], git["modules"], now["modules"]) == []
    assert freshness.pack_hashes({"git_commit": first}, str(repo), cache_path=str(tmp_path / "none.json")) == \
        git["modules"]
    assert freshness.commit_hashes("f" * 40, str(repo)) is None
    assert freshness.pack_hashes({"git_commit": "f" * 40}, str(repo), cache_path=str(tmp_path / "none.json")) is None


def test_the_house_move_alone_makes_no_module_stale():
    """This repository's move of 64 flat modules into subpackages (commit 4cf69ad): every moved module matches its
    old self by content; only mfulib/__init__.py (the old-name table it added) differs."""
    before, after = freshness.commit_hashes("4cf69ad^"), freshness.commit_hashes("4cf69ad")
    if before is None or after is None:
        pytest.skip("commit 4cf69ad is not in this clone")
    moved = [p for p in after["modules"] if p.startswith("scripts/mfulib/") and p not in before["modules"]]
    assert len(moved) >= 60  # the move happened in this commit
    assert freshness.stale_modules(["scripts/"], before["modules"], after["modules"]) == ["scripts/mfulib/__init__.py"]


def test_source_stamp_records_whether_the_tree_matches_the_hash_computed_before_the_call(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "a.py").write_bytes(b"X = 1\n")
    digest = freshness.tree_digest(freshness.tree_hashes(str(tmp_path)))
    assert freshness.source_stamp(str(tmp_path), expected=digest)["tree_matches_expected"] is True
    (tmp_path / "scripts" / "a.py").write_bytes(b"X = 2\n")
    st = freshness.source_stamp(str(tmp_path), expected=digest)
    assert st["tree_matches_expected"] is False and st["tree_sha256"] != digest
