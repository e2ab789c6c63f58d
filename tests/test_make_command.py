"""make's command line for a step, read from the Makefile without running anything (mfulib.pipeline.make_command):
the Makefile's defaults, the sticky .state/<step>.settings and the environment, and a work directory left
byte-identical (contents and mtimes)."""
import os
import shutil

import pytest

from mfulib.pipeline.make_command import make_step_command, script_arguments

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def snapshot(d):
    return {os.path.relpath(os.path.join(p, n), d): (os.stat(os.path.join(p, n)).st_mtime_ns,
                                                     open(os.path.join(p, n), "rb").read())
            for p, _dirs, files in os.walk(d) for n in files}


def test_the_probe_command_carries_the_makefile_defaults_and_touches_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("PROBE_ARGS", raising=False)
    work = tmp_path / "w"
    (work / ".state").mkdir(parents=True)
    (work / "model.py").write_text("x = 1\n")
    before = snapshot(work)
    argv, setvars = make_step_command(str(work), "probe")
    args = script_arguments(argv, "max_shape_probe.py")
    # the Makefile's PROBE_CMD, written out by hand
    assert args[:2] == ["--dir", str(work)] and args[4:] == ["--max-bytes", "10e9", "--max-ms", "4000", "--backend",
                                                              "auto", "--device", "0", "--seed", "0"]
    assert setvars == {"PROBE_ARGS": "", "SEED": "0", "BACKEND": "auto", "DEVICE_ID": "0"}
    assert snapshot(work) == before and sorted(os.listdir(work)) == [".state", "model.py"]


def test_sticky_settings_and_the_environment_reach_the_command(tmp_path, monkeypatch):
    work = tmp_path / "w"
    (work / ".state").mkdir(parents=True)
    (work / ".state" / "probe.settings").write_text("PROBE_ARGS=--cases 0 --max-scale 2\n")
    monkeypatch.delenv("PROBE_ARGS", raising=False)
    argv, setvars = make_step_command(str(work), "probe")
    assert argv[-4:] == ["--cases", "0", "--max-scale", "2"] and setvars["PROBE_ARGS"] == "--cases 0 --max-scale 2"
    monkeypatch.setenv("PROBE_ARGS", "--top 3 --scale-dims 'seq,batch'")
    argv, _ = make_step_command(str(work), "probe")
    assert argv[-4:] == ["--top", "3", "--scale-dims", "seq,batch"]  # split as the shell splits it


def test_a_script_make_does_not_run_is_a_clear_error():
    from mfulib.core.errors import UserError
    with pytest.raises(UserError, match="does not run max_shape_probe.py"):
        script_arguments(["python3", "x.py", "--dir", "w"], "max_shape_probe.py")
