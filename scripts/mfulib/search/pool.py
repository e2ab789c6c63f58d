"""The search pool of step 2b (mfulib/search/grid.py): probe.json's appended cases, the FLOPs that rank the
original cases, and the pool itself.

* :func:`read_probe`: the parts of probe.json (:mod:`mfulib.schemas.probe_json`; written by max_shape_probe.py) the
  search needs;
* :func:`trace_flops`: the reference's matrix FLOPs per case from ``check_flops.py --tracer-only`` (a subprocess,
  max_shape_probe.py's ``--flops-tool``), :func:`flops_py_values`: flops.py's, when it needs no forward args;
* :func:`build_pool`: the top-N original cases by FLOPs (bytes for an operator without matrix work) at scale 1 plus the
  probe's legal variants of them; the original top 3 are always in the pool (SKILL.md step 2;
  kb/ops/triton/guides/tooling/mfu_max_shape_search.md section 4: different cases take different code paths - one public
  operator's case ran a single kernel at 8x the MFU).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

from mfulib.core.paths import SCRIPTS_DIR
from mfulib.core.definitions import is_number
from mfulib.core import wallclock
from mfulib.core.errors import UserError
from mfulib.core.jsonio import read_json
from mfulib.schemas import grid_search_json as _gs
from mfulib.core.opdir import OpDir
from mfulib.core.symbols import factors_label

CHECK_FLOPS = os.path.join(SCRIPTS_DIR, "check_flops.py")
ALWAYS_TOP = 3  # the original top 3 are always in the pool (different cases take different code paths)



def read_probe(path: str) -> dict | None:
    """The parts of probe.json (:mod:`mfulib.schemas.probe_json`, written by max_shape_probe.py) the search reads, or
    None when ``path`` does not exist: {"appended": {case id: {source_case, factors, scale (None when not recorded)}},
    "verdicts": {case id: verdict of the candidate that made it}, "complete": bool, "interrupted" (why it stopped
    early, or None: :func:`mfulib.schemas.probe_json.budget_cut` reads it), "traced": {case id: {flops, status,
    reason, from}} (the probe's tracer counts: ``traced_flops`` of the originals, ``flops`` of passed candidates),
    "seed": the probe's seed (``run_key.seed``), whose draw those counts come from, "backend", "inputs" (model.py /
    model_new.py sha256), "timings": {case id: {time_ms, from}} (gate 4's median wall clock per call of each passed
    candidate, the scale-1 baseline of each source case), "wall_clock": how they were timed (``run_key.wall_clock``,
    :data:`mfulib.core.wallclock.METHOD`; None in files older than it), "n_originals": the case file's original
    cases (``backup.n_cases``; None without a backup record), "lines": {case id: the JSON line the probe appended}}.
    Raises UserError naming the file for a malformed one.

    The reader is small on purpose: it can be swapped for the probe's own schema module."""
    if not path or not os.path.exists(path):
        return None
    try:
        doc = read_json(path)
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON ({exc}) - re-run the probe (make probe)") from None
    appended = doc.get("appended") if isinstance(doc, dict) else None
    if not isinstance(appended, dict):
        raise UserError(f"{path}: no \"appended\" object - not a max_shape_probe.py result; re-run make probe")
    fix = "re-run the probe (make probe)"
    if doc.get("baselines") is not None and not isinstance(doc["baselines"], dict):
        raise UserError(f"{path}: baselines is {type(doc['baselines']).__name__}, not an object - {fix}")
    for i, c in enumerate(doc.get("candidates") or []):
        nid = c.get("new_case_id") if isinstance(c, dict) else None
        if nid is not None and (not isinstance(nid, int) or isinstance(nid, bool)):
            raise UserError(f"{path}: candidates[{i}].new_case_id is {nid!r}, not a case id - {fix}")
    out = {}
    for key, origin in appended.items():
        try:
            cid = int(key)
        except (TypeError, ValueError):
            raise UserError(f"{path}: appended key {key!r} is not a case id - re-run make probe") from None
        if not isinstance(origin, dict) or not isinstance(origin.get("source_case"), int) or \
                not isinstance(origin.get("factors", {}), dict) or \
                not all(isinstance(f, int) and not isinstance(f, bool) for f in (origin.get("factors") or {}).values()):
            raise UserError(f"{path}: appended[{key}] is not {{source_case: int, factors: {{symbol: factor}}}} - "
                            "re-run make probe")
        out[cid] = {"source_case": origin["source_case"], "factors": dict(origin.get("factors") or {}),
                    "scale": origin.get("scale") if is_number(origin.get("scale")) else None}
    cands = [c for c in doc.get("candidates") or [] if isinstance(c, dict) and c.get("new_case_id") is not None]
    verdicts = {c["new_case_id"]: c.get("verdict") for c in cands}
    traced = {}  # the probe's tracer counts (gate 2 of a candidate; the ranking of the originals)
    for key, v in (doc.get("traced_flops") or {}).items():
        if str(key).isdigit() and is_number(v):
            traced[int(key)] = {"flops": float(v), "status": "pass", "reason": None, "from": "probe.json"}
    for c in cands:
        if c.get("verdict") == "pass" and is_number(c.get("flops")):
            traced[c["new_case_id"]] = {"flops": float(c["flops"]), "status": "pass", "reason": None,
                                        "from": "probe.json"}
    run_key = doc.get("run_key") if isinstance(doc.get("run_key"), dict) else {}
    timings = {}  # the probe's wall clock per call: gate 4 of a passed candidate, the scale-1 baseline of a source
    for key, b in (doc.get("baselines") or {}).items():
        if str(key).isdigit() and isinstance(b, dict) and is_number(b.get("time_ms")) and b["time_ms"] > 0:
            timings[int(key)] = {"time_ms": float(b["time_ms"]), "from": "probe.json baselines (scale 1)"}
    for c in cands:
        if c.get("verdict") == "pass" and is_number(c.get("time_ms")) and c["time_ms"] > 0:
            timings[c["new_case_id"]] = {"time_ms": float(c["time_ms"]), "from": f"probe.json gate 4 of "
                                                                                 f"{c.get('candidate_id')}"}
    backup = doc.get("backup") if isinstance(doc.get("backup"), dict) else {}
    n_orig = backup.get("n_cases") if isinstance(backup.get("n_cases"), int) else None
    lines = {int(k): v.get("line") for k, v in appended.items() if isinstance(v.get("line"), str)}
    return {"appended": out, "n_originals": n_orig, "lines": lines, "complete": bool(doc.get("complete")),
            "verdicts": verdicts,
            "interrupted": doc.get("interrupted"), "traced": traced,
            "seed": run_key.get("seed"), "backend": run_key.get("backend"), "inputs": doc.get("inputs"),
            "timings": timings, "wall_clock": run_key.get("wall_clock")}


def check_probe_cases(probe: dict | None, probe_path: str, cases_path: str, cases: list) -> None:
    """Refuse a probe.json that no longer describes the case file: the probe appended its cases after the
    ``n_originals`` original lines, so every line after them must be one of its ``appended`` entries (the same case),
    and every entry a line. A hand-edited probe.json (an entry removed) would otherwise make a scaled case look like
    an original at scale 1, and the search would report it so. ``cases``: the case file's parsed lines. UserError
    naming both files, the cases and the fix; nothing for a probe.json without a backup record (older files)."""
    import json
    if not probe or probe.get("n_originals") is None:
        return
    n0, ids = probe["n_originals"], set(probe["appended"])
    after = set(range(n0, len(cases)))
    fix = (f"restore {probe_path} (make probe wrote it), or undo the probe - python3 scripts/max_shape_probe.py "
           f"--dir <work dir> --restore puts the original {n0} case(s) back - and run make probe again")
    if ids != after:
        unlisted, missing = sorted(after - ids), sorted(ids - after)
        raise UserError(f"{cases_path} and {probe_path} disagree: "
                        + "; ".join(([f"case(s) {unlisted} come after the {n0} original case(s) (lines the probe "
                                      "appended) but probe.json's appended does not list them"] if unlisted else []) +
                                    ([f"appended lists case(s) {missing} the case file does not have (a probe "
                                      "stopped while writing leaves this: make probe resumes it and writes them)"]
                                     if missing else []))
                        + f" - was probe.json edited by hand? {fix}")
    for cid, line in sorted((probe.get("lines") or {}).items()):
        try:
            same = json.loads(line) == cases[cid]
        except ValueError:
            same = False
        if not same:
            raise UserError(f"{cases_path}: case {cid} is not the line {probe_path} records for it (appended[{cid}]) "
                            f"- {fix}")


def probe_timings(probe: dict | None, backend: str, seed: int, inputs: dict) -> tuple:
    """({case id: {time_ms, from}}, why): the probe's wall-clock timings stage 1 may reuse - only when the probe
    ran on the same backend with the same seed over the same model.py / model_new.py (``inputs``: their sha256,
    :func:`mfulib.schemas.verify_json.input_digests`) and timed by stage 1's wall-clock method; otherwise ({}, the
    reason)."""
    if not probe or not probe.get("timings"):
        return {}, "no probe timings"
    if probe.get("backend") != backend or probe.get("seed") != seed:
        return {}, f"the probe ran on {probe.get('backend')} with seed {probe.get('seed')}"
    if probe.get("inputs") != inputs:
        return {}, "model.py / model_new.py changed since the probe"
    if probe.get("wall_clock") != wallclock.METHOD:
        method = probe.get("wall_clock") or "one synchronised call"
        return {}, f"the probe timed by another wall-clock method ({method}, not {wallclock.METHOD})"
    return dict(probe["timings"]), None


def probe_origins(path: str) -> dict:
    """{appended case id: search_origin {source_case, factors, scale, grid_search_json: None, probe_json}} of the
    probe.json at ``path`` ({} when absent): the collector marks a scaled case it measures without a search."""
    probe = read_probe(path)
    return {cid: {"source_case": o["source_case"], "factors": o["factors"], "scale": o["scale"],
                  "grid_search_json": None, "probe_json": os.path.abspath(path)}
            for cid, o in ((probe or {}).get("appended") or {}).items()}


# ------------------------------------------------------------------------------------------------ FLOPs


def trace_flops(opdir: OpDir, ids: list, seed: int, flops_tool: str, out_path: str, log,
                timeout_s: float | None = None) -> dict:
    """{case id: tracer row} for ``ids`` from ``<flops_tool> --op-dir <work> --tracer-only --cases ... -o out_path``
    (a subprocess: the tracer's imports and any crash stay out of this process). A row is {flops (matrix FLOPs,
    None unless the tracer counted the case: status ok), status, reason}. Raises UserError when the tool wrote
    nothing, or when it did not finish within ``timeout_s`` (killed)."""
    if not ids:
        return {}
    cmd = [sys.executable, flops_tool, "--op-dir", opdir.path, "--tracer-only", "--cases", ",".join(map(str, ids)),
           "--seed", str(seed), "-o", out_path, "--quiet"]
    if os.path.exists(out_path):
        os.unlink(out_path)
    log(f"tracing the reference's FLOPs of {len(ids)} case(s): {' '.join(cmd[1:])}")
    from mfulib.run.worker import die_with_parent
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, preexec_fn=die_with_parent)
    except subprocess.TimeoutExpired:
        raise UserError(f"{flops_tool} --tracer-only did not finish {len(ids)} case(s) within {timeout_s:g} s "
                        "(killed): a reference that hangs at these shapes? fix model.py, or raise --case-timeout-s "
                        "(it bounds each traced case)") from None
    if not os.path.exists(out_path):
        raise UserError(f"{flops_tool} --tracer-only wrote no {out_path} (exit status {r.returncode}): "
                        f"{(r.stderr or r.stdout).strip()[-600:]} - fix the reference (model.py) or the tool")
    out = {}
    for row in read_json(out_path).get("per_case") or []:
        tr = row.get("tracer") or {}
        ok = tr.get("status") == "ok" and is_number(tr.get("total_flops"))
        out[row["case"]] = {"flops": float(tr["total_flops"]) if ok else None, "status": row.get("status"),
                            "reason": None if ok else (row.get("diagnosis") or tr.get("reason") or tr.get("status"))}
    return out


def flops_py_values(opdir: OpDir, ids: list) -> dict:
    """{case id: flops.py FLOPs or None} when the work dir has a flops.py that needs no forward args, else {}."""
    if not os.path.exists(opdir.flops_py):
        return {}
    from mfulib.flops.contract import evaluate_case, load_flops
    ff = load_flops(opdir.flops_py)
    if ff.takes_args:
        return {}
    cases = opdir.read_cases()
    out = {}
    for i in ids:
        row = evaluate_case(ff, cases[i], case_id=i)
        out[i] = float(row["flops"]) if row["status"] == "ok" and is_number(row["flops"]) else None
    return out


# ------------------------------------------------------------------------------------------------ pool


def build_pool(infos: list, probe: dict | None, rank_values: dict, metric: str, top_n: int = 8,
               unrunnable: dict | None = None, lines: list | None = None):
    """(pool, excluded, rule): the search pool (module docstring) from the case descriptions ``infos``
    (:class:`mfulib.core.cases.CaseInfo`, all cases of the case file), the probe's appended cases and ``rank_values``
    {original case id: FLOPs (mfu) or bytes (mbu), None when unknown}; ``unrunnable`` {original case id: why this
    backend does not run it (:func:`mfulib.verify.verified_cases.skip_reason`: bf16 or above the input cap on the CPU
    interpreter)}: left out of the ranking (listed in ``excluded``), so they never crowd out the cases, and the
    probe's variants, that can run; ``lines``: the case lines themselves (parsed JSON, by case id): a variant whose
    line equals a pool case's line is one point, left out (``excluded``) rather than timed twice. Pure: runs
    nothing.

    Raises UserError when probe.json names a case the case file lacks (the two are out of step)."""
    if top_n < ALWAYS_TOP:
        raise UserError(f"--top-n {top_n}: the pool must hold at least the original top {ALWAYS_TOP}")
    appended = (probe or {}).get("appended") or {}
    n = len(infos)
    bad = sorted(c for c in appended if c >= n or appended[c]["source_case"] >= n)
    if bad:
        raise UserError(f"probe.json names case(s) {bad} but the case file has {n} cases - the case file was "
                        "replaced after the probe: re-run make probe (or --restore it first)")
    unrunnable = unrunnable or {}
    not_run = sorted(c for c in unrunnable if c not in appended)  # originals this backend does not run
    originals = [i for i in infos if i.case_id not in appended and i.case_id not in unrunnable]
    key = lambda i: rank_values.get(i.case_id)  # noqa: E731
    ranked = sorted(originals, key=lambda i: (-(key(i) if key(i) is not None else -math.inf), i.case_id))
    by_id = {i.case_id: i for i in infos}
    top = ranked[:top_n]
    pool, excluded = [], [{"case": c, "reason": f"not run on this backend: {unrunnable[c]}", "kind": _gs.NOT_RUN}
                          for c in not_run]
    for rank, info in enumerate(top):
        why = f"original #{rank + 1} by {'FLOPs' if metric == 'mfu' else 'bytes'}, scale 1"
        if rank < ALWAYS_TOP:
            why += " (the original top 3 are always in the pool)"
        pool.append(pool_entry(info, info.case_id, {}, rank, why))
    top_ids = {i.case_id: r for r, i in enumerate(top)}
    key_of = (lambda c: json.dumps(lines[c], sort_keys=True)) if lines else (lambda c: c)  # noqa: E731
    seen = {key_of(i.case_id): i.case_id for i in top}  # one point, one timing: a variant equal to a pool case
    for cid in sorted(appended):
        origin = appended[cid]
        src = origin["source_case"]
        verdict = ((probe or {}).get("verdicts") or {}).get(cid)
        if verdict not in (None, "pass"):
            excluded.append({"case": cid, "reason": f"its probe candidate's verdict is {verdict!r}, not pass"})
        elif src not in top_ids:
            excluded.append({"case": cid, "reason": f"variant of case {src}, which is not among the top {top_n}"})
        elif key_of(cid) in seen:
            excluded.append({"case": cid, "reason": f"the same case line as case {seen[key_of(cid)]}, already in "
                                                    "the pool"})
        else:
            seen[key_of(cid)] = cid
            entry = pool_entry(by_id[cid], src, origin["factors"], top_ids[src],
                               f"scaled variant of case {src}: {factors_label(origin['factors'])} (probe.json)")
            if origin.get("scale") is not None:  # the probe's own figure, where it records one
                entry["scale"] = float(origin["scale"])
            pool.append(entry)
    rule = (f"top {len(top)} of {len(originals)} original cases" + (
        f" this backend runs ({len(not_run)} more it does not run: excluded)" if not_run else "") + " by "
            f"{'FLOPs' if metric == 'mfu' else 'input bytes (no matrix work: MBU)'} at scale 1 + "
            f"{len(pool) - len(top)} scaled variant(s) from probe.json" + ("" if probe else " (no probe.json: run "
                                                                                     "make probe for scaled cases)"))
    return pool, excluded, rule


def pool_entry(info, source_case, factors, rank, why) -> dict:
    """One ``pool`` entry of grid_search.json for case ``info`` (:class:`mfulib.core.cases.CaseInfo`): ``factors``
    {symbol: factor} ({} = the original at scale 1, ``scale`` = their product unless probe.json records the
    candidate's scale), ``rank`` of its source case."""
    return {"case": info.case_id, "source_case": source_case, "factors": dict(factors),
            "scale": float(math.prod(factors.values())) if factors else 1.0, "original": not factors,
            "flops_rank": rank, "flops_traced": None, "flops_py": None, "input_bytes": info.input_bytes,
            "compute_dtype": info.compute_dtype, "why": why}
