"""What every work-directory reader shares: reading the file with clear errors, and the wrong-type error of a field."""
from __future__ import annotations

import os

from mfulib.core.errors import UserError, short_repr
from mfulib.core.jsonio import read_json


def wrong_type(path: str, field: str, value, want: str, fix: str) -> UserError:
    """The UserError for a JSON field of the wrong type: ``<file>: <field> is <type> <value>, not <want> - <fix>``."""
    return UserError(f"{path}: {field} is {type(value).__name__} {short_repr(value)}, not {want} - {fix}")


def read_work_json(path: str, missing: str, invalid: str):
    """The parsed JSON at ``path``; UserError ``<path>: not found - <missing>`` when absent and ``<path>: not valid
    JSON (<why>) - <invalid>`` when unparsable (``missing``/``invalid`` say how to produce a good file)."""
    if not os.path.exists(path):
        raise UserError(f"{path}: not found - {missing}")
    try:
        return read_json(path)
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON ({exc}) - {invalid}") from None
