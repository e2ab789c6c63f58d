"""The command line make would run for a step of a work directory, read from the Makefile without running the step.

A step run by hand (SKILL.md's commands) counts as make's only with the settings make would use
(:func:`mfulib.pipeline.workdir_state.record_run`). Where make never ran the step there is no record of its run to
compare with; this module asks make itself: ``make -s -f <Makefile> WORK=<work> --eval '<rule>' <target>``, where the
rule given with ``--eval`` prints the step's command variable (``PROBE_CMD``, from the step's recipe:
:attr:`mfulib.pipeline.step_graph.Step.command`) and the variables make records for the step (``SETVARS_<step>``)
after make has read the whole Makefile - so the step's sticky arguments (``.state/<step>.settings``) and the
environment (``PROBE_ARGS=...``) are applied exactly as a later ``make`` applies them. No goal of the pipeline is
named, so make builds nothing, runs no step and writes nothing (its parse-time shell calls only read).
"""
from __future__ import annotations

import os
import shlex
import subprocess

from mfulib.core.errors import UserError
from mfulib.core.paths import REPO_ROOT
from mfulib.pipeline.step_graph import read_steps

_TARGET = "_mfu_print_step_command"
_CMD_MARK = "MFU_STEP_COMMAND "
_VAR_MARK = "MFU_STEP_SETTING "
#: variables of make's command line that steer the make run itself, never a step's setting
_MAKE_OWN = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")


def make_step_command(work: str, step: str, makefile: str | None = None, timeout_s: float = 60.0) -> tuple:
    """(argv, setvars) of ``step`` in the work directory ``work`` as make would run it now: ``argv`` the command's
    words (split as the shell splits them), ``setvars`` {make variable: value} of ``SETVARS_<step>`` (what make
    writes to ``.state/<step>.settings`` when the step succeeds). Raises UserError when the Makefile names no
    command for ``step`` or make cannot be run / fails (its message quoted)."""
    makefile = makefile or os.path.join(REPO_ROOT, "Makefile")
    var = next((s.command for s in read_steps(makefile) if s.name == step), "")
    if not var:
        raise UserError(f"{makefile}: no command variable for step {step!r} in its $(call step,...) recipe")
    rule = (f"{_TARGET}: ; @: $(info {_CMD_MARK}$({var}))$(foreach v,$(SETVARS_{step}),"
            f"$(info {_VAR_MARK}$(v)=$(strip $($(v)))))")
    env = {k: v for k, v in os.environ.items() if k not in _MAKE_OWN}
    cmd = ["make", "-s", "--no-print-directory", "-f", makefile, f"WORK={os.path.abspath(work)}", "--eval", rule,
           _TARGET]
    try:
        done = subprocess.run(cmd, cwd=os.path.dirname(os.path.abspath(makefile)), env=env, capture_output=True,
                              text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"could not ask make for step {step}'s command ({' '.join(map(shlex.quote, cmd))}): {exc}")
    lines = done.stdout.splitlines()
    found = [ln[len(_CMD_MARK):] for ln in lines if ln.startswith(_CMD_MARK)]
    if done.returncode != 0 or not found:
        raise UserError(f"make did not print step {step}'s command (exit status {done.returncode}): "
                        f"{(done.stderr or done.stdout).strip()[-400:]}")
    setvars = dict(ln[len(_VAR_MARK):].split("=", 1) for ln in lines if ln.startswith(_VAR_MARK))
    return shlex.split(found[0]), setvars


def script_arguments(argv: list, script: str) -> list:
    """The words of ``argv`` after the one naming ``script`` (a file name, e.g. ``max_shape_probe.py``): the step
    script's own arguments, past make's wrappers (``device_lock.py ... --``, ``python3``). UserError when absent."""
    for i, word in enumerate(argv):
        if os.path.basename(word) == script:
            return argv[i + 1:]
    raise UserError(f"make's command for the step does not run {script}: {' '.join(map(shlex.quote, argv))}")
