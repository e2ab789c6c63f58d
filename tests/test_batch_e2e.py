"""make batch over real bundled operators on CPU, in two layouts (B: BENCH+GEN with a planted failure; A: a ROOT of
op_<Op>_<time> dirs), and the same layout-A batch with RUNNER=ray on a local Ray instance.

Kept to three full pipeline runs of the cheapest bundled operator (zoo/3_RMSNorm) plus one planted failure: the
three batches run once per module, at the same time, and every test reads their results.
"""
import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = os.path.join(ROOT, "scripts", "mfu_batch.py")
ZOO_BENCH, ZOO_GEN = (os.path.join(ROOT, "examples", "ops", d, "zoo") for d in ("bench", "gen"))
pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")]

PLANTED = '''import torch


class ModelNew(torch.nn.Module):
    """Planted failure for tests/test_batch_e2e.py: every forward raises."""

    def forward(self, *inputs):
        raise RuntimeError("planted failure")
'''


def start(out, *args, env=None):
    """Start one batch (the three run at once: the fixture's wall time is the slowest one's on a multi-core host)."""
    cmd = [sys.executable, BATCH, "--out", str(out), "--backend", "cpu", "--no-progress", *args]
    return out, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=dict(os.environ, **(env or {})))


def finish(started):
    out, proc = started
    stdout, stderr = proc.communicate(timeout=900)
    path = out / "batch_summary.json"
    r = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return r, (json.loads(path.read_text()) if path.exists() else None)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batch")
    env = {"MFU_PEAK_CACHE_DIR": str(tmp / "cache")}
    bench, gen = tmp / "bench", tmp / "gen"  # layout B: RMSNorm; 9_Planted = RMSNorm with a raising kernel;
    bench.mkdir()                              # 2_Softmax without any kernel (skipped)
    gen.mkdir()
    for f in ("3_RMSNorm.py", "3_RMSNorm.json", "3_RMSNorm_flops.py", "2_Softmax.py", "2_Softmax.json"):
        shutil.copy(os.path.join(ZOO_BENCH, f), bench)
    for suffix in (".py", ".json", "_flops.py"):  # the reference reads its case file by a hard-coded name
        text = open(os.path.join(ZOO_BENCH, "3_RMSNorm" + suffix)).read()
        (bench / f"9_Planted{suffix}").write_text(text.replace('"3_RMSNorm.json"', '"9_Planted.json"'))
    shutil.copy(os.path.join(ZOO_GEN, "3_RMSNorm_generated_code.py"), gen)
    (gen / "9_Planted_generated.py").write_text(PLANTED)
    root = tmp / "root"  # layout A: the RMSNorm reference, cases, flops.py and kernel in one dir, two timestamps
    for ts in ("20261101_0800", "20261201_0800"):
        d = root / f"op_RMSNorm_{ts}"
        d.mkdir(parents=True)
        for f in ("3_RMSNorm.py", "3_RMSNorm.json", "3_RMSNorm_flops.py"):
            shutil.copy(os.path.join(ZOO_BENCH, f), d)
        shutil.copy(os.path.join(ZOO_GEN, "3_RMSNorm_generated_code.py"), d)
    started = {"B": start(tmp / "outB", "--bench", str(bench), "--gen", str(gen), env=env),
               "A": start(tmp / "outA", "--root", str(root), "--keep-prof", "0", env=env)}
    try:
        import ray  # noqa: F401
    except ImportError:
        pass
    else:
        started["ray"] = start(tmp / "outRay", "--root", str(root), "--runner", "ray", "--keep-prof", "0", env=env)
    out = {k: finish(v) for k, v in started.items()}
    out.setdefault("ray", None)
    return out


def test_layout_b_planted_failure_is_recorded_and_the_others_finish(runs):
    r, s = runs["B"]
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]  # 1: one operator failed, the batch finished
    rows = {x["name"]: x for x in s["rows"]}
    ok, bad = rows["3_RMSNorm"], rows["9_Planted"]
    assert ok["status"] == "ok" and ok["headline"] == "MBU" and ok["mbu"] > 0 and ok["mfu_ach"] is None
    assert ok["numerator"] == "checked" and ok["dtype"]
    dec = json.load(open(ok["decompose_json"]))  # the row's figures are the decomposition's headline case's
    (best,) = [x for rep in dec["reports"] for x in rep["rows"] if x["case"] == ok["case"] and x["status"] == "ok"]
    assert best["mbu"] == ok["mbu"] and best["dtype"] == ok["dtype"] and dec["maxima"]["mbu"]["case"] == ok["case"]
    assert ok["bound"] == (best["bound"]["label"] if isinstance(best.get("bound"), dict) else None)
    assert bad["status"] == "failed" and bad["reason"].startswith("step verify failed (exit status")
    c = s["counts"]
    assert (c["operators"], c["succeeded"], c["failed"], c["skipped"]) == (2, 1, 1, 1)
    assert list(c["failed_why"]) == [bad["reason"].split(":")[0]] and s["skipped"][0]["name"] == "id 2"
    assert list(c["skipped_why"]) == ["no implementation"]
    log = open(bad["log"]).read()
    assert "planted failure" in log


def test_summary_files_csv_markdown_and_html_index_link_each_operator(runs):
    _, s = runs["B"]
    out = s["out_dir"]
    csv = pd.read_csv(os.path.join(out, "batch_summary.csv"))
    assert list(csv["name"]) == [x["name"] for x in s["rows"]]
    assert list(csv["status"]) == [x["status"] for x in s["rows"]] and sorted(csv["status"]) == ["failed", "ok"]
    md = open(os.path.join(out, "batch_summary.md")).read()
    assert "| 3_RMSNorm" in md and "failed 1" in md and "no implementation" in md
    page = open(os.path.join(out, "index.html")).read()
    for row in s["rows"]:
        assert f'href="{os.path.relpath(row["log"], out)}"' in page
    assert 'href="ops/3_RMSNorm/mfu_decompose.json"' in page


def test_layout_a_root_measures_the_newest_copy_and_prunes_profiles(runs):
    r, s = runs["A"]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (row,) = s["rows"]
    assert row["name"] == "RMSNorm" and row["status"] == "ok" and row["older"] == "op_RMSNorm_20261101_0800"
    assert s["skipped"][0]["why"].startswith("older copy of RMSNorm")
    job = json.load(open(os.path.join(s["out_dir"], "jobs", "RMSNorm.json")))
    assert job["pruned_prof"] and not os.path.exists(os.path.join(row["work"], "prof"))
    assert os.path.exists(os.path.join(row["work"], "performance.json"))


def test_runner_ray_on_a_local_instance_gives_the_same_summary(runs):
    if runs["ray"] is None:
        if os.environ.get("CI") == "true":
            pytest.fail("ray is not importable in CI: .ci/run installs requirements-ray.txt")
        pytest.skip("ray is not installed (pip install -r requirements-ray.txt)")
    r, s = runs["ray"]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    _, local = runs["A"]
    same = ("name", "layout", "status", "reason", "headline", "numerator", "bound", "older", "errors")
    assert [{k: x[k] for k in same} for x in s["rows"]] == [{k: x[k] for k in same} for x in local["rows"]]
    assert s["counts"] == local["counts"] and s["skipped"] == local["skipped"]
    # the figures are measured again (CPU-interpreter timings differ run to run); both runs have them
    assert all(x["mbu"] > 0 for x in s["rows"]) and s["runner"] == "ray"
    job = json.load(open(os.path.join(s["out_dir"], "jobs", "RMSNorm.json")))
    assert job["runner"] == "ray"
