"""``ncu --csv`` output (``--page raw`` or ``--page details``) as a :class:`~mfulib.collect.from_prof.profile.Profile`
(:func:`load_ncu`): launches in ncu ID order with made-up, ordered timestamps (ncu records none), the bytes
written to DRAM and the device's L2 size where ncu reports them, and the replay conditions (:func:`replay_record`)
that make these times ncu replay times rather than free-running ones.

Kernel time per launch: ``gpu__time_duration.sum``, else the details page's SpeedOfLight ``Duration``
(:func:`mfulib.profiles.ncu.kernel_duration`). A file with launches and neither metric is refused with the fix
(re-record with ``--metrics gpu__time_duration.sum``), never reported as an incomplete profile."""
from __future__ import annotations

import os

from mfulib.profiles import ncu as _ncu
from mfulib.core.nominal_peaks import l2_from_facts
from mfulib.collect.from_prof.profile import Profile
from mfulib.core.errors import UserError

#: what ncu prints on stderr (captured with the CSV when stdout and stderr go to one file) under
#: ``--clock-control none``, as in the H200 recording tests/fixtures/profiles/cuda/ncu_raw.csv
UNMODIFIED_CLOCKS = "Running with unmodified GPU clocks"


def replay_record(text: str) -> dict:
    """The ``ncu_replay`` record of performance.json for an ncu-timed case (schemas/performance_json.py):
    ``{"serialized": True, "clock_control": "none" | None, "cache_control": None, "note"}``. ``clock_control`` is
    "none" when the file holds ncu's unmodified-clocks warning, else None: not said by the file (ncu's default,
    ``base``, locks the clocks to the base clock); ``cache_control`` is never in the CSV (ncu's default, ``all``,
    flushes the caches before each replay pass). Source: Nsight Compute Kernel Profiling Guide, "Kernel Replay",
    "Clock Control", "Cache Control", https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html
    (docs/sources.md#ncu-metrics)."""
    clocks = "none" if UNMODIFIED_CLOCKS in text else None
    clock_text = ("clocks left free (--clock-control none, ncu's warning in the file)" if clocks else
                  "clocks as ncu set them (not said in the file; ncu's default --clock-control base locks them to "
                  "the base clock)")
    return {"serialized": True, "clock_control": clocks, "cache_control": None,
            "note": f"ncu replay times: ncu serialised every launch and replayed it, {clock_text}, caches as ncu set "
                    "them (not said in the file; ncu's default --cache-control all flushes them before each pass) - "
                    "not the free-running kernel time a torch.profiler or msprof trace records"}


def load_ncu(path) -> Profile:
    """An ``ncu --csv`` output (raw or details page) as a :class:`Profile` (launches in ncu ID order).

    Raises UserError when the file has launches but no kernel duration for any of them (the fix: the metric to
    record)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    recs = _ncu.parse_ncu_csv(text)
    details = '"Metric Name"' in next((ln for ln in text.splitlines() if ln.startswith('"ID",')), "")
    rows, t = [], 1
    l2, dev_name, sources = None, None, set()
    for rec in recs:
        d, d_src = _ncu.kernel_duration(rec)
        sources.add(d_src)
        pmu = {k: v for k, v in rec["metrics"].items() if isinstance(v, float) and k != _ncu.TIME_METRIC
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
    if recs and sources == {None}:
        page = "details" if details else "raw"
        raise UserError(f"{len(recs)} launch(es) on the ncu {page} page, none with a kernel duration (no "
                        f"{_ncu.TIME_METRIC} metric, no '{_ncu.SOL_DURATION[1]}' row of the "
                        f"'{_ncu.SOL_DURATION[0]}' section) - re-record with `ncu --csv --page {page} --metrics "
                        f"{_ncu.TIME_METRIC} ...` (or --section SpeedOfLight)")
    method = "ncu." + (_ncu.TIME_METRIC if sources - {None} == {_ncu.TIME_METRIC} else "details.SpeedOfLight.Duration")
    prof = Profile(path=os.path.abspath(path), fmt="ncu_details" if details else "ncu_raw", backend="cuda",
                   rows=rows, timing_method=method, timestamps=False)
    if recs:
        prof.extra["ncu_replay"] = replay_record(text)
        prof.flags.append(prof.extra["ncu_replay"]["note"])
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
