"""A keep dir that several collections wrote into (``--keep-prof``): ``prof/runs.json`` records which run kept each
profile, ``--from-prof`` reads the latest run only (saying so, listing what it ignored), ``--all-runs`` reads every
current folder (runs mixed, labelled), an older profile a new run replaces is moved aside rather than deleted, a keep
dir without the index warns, and kept profiles of cases no longer in the case file are refused by name.

Fast tier: the collections run in-process on the CPU backend (tests/fake_msprof/tinyops.py's two-kernel operator)."""
import json
import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_msprof"))
import tinyops  # noqa: E402

from mfulib.collect import from_prof as profiles  # noqa: E402
from mfulib.core.errors import UserError  # noqa: E402


def _collect(work, cases):
    from mfulib.collect.driver import Options, collect
    return collect(Options(op_dir=work, output_dir=work, impl="asc", backend="cpu", cases=cases, warmup=1, repeats=2,
                           keep_prof=work, progress=False, unverified_ok=True), log=lambda m: None)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A work dir whose keep dir holds two collections: cases [0, 1], then case 1 again. A copy per test."""
    root = tmp_path_factory.mktemp("keepdir")
    work = tinyops.make_workdir(root)
    first = _collect(work, [0, 1])
    second = _collect(work, [1])
    return work, first, second


@pytest.fixture
def work(two_runs, tmp_path):
    dst = str(tmp_path / "work")
    shutil.copytree(two_runs[0], dst, symlinks=True)
    return dst


def _runs(work):
    with open(os.path.join(work, "prof", "runs.json")) as f:
        return json.load(f)["runs"]


def _reparse(tmp_path, work, logs=None, **kw):
    opts = profiles.FromProfOptions(paths=[os.path.join(work, "prof")], output_dir=str(tmp_path / "out"), **kw)
    return profiles.from_prof(opts, log=logs.append if logs is not None else None)


def test_each_collection_is_one_indexed_run_and_the_replaced_profile_is_kept_aside(work, two_runs):
    runs = _runs(work)
    assert len(runs) == 2 and runs[0]["run_id"] != runs[1]["run_id"]
    assert sorted((p["case"], p["impl"]) for p in runs[0]["profiles"]) == [(0, "asc"), (1, "asc")]
    assert [(p["case"], p["folder"]) for p in runs[1]["profiles"]] == [(1, "case1_asc")]
    assert runs[1]["case_file"].endswith(".jsonl") and len(runs[1]["case_file_sha256"]) == 64
    moved = [p["folder"] for p in runs[0]["profiles"] if p["case"] == 1][0]
    assert moved == os.path.join("older", runs[0]["run_id"], "case1_asc")  # not deleted: moved, its entry follows
    assert os.path.isfile(os.path.join(work, "prof", moved, "spec.json"))
    assert two_runs[2]["per_case"][0]["asc_prof_dir"] == os.path.join("prof", "case1_asc")


def test_from_prof_on_a_keep_dir_reads_the_latest_run_only_and_lists_what_it_ignored(work, tmp_path, two_runs):
    logs = []
    rep = _reparse(tmp_path, work, logs, op_dir=work)
    runs = _runs(work)
    assert [c["case"] for c in rep["per_case"]] == [1]
    assert rep["per_case"][0]["kernel_time_ns"] == two_runs[2]["per_case"][0]["kernel_time_ns"]
    info = rep["from_prof"]["kept_runs"][0]
    assert info["mode"] == "latest" and info["run_id"] == runs[1]["run_id"]
    old = runs[0]["run_id"]  # the first run's both profiles: case 0 where it was, case 1 moved aside
    assert sorted(i["folder"] for i in info["ignored"]) == ["case0_asc", os.path.join("older", old, "case1_asc")]
    assert {i["run_id"] for i in info["ignored"]} == {old}
    assert any(f"latest run {runs[1]['run_id']}" in m and "case0_asc" in m and "--all-runs" in m for m in logs)
    assert [p["path"] for p in rep["from_prof"]["profiles"]] == [os.path.join(work, "prof", "case1_asc")]


def test_all_runs_reads_every_current_folder_and_says_runs_are_mixed(work, tmp_path, two_runs):
    rep = _reparse(tmp_path, work, op_dir=work, all_runs=True)
    assert [c["case"] for c in rep["per_case"]] == [0, 1]
    assert rep["per_case"][0]["kernel_time_ns"] == two_runs[1]["per_case"][[c["case"] for c in
                                                                             two_runs[1]["per_case"]].index(0)][
        "kernel_time_ns"]
    assert rep["from_prof"]["kept_runs"][0]["mode"] == "all-runs"
    assert any("--all-runs" in f and "mixed" in f for f in rep["flags"])


def test_a_keep_dir_without_the_index_reads_every_folder_with_a_warning(work, tmp_path):
    os.remove(os.path.join(work, "prof", "runs.json"))
    logs = []
    rep = _reparse(tmp_path, work, logs, op_dir=work)
    assert [c["case"] for c in rep["per_case"]] == [0, 1]
    assert rep["from_prof"]["kept_runs"][0]["mode"] == "unindexed"
    assert any("no runs.json" in f and "mixed" in f for f in rep["flags"])
    assert any(m.startswith("warning: ") and "may be mixed" in m for m in logs)


def test_kept_profiles_of_cases_gone_from_the_case_file_are_refused_by_name(work, tmp_path):
    from mfulib.core.opdir import OpDir
    path = OpDir(work).cases_path
    with open(path) as f:
        lines = f.readlines()
    with open(path, "w") as f:
        f.writelines(lines[:1])  # only case 0 is left: the latest run's case 1 is gone
    with pytest.raises(UserError, match=r"case1_asc \(case 1\)"):
        _reparse(tmp_path, work, op_dir=work)


def test_a_changed_case_file_is_flagged(work, tmp_path):
    from mfulib.core.opdir import OpDir
    path = OpDir(work).cases_path
    with open(path) as f:
        lines = f.readlines()
    with open(path, "w") as f:
        f.writelines(lines + lines[:1])  # case 1 still exists, but the file is not the one the run recorded
    rep = _reparse(tmp_path, work, op_dir=work)
    assert any("changed since run" in f for f in rep["flags"])


def test_all_runs_is_refused_without_from_prof(tmp_path):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "ops_profiling"))
    import msprof_perf_summary
    with pytest.raises(UserError, match="--all-runs"):
        msprof_perf_summary.main(["--output-dir", str(tmp_path), "--all-runs"])
