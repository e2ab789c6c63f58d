"""The Makefile drives the whole pipeline on a CPU machine (as CI runs it): `make OP=<bundled op> all`."""
import json
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def make(*args, env=None):
    return subprocess.run(["make", "-C", ROOT, *args], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, **(env or {})))


def test_make_all_runs_the_mha_block_end_to_end_on_cpu(tmp_path):
    work = tmp_path / "mha"
    r = make("OP=5_MHABlock", f"WORK={work}", "BACKEND=cpu", "all", env={"MFU_PEAK_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for name in ("prepare.json", "verify.json", "flops_check.json", "performance.json", "peak.json",
                 "mfu_decompose.json"):
        assert (work / name).exists(), name
    dec = json.loads((work / "mfu_decompose.json").read_text())
    rows = [r for r in dec["reports"][0]["rows"] if r["status"] == "ok"]
    skipped = [r for r in dec["reports"][0]["rows"] if r["status"] == "skipped"]
    assert len(rows) == 3 and all("bfloat16" in r["reason"] for r in skipped)  # cpu: the 3 smallest, bf16 skipped
    assert {p["part"] for r in rows for p in r["parts"]} >= {"attn", "proj"}
    # nothing changed: a second run redoes nothing
    again = make("OP=5_MHABlock", f"WORK={work}", "BACKEND=cpu", "all")
    assert "Nothing to be done" in again.stdout


def test_make_prepare_layout_b_and_a_bad_backend(tmp_path):
    bench, gen = os.path.join(ROOT, "examples/ops/bench/zoo"), os.path.join(ROOT, "examples/ops/gen/zoo")
    r = make("OP=2_Softmax", f"BENCH={bench}", f"GEN={gen}", f"WORK={tmp_path / 'sm'}", "prepare")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "sm" / "prepare.json").read_text())["layout"] == "B"
    bad = make("OP=2_Softmax", "BACKEND=tpu", "prepare")
    assert bad.returncode != 0 and "BACKEND=tpu is not one of" in bad.stderr
