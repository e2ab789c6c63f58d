"""The work directory's step records that make writes: ``.state/`` (:data:`STATE_DIR`) and each step's
``<step>.settings`` (the make variables it last ran with) - their one reader, and the probe's resume advice built from
them. :mod:`mfulib.pipeline.workdir_state` judges the steps with them."""
from __future__ import annotations

import os

STATE_DIR = ".state"


def settings_path(work: str, step: str) -> str:
    """``<work>/.state/<step>.settings``: the make variables ``step`` last ran with (``SETVARS_<step>``), one
    ``VAR=value`` a line, as the Makefile's step macro writes them when the step succeeds."""
    return os.path.join(work, STATE_DIR, f"{step}.settings")


def read_settings(work: str, step: str) -> dict | None:
    """{make variable: value} of :func:`settings_path` - read as the Makefile's ``settings_was`` reads it: the text
    after the first ``=``, stripped - or None when there is no such file (make never finished the step there)."""
    try:
        with open(settings_path(work, step), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    return {k: v.strip() for k, sep, v in (ln.partition("=") for ln in lines) if sep and k}


def probe_resume_cut(work: str) -> str:
    """What resumes the probe of ``work`` that its budget cut, keeping the PROBE_ARGS it ran with (its
    ``.state/probe.settings``): :func:`mfulib.schemas.probe_json.resume_cut`; the generic advice where they are not
    recorded."""
    from mfulib.schemas import probe_json
    return probe_json.resume_cut((read_settings(work, "probe") or {}).get("PROBE_ARGS"))
