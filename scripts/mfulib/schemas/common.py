"""The shared error of the work-directory validators: a JSON field of the wrong type, naming file, field and fix."""
from __future__ import annotations

from ..errors import UserError, short_repr


def wrong_type(path: str, field: str, value, want: str, fix: str) -> UserError:
    """The UserError for a JSON field of the wrong type: ``<file>: <field> is <type> <value>, not <want> - <fix>``."""
    return UserError(f"{path}: {field} is {type(value).__name__} {short_repr(value)}, not {want} - {fix}")
