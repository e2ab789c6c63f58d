"""The FLOPs checker (step 3, check_flops.py): a flops.py held against the independent tracer, case by case.

Per case: flops finite and >= 0 (0 = no matrix work); sum(flops_parts) == flops; FLOPs / nominal peak (the kernel time at 100% MFU) below
``max_implied_ms``; actual_seq_lengths consistent with the shapes; and the tracer's count
(:mod:`mfulib.flops.tracer`) compared with flops.py's, with a diagnosis of the ratio; ``vector_flops`` against the
tracer's element costs (:mod:`mfulib.flops.vector_costs`). Verdict: passed, failed, or **unverified** when a check could
not run or could not fail (docs/ARCHITECTURE.md#flops); a case with an empty input tensor has no work. For the file:
KERNEL_PARTS keys against flops_parts keys, REVIEW markers left by the generator. The flops.py contract itself (loading,
calling, the authoring helpers) is :mod:`mfulib.flops.contract`; the result file is
:mod:`mfulib.schemas.flops_check_json`.
"""
from __future__ import annotations

import math
import os
import re

from mfulib.core import cases as _cases
from mfulib.flops import tracer as flopcount
from mfulib.core.definitions import is_positive, time_ns_at
from mfulib.backends import device_identity, resolve_backend
from mfulib.core.errors import UserError, rejection_reason
from mfulib.flops.contract import REVIEW_MARK, FlopsContractError, FlopsFile, evaluate_case
from mfulib.core.nominal_peaks import nominal_peak_tflops
from mfulib.flops.bounds import class_bound_checks
from mfulib.flops.seq_lengths import padded_lengths, sequence_length_problems
from mfulib.schemas import peak_json


# ----------------------------------------------------------------------------------------------------------------
# Checking a flops.py against the reference (check_flops.py)
# ----------------------------------------------------------------------------------------------------------------

RATIO_TWO_BAND = (1.8, 2.2)
RATIO_HALF_BAND = (0.45, 0.55)
# verdicts of one check, worst last: "unverified" = the check could not run or could not fail
# (docs/ARCHITECTURE.md#flops)
_ORDER = {"skip": 0, "pass": 1, "rejected": 2, "warn": 3, "unverified": 4, "fail": 5}
EXIT_FAILED = 1
EXIT_UNVERIFIED = 3   # check_flops.py's exit status for an unverified numerator (2 is bad input, cli.py)
NO_WORK = "no work: nothing to time"


def _check(name, status, detail):
    return {"name": name, "status": status, "detail": detail}


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def _breakdown(by_op: dict) -> str:
    items = sorted(((k, v) for k, v in by_op.items() if v), key=lambda kv: -abs(kv[1]))
    return ", ".join(f"{k} {v:.4g}" for k, v in items[:6]) or "nothing"


def compare_with_tracer(ev: dict, tr, case: dict, case_id: int, tolerance: float = 0.01) -> dict:
    """The tracer check of one case's matrix FLOPs: {"status", "ratio", "diagnosis"}.

    ``ev`` is :func:`evaluate_case`'s row, ``tr`` a :class:`mfulib.flops.tracer.TraceResult`. Status "rejected" when
    both reject the case; "unverified" when the check cannot fail: the tracer could not run the reference, it
    counted 0 while ops it cannot see ran, it needed mask values it did not have, or flops.py agrees with it only
    up to ops it cannot see. Otherwise the ratio flops.py / tracer decides, with a diagnosis in order: 0 matrix
    FLOPs on both sides passes (no matrix work: no MFU, read through MBU); flops.py > 0 against a tracer 0 fails
    (vector arithmetic belongs in ``vector_flops``); within ``tolerance`` passes; equal to the tracer's dense count
    means a causal/sparse reduction is missing; equal to the tracer without one op's work means that work
    (projections) is missing; > 1 with actual_seq_lengths means padded lengths; ~2 causal missed; ~0.5 one FLOP
    per MAC; < 0.5 projections missed.
    """
    out = {"status": "pass", "ratio": None, "diagnosis": ""}
    if tr.status == "rejected":
        if ev["status"] == "rejected":
            out.update(status="rejected", diagnosis=f"rejected by the reference and by flops.py ({tr.reason})")
        else:
            out.update(status="fail", diagnosis=f"the reference rejects this case ({tr.reason}) but flops.py "
                       f"returns {_fmt(ev['flops'])}: reject it in flops.py too (raise ValueError(\"case rejected: "
                       "...\"))")
        return out
    if ev["status"] == "rejected":
        if tr.status == "ok":
            out.update(status="fail", diagnosis=f"flops.py rejects this case ({ev['reason']}) but the reference runs "
                       f"it ({_fmt(tr.total_flops)} FLOPs): give it FLOPs or make the reference reject it")
        else:
            out.update(status="rejected", diagnosis=f"rejected by flops.py ({ev['reason']}); the tracer could not "
                       f"run the reference either ({tr.status}: {tr.reason})")
        return out
    if ev["status"] != "ok":
        out.update(status="fail", diagnosis=f"flops.py failed: {ev['reason']}")
        return out
    if tr.status != "ok":
        out.update(status="unverified", diagnosis=f"unverified: the tracer could not run the reference "
                   f"({tr.status}: {tr.reason}) - give the reference its inputs (or a torch_npu stand-in) or check "
                   "flops.py by hand")
        return out
    f, t = ev["flops"], tr.total_flops
    unseen = ", ".join(f"{k} (x{v})" for k, v in sorted(tr.unseen_ops.items()))
    zero = ", ".join(zero_cost_standins(tr))
    if tr.needs_values:
        out.update(status="unverified", ratio=(f / t) if t else None,
                   diagnosis=f"needs values: a mask's values were unknown to the tracer (counted dense, "
                   f"{_fmt(t)}); flops.py {_fmt(f)} cannot be checked - trace on the CPU (--max-cpu-bytes) or build "
                   "the mask from shapes (triu/tril/arange)")
        return out
    if not t:
        if tr.unseen_ops:
            out.update(status="unverified", diagnosis=f"unverified: tracer counted 0 and the reference's work is "
                       f"in ops it cannot see: {unseen} - register a formula (mfulib.flops.formulas.REGISTRY) or "
                       "check flops.py by hand")
        elif f and zero:
            out.update(status="unverified", diagnosis=f"unverified: flops.py counts {_fmt(f)} matrix FLOPs, the "
                       f"tracer 0 - its stand-in formula for {zero} counts no matrix work: if that op does matrix "
                       "work, register its formula (mfulib.flops.contract.op_formula); if flops.py's count is vector "
                       "arithmetic, move it to vector_flops(case)")
        elif f:
            ops = ", ".join(sorted(tr.vector_ops)[:6]) or "none"
            out.update(status="fail", diagnosis=f"flops.py counts {_fmt(f)} matrix FLOPs but the reference has no "
                       f"matrix work (vector ops: {ops}): flops(case) is matrix work only - return 0 and put the "
                       "vector arithmetic in vector_flops(case)")
        else:
            ops = ", ".join(sorted(tr.vector_ops)[:6]) or "none"
            out["diagnosis"] = (f"no matrix work on either side (vector ops: {ops}): no MFU, read this operator "
                                "through MBU")
        return out
    ratio = f / t
    out["ratio"] = ratio
    if abs(ratio - 1.0) <= tolerance:
        if tr.unseen_ops:
            out.update(status="unverified", diagnosis=f"unverified: ratio {ratio:.4f} on the work the tracer sees, "
                       f"but it cannot count {unseen}: check that work in flops.py by hand")
        else:
            out["diagnosis"] = f"ok (ratio {ratio:.4f})"
        return out
    out["status"] = "fail"
    removed = sum(c["dense_flops"] - c["counted_flops"] for c in tr.mask_corrections)
    dense = t + removed
    pl = padded_lengths(case, case_id)
    if removed and abs(f / dense - 1.0) <= tolerance:
        out["diagnosis"] = (f"ratio {ratio:.3f}: flops.py counts the dense score matrix, but the reference masks "
                            f"{removed / dense:.1%} of its matrix work (causal/window/padding mask): count only the "
                            "unmasked (q, k) pairs (bottom-right causal when s_k != s_q if the reference aligns so; "
                            "a mask drawn at random is counted from the seeded draw by def flops(case, args) - "
                            "examples/flops_sparse_flash_attention.py)")
        return out
    for op, v in tr.by_op.items():
        if v and abs(f - (t - v)) <= tolerance * t:
            out["diagnosis"] = (f"ratio {ratio:.3f}: flops.py equals the tracer without its {op} work ({v:.4g} "
                                f"FLOPs): that work is missing in flops.py"
                                + (" (projections / linear layers?)" if op in ("aten::mm", "aten::addmm") else ""))
            return out
    if (tr.unseen_ops or zero) and ratio > 1.0:
        out.update(status="unverified", diagnosis=f"unverified: flops.py/tracer = {ratio:.3f} and the tracer cannot "
                   f"see {unseen or zero + ' (stand-ins counting 0)'}: the difference may be their work")
        return out
    if pl and pl[0] < pl[1] and ratio > 1.0 + tolerance:
        out["diagnosis"] = (f"ratio {ratio:.3f}: flops.py counts more than the reference and the case has "
                            f"actual_seq_lengths ({pl[0]} of {pl[1]} padded tokens): count from the actual lengths, "
                            "not the padded maximum")
    elif RATIO_TWO_BAND[0] <= ratio <= RATIO_TWO_BAND[1]:
        out["diagnosis"] = (f"ratio {ratio:.3f} (about 2): flops.py counts twice the reference's work: causal "
                            "reduction missed, or 2 FLOPs per MAC applied twice")
    elif RATIO_HALF_BAND[0] <= ratio <= RATIO_HALF_BAND[1]:
        out["diagnosis"] = (f"ratio {ratio:.3f} (about 0.5): flops.py counts half: 1 FLOP per MAC instead of 2, or "
                            "a causal halving the reference does not apply")
    elif ratio < 0.5:
        out["diagnosis"] = (f"ratio {ratio:.3f} (< 0.5): flops.py misses most of the reference's matrix work - "
                            f"projections missed? tracer by op: {_breakdown(tr.by_op)}")
    else:
        out["diagnosis"] = f"ratio {ratio:.3f}: flops.py and the tracer disagree; tracer by op: {_breakdown(tr.by_op)}"
    return out


def zero_cost_standins(tr) -> list:
    """Ops the tracer counted 0 matrix FLOPs through a stand-in's or a user formula (a torch_npu op whose built-in
    formula declares no matrix work, an op_formula returning 0): its 0 is a claim, not a count it could check."""
    user = set(getattr(tr, "user_formulas", None) or {})
    return sorted(k for k, v in (tr.formula_flops or {}).items()
                  if not v and (k.startswith(("torch_npu.", "npu::")) or k in user))


def vector_check(ev: dict, tr, tolerance: float = 0.01) -> dict:
    """flops.py's ``vector_flops`` against the tracer's element-cost sum (:mod:`mfulib.flops.vector_costs`).

    "skip" when flops.py defines none or the case has no FLOPs to check; "pass" within ``tolerance``; "unverified"
    when the tracer did not run or disagrees while it saw ops its table cannot cost; else "fail".
    """
    v = ev.get("vector_flops")
    if ev["status"] != "ok" or v is None:
        return _check("vector_flops", "skip", "no vector_flops(case)" if ev["status"] == "ok" else "no FLOPs")
    if not math.isfinite(v) or v < 0:
        return _check("vector_flops", "fail", f"vector_flops = {_fmt(v)}: must be finite and >= 0")
    if tr.status != "ok":
        return _check("vector_flops", "unverified", f"vector_flops = {_fmt(v)}: the tracer could not run")
    t = tr.vector_flops or 0.0
    uncosted = ", ".join(f"{k} (x{n})" for k, n in sorted((tr.vector_uncosted or {}).items()))
    agree = abs(v - t) <= tolerance * max(abs(t), 1.0)
    detail = f"vector_flops {_fmt(v)} vs tracer element costs {_fmt(t)}" + \
        (f" (ratio {v / t:.4f})" if t else "")
    if agree:
        return _check("vector_flops", "pass", detail + (f"; uncosted ops seen: {uncosted}" if uncosted else ""))
    if uncosted:
        return _check("vector_flops", "unverified", detail + f": the tracer cannot cost {uncosted} "
                      "(mfulib.flops.vector_costs) - check those ops by hand")
    return _check("vector_flops", "fail", detail + ": flops.py's vector arithmetic disagrees with the reference's "
                  f"ops ({', '.join(f'{k} x{n}' for k, n in sorted(tr.vector_ops.items())[:6])}) - count each op "
                  "per element as the table in mfulib.flops.vector_costs does")


def implied_time_check(flops, peak: dict | None, max_implied_ms: float = 4000.0) -> dict:
    """FLOPs / peak = the kernel time at 100% MFU (:func:`mfulib.core.definitions.time_ns_at`); it must stay below
    ``max_implied_ms`` (the search's single-call limit): longer at the peak means an over-count. ``peak``:
    {"tflops", "source"} or None (check skipped, with the reason). Measured kernel times are a later step's output
    (step 4): MFU above the peak is checked there (collector and decomposition), never here."""
    if not flops or not math.isfinite(flops):
        return _check("implied_time", "skip", "no FLOPs")
    if not peak or not peak.get("tflops"):
        return _check("implied_time", "skip", (peak or {}).get("source") or
                      "no nominal peak known (CPU): give --peak-tflops or a peak.json in the work dir")
    implied_ns = time_ns_at(flops, peak["tflops"])
    src = f"{peak['tflops']:.4g} TFLOP/s ({peak.get('source')})"
    detail = f"implied {implied_ns / 1e6:.4g} ms at {src}"
    if implied_ns / 1e6 > max_implied_ms:
        return _check("implied_time", "fail", detail + f" > {max_implied_ms:g} ms: no benchmark call takes that long "
                      "at the peak - flops.py over-counts (a dimension squared? units?)")
    return _check("implied_time", "pass", detail)


def empty_inputs(info) -> list:
    """Names of the case's tensor inputs with no element (a 0 in the shape): such a case has no work to time."""
    return [t.name for t in info.tensors if any(int(d) == 0 for d in t.shape)]


def check_case(ff: FlopsFile, opdir, case_id: int, seed: int = 0, tolerance: float = 0.01, peak=None,
               max_implied_ms: float = 4000.0, trace_kwargs=None, infos=None) -> dict:
    """All checks of one case; returns the flops_check.json row (never raises for a failing case).

    Row status, worst check first: fail > unverified > warn > rejected > pass; a case with an empty input tensor
    is "no_work" (:data:`NO_WORK`: never collected, flops.py and the tracer not consulted). ``trace_kwargs`` go to
    :func:`mfulib.flops.tracer.trace_case` (caps, a registry with flops.py's formulas); ``infos``: every case of
    the file described (for the class bounds, :mod:`mfulib.flops.bounds`; read here when None).
    """
    case = opdir.read_cases()[case_id]
    info = _cases.describe_case(case, case_id)
    row = {"case": case_id, "shape": info.shape_str, "dtype": info.dtype_str, "input_bytes": info.input_bytes,
           "seed": seed}
    empty = empty_inputs(info)
    if empty:
        row.update(flops=None, flops_parts=None, vector_flops=None, flops_status="no_work", flops_reason=None,
                   compute_dtype=None, tracer={"status": "no_work", "total_flops": None}, ratio=None,
                   status="no_work", diagnosis=f"{NO_WORK} (empty input tensor(s) {', '.join(empty)})",
                   checks=[_check("no_work", "skip", f"empty input tensor(s) {', '.join(empty)}")])
        return row
    args, arg_err = None, None
    if ff.takes_args:
        try:
            args, row["inputs_drawn"] = flopcount.build_reference_args(opdir, case_id, seed, with_draw=True)
            row["data_values"] = flopcount.data_values(args)
        except (Exception, SystemExit) as exc:  # sys.exit() in the reference is this case's error
            arg_err = exc
    if arg_err is not None:
        reason = rejection_reason(arg_err)
        ev = {"flops": None, "flops_parts": None, "vector_flops": None,
              "status": "rejected" if reason else "error",
              "reason": reason or f"building the forward args failed: {type(arg_err).__name__}: {arg_err}"}
    else:
        ev = evaluate_case(ff, case, args, case_id)
    try:
        row["compute_dtype"] = ff.compute_dtype(case, case_id)
    except Exception as exc:
        row["compute_dtype"] = None
        row["compute_dtype_error"] = str(exc) if isinstance(exc, FlopsContractError) else \
            f"{type(exc).__name__}: {exc}"
    row.update(flops=ev["flops"], flops_parts=ev["flops_parts"], vector_flops=ev.get("vector_flops"),
               flops_status=ev["status"], flops_reason=ev["reason"])
    tr = flopcount.trace_case(opdir, case_id, seed=seed, **(trace_kwargs or {}))
    row["tracer"] = tr.to_dict()
    checks = []
    if "compute_dtype_error" in row:
        checks.append(_check("compute_dtype", "fail", row["compute_dtype_error"]))
    cmp = compare_with_tracer(ev, tr, case, case_id, tolerance)
    row["ratio"], row["diagnosis"] = cmp["ratio"], cmp["diagnosis"]
    if ev["status"] == "ok":
        f = ev["flops"]
        ok = f is not None and math.isfinite(f) and f >= 0
        checks.append(_check("flops_finite", "pass" if ok else "fail",
                             f"flops = {_fmt(f)}" + ("" if ok else ": must be finite and >= 0 (0 = no matrix work)")))
        parts = ev["flops_parts"]
        if parts is None:
            checks.append(_check("parts_sum", "skip", "no flops_parts"))
        else:
            total = sum(parts.values())
            bad = [k for k, v in parts.items() if not math.isfinite(v) or v < 0]
            good = not bad and abs(total - f) <= max(1e-9 * abs(f), 0.5)
            checks.append(_check("parts_sum", "pass" if good else "fail",
                                 f"sum(flops_parts) = {_fmt(total)} vs flops = {_fmt(f)}"
                                 + (f"; negative/non-finite parts {bad}" if bad else "")
                                 + ("" if good else " - the parts must add up to flops(case)")))
        checks.append(implied_time_check(f, peak, max_implied_ms))
    probs = sequence_length_problems(case, case_id)
    bad_lengths = "warn" if cmp["status"] == "rejected" else "fail"  # often the very reason for the rejection
    checks.append(_check("seq_lengths", bad_lengths if probs else "pass", "; ".join(probs) or "consistent (or none)"))
    checks.append(_check("tracer", cmp["status"], cmp["diagnosis"]))
    if infos is None:
        infos = [_cases.describe_case(c, i) for i, c in enumerate(opdir.read_cases())]
    for bound in class_bound_checks(ev, tr, cmp["status"], infos, case_id, tolerance):
        checks.append(bound)
        if bound["status"] in ("fail", "unverified"):
            row["diagnosis"] += f"; {bound['detail']}"
    if tr.user_formulas:
        checks.append(_check("user_formula", "pass", "the tracer counted " + ", ".join(
            f"{k} {_fmt(v)}" for k, v in sorted(tr.user_formulas.items())) + " with formulas flops.py registered "
            "(op_formula): that part of its count is flops.py's own claim"))
    vec = vector_check(ev, tr, tolerance)
    checks.append(vec)
    if vec["status"] in ("fail", "unverified"):
        row["diagnosis"] += f"; {vec['detail']}"
    elif vec["status"] == "pass":
        row["diagnosis"] += "; vector_flops checked"
    row["checks"] = checks
    row["status"] = max((c["status"] for c in checks), key=lambda s: _ORDER[s])
    if row["status"] == "skip":
        row["status"] = "pass"
    return row


def file_checks(ff: FlopsFile, rows: list) -> list:
    """Checks of the file as a whole: KERNEL_PARTS against flops_parts keys; REVIEW markers left in a draft about
    its FLOPs make the numerator ``unverified`` (SKILL.md step 3: a generated draft is reviewed by a person before it
    counts), naming the lines to review; markers about KERNEL_PARTS / kernel names (a fact about the
    implementation, not the numerator) are a warning only."""
    checks = []
    names = next((list(r["flops_parts"]) for r in rows if r.get("flops_parts")), None)
    if ff.kernel_parts is None:
        checks.append(_check("kernel_parts", "warn" if ff.has_parts else "skip",
                             "no KERNEL_PARTS: every kernel is reported as 'other' in the decomposition"))
    elif ff.has_parts and names is None:  # flops_parts is defined but gave no parts on any case (it raised)
        checks.append(_check("kernel_parts", "skip", "not checked: flops_parts gave no parts on any case"))
    else:
        probs = ff.check_kernel_parts_keys(names if ff.has_parts else None)
        checks.append(_check("kernel_parts", "fail" if probs else "pass",
                             "; ".join(probs) or f"KERNEL_PARTS parts {sorted(ff.kernel_parts)} are keys of flops_parts "
                             "(each timed part has its FLOPs entry, 0 included)"))
    marks = ff.review_lines()
    kernel = [(n, t) for n, t in marks if _KERNEL_MARKER.search(t)]
    formula = [m for m in marks if m not in kernel]
    if formula:
        where = "; ".join(f"line {n}: {t[:90]}" for n, t in formula[:12])
        checks.append(_check("review_markers", "unverified", f"unverified: a draft with {len(formula)} FLOPs "
                             f"line(s) still marked {REVIEW_MARK} - review each against model.py, then delete the "
                             f"marker: {where}"))
    if kernel:
        where = "; ".join(f"line {n}: {t[:90]}" for n, t in kernel[:6])
        checks.append(_check("review_markers_kernels", "warn", f"{len(kernel)} {REVIEW_MARK} line(s) about "
                             f"KERNEL_PARTS / kernel names (the decomposition's parts, not the FLOPs): {where}"))
    return checks


# a REVIEW marker about the implementation's kernels (KERNEL_PARTS patterns, launched kernel names): not the numerator
_KERNEL_MARKER = re.compile(r"KERNEL_PARTS|\bkernels?\b|define the parts|left to 'other'|patterns?\b", re.I)


def select_cases(opdir, ff, case_ids=None, largest=None) -> list:
    """Case ids to check: ``case_ids`` if given, else all; ``largest`` keeps the N with the most FLOPs according
    to flops.py (input bytes where flops.py cannot say without args or raises). Raises UserError for an empty
    selection, ids outside the case file and ``largest`` < 1."""
    n = len(opdir.read_cases())
    ids = list(range(n)) if case_ids is None else list(case_ids)
    if not ids:
        raise UserError(f"{opdir.cases_path}: no case selected" + (" (the case file has none)" if case_ids is None
                        else " (--cases is empty)") + " - give case ids, e.g. --cases 3,7,9 or 0-4")
    bad = [i for i in ids if not 0 <= i < n]
    if bad:
        raise UserError(f"{opdir.cases_path}: no case(s) {bad} (ids 0..{n - 1}) - fix --cases")
    if largest is not None and largest < 1:
        raise UserError(f"--largest {largest}: must be >= 1 (the number of largest cases to check)")
    if largest:
        def size(i):
            info = opdir.describe(i)
            if ff is not None and not ff.takes_args:
                ev = evaluate_case(ff, opdir.read_cases()[i], case_id=i)
                if ev["status"] == "ok" and ev["flops"]:
                    return (1, ev["flops"])
            return (0, info.input_bytes)
        ids = sorted(sorted(ids, key=size, reverse=True)[:largest])
    return ids


def verdict_of(rows: list, file_level: list) -> str:
    """"failed" when a case or file check fails, else "unverified" when one is unverified, else "passed"."""
    states = [r["status"] for r in rows] + [c["status"] for c in file_level]
    if "fail" in states:
        return "failed"
    if "unverified" in states:
        return "unverified"
    return "passed"


def summarize(rows: list, file_level: list) -> dict:
    """The flops_check.json summary: verdict (passed | unverified | failed), counts by row status, the rejected
    cases (by flops.py or by the reference, :func:`rejected_by`), the unverified reasons, the ratio range."""
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    ratios = [r["ratio"] for r in rows if r.get("ratio") is not None]
    verdict = verdict_of(rows, file_level)
    rejected = [r["case"] for r in rows if rejected_by(r)]
    why = [f"case {r['case']}: {r['diagnosis']}" for r in rows if r["status"] == "unverified"]
    why += [c["detail"] for c in file_level if c["status"] == "unverified"]
    return {"n_cases": len(rows), "by_status": counts, "verdict": verdict,
            "n_rejected": len(rejected), "rejected_cases": rejected,
            "n_no_work": sum(1 for r in rows if r["status"] == "no_work"),
            "n_unverified": sum(1 for r in rows if r["status"] == "unverified"), "unverified_reasons": why[:20],
            "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
            "passed": verdict == "passed"}


def rejected_by(row: dict) -> str | None:
    """Who rejects the case of a flops_check row: "both", "flops.py", "reference" or None."""
    by_flops = row.get("flops_status") == "rejected"
    by_ref = (row.get("tracer") or {}).get("status") == "rejected"
    return "both" if by_flops and by_ref else "flops.py" if by_flops else "reference" if by_ref else None


def resolve_peak(work_dir: str, peak_tflops=None, backend: str = "auto") -> dict:
    """The nominal fp16/bf16 dense peak for the implied-time check: {"tflops": value|None, "source": text}.

    Order: ``peak_tflops`` (the --peak-tflops flag); the nominal block of the work dir's peak.json (a per-device
    fact any step may read, :func:`mfulib.schemas.peak_json.nominal_half_tflops`); the nominal table of the device
    this runs on (:func:`mfulib.core.nominal_peaks.nominal_peak_tflops`: NPU cube formula or CUDA datasheet); else None - CPU
    has no nominal peak, and the check is skipped with that reason. performance.json (step 4) is never read here.
    Raises UserError for a bad ``peak_tflops`` or a peak.json of the wrong structure (file and field named).
    """
    if peak_tflops is not None:
        if not is_positive(peak_tflops):
            raise UserError(f"--peak-tflops {peak_tflops}: must be a finite TFLOP/s figure > 0")
        return {"tflops": float(peak_tflops), "source": "--peak-tflops"}
    peak_path = os.path.join(work_dir, peak_json.FILE_NAME)
    if os.path.exists(peak_path):
        value, src = peak_json.nominal_half_tflops(peak_json.read_peak_json(peak_path))
        if value:
            return {"tflops": value, "source": src}
    if backend == "none":
        return {"tflops": None, "source": "--backend none: implied-time check skipped"}
    try:
        be, _why = resolve_backend(backend)
        value, src = nominal_peak_tflops(device_identity(be), "float16")
    except Exception as exc:  # no device of that kind here
        return {"tflops": None, "source": f"no nominal peak ({type(exc).__name__}: {exc})"}
    return {"tflops": value, "source": src}
