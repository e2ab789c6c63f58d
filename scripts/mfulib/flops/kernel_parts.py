"""KERNEL_PARTS: flops.py's map from a part of the operator to the fnmatch patterns of its kernels.

``KERNEL_PARTS = {part: [fnmatch patterns]}``; a kernel belongs to the first part (in dict order) with a pattern
matching its whole name (case-sensitive); unmatched kernels form the reserved part :data:`OTHER`. The flops.py
loader (:mod:`mfulib.flops.contract`), the collector and the decomposition all validate and match through here.
"""
from __future__ import annotations

import fnmatch

from mfulib.core.errors import UserError

OTHER = "other"


def check_kernel_parts(parts, where: str) -> dict:
    """``parts`` as {part: [patterns]} (lists), or UserError naming ``where``: not a dict of string lists, or a part
    named :data:`OTHER`."""
    if not isinstance(parts, dict) or not all(
            isinstance(k, str) and isinstance(v, (list, tuple)) and all(isinstance(p, str) for p in v)
            for k, v in parts.items()):
        raise UserError(f"{where}: KERNEL_PARTS must be a dict {{part: [fnmatch patterns]}}, "
                        f"e.g. {{\"attn\": [\"*flash*\"], \"proj\": [\"*matmul*\"]}}")
    if OTHER in parts:
        raise UserError(f"{where}: KERNEL_PARTS must not define a part named {OTHER!r} (reserved for unmatched "
                        "kernels) - rename it")
    return {k: list(v) for k, v in parts.items()}


def match_part(kernel_name: str, parts: dict) -> str:
    """The first part (in KERNEL_PARTS order) with a pattern matching ``kernel_name``; ``other`` if none.

    Patterns are fnmatch patterns matched case-sensitively against the whole kernel name.
    """
    for part, patterns in parts.items():
        for pat in patterns:
            if fnmatch.fnmatchcase(kernel_name, pat):
                return part
    return OTHER
