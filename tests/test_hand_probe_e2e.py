"""SKILL.md step 2 run by hand (``max_shape_probe.py --dir <work>``) where make never ran the probe: it counts as
make's probe step only with the settings make's command line would use (the Makefile's PROBE_CMD with PROBE_ARGS),
else ``make status`` shows it not done and names the setting that differs. On a copy of the session's
``make OP=5_MHABlock all`` (tests/pipelines.py), which runs no probe."""
import os
import shutil
import subprocess
import sys

import pytest

from pipelines import SCRIPTS, copy_work, pipeline_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")]
# a budget the tiny probe never reaches even on a loaded 2-core CI machine (30 s was cut there once: the row then
# reads "failed ... incomplete", not the settings verdict this test is about); it finishes in seconds otherwise
TINY = ["--cases", "0", "--max-scale", "2", "--budget-s", "240"]


def make(work, *args, **env):
    return subprocess.run(["make", "-C", ROOT, "OP=5_MHABlock", f"WORK={work}", *args], capture_output=True,
                          text=True, timeout=300, env=pipeline_env(**env))


def probe_row(work, **env) -> str:
    """`make status`'s probe line with the detail lines it wraps onto."""
    out, on = [], False
    for line in make(work, "status", **env).stdout.splitlines():
        words = line.split()
        if words[:1] == ["probe"]:
            on = True
        elif words and not line.startswith(" "):
            on = False
        if on:
            out += words
    return " ".join(out)


def hand_probe(work, **env):
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, "max_shape_probe.py"), "--dir", work, *TINY],
                       cwd=ROOT, capture_output=True, text=True, timeout=600, env=pipeline_env(**env))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def test_a_hand_run_probe_counts_as_makes_only_with_makes_settings(mha_all_checkout, tmp_path):
    work = copy_work(os.path.join(mha_all_checkout, "work", "5_MHABlock"), tmp_path / "mha")
    stamp = os.path.join(work, ".state", "probe.ok")
    # make's PROBE_ARGS is empty here: --max-scale 64 and no --cases / --budget-s - the tiny run is another run
    out = hand_probe(work)
    assert "other settings or inputs than make's" in out and "max_scale 64 -> 2" in out, out
    assert not os.path.exists(stamp)
    row = probe_row(work)
    assert " not done " in f" {row} " and "max_scale 64 -> 2" in row, row
    # the same run with make's PROBE_ARGS (the environment make reads too): make's probe step, done
    out = hand_probe(work, PROBE_ARGS=" ".join(TINY))
    assert "counts as make's probe step" in out, out
    assert os.path.exists(stamp)
    with open(os.path.join(work, ".state", "probe.settings"), encoding="utf-8") as f:
        assert f"PROBE_ARGS={' '.join(TINY)}\n" in f.read()
    assert make(work, "-q", f"{work}/.state/probe.ok", PROBE_ARGS=" ".join(TINY)).returncode == 0
    row = probe_row(work)  # PROBE_ARGS not given: the recorded one is kept (sticky)
    assert row.split()[1] == "done", row
    # another PROBE_ARGS on make's command line redoes it
    assert make(work, "-q", f"{work}/.state/probe.ok", "PROBE_ARGS=--max-scale 4").returncode == 1
