"""``ncu --csv`` output (``--page raw`` or ``--page details``) as a :class:`~mfulib.collect.from_prof.profile.Profile`
(:func:`load_ncu`): launches in ncu ID order with made-up, ordered timestamps (ncu records none), the bytes
written to DRAM and the device's L2 size where ncu reports them."""
from __future__ import annotations

import os

from mfulib.profiles import ncu as _ncu
from mfulib.collect.from_prof.flush import l2_from_facts
from mfulib.collect.from_prof.profile import Profile


def load_ncu(path) -> Profile:
    """An ``ncu --csv`` output (raw or details page) as a :class:`Profile` (launches in ncu ID order)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    recs = _ncu.parse_ncu_csv(text)
    details = '"Metric Name"' in next((ln for ln in text.splitlines() if ln.startswith('"ID",')), "")
    rows, t = [], 1
    l2, dev_name = None, None
    for rec in recs:
        d = _ncu.duration_ns(rec)
        pmu = {k: v for k, v in rec["metrics"].items() if isinstance(v, float) and k != "gpu__time_duration.sum"
               and not k.startswith("device__attribute")}
        b = None
        for key in ("dram__bytes_write.sum", "dram__bytes.sum"):
            b = _ncu.to_bytes(rec["metrics"].get(key), rec["units"].get(key))
            if b is not None:
                break
        l2 = l2 or _ncu.to_bytes(rec["metrics"].get("device__attribute_l2_cache_size"),
                                 rec["units"].get("device__attribute_l2_cache_size") or "byte")
        name_attr = rec["metrics"].get("device__attribute_display_name")
        dev_name = dev_name or (name_attr if isinstance(name_attr, str) else None)
        rows.append({"name": rec["kernel_name"], "start_ns": t, "duration_ns": d, "iteration": None,
                     "config": (rec.get("grid"), rec.get("block")), "pmu": pmu, "ncu_id": rec["id"],
                     "bytes": b, "bytes_source": "ncu dram__bytes" if b is not None else None,
                     "rules": rec.get("rules") or []})
        t += int(d or 0) + 1
    prof = Profile(path=os.path.abspath(path), fmt="ncu_details" if details else "ncu_raw", backend="cuda",
                   rows=rows, timing_method="ncu.gpu__time_duration.sum", timestamps=False)
    if l2:
        prof.l2_bytes, prof.l2_source = l2, "ncu device__attribute_l2_cache_size"
    if dev_name:
        from mfulib.core import nominal_peaks as _peaks
        prof.device = {"backend": "cuda", "name": dev_name, "identity_source": "ncu device__attribute_display_name"}
        prof.bandwidth_gbps = _peaks.nominal_for_identity(dict(prof.device)).get("bandwidth_gbps")
        if not prof.l2_bytes:
            prof.l2_bytes, prof.l2_source = l2_from_facts(dev_name)
    if any(rec.get("rules") for rec in recs):
        prof.extra["rules"] = sum(len(rec["rules"]) for rec in recs)
    if not recs and "No kernels were profiled" in text:
        prof.extra["ncu_note"] = "ncu: No kernels were profiled"
    return prof
