"""probe.json: what max_shape_probe.py (step 2a) tried and appended - its builder, writer and reader.

Provenance (``tool`` = ``max_shape_probe``, ``schema``, ``device``, ``command_line``, ...) +
``op_dir``, ``limits`` {max_bytes, max_ms, max_scale, bandwidth_gbps, bandwidth_source, l2_bytes, host_bytes,
device_free_bytes, verify_max_input_mb (verify's input cap of the backend, gate 1: 1 on cpu, null: none),
peak_tflops_max (the highest peak of peak.json, measured or nominal, TFLOP/s: gate 4's roofline floor; null without
one)}, ``groups`` [{key, layout, cases, notes}], ``symbols`` [{name, kind, group,
positions [[tensor, axis]...] (an attribute: [name, null]), followers [[input, axis | list index | null]...],
values (per case of ``cases``), cases, evidence [str], scaled: bool, weight: bool (a weight operand's axes: never
scaled)}], ``scale_dims`` [{symbol, why}], ``weights`` {operands [tensor names], output_biases [tensor names:
bias-named operands that follow a data GEMM's n], module_parameters [str], init_inputs, why} (what never scales, with the evidence),
``candidates`` [{candidate_id, source_case, ladder (its
ladder's symbols joined by "+"), scale (the product of the factors), factors {symbol: int factor}, input_bytes, gates [{gate: 1..5, name, ok: bool
| null (null: not checked, with the reason in detail), detail, value, limit; gate 3 also verified_by: full |
batch_slice | head_slice | row_slice (verify.json's, mfulib.verify.slices) | unverified (the whole reference did
not fit and no slice verified it: gate 3 fails, or passes marked under --accept-unverified-reference)}], verdict:
pass | fail | null (no verdict: cut by the budget, or superseded), superseded (only on a candidate
of an earlier run under another peak or wall-clock method that this run's ladders did not reach again: its old
verdict and why it was dropped; mfulib.search.probe.supersede), failed_gate:
int | null, new_case_id: int | null (its id in the case files once appended), same_as_case (optional: the
appended case whose line this candidate's scaled case equals - another ladder reached the shape first; its gates
and verdict are that candidate's, nothing appended twice), time_ms (gate 4: the median wall time
per call of back-to-back runs, :mod:`mfulib.core.wallclock`), flops, wall_s (seconds
the candidate took; each gate has its own ``wall_s``, gate 2 also ``waited_s``: the part the probe waited for a
trace started ahead), wall_figure (wall TFLOP/s = traced FLOPs / gate-4 time; GB/s
of inputs without matrix work), saturated (why the ladder ended at this passing factor, or null), flops_predicted
(the FLOPs the power law ``flops_law`` gives this candidate before its trace, or null)}], ``flops_law`` {group key:
{exponents {symbol: e}, n_cases, max_rel_residual} | {none: why}} (mfulib.search.flops_law: gate 4 may be decided on the
predicted FLOPs' roofline floor, gates 2-3 then ok null),
``ladders`` [{source_case, symbols, joint: bool, tried [[factor, passed]], best {factors, wall_figure} | null,
stopped (why the ladder ended), why (single: this symbol alone; joint: the two single ladders that gained most;
joint (greedy): the previous joint ladder gained over the earlier ones and this ladder's added symbol gained over
scale 1; or "not run: ..." with tried [], symbols the ones it would have joined or [])}] (per source case one
ladder per scaled symbol, then the joint pair; after every source's pair, source by source, the greedy joint
ladders of three or more symbols, mfulib.search.ladder.extend_joint), ``counts`` {tried, resumed,
passed_gate1, passed} (of the candidates),
``cut_candidate`` {candidate_id, source_case, scale, factors, gates_done, cut_in, wall_s, why} (the candidate the budget cut,
without a verdict: where its seconds went; absent when none was cut), ``baselines`` {"<source case>": {time_ms,
flops, input_bytes, figure, detail, wall_s}} (each source timed at scale 1, the saturation rule's starting point),
``wall_s`` (seconds of this run and the runs it resumed),
``appended`` {"<new_case_id>": {source_case, factors, scale, candidate_id, line (the case line as appended)}},
``complete`` (every planned candidate has a verdict), ``interrupted`` ("running" while a run is in progress - left
so by a killed run -, the reason a run stopped early, or null; one naming ``--budget-s`` is a run its budget cut:
:func:`budget_cut`), ``resumed`` [candidate ids whose verdict was reused
from the previous run], ``inputs`` {model.py, model_new.py: sha256}, ``made_from`` (written when the run ends:
:mod:`mfulib.schemas.provenance`; a run by hand with the settings of make's command line counts as make's probe step:
:func:`mfulib.pipeline.workdir_state.record_run`) and ``run_key`` {backend, seed, max_bytes,
max_ms, scale_symbols (the sorted names of the scaled symbols: two --scale-dims spellings of one choice are one run; an
earlier file's ``scale_dims`` spelling is resolved before the comparison), peak, saturation_stop, wall_clock (how
gate 4 timed: :data:`mfulib.core.wallclock.METHOD`; absent in older files)} (a
re-run reuses verdicts only for the same files and run key), ``sources``
(the source cases in the order their ladders run - a run cut by --budget-s lists those still to run; a source
found over --max-ms at scale 1 leaves it and the next case is appended), ``skipped_sources`` {case: why} (ranked
above the last source but not run: the backend's size cap, or over --max-ms at scale 1 by its roofline floor or
its first timing - then the next case by traced FLOPs took its place, each once; --cases: none does),
``traced_flops`` {case: tracer FLOPs}, ``backup`` {dir, files {name: sha256}, n_cases}
(the originals of the case files, put back by --restore).
"""
from __future__ import annotations

import shlex

from mfulib.core.errors import UserError
from mfulib.core.jsonio import write_json_atomic
from mfulib.schemas.common import read_work_json, wrong_type

SCHEMA = 1
TOOL = "max_shape_probe"
FILE_NAME = "probe.json"
BACKUP_DIR = ".probe_backup"
GATES = {1: "input bytes", 2: "reference accepts", 3: "ModelNew matches", 4: "one run time", 5: "effective bandwidth"}
VERDICTS = ("pass", "fail")


def gate(number: int, ok, detail: str, value=None, limit=None) -> dict:
    """One gate result: ``ok`` True/False (None: not checked, ``detail`` says why)."""
    return {"gate": number, "name": GATES[number], "ok": ok, "detail": detail, "value": value, "limit": limit}


def verdict_of(gates: list) -> tuple:
    """(verdict, failed_gate): the first gate with ok False fails the candidate."""
    for g in gates:
        if g["ok"] is False:
            return "fail", g["gate"]
    return "pass", None


def write_probe_json(path: str, doc: dict) -> None:
    """Write ``doc`` atomically (a reader never sees half a probe.json; an interrupted probe leaves a valid one)."""
    write_json_atomic(path, doc)


def read_probe_json(path: str) -> dict:
    """Read and check a probe.json; UserError naming the file, the field and the fix."""
    fix = "re-run max_shape_probe.py (make probe)"
    doc = read_work_json(path, fix, fix)
    if not isinstance(doc, dict) or doc.get("tool") != TOOL:
        raise UserError(f"{path}: not a max_shape_probe result (no tool={TOOL}) - {fix}")
    if not _is_int(doc.get("schema", 0)):
        raise wrong_type(path, "schema", doc.get("schema"), "an integer", fix)
    if doc.get("schema", 0) > SCHEMA:
        raise UserError(f"{path}: schema {doc.get('schema')} is newer than this tool ({SCHEMA}) - update the tool")
    for key, typ in (("symbols", list), ("candidates", list), ("appended", dict)):
        if not isinstance(doc.get(key), typ):
            raise wrong_type(path, key, doc.get(key), f"a JSON {typ.__name__}", fix)
    for key in ("baselines", "backup"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            raise wrong_type(path, key, doc[key], "a JSON object (or null)", fix)
    b = doc.get("backup")
    if b and not (isinstance(b.get("dir"), str) and isinstance(b.get("files"), dict) and _is_int(b.get("n_cases"))):
        raise wrong_type(path, "backup", b, "{dir: str, files: {name: sha256}, n_cases: int}", fix)
    for i, c in enumerate(doc["candidates"]):
        if not isinstance(c, dict) or not isinstance(c.get("candidate_id"), str) \
                or not _is_int(c.get("source_case")) or not _factors(c.get("factors")) \
                or not (c.get("scale") is None or _is_int(c["scale"])) \
                or not isinstance(c.get("gates", []), list):
            raise wrong_type(path, f"candidates[{i}]", c, "an object {candidate_id: str, source_case: int, scale: "
                             "int, factors: {symbol: int}, gates: [...], ...}", fix)
        if c.get("verdict") is not None and c["verdict"] not in VERDICTS:
            raise wrong_type(path, f"candidates[{i}].verdict", c["verdict"], "pass or fail", fix)
        if c.get("new_case_id") is not None and not _is_int(c["new_case_id"]):
            raise wrong_type(path, f"candidates[{i}].new_case_id", c["new_case_id"], "an integer or null", fix)
    for k, a in doc["appended"].items():
        if not str(k).isdigit() or not isinstance(a, dict) or not isinstance(a.get("line"), str) \
                or not _is_int(a.get("source_case")) or not _factors(a.get("factors")):
            raise wrong_type(path, f"appended[{k!r}]", a, "\"<new case id>\": {source_case: int, factors: "
                             "{symbol: int}, line: str, ...}", fix)
    return doc


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _factors(v) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and _is_int(f) for k, f in v.items())


def passing(doc: dict) -> list:
    """The candidates with verdict pass (the legal scaled variants), in the order they were tried."""
    return [c for c in doc.get("candidates") or [] if c.get("verdict") == "pass"]


#: probe.json ``interrupted`` while a run is in progress: a file that still says so was left by a killed run
RUNNING = "running"


#: what resumes a probe its budget cut: the cut ends the step ok (stamped), so only a larger budget - PROBE_ARGS is in
#: the probe step's run key - makes make run it again, from probe.json. PROBE_ARGS given replaces the whole value
#: (its other settings, e.g. --max-scale, back to their defaults), so the advice keeps the ones the probe ran with:
#: this text where they are unknown, :func:`resume_cut` where they are known (the work dir's ``.state/probe.settings``:
#: :func:`mfulib.pipeline.step_settings.probe_resume_cut`)
RESUME_CUT = "make probe with --budget-s <more> added to the PROBE_ARGS it ran with resumes it from probe.json"
_MORE = "<more>"


def resume_cut(probe_args: str | None) -> str:
    """:data:`RESUME_CUT` for a probe that ran with ``probe_args`` (its PROBE_ARGS; None: unknown, the generic text):
    ``make probe PROBE_ARGS='<them, --budget-s <more>>' resumes it from probe.json`` - an existing ``--budget-s``
    value replaced in place, else one appended."""
    if probe_args is None:
        return RESUME_CUT
    try:
        words = shlex.split(probe_args)
    except ValueError:  # unbalanced quotes: not something to build on
        return RESUME_CUT
    out, skip, found = [], False, False
    for w in words:
        if skip:
            skip = False
        elif w == "--budget-s" or w.startswith("--budget-s="):
            out += ["--budget-s", _MORE]
            skip, found = w == "--budget-s", True
        else:
            out.append(w)
    if not found:
        out += ["--budget-s", _MORE]
    text = " ".join(w if w == _MORE else shlex.quote(w) for w in out)
    return f"make probe PROBE_ARGS={shlex.quote(text)} resumes it from probe.json"


def budget_cut(doc: dict) -> str | None:
    """Why the probe of ``doc`` (a probe.json) stopped at its ``--budget-s`` - its ``interrupted`` text, e.g.
    "--budget-s 150 s reached" - when it did (``complete`` false and ``interrupted`` naming --budget-s: the ladders
    it did not finish were never tried, so a search over its cases is incomplete); None for a complete probe or one
    stopped otherwise (a Ctrl-C, a killed run)."""
    why = doc.get("interrupted") if isinstance(doc, dict) and not doc.get("complete") else None
    return why if isinstance(why, str) and "--budget-s" in why else None
