"""One loaded profile -> one collector-style result (:func:`analyse`), in this order: the device
(:mod:`~mfulib.collect.from_prof.devices`); the iterations, from the profile's own structure first
(:mod:`~mfulib.collect.from_prof.ranges`), the repeating launch sequence only without any
(:mod:`~mfulib.collect.from_prof.iterations`); the head of the window (cut-off and autotuned iterations); then, in
foreign profiles only, the harness flushes found by evidence (:mod:`~mfulib.collect.from_prof.flush`); last the
kernel summary of :func:`mfulib.profiles.kernels.summarize`. A profile that recorded nothing is ``no_kernels``;
launches recorded on the host without a kernel record make it ``incomplete`` (never 0 ns), except at the head of
the window, where they mark the iteration the profile was cut in.

The case's ``from_profile`` block records ``iterations_from`` (``mfu_iter | marker_kernels | profiler_step |
range:NAME | repeating_sequence``) and ``excluded``: [{what (l2_flush | autotune | cut_iteration | warmup |
outside_iterations), launches, time_ns, names}], everything left out of the operator's time.
"""
from __future__ import annotations

import time
from collections import Counter

from mfulib.backends.base import range_of
from mfulib.collect.from_prof.devices import choose_device, stream_overlap_note
from mfulib.collect.from_prof.flush import apply_flush_rule
from mfulib.collect.from_prof.iterations import delimit_by_sequence, renumber, screen_head, split_lost
from mfulib.collect.from_prof.profile import Profile
from mfulib.collect.from_prof.ranges import choose as choose_ranges, tag, tag_by_step_id
from mfulib.profiles import kernels as _kernels


OWN_RANGES = ("mfu_iter", "marker_kernels")  # this tool's iteration ranges / marker kernels


def analyse(prof: Profile, warmup=None, repeats=None, l2_flush: str = "exclude", l2_bytes=None, range_name=None,
            device=None, own_kernels=()) -> dict:
    """A collector-style result ({status, error, summary, flags, attempts, prof_dir, device, runtime,
    timing_method, from_profile}) for one profile; never raises for the profile's own faults (a ``--range`` naming
    no range of the profile raises UserError). ``own_kernels``: the implementation's Triton kernel names."""
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
           "l2_flush": l2_flush, "timestamps": prof.timestamps, "iterations_from": prof.iterations_from}
    res["from_profile"] = src
    rows, dev_flags, dev_problems, dev_record = choose_device(prof.rows, device, own_kernels)
    flags += dev_flags
    problems += dev_problems
    src.update(dev_record)
    ops = [x for x in rows if not _kernels.is_harness(x.get("name"))]
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
    source, lost_by_iter = prof.iterations_from, dict(prof.lost_by_iter or {})
    if prof.tagged:
        if range_name:
            flags.append(f"--range {range_name} not used: this tool's own iteration ranges delimit the profile")
    else:
        label, spans, range_flags = choose_ranges(prof.range_sets, rows, range_name)
        flags += range_flags
        if label:
            rows, source = tag(rows, spans), label
            src["delimiter"] = f"the profile's own {label} ranges"
            lost_by_iter = dict(Counter(i for i in (range_of(t, spans) for t in prof.extra.get("lost_launch_ns", []))
                                        if i is not None))
        else:
            stepped, n_steps = tag_by_step_id(rows)
            if n_steps >= 2:
                rows, source = stepped, "profiler_step"
                flags.append(f"iterations from the profile's own Step Id column ({n_steps} steps)")
    dropped_flush, flush_record = 0, {}
    if source is not None:
        present = {x["iteration"] for x in rows if x.get("iteration") is not None}
        cut, later = split_lost(lost_by_iter, present)
        rows, head_flags, _ = screen_head(rows, cut)
        flags += head_flags
        if not prof.tagged:  # the profile's own ranges: harness work is found by evidence
            rows, dropped_flush, flush_flags, flush_record = apply_flush_rule(
                rows, l2, l2_src, prof.bandwidth_gbps, l2_flush, own_kernels)
            flags += flush_flags
        n_tagged = max((x["iteration"] for x in rows if x.get("iteration") is not None), default=-1) + 1
        if w is None and r is None:
            w, r = 0, max(n_tagged, 1)
            flags.append(f"no --warmup/--repeats: all {n_tagged} iterations of the profile are measured")
        elif w is None or r is None:
            w = w if w is not None else max(n_tagged - r, 0)
            r = r if r is not None else max(n_tagged - w, 1)
        if not prof.tagged:
            rows, later = _align_to_end(rows, later, n_tagged, w, r, flags)
        problems += _lost_problems(later, w, w + r)
        src.update(expected=w + r)
    else:
        source = "repeating_sequence"
        harness_n = sum(1 for x in rows if _kernels.is_harness(x.get("name")))
        dropped_flush += harness_n
        expected = w + r if (w is not None and r is not None) else None
        rows, info = delimit_by_sequence([x for x in rows if not _kernels.is_harness(x.get("name"))], expected,
                                         prof.timestamps)
        flags += info["flags"]
        problems += info["problems"]
        rows, n_flush, flush_flags, flush_record = apply_flush_rule(rows, l2, l2_src, prof.bandwidth_gbps, l2_flush,
                                                                    own_kernels)
        dropped_flush += n_flush
        flags += flush_flags
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
        flags_lost, problems_lost = _lost_in_sequence(prof, rows)
        flags += flags_lost
        problems += problems_lost
    src["iterations_from"] = source
    if source not in OWN_RANGES:  # a foreign profile says where its iterations came from; this tool's own kept
        flags.insert(0, f"iterations from: {source}")  # profile re-reads to the live run's flags (the round trip)
    src.update(flush_record)
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
    elif summary.get("status") == "ok":
        note = stream_overlap_note(rows, set(range(w2, w2 + r2)))
        if note:
            flags.append(note)
    src["excluded"] = _excluded(rows, w2, flush_record if l2_flush == "exclude" else {})
    # listed as a flag where it is news: in this tool's own kept profile the warm-up and the launches outside the
    # iterations are the live run's own design (recorded in from_profile.excluded all the same)
    news = [e for e in src["excluded"] if source not in OWN_RANGES or e["what"] not in ("warmup", "outside_iterations")]
    if news:
        flags.append("left out of the operator's time: " + "; ".join(
            f"{e['what']} {e['launches']} launch(es) {e['time_ns'] / 1e3:.1f} us" for e in news))
    res["summary"] = summary
    res["flags"] = flags + list(summary.get("flags", []))
    if summary["status"] == "no_kernels":
        res.update(status="no_kernels", error=f"{prof.path}: " + "; ".join(summary["problems"]))
    elif summary["status"] != "ok":
        res.update(status="incomplete", error=f"{prof.path}: profile incomplete, not reported as a time: "
                   + "; ".join(summary["problems"][:3]))
    res["wall_s"] = {"parse": time.perf_counter() - t0}
    return res


def _align_to_end(rows, lost, n_found, warmup, repeats, flags):
    """``(rows, lost)`` with the foreign profile's range iterations renumbered so that the last one found is
    ``warmup + repeats - 1``, as the repeating-sequence path numbers them: the measured iterations are the last
    ``repeats``; iterations missing from the window (a profile cut at its start) count as warm-up, and extra ones
    before the window's last ``warmup + repeats`` are left out as warm-up."""
    shift = warmup + repeats - n_found
    if shift == 0:
        return rows, lost
    out = []
    for x in rows:
        it = x.get("iteration")
        if it is None:
            out.append(x)
        elif it + shift < 0:
            out.append(dict(x, iteration=None, excluded_as="warmup"))
        else:
            out.append(dict(x, iteration=it + shift))
    if shift < 0:
        flags.append(f"{n_found} iterations in the profile's ranges where --warmup {warmup} + --repeats {repeats} "
                     f"were expected: the first {-shift} are not measured (warm-up), the last {repeats} are")
    else:
        flags.append(f"{n_found} iterations in the profile's ranges where --warmup {warmup} + --repeats {repeats} "
                     f"were expected: the first {shift} are missing from the window (counted as warm-up), the last "
                     f"{min(repeats, n_found)} measured")
    return out, {int(k) + shift: v for k, v in (lost or {}).items() if int(k) + shift >= 0}


def _excluded(rows, warmup, flush_record):
    """Everything left out of the operator's time, by kind, with its launches and time (ns); ``flush_record``
    holds the L2 flushes dropped (empty when ``--l2-flush keep`` kept them in)."""
    out = [{"what": "l2_flush", "launches": f["launches"], "time_ns": f["time_ns"], "names": f["names"][:3]}
           for f in flush_record.get("l2_flushes", [])]
    groups = {}
    for x in rows:
        if _kernels.is_harness(x.get("name")):
            continue
        it = x.get("iteration")
        what = (x.get("excluded_as") or "outside_iterations") if it is None else ("warmup" if it < warmup else None)
        if what:
            groups.setdefault(what, []).append(x)
    for what in ("autotune", "cut_iteration", "warmup", "outside_iterations"):
        g = groups.get(what)
        if g:
            names = [n for n, _ in Counter(str(x.get("name"))[:80] for x in g).most_common(3)]
            out.append({"what": what, "launches": len(g), "time_ns": float(sum(x.get("duration_ns") or 0 for x in g)),
                        "names": names})
    return out


def _lost_in_sequence(prof, rows):
    """``(flags, problems)`` for host launches without a kernel record in a profile delimited by its sequence: those
    before the first complete iteration are where the profile was cut (a longer warm-up is the fix); later ones
    mean the profiler buffer was not drained."""
    if not prof.lost_launches:
        return [], []
    first = [x.get("host_ns") or x.get("start_ns") for x in rows if x.get("iteration") is not None]
    times = prof.extra.get("lost_launch_ns") or []
    head = sum(1 for t in times if first and t < min(first)) if times else 0
    later = prof.lost_launches - head
    flags = [f"profile cut at its start: {head} launch(es) recorded on the host before the first complete iteration "
             "have no kernel record - left out; record with a longer warm-up so that the window opens on a whole "
             "iteration"] if head else []
    problems = [f"{later} kernel launch(es) recorded on the host have no kernel record: profiler buffer not "
                "drained - re-record the profile (retry), synchronizing the device before the profiler stops"] \
        if later else []
    return flags, problems


def _lost_problems(lost, warmup, n):
    lost = {int(k): v for k, v in (lost or {}).items() if warmup <= int(k) < n and v}
    if not lost:
        return []
    return [f"{sum(lost.values())} kernel launch(es) in measured iterations {sorted(lost)} have no kernel record: "
            "profiler buffer not drained - re-record the profile (retry)"]
