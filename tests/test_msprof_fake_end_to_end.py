"""The npu path end to end on a CPU machine through the msprof TEST DOUBLE (tests/fake_msprof/msprof), plus the
CANN environment checks. The double runs the collector's child on the cpu backend and writes a PROF directory in
the documented format (its docstring says exactly what is emulated)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "fake_msprof")
sys.path.insert(0, FAKE)
import tinyops  # noqa: E402

from mfulib.profiles import kernels  # noqa: E402
from mfulib.profiles import msprof
from mfulib.collect.driver import Options, collect  # noqa: E402
from mfulib.backends.npu import NpuBackend, check_cann  # noqa: E402
from mfulib.core.device import cann_version  # noqa: E402
from mfulib.core.errors import UserError  # noqa: E402

INI = "[version]\nSoC_version=Ascend910B2\n[SoCInfo]\nai_core_cnt=24\ncube_core_cnt=24\n[AICoreSpec]\ncube_freq=1800\n"


def make_fake_cann(root):
    """A CANN-like tree (install info, platform ini, set_env.sh) whose tools/profiler/bin/msprof wraps the double;
    returns the environment set_env.sh would give (ASCEND_HOME_PATH, PATH)."""
    home = root / "Ascend" / "ascend-toolkit" / "latest"
    (home / "x86_64-linux" / "data" / "platform_config").mkdir(parents=True)
    (home / "x86_64-linux" / "ascend_toolkit_install.info").write_text("package_name=Ascend-cann-toolkit\n"
                                                                      "version=8.3.RC2\n")
    (home / "x86_64-linux" / "data" / "platform_config" / "Ascend910B2.ini").write_text(INI)
    (home.parent / "set_env.sh").write_text(f"export ASCEND_HOME_PATH={home}\n")
    bindir = home / "tools" / "profiler" / "bin"
    bindir.mkdir(parents=True)
    wrapper = bindir / "msprof"
    wrapper.write_text(f'#!/bin/sh\n# wrapper of the msprof TEST DOUBLE\nexec "{sys.executable}" "{FAKE}/msprof" "$@"\n')
    wrapper.chmod(0o755)
    return {"ASCEND_HOME_PATH": str(home), "PATH": f"{bindir}{os.pathsep}{FAKE}{os.pathsep}{os.environ['PATH']}"}


FAKE_KNOBS = ("FAKE_MSPROF_CANN", "FAKE_MSPROF_FAULT", "FAKE_MSPROF_FAULT_RUNS", "FAKE_MSPROF_SLICES",
              "FAKE_MSPROF_STALE", "FAKE_MSPROF_NO_EXPORT", "ASCEND_DEVICE_ID")


def _apply(mp, env):
    for k, v in env.items():
        mp.setenv(k, v)
    for k in FAKE_KNOBS:
        mp.delenv(k, raising=False)


@pytest.fixture
def fake_cann(tmp_path, monkeypatch):
    _apply(monkeypatch, make_fake_cann(tmp_path))
    return os.environ["ASCEND_HOME_PATH"]


@pytest.fixture(scope="module")
def npu_collected(tmp_path_factory):
    """One collection through the double, shared by the tests that re-export and re-read its PROF directory."""
    root = tmp_path_factory.mktemp("npu")
    with pytest.MonkeyPatch.context() as mp:
        _apply(mp, make_fake_cann(root))
        work = tinyops.make_workdir(root)
        rep = run_npu(work)
        yield work, rep, dict(os.environ)


def measured_sums(prof_dir, warmup, repeats):
    """Per-iteration kernel sums straight from what the double measured (its raw rows), for comparison."""
    (raw,) = [os.path.join(r, "fake_rows.json") for r, _, fs in os.walk(prof_dir) if "fake_rows.json" in fs]
    with open(raw) as f:
        rows = json.load(f)["rows"]
    marks = [i for i, r in enumerate(rows) if r["name"] == kernels.MARKER_KERNEL]
    return [sum(r["dur_ns"] for r in rows[marks[i] + 1:marks[i + 1]]) for i in range(warmup, warmup + repeats)]


def run_npu(work, **kw):
    opts = dict(op_dir=work, output_dir=work, impl="asc", warmup=1, repeats=2, backend="npu", cases=[0], mfu=True,
                keep_prof=work, progress=False, unverified_ok=True)  # no NPU here to verify on: the timing path only
    opts.update(kw)
    return collect(Options(**opts))


@pytest.mark.e2e
def test_the_npu_path_runs_end_to_end_through_the_msprof_double(npu_collected):
    work, rep, _ = npu_collected
    (c,) = rep["per_case"]
    assert rep["backend"] == "npu" and rep["timing_method"] == "msprof.op_summary.Task_Duration"
    assert rep["environment"]["cann_version"] == "8.3.RC2" and rep["environment"]["msprof"].endswith("bin/msprof")
    assert rep["device"]["name"] == "Ascend910B2" and rep["device"]["identity_source"] == "npu-smi info"
    assert rep["device"]["runtime"]["ai_core_num"] == 24 and rep["device"]["runtime"]["aic_frequency_mhz"] == 1800
    assert rep["peak"]["value_tflops"] == pytest.approx(24 * 1800e6 * 8192 / 1e12)  # 353.89, from info.json.0
    assert "info.json.0" in rep["peak"]["source"]
    assert c["sequence"] == ["scale_kernel", "add_one_kernel"] and c["asc_error"] is None
    prof = os.path.join(work, c["asc_prof_dir"])
    assert c["iter_kernel_time_ns"] == measured_sums(prof, 1, 2)  # exact: ns survive the CSV round trip
    assert c["mfu_nom"] == pytest.approx(c["flops"] / c["kernel_time_ns"] / 1e3 / rep["peak"]["value_tflops"])
    assert c["harness_launches_dropped"] == 4  # 3 iteration-start markers + the end marker
    # the double writes N/A PMU cells by default (a CPU has no AI-core PMU): no counters, and the reason is said
    assert c["pmu"] == {} and c["pmu_source"] is None
    assert c["pmu_unavailable"].startswith("msprof: ") and "N/A" in c["pmu_unavailable"]
    assert "--ai-core" in c["pmu_unavailable"]


def reexport(npu_collected, tmp_path, env):
    """A copy of the shared run's attempt dir whose CSV export is rewritten by ``msprof --export=on`` with ``env``."""
    work, rep, base_env = npu_collected
    attempt = str(tmp_path / "attempt")
    shutil.copytree(os.path.join(work, rep["per_case"][0]["asc_prof_dir"]), attempt)
    (prof,) = msprof.prof_dirs(os.path.join(attempt, "msprof"))
    shutil.rmtree(os.path.join(prof, "mindstudio_profiler_output"))
    subprocess.run(["msprof", "--export=on", f"--output={prof}"], check=True, env=dict(base_env, **env))
    return attempt, rep["per_case"][0]


@pytest.mark.parametrize("variant, env, extra_ns", [
    ("CANN 9.x Block Num header", {"FAKE_MSPROF_CANN": "9.0"}, 0),
    ("old device_*/summary layout", {"FAKE_MSPROF_CANN": "old"}, 0),
    ("torch_npu kernel_details.csv", {"FAKE_MSPROF_CANN": "torch_npu"}, 0),
    ("sliced export", {"FAKE_MSPROF_SLICES": "3"}, 0),
    ("stale and partial exports beside the complete one", {"FAKE_MSPROF_STALE": "1"}, 0),
    ("task_time fallback (2.58 us longer per task, as in a real export)", {"FAKE_MSPROF_CANN": "task_time_only"},
     2 * 2580),
])
@pytest.mark.e2e
def test_every_export_variant_of_the_same_run_gives_the_same_kernel_times(npu_collected, tmp_path, variant, env,
                                                                         extra_ns):
    attempt, c = reexport(npu_collected, tmp_path, env)
    rows, info = NpuBackend().launches(attempt, {}, 3)
    s = kernels.summarize(rows, 1, 2)
    assert s["status"] == "ok", (variant, s["problems"])
    assert s["iter_kernel_time_ns"] == [t + extra_ns for t in c["iter_kernel_time_ns"]], variant


@pytest.mark.parametrize("fault, expect", [("lose_rows", "lost rows"), ("zero_ts", "zero or missing timestamp"),
                                           ("drop_start", "iteration markers")])
@pytest.mark.e2e
def test_damaged_exports_are_detected_as_incomplete(npu_collected, tmp_path, fault, expect):
    attempt, _ = reexport(npu_collected, tmp_path, {"FAKE_MSPROF_FAULT": fault})
    rows, info = NpuBackend().launches(attempt, {}, 3)
    s = kernels.summarize(rows, 1, 2, extra_problems=info["problems"])
    assert s["status"] == "incomplete" and expect in " ".join(s["problems"])


@pytest.mark.e2e
def test_an_incomplete_profile_is_retried_and_the_retry_is_reported(tmp_path, fake_cann, monkeypatch):
    monkeypatch.setenv("FAKE_MSPROF_FAULT", "lose_rows")
    monkeypatch.setenv("FAKE_MSPROF_FAULT_RUNS", "1")
    monkeypatch.setenv("FAKE_MSPROF_STATE", str(tmp_path / "fault_counter"))
    work = tinyops.make_workdir(tmp_path)
    c = run_npu(work)["per_case"][0]
    assert c["asc_error"] is None and c["attempts"] == 2
    assert any(f.startswith("incomplete profile retried") for f in c["flags"])


@pytest.mark.e2e
def test_a_profile_that_stays_incomplete_is_an_error_never_a_zero_time(tmp_path, fake_cann, monkeypatch):
    monkeypatch.setenv("FAKE_MSPROF_FAULT", "zero_ts")
    work = tinyops.make_workdir(tmp_path)
    rep = run_npu(work, retry=1)
    (c,) = rep["per_case"]
    assert "profile incomplete after 2 attempt(s)" in c["asc_error"] and c["attempts"] == 2
    assert c["asc_us"] is None and c["kernel_time_ns"] is None and c["mfu_nom"] is None
    assert rep["n_cases_valid"] == 0


def test_missing_ascend_home_path_says_to_source_set_env(monkeypatch):
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    with pytest.raises(UserError, match=r"ASCEND_HOME_PATH is not set: CANN's set_env.sh was not sourced.*source "):
        check_cann()


def test_msprof_missing_from_path_names_the_one_under_ascend_home(fake_cann, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with pytest.raises(UserError, match=r"msprof is not on PATH.*tools/profiler/bin/msprof"):
        check_cann()


def test_an_msprof_from_another_cann_install_is_refused(fake_cann, tmp_path, monkeypatch):
    other = tmp_path / "old_cann" / "bin"
    other.mkdir(parents=True)
    (other / "msprof").write_text("#!/bin/sh\n")
    (other / "msprof").chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(UserError, match="not from ASCEND_HOME_PATH"):
        check_cann()
    assert check_cann(str(other / "msprof"))["notes"]  # an explicit --msprof is used as given, with a note


def test_cann_version_is_read_from_install_info_or_version_cfg(tmp_path):
    (tmp_path / "version.cfg").write_text("runtime_running_version=[7.0.0.5.242:8.0.RC1]\n")
    assert cann_version(str(tmp_path)) == "8.0.RC1"
    (tmp_path / "aarch64-linux").mkdir()
    (tmp_path / "aarch64-linux" / "ascend_toolkit_install.info").write_text("version=9.0.0\n")
    assert cann_version(str(tmp_path)) in ("9.0.0", "8.0.RC1")  # the install info of this machine's arch wins
