"""Which cases the collector measures (:func:`select_cases`, the rule is in :mod:`mfulib.collect.driver`), only
cases verify passed on this backend (:func:`select_verified` verifies the selected cases without a verify row
first), and the reserve a rejected case hands its slot to (:func:`next_admitted`)."""
from __future__ import annotations

from mfulib.collect.options import Options
from mfulib.core.errors import UserError
from mfulib.core.opdir import OpDir
from mfulib.core.fmt import plural


def select_cases(infos, ff, opdir: OpDir, opts: Options, backend_name: str, gate=None):
    """(selected CaseInfos, skipped [(CaseInfo, reason, verify mark)], selection description).

    Ranking key: flops(case) from flops.py when it needs no forward args, else input bytes (said in ``rule``).
    With a :class:`mfulib.verify.verified_cases.Gate`, a case it does not admit is skipped (its reason, listed under
    ``not_verified``) wherever it ranks, so the next case takes its slot and the reserve holds only cases that may
    be timed; a case without a verify row is selected (the caller verifies it and selects again).
    """
    by_id = {i.case_id: i for i in infos}
    skipped = []
    from mfulib.backends import backend_class
    cls = backend_class(backend_name)
    smallest = cls.interpreter  # the interpreter is slow: smallest cases first
    if opts.cases is not None:
        bad = [c for c in opts.cases if c not in by_id]
        if bad:
            raise UserError(f"--cases: no case {bad} (the case file has {plural(len(infos), 'case')}, ids 0..{len(infos) - 1})")
        order = [by_id[c] for c in opts.cases]
        rule = (f"chosen by the search ({opts.search_json})" if opts.search_json else "--cases") + \
            f" {','.join(map(str, opts.cases))}"
        k = opts.max_cases or len(order)
    else:
        key, what = None, "input bytes (no flops.py: no MFU reported)"
        if ff is not None and not ff.takes_args:
            from mfulib.flops.contract import evaluate_case
            cases = opdir.read_cases()
            vals = {i.case_id: evaluate_case(ff, cases[i.case_id], case_id=i.case_id) for i in infos}
            if any(v["status"] == "ok" and v["flops"] for v in vals.values()):
                key, what = (lambda i: vals[i.case_id]["flops"] if vals[i.case_id]["status"] == "ok" else None), \
                    "theoretical FLOPs (flops.py)"
            elif any(v["status"] == "ok" for v in vals.values()):
                what = "bytes moved (input bytes: no matrix work, MBU is the headline)"
            else:
                what = "input bytes (flops.py gave no FLOPs for any case)"
        elif ff is not None:
            what = "input bytes (flops.py needs the forward args: FLOPs are computed for the selected cases only)"
        key = key or (lambda i: i.input_bytes)
        missing = float("inf") if smallest else -1.0
        order = sorted(infos, key=lambda i: (key(i) if key(i) is not None else missing, -i.case_id if not smallest
                                             else i.case_id), reverse=not smallest)
        k = opts.max_cases or opts.top_k
        rule = f"{'smallest' if smallest else 'top'}-{k} by {what}" + \
            (f" ({backend_name} backend: smallest first, to keep the interpreter fast)" if smallest else "")
    selected, reserve, marks = [], [], {}
    for info in order:
        if not cls.runs_bf16 and info.compute_dtype == "bfloat16":
            skipped.append((info, cls.bf16_skip_reason, None))
            continue
        empty = [t.name for t in info.tensors if any(int(d) == 0 for d in t.shape)]
        if empty:  # check_flops.py reports these as "no work" too (flops_check.NO_WORK)
            skipped.append((info, f"no work: nothing to time (empty input tensor(s) {', '.join(empty)})", None))
            continue
        if gate is not None:  # every case, not only while slots are open: the reserve holds timeable cases only
            admitted, marks[info.case_id] = gate.admits(info.case_id)
            if not admitted:  # verify skipped/rejected/failed it: never timed, the next case takes the slot
                skipped.append((info, marks[info.case_id]["reason"], marks[info.case_id]))
                continue
        (selected if len(selected) < k else reserve).append(info)
    # without --cases, a case the operator rejects hands its slot to the next one of ``reserve``
    return selected, skipped, {"rule": rule, "order": [i.case_id for i in selected],
                               "skipped": [i.case_id for i, _, _ in skipped],
                               "not_verified": [i.case_id for i, _, m in skipped if m is not None],
                               "reserve": [] if opts.cases is not None else [i.case_id for i in reserve]}


def select_verified(infos, ff, opdir: OpDir, opts: Options, backend_name: str, gate, log):
    """:func:`select_cases` until every selected case has a verify row (``gate`` verifies the missing ones between
    rounds); returns ``(selected, skipped, selection)``. Raises UserError when no case is left to measure (an
    earlier performance.json is then kept)."""
    while True:  # each round verifies the selected cases that have no verify row yet, then selects again
        selected, skipped, selection = select_cases(infos, ff, opdir, opts, backend_name, gate)
        todo = gate.pending([i.case_id for i in selected]) if gate else []
        if not todo:
            break
        gate.verify(todo)
    if gate is not None:
        selection.update(verify_file=gate.path, verified_now=list(gate.verified_now),
                         unverified_ok=opts.unverified_ok)
        by_why = {}  # one line per reason: the cases verify skipped for one cause share it
        for info, why, mark in skipped:
            if mark is not None:
                by_why.setdefault(why, []).append(str(info.case_id))
        for why, ids in by_why.items():
            log(f"case {', '.join(ids)} not timed: {why}")
    if not selected:  # nothing would be measured: keep an earlier performance.json instead of an empty one
        why = "; ".join(f"case {i.case_id}: {r}" for i, r, _ in skipped[:4]) or "the case file has no case"
        raise UserError(f"{opdir.cases_path}: no case to measure on {backend_name} ({selection['rule']}: {why}) - "
                        "pick other --cases or another --backend")
    return selected, skipped, selection


def next_admitted(reserve: list, gate, skipped: list):
    """Pop the next case of ``reserve`` (CaseInfos in ranking order) that ``gate`` admits - verifying it first
    when it has no verify row - or None; the ones it refuses are appended to ``skipped`` (info, reason, mark)."""
    while reserve:
        nxt = reserve.pop(0)
        if gate is None:
            return nxt
        if gate.pending([nxt.case_id]):
            gate.verify([nxt.case_id])
        admitted, mark = gate.admits(nxt.case_id)
        if admitted:
            return nxt
        skipped.append((nxt, mark["reason"], mark))
    return None
