"""A new backend needs changes under the backend package only: a fake ``rocm`` backend (the CPU interpreter under
another name) registered through ``MFU_BACKEND_PLUGINS`` runs the CPU pipeline - prepare -> verify -> collect -
and every capability a caller asks of it is the class's, never a comparison with its name."""
import json
import os
import subprocess
import sys
import types

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_msprof"))
import tinyops  # noqa: E402

from mfulib import backends  # noqa: E402
from mfulib.core.errors import UserError  # noqa: E402
from mfulib.verify.verified_cases import default_max_input_mb, skip_reason  # noqa: E402

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts")
STUB = '''from mfulib.backends.cpu import CpuBackend


class RocmBackend(CpuBackend):
    """A stand-in for a new backend: the CPU interpreter's capabilities under the name rocm."""
    name = "rocm"
'''


@pytest.fixture
def rocm(tmp_path, monkeypatch):
    """The stub registered for this test and the processes it starts (the plug-in module on their PYTHONPATH)."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "mfu_rocm_stub.py").write_text(STUB)
    monkeypatch.syspath_prepend(str(plugins))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv(backends.PLUGINS_ENV, "rocm=mfu_rocm_stub:RocmBackend")
    monkeypatch.setattr(backends, "_REGISTERED", {})  # what this test loads is forgotten after it
    return "rocm"


def test_the_stub_answers_every_capability_through_the_registry(rocm):
    cls = backends.backend_class(rocm)
    assert cls.name == "rocm" and rocm in backends.names()
    assert backends.resolve_backend(rocm) == ("rocm", "--backend rocm")
    assert backends.device_string(rocm, 3) == "cpu" and cls.interpreter and not cls.runs_bf16
    assert backends.validates_only(rocm) and not backends.fp32_dot_is_tf32(rocm, "float32")
    assert default_max_input_mb(rocm) == 1.0
    bf16 = types.SimpleNamespace(compute_dtype="bfloat16", input_bytes=16)  # what skip_reason reads of a case
    assert skip_reason(bf16, rocm) == cls.bf16_skip_reason
    ident = backends.device_identity(rocm)
    assert ident["backend"] == "rocm" and ident["key"].startswith("rocm-") and ident["accelerator"] is False


def test_an_unknown_backend_and_a_broken_plugin_are_user_errors_naming_the_choices(rocm, monkeypatch):
    with pytest.raises(UserError, match="rocm"):  # the choices list the plug-in
        backends.backend_class("tpu")
    monkeypatch.setenv(backends.PLUGINS_ENV, "rocm=no_such_module:RocmBackend")
    with pytest.raises(UserError, match="does not load"):
        backends.backend_class("rocm")
    monkeypatch.setenv(backends.PLUGINS_ENV, "rocm")
    with pytest.raises(UserError, match="name=module:Class"):
        backends.names()


@pytest.mark.e2e
def test_prepare_verify_and_collect_run_on_the_stub_backend(rocm, tmp_path):
    from mfulib.collect.driver import Options, collect
    work = tinyops.make_workdir(tmp_path)  # prepare (mfulib.sources.prepare)
    verify = subprocess.run([sys.executable, os.path.join(SCRIPTS, "verify_op.py"), "--op-dir", work, "--backend",
                             rocm, "--cases", "0,1"], capture_output=True, text=True, timeout=600)
    assert verify.returncode == 0, verify.stderr[-2000:]
    with open(os.path.join(work, "verify.json")) as f:
        ver = json.load(f)
    assert ver["device"]["backend"] == "rocm" and [c["status"] for c in ver["cases"]] == ["pass", "pass"]
    assert "cpu_adaptations" in ver  # the stub interprets Triton: verify recorded what the interpreter adapted
    rep = collect(Options(op_dir=work, output_dir=work, impl="asc", backend=rocm, cases=[0, 1], warmup=1, repeats=2,
                          flush_cache_mib=1, progress=False))  # only verified cases: the gate read verify.json
    assert rep["backend"] == "rocm"
    assert [c["case"] for c in rep["per_case"]] == [0, 1]
    for c in rep["per_case"]:
        assert c["asc_error"] is None and c["asc_us"] > 0
        assert [k["name"] for k in c["kernels"]] == ["scale_kernel", "add_one_kernel"]
        assert c["harness_launches_dropped"] == 3  # the flush before each iteration, never operator time


def test_a_plugin_class_is_bound_to_the_name_it_is_registered_by(monkeypatch):
    from mfulib.backends.cpu import CpuBackend
    monkeypatch.setattr(backends, "_REGISTERED", {})

    class Unnamed(CpuBackend):  # inherits name "cpu": records and cache keys must still say "other"
        pass
    backends.register("other", Unnamed)
    cls = backends.backend_class("other")
    assert cls.name == "other" and issubclass(cls, Unnamed) and CpuBackend.name == "cpu"


def test_a_record_says_itself_whether_its_numbers_validate_only():
    """A process that does not know a plug-in's name reads the record's own device.accelerator field."""
    assert backends.validates_only("never-registered", accelerator=False) is True
    assert backends.validates_only("cpu", accelerator=True) is False
    assert backends.validates_only("cpu") is True and backends.validates_only("never-registered") is False


def test_make_accepts_a_backend_registered_through_the_plugin_variable(tmp_path):
    import shutil
    make = shutil.which("make")
    if make is None:
        pytest.skip("GNU make is not installed")
    root = os.path.dirname(SCRIPTS)
    env = dict(os.environ, MFU_BACKEND_PLUGINS="rocm=mfu_rocm_stub:RocmBackend")
    r = subprocess.run([make, "-C", root, "-n", "BACKEND=rocm", "help"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([make, "-C", root, "-n", "BACKEND=rocm", "help"], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if k != "MFU_BACKEND_PLUGINS"}, timeout=60)
    assert r.returncode != 0 and "BACKEND=rocm is not one of" in r.stderr
