"""The Makefile drives the whole pipeline on a CPU machine (as CI runs it): `make OP=<bundled op> all`."""
import json
import os
import shutil
import subprocess

import pytest

from pipelines import copy_work

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def make(*args, env=None):
    return subprocess.run(["make", "-C", ROOT, *args], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, **(env or {})))


@pytest.mark.e2e
def test_make_all_runs_the_mha_block_end_to_end_on_cpu(mha_all_checkout, tmp_path):
    # the session's `make OP=5_MHABlock all` (tests/pipelines.py), copied: the README's quick start, run once
    work = tmp_path / "mha"
    copy_work(os.path.join(mha_all_checkout, "work", "5_MHABlock"), work)
    for name in ("prepare.json", "verify.json", "flops_check.json", "performance.json", "peak.json",
                 "mfu_decompose.json", "report.html"):
        assert (work / name).exists(), name
    dec = json.loads((work / "mfu_decompose.json").read_text())
    rows = [r for r in dec["reports"][0]["rows"] if r["status"] == "ok"]
    skipped = [r for r in dec["reports"][0]["rows"] if r["status"] == "skipped"]
    assert len(rows) == 3 and all("bfloat16" in r["reason"] for r in skipped)  # cpu: the 3 smallest, bf16 skipped
    assert {p["part"] for r in rows for p in r["parts"]} >= {"attn", "proj"}
    # nothing changed: a second run (in another directory: work directories are relocatable) redoes nothing
    again = make("OP=5_MHABlock", f"WORK={work}", "all")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout, again.stdout + again.stderr


def test_make_prepare_layout_b_and_a_bad_backend(tmp_path):
    bench, gen = os.path.join(ROOT, "examples/ops/bench/zoo"), os.path.join(ROOT, "examples/ops/gen/zoo")
    r = make("OP=2_Softmax", f"BENCH={bench}", f"GEN={gen}", f"WORK={tmp_path / 'sm'}", "prepare")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "sm" / "prepare.json").read_text())["layout"] == "B"
    bad = make("OP=2_Softmax", "BACKEND=tpu", "prepare")
    assert bad.returncode != 0 and "BACKEND=tpu is not one of" in bad.stderr


# ------------------------------------------------------------------------ make setup, against a recording fake PY

FAKE_PY = r'''#!/bin/bash
# test double of python for `make setup`: records every call; "installs" by creating marker files
echo "$*" >> "$STATE/calls"
case "$*" in
  "-c import triton; print(triton.__version__)") [ -f "$STATE/triton" ] && { echo 3.9.0; exit 0; }; exit 1;;
  "-c import torch") [ -f "$STATE/torch" ] && exit 0; exit 1;;
  "-c import torch; print(torch.__version__)") echo 2.13.0; exit 0;;
  "-m pip install torch>=2.1") touch "$STATE/torch" "$STATE/triton"; exit 0;;  # the CUDA wheel brings triton
  "-m pip install torch==2.13.0+cpu") touch "$STATE/torch"; exit 0;;
  "-m pip install triton==3.8.0") touch "$STATE/triton"; exit 0;;
  "-m pip install -r "*) exit 0;;
esac
echo "fake python: unexpected call: $*" >&2; exit 3
'''


def setup_with_fake_python(tmp_path, have=(), gpu=False):
    state = tmp_path / "state"
    state.mkdir()
    for name in have:
        (state / name).touch()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    py = bindir / "fakepy"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    if gpu:
        (bindir / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
        (bindir / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "STATE": str(state)}
    r = subprocess.run([shutil.which("make"), "-C", ROOT, "setup", f"PY={py}"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout, (state / "calls").read_text().splitlines()


def test_setup_on_a_cpu_only_host_without_torch_installs_the_cpu_build_never_the_cuda_one(tmp_path):
    out, calls = setup_with_fake_python(tmp_path)
    installs = [c for c in calls if c.startswith("-m pip install")]
    assert installs[0] == "-m pip install torch==2.13.0+cpu" and "no GPU" in out
    assert not any("torch>=" in c for c in calls)
    assert installs[1].startswith("-m pip install -r ") and installs[1].endswith("requirements.txt")
    assert installs[2] == "-m pip install triton==3.8.0"  # the CPU wheel brings no triton; 3.8.0 runs block pointers


def test_setup_keeps_an_installed_torch_and_triton(tmp_path):
    out, calls = setup_with_fake_python(tmp_path, have=("torch", "triton"))
    assert [c for c in calls if c.startswith("-m pip install")] == [c for c in calls if " -r " in c]
    assert "torch 2.13.0 already installed: kept" in out and "triton 3.9.0 already installed: kept" in out


def test_setup_with_a_gpu_says_triton_came_with_torch_instead_of_kept(tmp_path):
    out, calls = setup_with_fake_python(tmp_path, gpu=True)
    assert "-m pip install torch>=2.1" in calls and "-m pip install triton==3.8.0" not in calls
    (triton,) = [ln for ln in out.splitlines() if "triton 3.9.0" in ln]
    assert "dependency of torch" in triton and "kept" not in triton


# pytest plugins the Makefile's test targets use (by command-line flag, never imported): listed all the same
RUNNER_PLUGINS = {"pytest-xdist"}


def test_requirements_list_exactly_the_third_party_packages_the_code_imports():
    import ast
    import sys
    names = {"numpy", "pandas", "tqdm", "tabulate", "matplotlib", "pytest"}  # pip names = import names here
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        listed = {line.split(">")[0].split("=")[0].strip() for line in f if line.strip() and not line.startswith("#")}
    imported = set()
    for top in ("scripts", "tests", "bench"):
        for dirpath, _d, files in os.walk(os.path.join(ROOT, top)):
            for fn in files:
                if fn.endswith(".py"):
                    with open(os.path.join(dirpath, fn), encoding="utf-8") as f:
                        tree = ast.parse(f.read())
                    for n in ast.walk(tree):
                        if isinstance(n, ast.Import):
                            imported |= {a.name.split(".")[0] for a in n.names}
                        elif isinstance(n, ast.ImportFrom) and not n.level and n.module:
                            imported.add(n.module.split(".")[0])
    third_party = {m for m in imported if m not in sys.stdlib_module_names} & (names | {"pandas", "rich"})
    assert listed == names | RUNNER_PLUGINS and names == third_party


@pytest.mark.e2e
def test_a_hand_edited_probe_json_makes_the_search_and_make_status_redo_it(tmp_path):
    """make (asked with -q over the stamps and files the steps leave) and make status agree: a probe.json newer than
    the search's stamp - a candidate dropped from it by hand - redoes the search; untouched, nothing is redone."""
    import time
    from mfulib.pipeline import workdir_state
    work = tmp_path / "w"
    common = ["OP=zoo/5_MHABlock", f"WORK={work}", "BACKEND=cpu"]
    r = make(*common, "prepare")
    assert r.returncode == 0, r.stderr[-2000:]
    (work / ".state").mkdir(exist_ok=True)
    t0 = time.time() - 100
    for d, _dirs, files in os.walk(work):  # what step 1 made: older than every later step's files
        for f in files:
            os.utime(os.path.join(d, f), (t0, t0))
    for k, name in enumerate(("probe.json", ".state/verify.ok", ".state/probe.ok", ".state/flops.ok",
                              "grid_search.json", ".state/search.ok"), 1):
        (work / name).touch()
        os.utime(work / name, (t0 + k, t0 + k))  # each newer than the one before, as the steps leave them

    def search_redone():
        q = subprocess.run(["make", "-q", "-C", ROOT, *common, f"{work}/.state/search.ok"], capture_output=True,
                           text=True)
        assert q.returncode in (0, 1), q.stdout[-1000:] + q.stderr[-1000:]
        return q.returncode == 1
    assert not search_redone()
    os.utime(work / "probe.json", (t0 + 50, t0 + 50))
    assert search_redone()
    rows = {r["step"]: r for r in workdir_state.step_states(str(work), ("ok", ""))}
    detail = rows["search"]["detail"]
    assert rows["search"]["state"] == "stale" and "probe.json changed since this step ran" in detail
    assert detail.count("probe.json changed") == 1, detail  # one reason, said once
