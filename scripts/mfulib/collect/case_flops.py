"""The FLOPs attached to each measured case: the work directory's ``flops.py`` (:func:`load_flops`,
:func:`case_flops`), the tracer's count and check_flops.py's verdict on the numerator (``flops_check.json``:
:func:`tracer_flops`, :func:`numerator_of`)."""
from __future__ import annotations

import os

from mfulib.core.errors import UserError
from mfulib.core.opdir import OpDir


def load_flops(opdir: OpDir):
    """The work dir's flops.py (:class:`mfulib.flops.contract.FlopsFile`), or None when there is none.
    A flops.py that does not load raises UserError (file + fix)."""
    if not os.path.exists(opdir.flops_py):
        return None
    from mfulib.flops.contract import load_flops as _load
    return _load(opdir.flops_py)


def tracer_flops(opdir: OpDir) -> dict:
    """{case id: tracer FLOPs} from check_flops.py's flops_check.json in the work dir ({} when absent)."""
    from mfulib.schemas.flops_check_json import FILE_NAME, tracer_flops as _read
    return _read(opdir.file(FILE_NAME))


def case_flops(ff, opdir: OpDir, info, seed: int) -> dict:
    """{flops, flops_source, flops_parts, compute_dtype, flops_tracer, note} of one case from flops.py (the
    forward args are built, seeded with ``seed``, when flops.py takes them). Never raises for the case."""
    from mfulib.flops.contract import evaluate_case
    ent = {"flops": None, "flops_source": None, "flops_parts": None, "compute_dtype": None, "note": None}
    if ff is None:
        return ent
    case = opdir.read_cases()[info.case_id]
    args = None
    try:
        if ff.takes_args:  # the timed child's draw (same seed, same stream): FLOPs of the inputs that are timed
            from mfulib.flops.tracer import build_reference_args, data_values
            args, ent["inputs_drawn"] = build_reference_args(opdir, info.case_id, seed, with_draw=True)
            ent["data_values"] = data_values(args)
        ev = evaluate_case(ff, case, args, info.case_id)
        ent["compute_dtype"] = ff.compute_dtype(case, info.case_id)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - recorded per case (sys.exit() in user code too)
        why = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
        ev = {"status": "error", "reason": why, "flops": None, "flops_parts": None}
    ent["flops_source"] = "flops.py" + (f" (flops(case, args), seed {seed})" if ff.takes_args else "")
    ent["vector_flops"] = ev.get("vector_flops") if ev["status"] == "ok" else None
    if ev["status"] == "ok" and ev["flops"] is not None and ev["flops"] >= 0:
        ent.update(flops=ev["flops"], flops_parts=ev["flops_parts"])  # 0 = no matrix work: no MFU, MBU headline
        if not ev["flops"]:
            ent["note"] = "no matrix work (flops 0): no MFU - MBU is this case's figure"
    else:
        ent["note"] = (f"flops.py gives no FLOPs for this case ({ev['status']}: {ev.get('reason') or ev['flops']}): "
                       "no MFU")
    return ent


def numerator_verdicts(opdir: OpDir) -> dict:
    """check_flops.py's verdict on flops.py (:func:`mfulib.schemas.flops_check_json.numerator_verdicts`)."""
    from mfulib.schemas.flops_check_json import FILE_NAME, numerator_verdicts as _read
    return _read(opdir.file(FILE_NAME))


def numerator_of(verdicts: dict, case_id: int, ff) -> dict:
    """{numerator, numerator_reason} of one case: checked | unverified | failed | ... from flops_check.json, or
    "unchecked" when check_flops.py has not run on it (None without a flops.py)."""
    if ff is None:
        return {"numerator": None, "numerator_reason": None}
    ent = verdicts.get("cases", {}).get(case_id)
    if ent is None:
        return {"numerator": "unchecked", "numerator_reason": "check_flops.py has not checked this case"}
    return {"numerator": ent["numerator"], "numerator_reason": ent.get("reason")}


def flops_entry(ff, opdir: OpDir, info, seed: int, tracer: dict, verdicts: dict) -> dict:
    """:func:`case_flops` of one case with its tracer count (``flops_tracer``) and numerator verdict."""
    ent = case_flops(ff, opdir, info, seed)
    ent["flops_tracer"] = tracer.get(info.case_id)
    ent.update(numerator_of(verdicts, info.case_id, ff))
    return ent
