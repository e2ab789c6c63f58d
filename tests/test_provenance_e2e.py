"""Reports that record what they were made from, through make and through SKILL.md's hand-run commands, on copies
of the session's ``make OP=5_MHABlock all`` (tests/pipelines.py): an edit after a run marks the reports stale, a
failed verify makes the hand-run decomposition refuse, a hand-run step with make's settings counts as make's."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from pipelines import SCRIPTS, copy_work, pipeline_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")]


def make(work, *args):
    return subprocess.run(["make", "-C", ROOT, "OP=5_MHABlock", f"WORK={work}", *args], capture_output=True,
                          text=True, timeout=900, env=pipeline_env())


def script(work, name, *args):
    return subprocess.run([sys.executable, os.path.join(SCRIPTS, name), *args], cwd=work, capture_output=True,
                          text=True, timeout=900, env=pipeline_env())


def status_rows(work) -> dict:
    """{step: its line, with the detail lines `make status` wraps it onto (step column blank) joined to it}."""
    out, last = {}, None
    for line in make(work, "status").stdout.splitlines():
        words = line.split()
        if words[:1] and words[0] in ("verify", "flops", "collect", "peak", "decompose", "report.html:"):
            out[words[0]], last = line, words[0]
        elif last and line.startswith(" ") and words:
            out[last] += " " + " ".join(words)
        else:
            last = None
    return out


@pytest.fixture
def mha(mha_all_checkout, tmp_path):
    return copy_work(os.path.join(mha_all_checkout, "work", "5_MHABlock"), tmp_path / "mha")


def test_an_edit_after_a_run_marks_the_reports_stale_on_screen_in_json_html_and_status(mha):
    rows = status_rows(mha)
    assert all(" done " in rows[s] for s in ("verify", "collect", "decompose")), rows
    with open(os.path.join(mha, "model_new.py"), "a", encoding="utf-8") as f:
        f.write("\n# an edit after the run\n")
    rows = status_rows(mha)
    assert " stale " in rows["collect"] and "model_new.py changed since this report was made" in rows["collect"]
    assert rows["collect"].count("model_new.py changed") == 1, rows["collect"]  # by content, not also by file time
    assert " stale " in rows["decompose"] and "report.html:" in rows
    # SKILL.md step 6 by hand: the table is printed from the earlier measurement, marked STALE everywhere
    r = script(mha, "mfu_decompose.py", "--op-dir", ".", "--peak-json", "peak.json")
    assert r.returncode == 0, r.stderr
    flat = " ".join(r.stdout.split())  # the warning wraps where the temporary path's length puts it
    assert "STALE" in r.stdout + r.stderr and "model_new.py changed since this report was made" in flat, \
        r.stdout[-3000:]
    doc = json.load(open(os.path.join(mha, "mfu_decompose.json"), encoding="utf-8"))
    assert any("model_new.py changed" in s for s in doc["stale"]) and doc["reports"][0]["stale"]
    r = script(mha, "mfu_decompose.py", "--op-dir", ".", "--from-json", "--html", "report.html")
    assert r.returncode == 0 and "STALE" in r.stderr
    assert "STALE:" in open(os.path.join(mha, "report.html"), encoding="utf-8").read()


def test_a_failed_verify_after_an_edit_makes_the_hand_run_decomposition_refuse(mha):
    path = os.path.join(mha, "model_new.py")
    text = open(path, encoding="utf-8").read()
    at = text.rfind("return ")
    with open(path, "w", encoding="utf-8") as f:  # every output doubled: verify fails every case
        f.write(text[:at] + text[at:].replace("return ", "return 2 * ", 1))
    assert make(mha, "verify").returncode != 0
    before = open(os.path.join(mha, "mfu_decompose.json"), encoding="utf-8").read()
    r = script(mha, "mfu_decompose.py", "--op-dir", ".", "--peak-json", "peak.json")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "verify.json changed since this report was made and now records a failed step" in " ".join(r.stderr.split())
    assert open(os.path.join(mha, "mfu_decompose.json"), encoding="utf-8").read() == before  # nothing written
    # an earlier round given as --report is judged against its own inputs: marked, not refused
    r = script(mha, "mfu_decompose.py", "--op-dir", ".", "--peak-json", "peak.json", "--no-current", "--report",
               "old=performance.json", "-o", "old_decompose.json")
    assert r.returncode == 0 and "STALE" in r.stdout, r.stdout + r.stderr


def test_a_hand_run_collection_with_makes_settings_counts_as_makes(mha):
    # SKILL.md step 4 with make's flags (the Makefile's PMU=none, not the script's --pmu auto): the same cases and
    # inputs -> still "done"
    r = script(mha, os.path.join("ops_profiling", "msprof_perf_summary.py"), "--quick", "--mfu", "--impl", "asc",
               "--output-dir", ".", "--keep-prof", ".", "--seed", "0", "--pmu", "none", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "counts as make's collect step" in " ".join((r.stdout + r.stderr).split())
    assert " done " in status_rows(mha)["collect"]
    # another case choice by hand: not make's - not done, and make redoes the step
    r = script(mha, os.path.join("ops_profiling", "msprof_perf_summary.py"), "--quick", "--mfu", "--impl", "asc",
               "--output-dir", ".", "--cases", "0", "--quiet")
    assert r.returncode == 0 and "make redoes it" in " ".join((r.stdout + r.stderr).split())
    row = status_rows(mha)["collect"]
    assert " not done " in row and "other settings" in row, row
