"""``KERNEL_PARTS`` of a draft (:mod:`mfulib.flops.drafts`): the launched Triton kernels matched to the FLOPs parts.

:func:`kernel_parts_for` maps each part of a draft's ``flops_parts`` to fnmatch patterns built from the kernel names
``model_new.py`` launches (matched by keyword: attention, projection, up / down), and says in a REVIEW note what it
could not assign; :func:`format_parts` writes the mapping as the draft's Python literal.
"""
from __future__ import annotations

import re

_ATTN_KERNEL = r"attn|attention|flash|sdpa|softmax|fa_|_fa"
_PART_KEYWORDS = {
    "attention_proj": [("attn", r"attn|attention|flash|sdpa|softmax"), ("proj", r"matmul|gemm|linear|proj|mm")],
    "ffn": [("up", r"up|ffn1|fc1|w1|gate|act|first"), ("down", r"down|ffn2|fc2|w2|second|out")],
}


def kernel_parts_for(cls: str, part_names: list, kernels: list) -> tuple:
    """({part: [patterns]}, note): patterns from the launched kernel names, matched to parts by keyword; with no
    launch found, '*' for a single part, else generic name patterns (the note marks both REVIEW)."""
    if not kernels:  # no model_new.py, or one that runs torch ops (aten::mm, ...), not Triton kernels
        if len(part_names) == 1:  # one part: every kernel is its own (nothing left to 'other' by a guessed name)
            return {part_names[0]: ["*"]}, ("# REVIEW: no Triton kernel launch found in model_new.py - every kernel "
                                            "is the one part's ('*'); name them if it launches other work")
        generic = {"attn": ["*attn*", "*attention*", "*flash*"], "proj": ["*matmul*", "*gemm*", "*linear*"],
                   "up": ["*up*", "*ffn1*", "*fc1*"], "down": ["*down*", "*ffn2*", "*fc2*"]}
        parts = {p: generic.get(p, [f"*{p}*"]) for p in part_names}
        return parts, ("# REVIEW: no Triton kernel launch found in model_new.py - generic patterns: match them to "
                       "kernel names")
    note = f"# kernels launched by model_new.py: {', '.join(kernels)}"
    if len(part_names) == 1:
        mine = [k for k in kernels if re.search(_ATTN_KERNEL, k, re.I)] if "attention" in cls else []
        if not mine:
            return {part_names[0]: [f"*{k}*" for k in kernels]}, note
        left = [k for k in kernels if k not in mine]
        if left:
            note += f"\n# REVIEW: {', '.join(left)} left to 'other' (no FLOPs of their own: rope, copies?)"
        return {part_names[0]: [f"*{k}*" for k in mine]}, note
    parts = {p: [] for p in part_names}
    left = []
    for kname in kernels:
        for part, rx in _PART_KEYWORDS.get(cls, []):
            if part in parts and re.search(rx, kname, re.I):
                parts[part].append(f"*{kname}*")
                break
        else:
            left.append(kname)
    if cls == "ffn" and left and not any(parts.values()) and len(kernels) == 2:
        parts = {"up": [f"*{kernels[0]}*"], "down": [f"*{kernels[1]}*"]}  # launch order: up first
        left = []
    if left or not all(parts.values()):
        note += f"\n# REVIEW: kernels not assigned to a part ({', '.join(left) or 'none'}); parts without a pattern " \
                f"({', '.join(p for p, v in parts.items() if not v) or 'none'})"
    return parts, note


def format_parts(parts: dict) -> str:
    """``{part: [patterns]}`` as a multi-line dict literal, one part a line."""
    inner = ",\n".join(f"    {k!r}: {v!r}" for k, v in parts.items())
    return "{\n" + inner + ",\n}"
