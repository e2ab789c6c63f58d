"""The pipeline's step graph, read from the Makefile - the one place it is written.

Each step of steps 2-6 is a Makefile rule ``$(ST)/<step>.ok: <prerequisites>`` whose recipe is
``$(call step,<step>,$(WORK)/<report>,...)``. Its prerequisites name the steps it needs (``$(ST)/<other>.ok``;
``$(WORK)/prepare.json`` is step 1) and the work-directory files it depends on (``$(WORK)/<file>``); order-only
prerequisites (after ``|``) and conditional ones (``$(if ...)``, ``$(wildcard $(ST)/...)``: the search's extra edges
under ``SEARCH=1``) are not part of a step's own inputs; ``$(wildcard $(WORK)/<file>)`` written in the rule line
itself is (the file, an input when it exists: the search's probe.json). ``make status``
(:mod:`mfulib.pipeline.workdir_state`) judges a work directory with this graph, so it cannot drift from what make
does.

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
_CALL = re.compile(r"\$\(call step,([a-z_]+),\$\(WORK\)/([A-Za-z0-9_.]+)(?:,\$\(([A-Z_]+)\))?")
_STAMP = re.compile(r"^\$\(ST\)/([a-z_]+)\.ok$")
_WORKFILE = re.compile(r"^\$\(WORK\)/([A-Za-z0-9_.]+)$")
_OPTIONAL = re.compile(r"\$\(wildcard\s+(\$\(WORK\)/[A-Za-z0-9_.]+)\)")


@dataclass(frozen=True)
class Step:
    """One pipeline step as the Makefile builds it: its stamp name, its report, the steps and work-dir files its
    stamp depends on, and the make variable holding its command line (``PROBE_CMD``: the recipe's third argument;
    "" for step 1)."""
    name: str
    report: str
    needs: tuple = ()
    files: tuple = ()
    command: str = ""


def _strip_calls(text: str) -> str:
    """``text`` without make function calls (``$(if ...)``, ``$(wildcard ...)``: conditional edges, not a step's own
    inputs)."""
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
    return text


def _prerequisites(text: str, variables: dict, where: str) -> list:
    """The normal prerequisites of a rule line's right-hand side: tokens before ``|``, conditional function calls
    left out except ``$(wildcard $(WORK)/<file>)`` (a work file, an input when it exists: kept as the file), plain
    variables expanded (:func:`_expand`)."""
    text = _OPTIONAL.sub(r" \1 ", text.split("|", 1)[0])  # a work file made a prerequisite only when it exists
    text = _strip_calls(text)
    return _strip_calls(_expand(text, variables, where).split("|", 1)[0]).split()


def _logical_lines(text: str) -> list:
    """(line number, text) of the Makefile's logical lines: backslash-newline continuations joined, as make does."""
    out, buf, start = [], "", None
    for n, line in enumerate(text.split("\n"), 1):
        if start is None:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append((start, buf + line))
        buf, start = "", None
    if buf:
        out.append((start, buf))
    return out


_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?:\?|:|::|\+)?=\s*(.*)$")
_VAR = re.compile(r"\$[({]([A-Za-z_][A-Za-z0-9_]*)[)}]")
_KEEP_VARS = ("ST", "WORK")  # the tokens a prerequisite is recognised by


def _expand(text: str, variables: dict, where: str, depth: int = 0) -> str:
    """``text`` with plain ``$(NAME)`` references replaced by the Makefile's own assignments (``+=`` appended), as
    often as they nest (at most 10 deep); ``$(ST)`` and ``$(WORK)`` stay. UserError for a reference to a variable the
    Makefile does not assign (its value would come from the command line or the environment: not a fixed edge)."""
    def sub(m):
        name = m.group(1)
        if name in _KEEP_VARS:
            return m.group(0)
        if name not in variables:
            raise UserError(f"{where}: a step rule's prerequisite uses $({name}), which the Makefile does not assign -"
                            " write the prerequisite itself, or assign the variable in the Makefile")
        return variables[name]
    if depth > 10:
        raise UserError(f"{where}: variables in a step rule's prerequisites nest more than 10 deep")
    new = _VAR.sub(sub, text)
    return new if new == text else _expand(new, variables, where, depth + 1)


def parse_makefile(text: str, where: str = "Makefile") -> tuple:
    """The steps of a Makefile's text, in :data:`STEP_ORDER`; step 1 (prepare) first, with no inputs of its own.

    Every rule line of a stamp counts (make merges them): a step's inputs are the union of the normal prerequisites
    of all its ``$(ST)/<step>.ok:`` lines, continuation lines joined and plain variables expanded; conditional ones
    (inside ``$(if ...)`` / ``$(wildcard ...)``) are left out, except ``$(wildcard $(WORK)/<file>)`` written in the
    rule line (not through a variable), which counts as that work file. Raises UserError naming ``where`` when a step of
    STEP_ORDER has no ``$(call step,...)`` rule, a step rule is not in STEP_ORDER, a prerequisite names a stamp that
    is no step, or a step needs one listed after it in STEP_ORDER (make status judges them in that order)."""
    lines = _logical_lines(text)
    variables = {}
    for _n, line in lines:
        m = _ASSIGN.match(line)
        if m and not line.startswith("\t"):
            op = line[len(m.group(1)):].lstrip()[:2]
            variables[m.group(1)] = (variables.get(m.group(1), "") + " " + m.group(2)) if op.startswith("+") \
                else m.group(2)
    reports, needs, files, commands = {}, {}, {}, {}
    for k, (n, line) in enumerate(lines):
        m = _RULE.match(line)
        if not m:
            continue
        stamp = m.group(1)
        recipe = lines[k + 1][1] if k + 1 < len(lines) else ""
        call = _CALL.search(recipe)
        if call:
            if call.group(1) != stamp:
                raise UserError(f"{where}:{lines[k + 1][0]}: the rule for $(ST)/{stamp}.ok calls step "
                                f"{call.group(1)!r}")
            reports[stamp] = call.group(2)
            commands[stamp] = call.group(3) or ""
        for tok in _prerequisites(m.group(2), variables, f"{where}:{n}"):
            st, wf = _STAMP.match(tok), _WORKFILE.match(tok)
            if st:
                needs.setdefault(stamp, []).append(st.group(1))
            elif wf and wf.group(1) == PREPARE_JSON:
                needs.setdefault(stamp, []).append("prepare")
            elif wf:
                files.setdefault(stamp, []).append(wf.group(1))
    unknown = sorted(set(reports) - set(STEP_ORDER))
    missing = [s for s in STEP_ORDER[1:] if s not in reports]
    if unknown or missing:
        raise UserError(f"{where}: step rules and mfulib.pipeline.step_graph.STEP_ORDER disagree (missing in the "
                        f"Makefile: {missing or 'none'}; unknown to STEP_ORDER: {unknown or 'none'}) - add the step "
                        "to both")
    steps = [Step("prepare", PREPARE_JSON)]
    for pos, name in enumerate(STEP_ORDER[1:], 1):
        own = tuple(dict.fromkeys(needs.get(name, ())))
        not_steps = [x for x in own if x not in STEP_ORDER]
        later = [x for x in own if x in STEP_ORDER and STEP_ORDER.index(x) >= pos]
        if not_steps:
            raise UserError(f"{where}: step {name} needs $(ST)/{not_steps[0]}.ok, which no step writes - make it a "
                            "step (a $(call step,...) rule and an entry in STEP_ORDER) or drop the prerequisite")
        if later:
            raise UserError(f"{where}: step {name} needs {later}, listed after it in "
                            "mfulib.pipeline.step_graph.STEP_ORDER - reorder STEP_ORDER so every step follows what "
                            "it needs")
        steps.append(Step(name, reports[name], own, tuple(dict.fromkeys(files.get(name, ()))), commands[name]))
    return tuple(steps)


@functools.lru_cache(maxsize=None)
def read_steps(makefile: str = os.path.join(REPO_ROOT, "Makefile")) -> tuple:
    """:func:`parse_makefile` of the project's Makefile (read once per process, on first use - a Makefile it cannot
    read breaks ``make status``, not every command that imports this module)."""
    with open(makefile, encoding="utf-8") as f:
        return parse_makefile(f.read(), makefile)


def judging_order(steps: tuple, waits: dict) -> list:
    """``steps`` in the order make status can judge them: each after every step it needs or waits for (``waits``:
    {step: [step]}, the search's conditional edges - flops waits for the probe, listed after it), otherwise in
    ``steps``' own order."""
    names = [s.name for s in steps]
    needs = {s.name: set(s.needs) | {n for n in waits.get(s.name, ()) if n in names} for s in steps}
    order, done = [], set()
    while len(order) < len(steps):
        nxt = next((s for s in steps if s.name not in done and needs[s.name] <= done), None)
        if nxt is None:  # a cycle through a conditional edge: judge the rest in the listed order
            nxt = next(s for s in steps if s.name not in done)
        order.append(nxt)
        done.add(nxt.name)
    return order


def on_make_path(steps: tuple, waits: dict) -> set:
    """The steps ``make all`` runs when they are not done: everything the last step (the decomposition) needs or
    waits for (``waits``), directly or through another step. The probe and the search are on it only through the
    search's conditional edges (the Makefile's ``SEARCH_EDGES``: with ``SEARCH=1``, or once make ran them in the
    work directory: the Makefile passes them to make status); off it, their own targets (``make search``) redo
    them."""
    by_name = {s.name: s for s in steps}
    seen, todo = set(), [steps[-1].name]
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        todo += list(by_name[name].needs) + list(waits.get(name, ()))
    return seen
