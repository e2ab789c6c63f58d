"""Round trip (issue 28 item 6): after ``make collect`` (its rule keeps the raw profiles under ``<work>/prof``),
``--from-prof <work>/prof --op-dir <work> --output-dir <elsewhere>`` gives the live collection's per-case kernel times
and flags. Reads the session's ``make OP=5_MHABlock all`` on the CPU (tests/pipelines.py), copied."""
import json
import os
import subprocess
import sys

import pytest

from pipelines import copy_work

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTOR = os.path.join(ROOT, "scripts", "ops_profiling", "msprof_perf_summary.py")


@pytest.mark.e2e
def test_make_collects_kept_profile_reparses_to_the_same_times_and_flags(mha_all_checkout, tmp_path):
    work = copy_work(os.path.join(mha_all_checkout, "work", "5_MHABlock"), tmp_path / "mha")
    out = tmp_path / "elsewhere"
    r = subprocess.run([sys.executable, COLLECTOR, "--from-prof", os.path.join(work, "prof"), "--op-dir", work,
                        "--output-dir", str(out), "--mfu"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    live = json.load(open(os.path.join(work, "performance.json")))
    again = json.load(open(out / "performance.json"))
    measured = {c["case"]: c for c in live["per_case"] if not c.get("skipped")}
    got = {c["case"]: c for c in again["per_case"]}
    assert len(measured) == 3 and set(got) == set(measured)  # cpu: the 3 smallest cases, each kept and re-read
    assert again["timing_method"] == live["timing_method"]
    for cid, c in measured.items():
        g = got[cid]
        assert g["from_profile"]["asc"]["format"] == "kept chrome_trace_cpu"
        assert g["kernel_time_ns"] == c["kernel_time_ns"] and g["iter_kernel_time_ns"] == c["iter_kernel_time_ns"]
        assert g["sequence"] == c["sequence"] and g["flags"] == c["flags"]
        assert g["flops"] == c["flops"] and g["numerator"] == c["numerator"] == "checked"
        assert g["output_bytes"] == c["output_bytes"] and g["mfu_nom"] == c["mfu_nom"]
        assert g["ncu_replay"] is None and c.get("ncu_replay") is None
