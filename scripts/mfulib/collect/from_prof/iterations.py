"""Iterations of a profile without ranges, and the head of its window.

This tool's ranges or marker kernels, or the profile's own ranges (:mod:`mfulib.collect.from_prof.ranges`),
delimit iterations where present. Otherwise the launch sequence is searched for its period
(:func:`delimit_by_sequence`): a launch is identified by its kernel name and launch configuration (CUDA grid/block/registers/shared memory, ncu grid/block, msprof
Block Dim), and the period that covers the most launches at the end of the window (at least two repetitions)
wins; where one iteration repeats a kernel (period ambiguous) it is split at the device-idle gaps (a boundary gap
at least :data:`GAP_RATIO` times every gap inside). Iterations are aligned to the end of the window.

The head of the window: a first iteration with fewer launches than the others, or whose host launches lack their
kernel records (the profile was cut at its start) is named, reported as found/expected launches and left out, the
case measured from the complete iterations, and a longer warm-up advised; a first iteration (or the launches before
the first complete one) holding many more launches of the operator's kernels than a steady one, with or without
flush kernels between them, is the autotuner benchmarking its configs (or a warm-up): "first call autotuned: N
launches", left out.
"""
from __future__ import annotations

from collections import Counter

from mfulib.collect.from_prof.flush import is_fill
from mfulib.profiles import kernels as _kernels

GAP_RATIO = 4.0


def _sig(r):
    return (r.get("name"), r.get("config"))


def _periodic_suffix(sigs, k):
    n = len(sigs)
    j = n - k - 1
    while j >= 0 and sigs[j] == sigs[j + k]:
        j -= 1
    return n - 1 - j  # length of the longest k-periodic suffix


def delimit_by_sequence(rows, expected=None, timestamps=True):
    """Tag ``rows`` (start order, harness rows removed) with iterations from the repeating launch sequence.

    Returns ``(tagged rows, info)``; ``info``: ``period`` (launches per iteration), ``found`` (complete
    iterations), ``expected``, ``head`` (launches before the first complete iteration), ``partial`` (launches of a
    cut-off first iteration), ``autotune`` {launches, configs, kernels}, ``flags``, ``problems``. Iterations are
    numbered so that the last one found is ``expected - 1`` (or ``found - 1``): missing ones are at the head.
    """
    sigs = [_sig(r) for r in rows]
    n = len(sigs)
    info = {"method": "repeating launch sequence (no iteration marker or range of this tool)", "flags": [],
            "problems": [], "expected": expected}
    tagged = [dict(r, iteration=None) for r in rows]
    best = None
    if expected == 1 or n == 1:
        best = (n, 1)
    for k in range(1, min(n // 2, 4096) + 1):
        if best is not None and best[0] < k and k % best[0] == 0:
            continue  # a multiple of the best period covers no more; one iteration repeating it is split below
        reps = _periodic_suffix(sigs, k) // k
        if reps >= 2 and (best is None or reps * k > best[0] * best[1]):
            best = (k, reps)
            if reps * k == n:
                break
    if best is None or n == 0:
        info["problems"].append(f"the launch sequence of {n} launch(es) does not repeat: iterations cannot be "
                                "delimited - record the profile with this tool, or with one range per iteration")
        return tagged, info
    k, reps = best
    if timestamps and reps >= 4 and all(_kernels.is_valid_record(r) for r in rows[n - reps * k:]):
        # one iteration repeating a kernel (pattern): split at the device-idle gaps
        start = n - reps * k
        gaps = [rows[start + (j + 1) * k]["start_ns"] - (rows[start + (j + 1) * k - 1]["start_ns"] +
                                                         rows[start + (j + 1) * k - 1]["duration_ns"])
                for j in range(reps - 1)]
        for m in range(2, reps // 2 + 1):
            bnd = [g for j, g in enumerate(gaps) if (reps - 1 - j) % m == 0]
            inner = [g for j, g in enumerate(gaps) if (reps - 1 - j) % m != 0]
            if bnd and inner and min(bnd) > GAP_RATIO * max(max(inner), 1):
                info["flags"].append(f"one iteration repeats a {k}-launch pattern {m} times: iterations split at the "
                                     f"device-idle gaps (>= {GAP_RATIO:g}x the gaps inside)")
                k, reps = k * m, reps // m
                break
    start = n - reps * k
    ref = sigs[start:start + k]
    partial = 0
    for h in range(k - 1, 0, -1):
        if start - h >= 0 and sigs[start - h:start] == ref[k - h:]:
            partial = h
            break
    first_idx = (expected - reps) if expected else 0
    for j in range(reps):
        for i in range(start + j * k, start + (j + 1) * k):
            tagged[i]["iteration"] = first_idx + j
    for i in range(start - partial, start):
        tagged[i]["excluded_as"] = "cut_iteration"
    info.update(period=k, found=reps, head=start, partial=partial)
    info["flags"].append(f"iterations delimited by the repeating launch sequence (no iteration marker or range of "
                         f"this tool): {reps} complete iteration(s) of {k} launch(es)")
    head_rows = rows[:start - partial]
    ref_names = {s[0] for s in ref}
    ref_configs = set(ref)
    tune = [r for r in head_rows if r.get("name") in ref_names and not is_fill(r)]
    between = [r for r in head_rows if r.get("name") not in ref_names and is_fill(r)]
    if tune:
        for i, r in enumerate(head_rows):
            if r.get("name") in ref_names or is_fill(r):
                tagged[i]["excluded_as"] = "autotune"
    if tune:
        other = {(_sig(r)) for r in tune} - ref_configs
        kernels_ = sorted({r["name"] for r in tune})
        info["autotune"] = {"launches": len(tune), "configs": len(other), "kernels": kernels_,
                            "flush_launches": len(between)}
        what = (f"first call autotuned: {len(tune)} launches of {kernels_[:3]}" +
                (f" (+ {len(between)} flush kernels between them)" if between else ""))
        if other:
            info["flags"].append(f"{what} before the first complete iteration, in {len(other)} launch "
                                 "configuration(s) other than the steady one (autotuning recognised, the autotuner "
                                 "benchmarking its configs): excluded")
        else:
            info["flags"].append(f"{len(tune)} extra launch(es) of {kernels_[:3]} before the first complete "
                                 "iteration (warm-up or autotuning in the chosen configuration): excluded")
    rest = [r for r in head_rows if r.get("name") not in ref_names and not (tune and is_fill(r))]
    if rest:
        top = Counter(r.get("name") for r in rest).most_common(3)
        info["flags"].append(f"{len(rest)} other launch(es) before the first complete iteration not counted (input "
                             f"set-up?): {[t[0][:60] for t in top]}")
    if partial:
        cut = f"iteration {first_idx - 1}" if expected else "the first iteration"
        info["cut_iteration"] = first_idx - 1 if expected else None
        info["flags"].append(f"profile cut at its start: {cut} (the first iteration in the window) has {partial} of "
                             f"{k} launches (found/expected) - left out, measured from the {reps} complete "
                             "iteration(s); record with a longer warm-up so that the window opens on a whole "
                             "iteration")
    if expected and reps < expected:
        info["flags"].append(f"found {reps} of {expected} expected iterations ({reps * k + partial} of {expected * k} "
                             f"launches): the first {expected - reps} are missing from the window; measured from the "
                             "ones present")
    elif expected and reps > expected:
        info["flags"].append(f"{reps} complete iterations where {expected} were expected (--warmup + --repeats): the "
                             f"first {reps - expected} are left out")
    return tagged, info


def screen_head(tagged, cut_iterations=()):
    """Leave out head iterations (in range/marker-tagged rows) that are cut off (a strict part of the steady launch
    sequence, or in ``cut_iterations``: launches recorded on the host without a kernel record there) or hold
    autotuning / warm-up (more launches of the steady kernels than a steady iteration, possibly with flush kernels
    between them). Returns ``(rows, flags, excluded)``; ``excluded``: [{what: cut_iteration | autotune, iteration,
    launches, flush_launches, time_ns}]."""
    by = {}
    for r in tagged:
        if r.get("iteration") is not None and not _kernels.is_harness(r.get("name")):
            by.setdefault(r["iteration"], []).append(r)
    if len(by) < 2:
        return tagged, [], []
    order = {i: sorted(v, key=lambda r: r.get("start_ns") or 0) for i, v in by.items()}
    seqs = {i: tuple(_sig(r) for r in v) for i, v in order.items()}
    freq = Counter(seqs.values())
    ref = max(freq, key=lambda s: (freq[s], len(s)))
    names = Counter(s[0] for s in ref)
    drop, flags, excluded = set(), [], []
    for i in sorted(seqs):
        s = seqs[i]
        if s == ref and i not in cut_iterations:
            break
        own = [r for r in order[i] if r.get("name") in names and not is_fill(r)]
        fills = [r for r in order[i] if r.get("name") not in names and is_fill(r)]
        spent = float(sum(r.get("duration_ns") or 0 for r in order[i]))
        if i in cut_iterations or _kernels.is_strict_subsequence(s, ref):
            drop.add(i)
            excluded.append({"what": "cut_iteration", "iteration": i, "launches": len(s), "time_ns": spent})
            flags.append(f"profile cut at its start: iteration {i} has {len(s)} of {len(ref)} launches "
                         "(found/expected; launches missing at the head of the window) - left out, measured from the "
                         "complete iterations; record with a longer warm-up so that the window opens on a whole "
                         "iteration")
        elif len(own) + len(fills) == len(s) and len(own) > len(ref) and \
                all(Counter(r.get("name") for r in own)[n] >= c for n, c in names.items()):
            drop.add(i)
            other = len({_sig(r) for r in own} - set(ref))
            excluded.append({"what": "autotune", "iteration": i, "launches": len(own), "flush_launches": len(fills),
                             "time_ns": spent})
            flags.append(f"first call autotuned: {len(own)} launches of {sorted(names)[:3]} in iteration {i} "
                         f"against {len(ref)} in each steady one" +
                         (f" (+ {len(fills)} flush kernels between them)" if fills else "") +
                         f", {other} other launch configuration(s): autotuning recognised - left out")
        else:
            break
    if not drop:
        return tagged, flags, excluded
    kinds = {e["iteration"]: e["what"] for e in excluded}
    return [dict(r, iteration=None, excluded_as=kinds[r["iteration"]]) if r.get("iteration") in drop else r
            for r in tagged], flags, excluded


def split_lost(lost_by_iter, iterations):
    """``(cut, later)`` of ``lost_by_iter`` {iteration: host launches without a kernel record}: ``cut`` the head
    iterations (from the first one holding launches, consecutive) that lost records - the profile's window opened
    inside them, a longer warm-up is the fix - and ``later`` {iteration: n} the rest (profiler buffer not drained)."""
    lost = {int(k): v for k, v in (lost_by_iter or {}).items() if v}
    cut = set()
    for i in sorted(iterations):
        if i not in lost:
            break
        cut.add(i)
    return cut, {i: v for i, v in lost.items() if i not in cut}


def renumber(rows, warmup, repeats):
    """(rows with iterations 0.., warmup', repeats', dropped measured count) keeping only iterations that hold
    launches, numbered in order; iterations below ``warmup`` stay warmup."""
    present = sorted({r["iteration"] for r in rows if r.get("iteration") is not None and r["iteration"] >= 0
                      and r["iteration"] < warmup + repeats and not _kernels.is_harness(r.get("name"))})
    mapping = {old: new for new, old in enumerate(present)}
    w2 = sum(1 for i in present if i < warmup)
    r2 = len(present) - w2
    out = [dict(r, iteration=mapping.get(r.get("iteration"))) for r in rows]
    return out, w2, r2
