"""verify_op.py: a case that crashes the process or hangs is recorded, and the other cases still run."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_msprof"))
import tinyops  # noqa: E402

pytestmark = pytest.mark.e2e  # every test runs verify_op.py, which runs each case in a child process
VERIFY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "verify_op.py")


def run_verify(work, *extra):
    r = subprocess.run([sys.executable, VERIFY, "--op-dir", work, "--backend", "cpu", *extra],
                       capture_output=True, text=True, timeout=300)
    return r, json.load(open(os.path.join(work, "verify.json"))) if os.path.exists(os.path.join(work, "verify.json")) else None


def test_an_aborting_case_is_recorded_as_crashed_and_the_others_pass(tmp_path):
    work = tinyops.make_workdir(tmp_path, variant="crash1024")  # case 1 (1024 elements) calls os.abort()
    r, v = run_verify(work, "--cases", "0,1,2")
    assert r.returncode == 1
    status = {c["case"]: c["status"] for c in v["cases"]}
    assert status == {0: "pass", 1: "crashed", 2: "pass"}
    assert "exit status" in v["cases"][1]["reason"]


def test_a_hanging_case_times_out_and_the_next_case_still_runs(tmp_path):
    work = tinyops.make_workdir(tmp_path, variant="hang1024")
    r, v = run_verify(work, "--cases", "1,4", "--case-timeout-s", "12")  # > a case child's start
    status = {c["case"]: c["status"] for c in v["cases"]}
    assert status == {1: "timeout", 4: "pass"} and r.returncode == 1


def test_an_empty_case_range_is_refused_and_keeps_the_previous_result(tmp_path):
    work = tinyops.make_workdir(tmp_path)
    r, v = run_verify(work, "--cases", "0")
    assert r.returncode == 0 and [c["case"] for c in v["cases"]] == [0]
    r, v2 = run_verify(work, "--cases", "5-3")
    assert r.returncode == 2 and "5-3" in r.stderr and v2 == v
