"""Iterations of a profile without this tool's markers, and the head of its window.

This tool's ranges (chrome traces) or marker kernels (msprof) delimit iterations where present.
Otherwise the launch sequence is searched for its period (:func:`delimit_by_sequence`): a launch is identified
by its kernel name and launch configuration (CUDA grid/block/registers/shared memory, ncu grid/block, msprof
Block Dim), and the period that covers the most launches at the end of the window (at least two repetitions)
wins; where one iteration repeats a kernel (period ambiguous) it is split at the device-idle gaps (a boundary gap
at least :data:`GAP_RATIO` times every gap inside). Iterations are aligned to the end of the window.

The head of the window: a first iteration with fewer launches than the others (the window started late)
is reported as found/expected launches and left out, the case measured from the iterations present; a first
iteration (or the launches before the first complete one) holding extra launches of the operator's kernels
in other launch configurations is the autotuner benchmarking its configs: recognised and left out.
"""
from __future__ import annotations

from collections import Counter

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
    info.update(period=k, found=reps, head=start, partial=partial)
    info["flags"].append(f"iterations delimited by the repeating launch sequence (no iteration marker or range of "
                         f"this tool): {reps} complete iteration(s) of {k} launch(es)")
    head_rows = rows[:start - partial]
    ref_names = {s[0] for s in ref}
    ref_configs = set(ref)
    tune = [r for r in head_rows if r.get("name") in ref_names]
    if tune:
        other = {(_sig(r)) for r in tune} - ref_configs
        kernels_ = sorted({r["name"] for r in tune})
        info["autotune"] = {"launches": len(tune), "configs": len(other), "kernels": kernels_}
        if other:
            info["flags"].append(f"autotuning recognised before the first complete iteration: {len(tune)} launch(es) "
                                 f"of {kernels_[:3]} in {len(other)} launch configuration(s) other than the steady "
                                 "one (the autotuner benchmarking its configs): excluded")
        else:
            info["flags"].append(f"{len(tune)} extra launch(es) of {kernels_[:3]} before the first complete "
                                 "iteration (warm-up or autotuning in the chosen configuration): excluded")
    rest = [r for r in head_rows if r.get("name") not in ref_names]
    if rest:
        top = Counter(r.get("name") for r in rest).most_common(3)
        info["flags"].append(f"{len(rest)} other launch(es) before the first complete iteration not counted (input "
                             f"set-up?): {[t[0][:60] for t in top]}")
    if partial:
        info["flags"].append(f"launches missing at the head of the window: the first iteration has {partial} of {k} "
                             "launches (found/expected; the profile started late) - left out, measured from the "
                             f"{reps} complete iteration(s)")
    if expected and reps < expected:
        info["flags"].append(f"found {reps} of {expected} expected iterations ({reps * k + partial} of {expected * k} "
                             f"launches): the first {expected - reps} are missing from the window; measured from the "
                             "ones present")
    elif expected and reps > expected:
        info["flags"].append(f"{reps} complete iterations where {expected} were expected (--warmup + --repeats): the "
                             f"first {reps - expected} are left out")
    return tagged, info


def screen_head(tagged):
    """Leave out head iterations (in range/marker-tagged rows) that are cut off (a strict part of the steady
    launch sequence) or hold autotuning (the steady sequence plus extra launches of its kernels). Returns
    ``(rows, flags)``."""
    by = {}
    for r in tagged:
        if r.get("iteration") is not None and not _kernels.is_harness(r.get("name")):
            by.setdefault(r["iteration"], []).append(r)
    if len(by) < 2:
        return tagged, []
    seqs = {i: tuple(_sig(r) for r in sorted(v, key=lambda r: r.get("start_ns") or 0)) for i, v in by.items()}
    freq = Counter(seqs.values())
    ref = max(freq, key=lambda s: (freq[s], len(s)))
    names = {s[0] for s in ref}
    drop, flags = set(), []
    for i in sorted(seqs):
        s = seqs[i]
        if s == ref:
            break
        if _kernels.is_strict_subsequence(s, ref):
            drop.add(i)
            flags.append(f"iteration {i} has {len(s)} of {len(ref)} launches (found/expected; launches missing at the "
                         "head of the window): left out, measured from the complete iterations")
        elif _kernels.is_strict_subsequence(ref, s) and all(x[0] in names for x in s):
            other = len(set(s) - set(ref))
            drop.add(i)
            flags.append(f"iteration {i} holds {len(s) - len(ref)} extra launch(es) of the operator's kernels "
                         f"({other} other launch configuration(s)): autotuning recognised - left out")
        else:
            break
    if not drop:
        return tagged, flags
    return [dict(r, iteration=None) if r.get("iteration") in drop else r for r in tagged], flags


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
