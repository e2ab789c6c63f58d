"""Small helpers shared by the CLIs: exit-status policy and common arguments."""
import argparse
import os
import shlex
import sys

from mfulib.core.paths import SCRIPTS_DIR
from mfulib.core.errors import SettingsRefused, UserError

EXIT_USER_ERROR = 2
EXIT_REFUSED = 4  # mfulib.core.errors.SettingsRefused: refused before anything changed (the Makefile's step reads it)


def script_command(name: str) -> str:
    """``python3 <absolute path of scripts/<name>>`` for hints in messages: it runs from any directory, where a
    checkout-relative ``python3 scripts/<name>`` works only from the checkout root.

    ``name``: a path below scripts/, e.g. ``"peak_calib.py"`` or ``"ops_profiling/msprof_perf_summary.py"``."""
    return "python3 " + shlex.quote(os.path.join(SCRIPTS_DIR, name))


def sigterm_as_interrupt() -> None:
    """Make SIGTERM (kill, timeout(1)) raise ``KeyboardInterrupt("signal 15")`` in this process, so a script that
    records a Ctrl-C in its report (``interrupted``) records a SIGTERM the same way; :func:`stop_label` tells them
    apart. (mfu_batch.py stops a job with SIGTERM to its make, which a step under scripts/device_lock.py receives
    as SIGINT; what is still running after its grace is killed with SIGKILL, which no handler sees.)"""
    import signal

    def _terminated(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, _terminated)


def stop_label(exc: BaseException) -> str:
    """How a step was stopped, for the ``interrupted`` field of its report: ``SIGTERM`` (raised as a
    KeyboardInterrupt by :func:`sigterm_as_interrupt`'s handler) or ``SIGINT`` - Ctrl-C, and also make's and the
    device lock's way of stopping a step (scripts/device_lock.py passes a stop on to its child as SIGINT, also the
    SIGTERM that mfu_batch.py's --op-timeout-s sends to the step's make)."""
    if str(exc).startswith("signal"):
        return "SIGTERM"
    return "SIGINT (Ctrl-C, or make / the device lock / mfu_batch stopping it)"


def run_main(main, argv=None):
    """Run ``main(argv)``; a :class:`UserError` prints ``error: ...`` and exits with status 2.

    Ctrl-C exits 130 after whatever ``main`` already wrote (writes are atomic, so nothing is half-written).
    """
    try:
        rc = main(argv)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_REFUSED if isinstance(exc, SettingsRefused) else EXIT_USER_ERROR)
    except (PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError) as exc:
        # a path the user gave cannot be read or written: say which, no traceback
        print(f"error: {exc.filename or ''}: {exc.strerror} - check the path and its permissions", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(rc or 0)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows defaults and keeps the description's line breaks; no "(default: None)" / "(default: False)" noise,
    and nothing added where the help text already states its default."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text.lower():
            return text
        return super()._get_help_string(action)


def parser(prog_doc: str, prog: str = None) -> argparse.ArgumentParser:
    """An ArgumentParser whose description is the script's docstring and whose help shows defaults."""
    return argparse.ArgumentParser(prog=prog, description=prog_doc, formatter_class=HelpFormatter)


def parse_case_list(text: str):
    """Parse ``"3,7,9"`` or ``"0-4,9"`` into a sorted list of case ids (0-based)."""
    ids = set()
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                ids.update(range(lo, hi + 1))
            else:
                ids.add(int(part))
        except ValueError:
            raise UserError(f"--cases {text!r}: {part!r} is not a case id or a non-empty range lo-hi (lo <= hi); "
                            "use e.g. --cases 3,7,9 or 0-4")
    return sorted(ids)
