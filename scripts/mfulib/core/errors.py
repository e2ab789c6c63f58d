"""Errors that reach the user.

A :class:`UserError` is bad input or a bad environment, not a bug: its message names the file, the case and the
fix, and the CLIs turn it into ``error: <message>`` on stderr with exit status 2 (see :mod:`mfulib.core.cli`).
"""


class UserError(Exception):
    """Bad input or environment; the message must say which file/case and what to do."""


class SettingsRefused(UserError):
    """Settings a step refuses before it has changed anything (the probe asked for a smaller ``--max-scale`` than the
    cases an earlier run appended): its earlier run and outputs stand. The CLIs exit with
    :data:`mfulib.core.cli.EXIT_REFUSED`, and make's step wrapper puts the earlier run's stamp back, so the next
    ``make`` does not redo that run and every step after it."""


class CaseRejected(UserError):
    """A case that the operator's reference or implementation refuses, with the reason.

    Operator files signal this by raising ``ValueError("case rejected: <reason>")`` from ``forward`` (the team
    convention, see README); :func:`rejection_reason` recognises it.
    """


REJECT_PREFIX = "case rejected:"


def rejection_reason(exc: BaseException):
    """Return the reason if ``exc`` is a per-case rejection (message starts with ``case rejected:``), else None."""
    msg = str(exc).strip()
    if isinstance(exc, CaseRejected):
        return msg
    if msg.lower().startswith(REJECT_PREFIX):
        return msg[len(REJECT_PREFIX):].strip()
    return None


def short_repr(v, n: int = 50) -> str:
    """``repr(v)`` cut to ``n`` characters (``...`` marks the cut), for quoting a bad value in an error message."""
    r = repr(v)
    return r if len(r) <= n else r[:n - 3] + "..."
