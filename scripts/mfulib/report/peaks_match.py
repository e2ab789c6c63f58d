"""Which peaks a report is read against, and whether peak.json was measured on the report's device.

:func:`peaks_for` picks the nominal fp16/bf16 dense peak (the collector's own figure first) and the measured
per-mode peaks and bandwidth of peak.json; :func:`check_same_device` refuses a peak.json of another backend;
:func:`device_cores` is the core count the peak spans (the PMU view's active-core fraction).
"""
from __future__ import annotations

from mfulib.core.definitions import HALF_DTYPES, canonical_mode, finite_or_none
from mfulib.core.device import slug
from mfulib.core.errors import UserError
from mfulib.schemas.peak_json import nominal_half_tflops


def peaks_for(report: dict, peak: dict) -> dict:
    """The peaks a report's cases are read against: nominal fp16/bf16 dense peak (performance.json's own peak
    block, else peak.json's nominal), measured per-mode peaks and bandwidth from peak.json."""
    nom, src = None, None
    pblock = report.get("peak") or {}
    ntf = pblock.get("nominal_tflops")
    if finite_or_none(pblock.get("value_tflops")):  # the figure the collector used for its mfu_nom
        nom = float(pblock["value_tflops"])
        src = f"performance.json peak ({pblock.get('source', 'collector')})"
    elif isinstance(ntf, dict):
        half = [k for k in ntf if canonical_mode(k) in HALF_DTYPES]  # float16, bfloat16, then alias spellings
        for d in sorted(half, key=lambda k: (k not in HALF_DTYPES, HALF_DTYPES.index(canonical_mode(k)))):
            if finite_or_none(ntf.get(d)):
                nom, src = float(ntf[d]), f"performance.json peak ({pblock.get('source', 'collector')})"
                break
    elif finite_or_none(ntf):
        nom, src = float(ntf), f"performance.json peak ({pblock.get('source', 'collector')})"
    if nom is None:
        nom, src = nominal_half_tflops(peak)
    by_mode = ntf if isinstance(ntf, dict) and not pblock.get("override") else (peak.get("nominal") or {}).get("tflops")
    return {"nominal_tflops": nom, "nominal_source": src or "none: MFU@nom not computed",
            "nominal_by_mode": {canonical_mode(k): v for k, v in (by_mode or {}).items()},
            "peak_tflops": dict(peak.get("peak_tflops") or {}), "bandwidth_gbps": finite_or_none(peak.get("bandwidth_gbps"))}


def device_cores(device) -> float | None:
    """Cores the peak spans (for the PMU view's active-core fraction): the runtime AI-core count of an NPU
    (msprof info.json), else its cube cores, else a GPU's SM count; None when the device block says none."""
    d = device if isinstance(device, dict) else {}
    for v in ((d.get("runtime") or {}).get("ai_core_num"), d.get("cube_core_num"), d.get("multiprocessor_count")):
        if finite_or_none(v):
            return float(v)
    return None


def check_same_device(report: dict, peak: dict, where: str, peak_path: str) -> list:
    """Raise UserError when peak.json was measured on another backend than the report; warn on a name mismatch."""
    notes = []
    rb = report.get("backend")
    pb = peak.get("backend")
    if rb and pb and rb != pb:
        raise UserError(f"{peak_path}: measured on backend {pb!r} but {where} ran on {rb!r} - run peak_calib.py on "
                        f"the {rb} device (peak_calib.py --backend {rb} -o peak.json)")
    rdev = report.get("device") or {}
    rname = rdev.get("name") if isinstance(rdev, dict) else str(rdev)
    pdev = peak.get("device") or {}
    pname = pdev.get("name") if isinstance(pdev, dict) else str(pdev)
    if rname and pname and slug(rname) != slug(pname):
        notes.append(f"device names differ: {where} ran on {rname!r}, {peak_path} measured {pname!r}")
    return notes
