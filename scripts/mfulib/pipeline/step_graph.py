"""The pipeline's step graph, read from the Makefile - the one place it is written.

Each step of steps 2-6 is a Makefile rule ``$(ST)/<step>.ok: <prerequisites>`` whose recipe is
``$(call step,<step>,$(WORK)/<report>,...)``. Its prerequisites name the steps it needs (``$(ST)/<other>.ok``;
``$(WORK)/prepare.json`` is step 1) and the work-directory files it depends on (``$(WORK)/<file>``); order-only
prerequisites (after ``|``) and conditional ones (``$(if ...)``, ``$(wildcard ...)``: the search's extra edges under
``SEARCH=1``) are not part of a step's own inputs. ``make status`` (:mod:`mfulib.pipeline.workdir_state`) judges a work
directory with this graph, so it cannot drift from what make does.

:func:`read_steps` raises :class:`~mfulib.core.errors.UserError` when the Makefile has no rule for a step of
:data:`STEP_ORDER` or a step rule this module does not know - the two would disagree silently otherwise.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

from mfulib.core.errors import UserError
from mfulib.core.opdir import PREPARE_JSON
from mfulib.core.paths import REPO_ROOT

#: the order ``make status`` lists the steps in: SKILL.md's step numbers (1 prepare, 2 verify + the search's probe
#: and grid search, 3 flops, 4 collect, 5 peak, 6 decompose). Only the order lives here; the edges are the Makefile's.
STEP_ORDER = ("prepare", "verify", "flops", "probe", "search", "collect", "peak", "decompose")

_RULE = re.compile(r"^\$\(ST\)/([a-z_]+)\.ok:(?!=)(.*)$")
_CALL = re.compile(r"\$\(call step,([a-z_]+),\$\(WORK\)/([A-Za-z0-9_.]+)")
_STAMP = re.compile(r"^\$\(ST\)/([a-z_]+)\.ok$")
_WORKFILE = re.compile(r"^\$\(WORK\)/([A-Za-z0-9_.]+)$")


@dataclass(frozen=True)
class Step:
    """One pipeline step as the Makefile builds it: its stamp name, its report, the steps and work-dir files its
    stamp depends on."""
    name: str
    report: str
    needs: tuple = ()
    files: tuple = ()


def _prerequisites(text: str) -> list:
    """The normal prerequisites of a rule line: tokens before ``|``, with make function calls (``$(if ...)``,
    ``$(wildcard ...)``: conditional edges, not a step's own inputs) left out."""
    text = text.split("|", 1)[0]
    while True:
        m = re.search(r"\$\([a-z]+\s", text)
        if not m:
            break
        depth, j = 0, m.start() + 1
        for j in range(m.start() + 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 0:
                break
        text = text[:m.start()] + " " + text[j + 1:]
    return text.split()


def parse_makefile(text: str, where: str = "Makefile") -> tuple:
    """The steps of a Makefile's text, in :data:`STEP_ORDER`; step 1 (prepare) first, with no inputs of its own.

    Raises UserError naming ``where`` when a step of STEP_ORDER has no ``$(call step,...)`` rule or the Makefile has
    a step rule not in STEP_ORDER."""
    lines = text.split("\n")
    found = {}
    for i, line in enumerate(lines):
        m = _RULE.match(line)
        if not m:
            continue
        recipe = lines[i + 1] if i + 1 < len(lines) else ""
        call = _CALL.search(recipe)
        if not call:
            continue  # an extra-edge rule (e.g. the search's SEARCH=1 edges): no recipe of its own
        name, report = call.groups()
        if name != m.group(1):
            raise UserError(f"{where}:{i + 2}: the rule for $(ST)/{m.group(1)}.ok calls step {name!r}")
        needs, files = [], []
        for tok in _prerequisites(m.group(2)):
            st, wf = _STAMP.match(tok), _WORKFILE.match(tok)
            if st:
                needs.append(st.group(1))
            elif wf and wf.group(1) == PREPARE_JSON:
                needs.append("prepare")
            elif wf:
                files.append(wf.group(1))
        found[name] = Step(name, report, tuple(needs), tuple(files))
    unknown = sorted(set(found) - set(STEP_ORDER))
    missing = [s for s in STEP_ORDER[1:] if s not in found]
    if unknown or missing:
        raise UserError(f"{where}: step rules and mfulib.pipeline.step_graph.STEP_ORDER disagree (missing in the Makefile:"
                        f" {missing or 'none'}; unknown to STEP_ORDER: {unknown or 'none'}) - add the step to both")
    return (Step("prepare", PREPARE_JSON),) + tuple(found[s] for s in STEP_ORDER[1:])


@functools.lru_cache(maxsize=None)
def read_steps(makefile: str = os.path.join(REPO_ROOT, "Makefile")) -> tuple:
    """:func:`parse_makefile` of the project's Makefile (read once per process)."""
    with open(makefile, encoding="utf-8") as f:
        return parse_makefile(f.read(), makefile)
