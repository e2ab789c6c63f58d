"""Iterations from a foreign profile's own structure: the ranges its author recorded, before any guess.

Sources, in the order they are tried (the first present wins; the label is the case's ``iterations_from``):

* ``mfu_iter`` - this tool's ``mfu::iter::<i>`` ranges (or its marker kernels on the NPU, ``marker_kernels``):
  read by the loaders (:func:`mfulib.backends.cuda.trace_launches`, :func:`mfulib.profiles.kernels.assign_by_markers`);
* ``profiler_step`` - torch.profiler's ``ProfilerStep#N`` ranges (one per ``prof.step()``; chrome traces), or the
  ``Step Id`` column torch_npu writes into ``kernel_details.csv`` when a schedule gives steps
  (docs/sources.md#msprof-csv);
* ``range:NAME`` - the user's ``record_function`` ranges (chrome-trace ``user_annotation`` events). Names that
  differ only in a trailing number (``iter_0``, ``iter_1``) are one range family, ``NAME#``. Where several names
  hold kernels (nested or side by side) the one covering the most of the operator's launches wins, then the one
  with the fewest instances (the coarsest: each instance a whole iteration, not a phase of one); a family whose
  instances alternate between kernel sequences (A, B, A, B: phases of an iteration) is no iteration and is passed
  over, as is a name with one instance holding kernels (a range around the whole run, it splits nothing);
  ``--range NAME`` picks one;
* ``repeating_sequence`` - none of these: :func:`mfulib.collect.from_prof.iterations.delimit_by_sequence`.

A kernel belongs to the range instance holding its host launch (the CUDA runtime call linked by ``correlation``),
so a device running behind the host does not move kernels into the next range. NVTX ranges are written by Nsight
Systems, not by torch.profiler's chrome trace, and mstx ranges by msprof into its SQLite export only (the CSV
exports carry no range column): neither is read here.
"""
from __future__ import annotations

import re

from mfulib.backends.base import range_of
from mfulib.core.errors import UserError
from mfulib.profiles import kernels as _kernels

STEP_RE = re.compile(r"^ProfilerStep#\d+$")
OWN_RANGE_RE = re.compile(r"^mfu::")
_TRAILING_NUMBER = re.compile(r"^(.*?[^\d#_:\- ])[#_:\- ]?\d+$")


def family(name: str) -> str:
    """The range family of a ``record_function`` name: ``iter_3`` -> ``iter#``; a name without a trailing number
    is its own family."""
    m = _TRAILING_NUMBER.match(name)
    return m.group(1) + "#" if m else name


def range_sets(events) -> dict:
    """``{label: [(start_ns, end_ns, instance, name)]}`` of the iteration-like host ranges of a chrome trace:
    ``profiler_step`` and ``range:<family>`` (this tool's ``mfu::`` ranges excluded). Instances of one label that
    overlap an earlier one (recursion, nesting of one name) are dropped, so each label's instances are disjoint."""
    raw = {}
    for e in events:
        cat, name = e.get("cat"), str(e.get("name", ""))
        if cat not in ("user_annotation", "cpu_op") or OWN_RANGE_RE.match(name):
            continue
        if STEP_RE.match(name):
            label = "profiler_step"
        elif cat == "user_annotation":
            label = "range:" + family(name)
        else:
            continue
        raw.setdefault(label, []).append((e["ts_ns"], e["ts_ns"] + e["dur_ns"], name))
    out = {}
    for label, spans in raw.items():
        kept = []
        for s, t, name in sorted(spans):
            if not kept or s >= kept[-1][1]:
                kept.append((s, t, name))
        out[label] = [(s, t, i, name) for i, (s, t, name) in enumerate(kept)]
    return out


def _anchor(row):
    """The time that places a kernel in a range: its host launch, else its own start."""
    return row.get("host_ns") if row.get("host_ns") is not None else row.get("start_ns")


def choose(sets: dict, rows, range_name: str | None = None):
    """``(label, ranges, flags)`` of the range set that delimits the iterations of ``rows`` (launch rows with
    ``host_ns``), or ``(None, None, flags)`` when no set holds a kernel of the operator.

    ``range_name`` (``--range``): an exact range name picks that name's instances only (``iteration_3``,
    ``ProfilerStep#5``); a family, spelled as the messages show it (``iteration#``, ``ProfilerStep#N``) or by its
    prefix (``iteration_``, ``ProfilerStep``), picks every instance of the family. Raises UserError when it names no
    range of the profile holding a kernel (the names found listed)."""
    ops = [r for r in rows if not _kernels.is_harness(r.get("name"))]
    where = {label: [range_of(_anchor(r), spans) for r in ops] for label, spans in sets.items()}
    cover = {label: sum(1 for i in idx if i is not None) for label, idx in where.items()}
    instances = {label: len({i for i in idx if i is not None}) for label, idx in where.items()}
    flags = []
    if range_name:
        label, spans = _by_name(sets, range_name)
        if label is None or not any(range_of(_anchor(r), spans) is not None for r in ops):
            names = sorted(f"{_show(lb)} ({cover[lb]} kernels)" for lb in sets) or ["none"]
            raise UserError(f"--range {range_name}: no such range holds a kernel of the profile; its ranges: "
                            f"{', '.join(names[:8])} - give one of them (a family, or one name of it), or leave "
                            "--range out")
        return label, spans, [f"iterations from the {_show(label)} ranges ({len(spans)} instance(s), --range "
                              f"{range_name})"]
    held = {label: n for label, n in cover.items() if instances[label] >= 2}  # one range around all: no split
    alternating = sorted(lb for lb in held if _alternates(ops, where[lb]))
    if not held or len(alternating) == len(held):
        return None, None, flags
    if "profiler_step" in held and "profiler_step" not in alternating:
        label = "profiler_step"
    else:  # the most launches covered, then the coarsest family (each instance one whole iteration)
        label = min((lb for lb in held if lb not in alternating), key=lambda lb: (-held[lb], instances[lb], lb))
    others = sorted(lb for lb in held if lb != label and lb not in alternating)
    text = (f"iterations from the profile's own {_show(label)} ranges ({instances[label]} instance(s) holding "
            f"{held[label]} of {len(ops)} launches)")
    if others:
        text += (f"; other ranges holding kernels: {', '.join(_show(lb) for lb in others[:4])} - --range NAME "
                 "picks another")
    if alternating:
        text += (f"; passed over (their instances alternate between kernel sequences, so each holds a part of an "
                 f"iteration): {', '.join(_show(lb) for lb in alternating[:4])}")
    flags.append(text)
    return label, sets[label], flags


def _alternates(ops, where) -> bool:
    """True when the kernel-name sequences of a family's instances (after the first, which may hold a warm-up or be
    cut) repeat with a period of two or more instances: A, B, A, B... - each instance is a part of an iteration."""
    seqs = {}
    for r, i in zip(ops, where):
        if i is not None:
            seqs.setdefault(i, []).append(r.get("name"))
    tail = [tuple(seqs[i]) for i in sorted(seqs)][1:]
    for p in range(2, len(tail) // 2 + 1):
        if all(tail[j] == tail[j + p] for j in range(len(tail) - p)):
            return len(set(tail[:p])) >= 2  # a cycle of different sequences, not one sequence repeated
    return False


def _by_name(sets: dict, range_name: str):
    """``(label, spans)`` that ``--range range_name`` picks from ``sets`` (see :func:`choose`), or ``(None, None)``;
    an exact name's instances are renumbered 0.. in their order."""
    if range_name in ("ProfilerStep", "ProfilerStep#", "ProfilerStep#N") and "profiler_step" in sets:
        return "profiler_step", sets["profiler_step"]
    if range_name[-1:] in "#_:- " and "range:" + range_name.rstrip("#_:- ") + "#" in sets:
        label = "range:" + range_name.rstrip("#_:- ") + "#"
        return label, sets[label]
    for label, spans in sets.items():
        exact = [sp for sp in spans if sp[3] == range_name]
        if exact:
            return "range:" + range_name, [(s, t, i, name) for i, (s, t, _, name) in enumerate(exact)]
    label = "range:" + range_name
    return (label, sets[label]) if label in sets else (None, None)


def _show(label: str) -> str:
    return "ProfilerStep#N" if label == "profiler_step" else f"record_function '{label[len('range:'):]}'"


def tag(rows, spans):
    """Rows tagged with the index of the range instance holding their host launch (None outside every one)."""
    return [dict(r, iteration=range_of(_anchor(r), spans)) for r in rows]


def tag_by_step_id(rows):
    """``(rows, n_steps)``: rows of a torch_npu ``kernel_details.csv`` tagged by their ``Step Id`` (steps numbered
    0.. in their own order); ``n_steps`` 0 (rows untouched) when no row has one."""
    steps = sorted({r["step_id"] for r in rows if isinstance(r.get("step_id"), int)})
    if not steps:
        return rows, 0
    index = {s: i for i, s in enumerate(steps)}
    return [dict(r, iteration=index.get(r.get("step_id"))) for r in rows], len(steps)
