"""The state of a work directory's steps, the way the Makefile judges it: step 1 against the source choices it
was built from, every later step by its stamp and its report.

* Step 1 (prepare): ``prepare.json`` records the ``request`` (the source form and choices given: layout, V / ITER /
  VARIANT, BENCH / GEN / id, REF_ROOT / IMPL_ROOT / path, example, seed) and the ``sources`` it resolved to (path +
  sha256). :func:`prepare_verdict` compares them with the current command line and the current file *contents*:
  another choice, another resolved file (e.g. a new ``iter_<n>``) or changed content means redo (the old work
  directory is kept as a backup); a touch without a content change means nothing to do. The Makefile asks this at
  parse time (``prepare_op_dir.py ... --check``), so the sources are not mtime prerequisites.
* Steps 2-6: make writes ``<work>/.state/<step>.ok`` (:func:`stamp_path`) only after the step's script succeeded;
  the report keeps its name whatever happened. A step is **done** when its stamp is newer than everything it
  depends on (:data:`STEPS`, read from the Makefile's rules); **stale** when an input changed since; **failed**
  when it has no stamp and either make recorded the script's exit status (``<step>.failed``,
  :func:`failure_record`) or its report records a failure or an incomplete run (kept as evidence; make redoes
  the step); **not done** when a report is there but make recorded neither success nor failure (the run was
  killed, or the script ran outside make); **not run** otherwise. A script that writes an incomplete report
  outside make removes the step's stamp (:func:`invalidate`). :func:`step_states` gives the table ``make status``
  prints; :func:`seed_mismatch` warns when the steps' reports were drawn with different seeds.
"""
from __future__ import annotations

import os
import textwrap

from mfulib.core.jsonio import sha256
from mfulib.core.errors import UserError
from mfulib.core.jsonio import read_json
from mfulib.core.opdir import PREPARE_JSON
from mfulib.pipeline.step_settings import STATE_DIR, probe_resume_cut, read_settings, settings_path  # noqa: F401
from mfulib.pipeline.step_graph import Step, judging_order, on_make_path, read_steps  # noqa: F401  Step: a row of STEPS
from mfulib.schemas import provenance

# request keys -> the make variable that sets them (for the "what changed" message)
MAKE_NAMES = {"form": "source layout", "src": "V", "iter": "ITER", "variant": "VARIANT", "bench": "BENCH",
              "gen": "GEN", "id": "OP", "ref_root": "REF_ROOT", "impl_root": "IMPL_ROOT", "example": "OP",
              "entry": "--entry", "seed": "--seed", "ref": "--ref", "cases": "--cases", "impl": "--impl"}


#: the steps in make status's order, their reports and inputs - read from the Makefile's rules
#: (:mod:`mfulib.pipeline.step_graph`), the one place the graph is written
def __getattr__(name):
    """``STEPS``: the steps in make status's order (:func:`mfulib.pipeline.step_graph.read_steps`), read on first
    use, so that a Makefile it cannot read breaks make status with its reason, not every importer."""
    if name == "STEPS":
        return read_steps()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def stamp_path(work: str, step: str) -> str:
    """``<work>/.state/<step>.ok``: written by make after ``step`` succeeded (step 1's stamp is prepare.json)."""
    return os.path.join(work, PREPARE_JSON) if step == "prepare" else os.path.join(work, STATE_DIR, f"{step}.ok")


def failure_record(work: str, step: str):
    """The exit status make recorded for the last failed run of ``step`` (2-6), or None.

    The Makefile's ``step`` macro touches ``<work>/.state/<step>.started`` before the step's script, removes
    ``<step>.failed`` then, and writes the script's exit status to ``<work>/.state/<step>.failed`` when it failed
    (not for an exit status it accepted). A run killed by a signal (Ctrl-C) records nothing. A record older than
    the last ``.started`` (a later run began) does not count. Returns an int (or the file's text when it is not
    one)."""
    path = os.path.join(work, STATE_DIR, f"{step}.failed")
    if step == "prepare" or not os.path.exists(path):
        return None
    started = _mtime(os.path.join(work, STATE_DIR, f"{step}.started"))
    if started is not None and _mtime(path) < started:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else (text or "unknown")


def invalidate(work: str, step: str) -> bool:
    """Remove the stamp of ``step`` (2-6) in ``work``: a script that writes an incomplete or failed report outside
    make (e.g. the collector interrupted by hand after make's run) calls it, so the next ``make`` redoes the step.
    Returns whether a stamp was removed."""
    path = stamp_path(work, step)
    if step == "prepare" or not os.path.exists(path):
        return False
    os.unlink(path)
    return True


def make_record_path(work: str, step: str) -> str:
    """``<work>/.state/<step>.made_from.json``: the ``made_from`` of the step's last run by make (its settings and
    inputs), what a run by hand is compared with (:func:`record_run`)."""
    return os.path.join(work, STATE_DIR, f"{step}.made_from.json")


def _same_run(a: dict, b: dict) -> list:
    """The differences between two ``made_from`` blocks' settings and input digests ([] when the runs match)."""
    out = []
    sa, sb = a.get("settings") or {}, b.get("settings") or {}
    out += [f"{k} {sb.get(k)!r} -> {sa.get(k)!r}" for k in sorted(set(sa) | set(sb)) if sa.get(k) != sb.get(k)]
    fa, fb = a.get("files") or {}, b.get("files") or {}
    out += [f"{k} differs" for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]
    return out


def make_would_path(work: str, step: str) -> str:
    """``<work>/.state/<step>.make_would.json``: where make never ran ``step``, the ``made_from`` settings make's
    command line would give (:mod:`mfulib.pipeline.make_command`), derived by the last run by hand and compared with
    it (``make status`` says which settings differ)."""
    return os.path.join(work, STATE_DIR, f"{step}.make_would.json")


def hand_run_differences(work: str, step: str, block: dict):
    """How a run of ``step`` outside make (its report's ``made_from`` ``block``) differs from make's last run of it
    (:func:`make_record_path`), else from the run make's command line would be (:func:`make_would_path`): a list
    ([] = the same settings and inputs: it counts as make's), or None when there is neither to compare with."""
    for path in (make_record_path(work, step), make_would_path(work, step)):
        try:
            made = read_json(path)
        except (OSError, ValueError):
            continue
        if isinstance(made, dict):
            return _same_run(block, made)
    return None


def _make_would(work: str, step: str, block: dict, parse, script: str, drop) -> list:
    """The differences between the hand run's ``block`` and the run make would make of ``step`` now: its command
    line from the Makefile (:func:`mfulib.pipeline.make_command.make_step_command`), parsed by the step script's own
    parser (``parse``: argv -> namespace) into :func:`mfulib.schemas.provenance.settings_of` (without ``drop``);
    plus each step it needs that make has not done (no stamp). Stores make's side in :func:`make_would_path` (with
    ``setvars``: what make would write to ``.state/<step>.settings``)."""
    from mfulib.core.jsonio import write_json_atomic
    from mfulib.pipeline.make_command import make_step_command, script_arguments
    argv, setvars = make_step_command(work, step)
    settings = provenance.settings_of(parse(script_arguments(argv, script)), drop=drop)
    would = {"settings": settings, "files": block.get("files") or {}, "setvars": setvars}
    os.makedirs(os.path.join(work, STATE_DIR), exist_ok=True)
    write_json_atomic(make_would_path(work, step), would)
    row = next(s for s in read_steps() if s.name == step)
    return _same_run(block, would) + [f"{n} not done by make" for n in row.needs if not os.path.exists(
        stamp_path(work, n))]


def record_run(work: str, step: str, block: dict, log=print, parse=None, script: str = "", drop=()) -> None:
    """After ``step`` wrote its report with the ``made_from`` ``block`` in ``work``: a run by make stores the block
    as make's record (:func:`make_record_path`); a run by hand counts as make's only when its settings and inputs
    are the ones of make's last run - or, where make never ran the step and ``parse`` (the step script's
    ``parse_args``; ``script`` its file name, ``drop`` the destinations left out of its settings) is given, the
    ones make's command line would use now (:func:`_make_would`): then the step's stamp is (re)written (with
    ``.state/<step>.settings`` as make writes it), else it is removed so that make redoes the step - and says which
    on screen (``log``). UserError when make cannot be asked."""
    if block.get("by_make"):
        from mfulib.core.jsonio import write_json_atomic
        write_json_atomic(make_record_path(work, step), block)
        return
    setvars = None
    if os.path.exists(make_record_path(work, step)) or parse is None:
        diff = hand_run_differences(work, step, block)
    else:
        diff = _make_would(work, step, block, parse, script, drop)
        setvars = read_json(make_would_path(work, step)).get("setvars") or {}
    if diff is None:
        return
    stamp = stamp_path(work, step)
    if not diff:
        if os.path.isdir(os.path.dirname(stamp)):
            open(stamp, "a").close()
            os.utime(stamp)
            if setvars:  # as the Makefile's step macro records them
                with open(settings_path(work, step), "w", encoding="utf-8") as f:
                    f.write("".join(f"{k}={v}\n" for k, v in setvars.items()))
        log(f"{step}: run by hand with make's settings and inputs: counts as make's {step} step")
    else:
        invalidate(work, step)
        log(f"{step}: run by hand with other settings or inputs than make's ({'; '.join(diff[:4])}): "
            "make status shows it not done and the next make redoes it")


def failed_report(path: str):
    """Why the report at ``path`` is a failed step's report (str), or None: it is one of the step reports of
    :data:`STEPS`, records a failure or an incomplete run (:func:`report_verdict`) and make did not accept it (no
    stamp newer than it: ``ACCEPT_VERIFY_FAILURES=1``'s accepted per-case failures are no step failure)."""
    name, work = os.path.basename(path), os.path.dirname(os.path.abspath(path))
    step = next((s.name for s in read_steps() if s.report == name and s.name != "prepare"), None)
    if step is None:
        return None
    stamp = _mtime(stamp_path(work, step))
    if stamp is not None and stamp >= (_mtime(path) or 0):
        return None
    ok, detail = report_verdict(step, path)
    return None if ok else (detail[:160] + ("..." if len(detail) > 160 else "") if detail else "failed")


def judge_report(path: str, doc: dict | None = None) -> list:
    """:func:`mfulib.schemas.provenance.judge` of the report at ``path`` (``doc``: its content when already read),
    with a failed step's report (:func:`failed_report`) as the refusing input."""
    if doc is None:
        try:
            doc = read_json(path)
        except (OSError, ValueError):
            return []
    return provenance.judge(doc, os.path.dirname(os.path.abspath(path)), failed=failed_report)


def check_current(path: str, doc: dict | None = None, refuse: bool = True) -> list:
    """The stale reasons of the report at ``path`` (:func:`judge_report`; [] when current). With ``refuse``, a
    recorded input that changed and is now a failed step's report raises UserError (naming the report, the input
    and the fix): a step must not build on it. A report given for comparison (``--report``: an earlier round) is
    judged with ``refuse`` False - against its own recorded inputs, marked, never refused."""
    issues = judge_report(path, doc)
    bad = provenance.refusals(issues)
    if refuse and bad:
        raise UserError(f"{path}: made from inputs that changed since, and {bad[0]} - it cannot be built on: fix that "
                        f"step and re-run it and the steps after it (make status OP=<op> shows which), or give this "
                        "report as --report to read it as an earlier round")
    return provenance.stale_reasons(issues)


# ------------------------------------------------------------------------------------------------ step 1


def source_record(sources: dict) -> dict:
    """{name: {path, sha256}} of the resolved source files ``sources`` ({ref|cases|impl|flops: path or None})."""
    return {k: {"path": os.path.abspath(p), "sha256": sha256(p)} for k, p in sources.items() if p}


def _show(value) -> str:
    return "(unset)" if value is None else repr(value)


def prepare_verdict(work: str, request: dict, sources: dict) -> tuple:
    """(verdict, reason) of step 1 for the work directory ``work``.

    ``request``: the source form and choices of the current command line (prepare_op_dir.py builds it);
    ``sources``: {ref|cases|impl|flops: path} they resolve to now. Verdicts: ``new`` (no prepare.json), ``redo``
    (reason says what changed: a choice, a resolved file, a file's content), ``ok``.
    """
    path = os.path.join(work, PREPARE_JSON)
    if not os.path.exists(path):
        return "new", f"{path} does not exist yet"
    try:
        doc = read_json(path)
    except (OSError, ValueError) as exc:
        return "redo", f"{path} is unreadable ({exc})"
    if not isinstance(doc, dict) or "request" not in doc:
        return "redo", f"{path} records no source choices (made by an older version)"
    changes = [f"{MAKE_NAMES.get(k, k)} {_show(doc['request'].get(k))} -> {_show(request.get(k))}"
               for k in sorted(set(doc["request"]) | set(request)) if doc["request"].get(k) != request.get(k)]
    recorded, choice_changed = doc.get("sources") or {}, bool(changes)
    for k in sorted(set(recorded) | {k for k, p in sources.items() if p}):
        old, new = (recorded.get(k) or {}).get("path"), sources.get(k)
        new = os.path.abspath(new) if new else None
        if old != new:
            if not choice_changed:  # a changed choice explains the other files; otherwise say which file changed
                changes.append(f"{k} file {old} -> {new}")
        elif new and os.path.isfile(new) and sha256(new) != recorded[k].get("sha256"):
            changes.append(f"{k} content changed ({new})")
    if changes:
        return "redo", "; ".join(changes)
    return "ok", "sources and choices unchanged since prepare.json was written"


# ------------------------------------------------------------------------------------------------ steps 2-6


def report_verdict(step: str, path: str) -> tuple:
    """(ok, detail) of a step's report: ok False when it records a failure or an incomplete run, None when it cannot
    be read (not valid JSON, wrong structure) - ``detail`` says why."""
    from mfulib.schemas import decompose_json, flops_check_json, peak_json, performance_json, verify_json
    try:
        if step == "verify":
            ok, problems = verify_json.completeness(verify_json.read_verify_json(path))
        elif step == "flops":
            ok, problems = flops_check_json.completeness(read_json(path))
        elif step == "collect":
            rep = performance_json.load_report(path)
            ok, problems = performance_json.completeness(rep)
            timed = [c for c in rep["per_case"] if not c.get("skipped")]
            if ok and not rep.get("n_cases_valid"):
                ok, problems = False, ["no selected case has a kernel time"] + problems
            elif ok:
                problems = [f"{rep['n_cases_valid']} of {len(timed)} timed cases valid, "
                            f"{len(rep['per_case']) - len(timed)} skipped"] + problems
        elif step == "peak":
            peak = peak_json.read_peak_json(path)
            ok, problems = not peak.get("interrupted"), (["interrupted"] if peak.get("interrupted") else [])
        elif step == "probe":
            from mfulib.schemas import probe_json
            doc = probe_json.read_probe_json(path)
            ok = bool(doc.get("complete"))
            problems = [f"{len(doc.get('appended') or {})} scaled case(s) appended from "
                        f"{len(doc.get('candidates') or [])} candidate(s)"]
            if not ok:
                problems.append(f"incomplete: {doc.get('interrupted') or 'interrupted'} ("
                                + (probe_resume_cut(os.path.dirname(path)) if probe_json.budget_cut(doc)
                                   else "make probe resumes") + ")")
        elif step == "search":
            ok, problems = _search_verdict(path)
        elif step == "decompose":
            ok, problems = decompose_json.completeness(decompose_json.read_decompose_json(path))
        else:
            ok, problems = True, []
    except (UserError, OSError, ValueError, RecursionError) as exc:
        return None, f"its report cannot be read ({type(exc).__name__}: {str(exc)[:200]})"
    return ok, "; ".join(problems)


def _search_verdict(path: str) -> tuple:
    """(ok, problems) of a grid_search.json: its best point (with the re-timing's run count, spread and tie), led by
    "search incomplete" when the budget cut the probe (the probe.json beside it, else the search's ``probe_cut``:
    :func:`mfulib.schemas.probe_json.budget_cut`) - the limit is then a lower bound, not a plain result."""
    from mfulib.schemas import grid_search_json, probe_json
    doc = grid_search_json.read_grid_search_json(path)
    text = grid_search_json.best_text(doc)
    probe_path = os.path.join(os.path.dirname(path), probe_json.FILE_NAME)
    try:
        cut = probe_json.budget_cut(read_json(probe_path)) if os.path.exists(probe_path) else None
    except (OSError, ValueError):
        cut = None
    cut = cut or doc.get("probe_cut")
    if not doc.get("complete") and doc.get("interrupted"):
        return False, [f"interrupted ({doc['interrupted']}); best so far: {grid_search_json.best_so_far(doc)}"]
    if cut:
        return bool(doc.get("complete")), [f"search incomplete: the probe was cut by its budget ({cut}); best so far: "
                                           f"{text or 'none'}; {probe_resume_cut(os.path.dirname(path))}, then "
                                           "make search"]
    return bool(doc.get("complete")), [f"best: {text}" if text else "no best point"]


def _stopped_report(path: str) -> bool:
    """Whether the report at ``path`` records that its run was stopped before its end (``complete`` false and an
    ``interrupted`` reason: a stopped search, probe or collection), rather than a run that ended and failed."""
    try:
        doc = read_json(path)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("complete") is False and bool(doc.get("interrupted"))


def _made_from(path: str):
    """The ``made_from`` block of the report at ``path``, or None (unreadable, or made before the record existed)."""
    try:
        doc = read_json(path)
    except (OSError, ValueError):
        return None
    block = doc.get(provenance.KEY) if isinstance(doc, dict) else None
    return block if isinstance(block, dict) else None


def _mtime(path):
    return os.path.getmtime(path) if os.path.exists(path) else None


def step_states(work: str, prepare: tuple, settings_changed: dict | None = None, waits: dict | None = None) -> list:
    """One row per step of :data:`STEPS`: {step, state (done | stale | failed | not done | not run | error), detail,
    report}; "not done": a report without make's stamp from a run that was stopped or run by hand.

    ``prepare``: :func:`prepare_verdict`'s (verdict, reason), or ("error", message) when the sources cannot be
    resolved. ``settings_changed``: {step: [make variable]} given with other values than the step last ran with
    (the Makefile's ``settings_changed``): such a done step is stale, and so are the steps after it. ``waits``:
    {step: [step]}, the search's conditional edges make takes now (the Makefile's ``SEARCH_EDGES``, e.g.
    ``{"collect": ["search"], "flops": ["probe"]}`` with ``SEARCH=1`` or once make ran the probe and the search in
    ``work``): judged as the step's own needs, as make does - a search whose stamp a hand run with other settings
    removed makes the collection stale. A step off make's path (:func:`mfulib.pipeline.step_graph.on_make_path`)
    that is to be redone says which target redoes it."""
    settings_changed, waits = settings_changed or {}, waits or {}
    steps = read_steps()
    path = on_make_path(steps, waits)
    rows, state = {}, {}
    for step in judging_order(steps, waits):
        redo = "make redoes it" if step.name in path else \
            f"make {step.name} redoes it (make all does only with SEARCH=1)"
        report = os.path.join(work, step.report)
        if step.name == "prepare":
            verdict, why = prepare
            st = {"ok": "done", "redo": "stale", "new": "not run"}.get(verdict, "error")
            rows["prepare"] = {"step": "prepare", "state": st, "detail": why, "report": report}
            state["prepare"] = st
            continue
        stamp = stamp_path(work, step.name)
        needs = tuple(dict.fromkeys(tuple(step.needs) + tuple(waits.get(step.name, ()))))
        upstream = [f"{n} {state[n]}" for n in needs if state.get(n) != "done"]
        deps = [stamp_path(work, n) for n in needs] + [os.path.join(work, f) for f in step.files]
        have_report = os.path.exists(report)
        ok, detail = report_verdict(step.name, report) if have_report else (None, "")
        if os.path.exists(stamp):
            newer = [os.path.relpath(d, work) for d in deps if (_mtime(d) or 0) > _mtime(stamp)]
            given = settings_changed.get(step.name) or []
            judged = provenance.stale_reasons(judge_report(report)) if have_report and ok is not None else []
            newer = [n for n in newer if not any(j.startswith(f"{n} changed since") for j in judged)]  # said once,
            # by content (the report's record) rather than by file time
            if upstream or newer or given or judged:
                st, detail = "stale", "; ".join(upstream + [f"{n} changed since this step ran" for n in newer] +
                                                 ([f"{', '.join(given)} given with another value than its last run"]
                                                  if given else []) + judged)
            elif not have_report:
                st, detail = "stale", f"its report {report} is gone"
            elif ok is None:  # the stamp stands, so make takes the step as done - but nothing can read its report
                st, detail = "error", f"{detail}; make takes the step as done - make FORCE=1 {step.name} redoes it"
            else:  # make's view: the stamp stands (a failure it accepted, e.g. ACCEPT_VERIFY_FAILURES=1, is listed)
                st, detail = "done", (detail if ok else f"accepted: {detail}")
        elif (rc := failure_record(work, step.name)) is not None:
            st = "failed"
            started = _mtime(os.path.join(work, STATE_DIR, f"{step.name}.started"))
            failed_at = _mtime(os.path.join(work, STATE_DIR, f"{step.name}.failed"))
            if have_report and ok and failed_at is not None and _mtime(report) > failed_at:
                what = "its report was rewritten since, by a run outside make, and passes"
            elif have_report and (started is None or _mtime(report) >= started):
                what = detail or "its report is kept"
            elif have_report:
                what = "no new report (the one there is from an earlier run)"
            else:
                what = "no report written"
            detail = f"exit status {rc}; {what}; {redo}"  # the report's own words first: status cuts at 110
        elif not have_report:
            st, detail = "not run", "; ".join(upstream)
        elif not ok:  # a report that says it was stopped (Ctrl-C, SIGTERM, the batch's timeout) is not a failure
            st = "not done" if _stopped_report(report) else "failed"
            detail = f"stopped, {redo}: {detail}" if st == "not done" else detail
        else:
            block = _made_from(report)
            diff = hand_run_differences(work, step.name, block) if block and not block.get("by_make") else None
            why = (f"run by hand with other settings or inputs than make's ({'; '.join(diff[:3])})" if diff else
                   f"a step it waits for is not done: {', '.join(upstream)}" if upstream else
                   "interrupted, or run outside make")
            st, detail = "not done", (f"report present but make recorded no success ({why}): {redo}" +
                                      (f"; {detail}" if detail else ""))
        state[step.name] = st
        rows[step.name] = {"step": step.name, "state": st, "detail": detail, "report": report if have_report else ""}
    return [rows[s.name] for s in steps]


SEEDED_REPORTS = ("verify.json", "flops_check.json", "performance.json")


def recorded_seeds(work: str) -> dict:
    """{report file name: seed} of the reports of ``work`` that draw the cases' random inputs (verify,
    check_flops, the collector: each writes its ``--seed`` as the top-level ``seed``). A report that is absent,
    unreadable or records no seed is left out."""
    out = {}
    for name in SEEDED_REPORTS:
        path = os.path.join(work, name)
        if not os.path.exists(path):
            continue
        try:
            doc = read_json(path)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("seed") is not None:
            out[name] = doc["seed"]
    return out


def seed_mismatch(work: str):
    """A warning (str) when the reports of ``work`` were made with different ``--seed`` values (e.g. ``make all
    SEED=1``, then ``make all COLLECT_ARGS=...`` re-ran the collector with the default SEED 0 while verify kept
    seed 1): the cases were verified, checked and timed on different random inputs. None when they agree (or
    fewer than two record a seed)."""
    seeds = recorded_seeds(work)
    if len(set(map(repr, seeds.values()))) < 2:
        return None
    listed = ", ".join(f"{name} seed {seed!r}" for name, seed in seeds.items())
    return (f"{work}: the steps ran with different seeds ({listed}) - the cases were verified, checked and timed on "
            "different random inputs; re-run every step with one seed: make SEED=<n> all (a SEED given on the "
            "command line redoes each step that ran with another), or FORCE=1 to rebuild the work directory")


def case_file_problem(work: str):
    """The error every step of ``work`` would stop at on its case file (a malformed line: file, line, case and the
    fix, from :func:`mfulib.core.cases.read_case_file`), else None; None too before step 1 made the directory."""
    if not os.path.exists(os.path.join(work, PREPARE_JSON)):
        return None
    from mfulib.core.cases import read_case_file
    from mfulib.core.opdir import OpDir
    try:
        read_case_file(OpDir(work).cases_path)
    except UserError as exc:
        return str(exc)
    return None


def status_table(work: str, prepare: tuple, settings_changed: dict | None = None, waits: dict | None = None) -> str:
    """The ``make status`` table (tabulate) of :func:`step_states` for ``work`` (``settings_changed``, ``waits``:
    its), then the case file's error (:func:`case_file_problem`: a step that failed on it, or has not run, would
    otherwise say only "failed" or "not run") and :func:`seed_mismatch`'s warning when the steps ran with different
    seeds."""
    from tabulate import tabulate
    rows = step_states(work, prepare, settings_changed, waits)
    body = [[r["step"], r["state"], textwrap.fill(r["detail"] or "", 80), r["report"]] for r in rows]  # wrapped, not cut
    mixed, bad = seed_mismatch(work), case_file_problem(work)
    html = os.path.join(work, "report.html")
    record = provenance.html_record(html) if os.path.exists(html) else None
    old = provenance.stale_reasons(provenance.judge(record, work)) if record else []
    return (f"work directory {work}\n" + tabulate(body, headers=["step", "state", "detail", "report"])
            + (f"\nerror: {bad}" if bad else "") + (f"\nwarning: {mixed}" if mixed else "")
            + (f"\nreport.html: stale ({'; '.join(old)}) - make report renders it again" if old else ""))
