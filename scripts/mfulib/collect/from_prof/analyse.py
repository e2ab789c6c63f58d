"""One loaded profile -> one collector-style result (:func:`analyse`): the L2-flush rule
(:mod:`~mfulib.collect.from_prof.flush`), the iterations (:mod:`~mfulib.collect.from_prof.iterations`),
then the kernel summary of :func:`mfulib.profiles.kernels.summarize`. A profile that recorded nothing is
``no_kernels``; launches recorded on the host without a kernel record make it ``incomplete`` (never 0 ns)."""
from __future__ import annotations

import time

from mfulib.profiles import kernels as _kernels
from mfulib.collect.from_prof.flush import apply_flush_rule
from mfulib.collect.from_prof.iterations import delimit_by_sequence, renumber, screen_head
from mfulib.collect.from_prof.profile import Profile


def analyse(prof: Profile, warmup=None, repeats=None, l2_flush: str = "exclude", l2_bytes=None) -> dict:
    """A collector-style result ({status, error, summary, flags, attempts, prof_dir, device, runtime,
    timing_method, from_profile}) for one profile; never raises for the profile's own faults."""
    t0 = time.perf_counter()
    flags = list(prof.flags)
    problems = list(prof.problems)
    res = {"status": "ok", "error": None, "attempts": 1, "prof_dir": prof.path, "output_bytes": None,
           "device": prof.device or {"backend": prof.backend}, "compat": None, "runtime": prof.runtime,
           "timing_method": prof.timing_method, "summary": None, "flags": flags, "wall_s": {}}
    w = warmup if warmup is not None else prof.warmup
    r = repeats if repeats is not None else prof.repeats
    l2, l2_src = (l2_bytes, "--l2-mib") if l2_bytes else (prof.l2_bytes, prof.l2_source)
    src = {"path": prof.path, "format": prof.fmt, "delimiter": prof.delimiter, "l2_bytes": l2, "l2_source": l2_src,
           "l2_flush": l2_flush, "timestamps": prof.timestamps}
    res["from_profile"] = src
    ops = [x for x in prof.rows if not _kernels.is_harness(x.get("name"))]
    if not ops:
        if prof.lost_launches or (prof.host_launches or 0) > 0:
            n = prof.lost_launches or prof.host_launches
            res.update(status="incomplete", error=f"{prof.path}: {n} kernel launch(es) recorded on the host but no "
                       "kernel record: profiler buffer not drained (the profile was stopped or exported before the "
                       "device records were flushed) - re-record it (retry), synchronizing the device before the "
                       "profiler stops; not reported as 0 ns")
        else:
            what = prof.extra.get("ncu_note") or "the export has a header and no kernel row"
            res.update(status="no_kernels", error=f"{prof.path}: no device kernel ({what}): the profiled call did no "
                       "device work, or the profiler recorded no kernel activity (CUDA: ProfilerActivity.CUDA; msprof: "
                       "--task-time=on)")
        return res
    n_records = len(prof.rows)
    if prof.launches_counted_apart and prof.host_launches and prof.host_launches > n_records:
        flags.append(f"api_statistic counts {prof.host_launches} KernelLaunch calls but the kernel table has "
                     f"{n_records} rows: {prof.host_launches - n_records} launch(es) without a kernel record (profiler "
                     "buffer not drained?) - re-record if the iterations below are incomplete")
    # harness work inside the window
    rows, dropped_flush, flush_flags, flush_record = apply_flush_rule(prof.rows, l2, l2_src,
                                                                      prof.bandwidth_gbps, l2_flush)
    flags += flush_flags
    src.update(flush_record)
    # iterations
    if prof.tagged:
        rows, head_flags = screen_head(rows)
        flags += head_flags
        n_tagged = max((x["iteration"] for x in rows if x.get("iteration") is not None), default=-1) + 1
        if w is None and r is None:
            w, r = 0, max(n_tagged, 1)
            flags.append(f"no --warmup/--repeats: all {n_tagged} iterations of the profile are measured")
        elif w is None or r is None:
            w = w if w is not None else max(n_tagged - r, 0)
            r = r if r is not None else max(n_tagged - w, 1)
        problems += _lost_problems(prof.lost_by_iter, w, w + r)
        src.update(expected=w + r)
    else:
        harness_n = sum(1 for x in rows if _kernels.is_harness(x.get("name")))
        dropped_flush += harness_n
        expected = w + r if (w is not None and r is not None) else None
        tagged, info = delimit_by_sequence([x for x in rows if not _kernels.is_harness(x.get("name"))], expected,
                                           prof.timestamps)
        rows = tagged
        flags += info["flags"]
        problems += info["problems"]
        src.update(period=info.get("period"), found=info.get("found"), expected=expected, head=info.get("head"),
                   partial=info.get("partial"), autotune=info.get("autotune"))
        if r is None:
            w, r = (w or 0), max(info.get("found") or 1, 1) - (w or 0)
            if r < 1:
                problems.append(f"--warmup {w} leaves no measured iteration of the {info.get('found')} found")
            flags.append(f"no --repeats: all {info.get('found')} iterations found are used (warmup {w})")
        elif w is None:  # --repeats alone: the last repeats iterations are the measured ones, as with tagged ones
            w = max((info.get("found") or 0) - r, 0)
            flags.append(f"no --warmup: the last {r} of the {info.get('found')} iterations found are measured "
                         f"(warmup {w})")
        if prof.lost_launches:
            problems.append(f"{prof.lost_launches} kernel launch(es) recorded on the host have no kernel record: "
                            "profiler buffer not drained - re-record the profile (retry), synchronizing the device "
                            "before the profiler stops")
    rows, w2, r2 = renumber(rows, w, r)
    src.update(warmup=w, repeats=r, warmup_used=w2, repeats_used=r2)
    if r2 < r and r2 > 0 and not problems:
        flags.append(f"measured from {r2} of {r} iterations (the others are missing or left out, see above)")
    if r2 == 0 and not problems:
        problems.append(f"no complete measured iteration in the profile ({w2} warmup iteration(s) only) - record more "
                        "iterations or lower --warmup")
    summary = _kernels.summarize(rows, w2, max(r2, 1), extra_problems=problems)
    summary["harness_launches_dropped"] = summary.get("harness_launches_dropped", 0) + dropped_flush
    if not prof.timestamps and summary.get("status") == "ok":
        summary.update(span_ns=None, launch_overhead_ns=None, iter_span_ns=None)
        flags.append("ncu records no timestamps (it serializes and replays launches): span and launch overhead are "
                     "not available")
    res["summary"] = summary
    res["flags"] = flags + list(summary.get("flags", []))
    if summary["status"] == "no_kernels":
        res.update(status="no_kernels", error=f"{prof.path}: " + "; ".join(summary["problems"]))
    elif summary["status"] != "ok":
        res.update(status="incomplete", error=f"{prof.path}: profile incomplete, not reported as a time: "
                   + "; ".join(summary["problems"][:3]))
    res["wall_s"] = {"parse": time.perf_counter() - t0}
    return res


def _lost_problems(lost_by_iter, warmup, n):
    lost = {int(k): v for k, v in (lost_by_iter or {}).items() if warmup <= int(k) < n and v}
    if not lost:
        return []
    return [f"{sum(lost.values())} kernel launch(es) in measured iterations {sorted(lost)} have no kernel record: "
            "profiler buffer not drained - re-record the profile (retry)"]
