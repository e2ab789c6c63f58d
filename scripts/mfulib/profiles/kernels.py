"""Kernel launch table -> per-iteration kernel time, per-kernel statistics and the checks that keep them honest.

Input rows (one per kernel launch, from any backend): ``name``, ``start_ns``, ``duration_ns`` (ints, ns),
``iteration`` (0-based index among warmup + repeats; None = outside the timed iterations, e.g. the priming call),
optionally ``kind`` and ``pmu`` ({counter: value}).

Definitions (docs/ARCHITECTURE.md#kernel-time):

* kernel time of one iteration = sum of the durations of its kernels (idle gaps excluded);
* span of one iteration = last kernel end - first kernel start; ``kernel_union_ns`` = the length of the union of
  its kernels' [start, end) intervals (:func:`interval_union_ns`), equal to the kernel time unless kernels overlap
  (several streams, a foreign profile); ``kernel_overlap_ns`` = kernel time - union; ``launch_overhead_ns`` = span -
  union: the idle time between kernels, never negative, = span - kernel time without overlap. Overlap is flagged
  (``kernel_overlap``); the kernel time, and so MFU, stays the sum (the official definition);
* the per-case figure is the **median** over the measured iterations (warmup iterations are dropped);
* ``repeat_spread`` = (max - min) / median of the measured per-iteration kernel times; above
  :data:`SPREAD_LIMIT` (5%) it is flagged;
* per kernel name: launches per iteration (from the data, never assumed 1), mean / median / min / max / std
  (population, ddof=0) of single-launch durations over the measured iterations, and ``time_per_iter_ns`` = that
  name's per-iteration sum **in the median iteration itself** (``median_iterations``: the measured iteration whose
  kernel time is the median, or the mean over the two middle ones for an even count), so the kernels of a case add
  up to its ``kernel_time_ns`` exactly (separate per-kernel medians need not: 52 vs 40 ns on synthetic data).

Harness launches (names starting with :data:`HARNESS_PREFIX`: the iteration marker and cache-flush kernels the
collector itself launches) are never operator time: they are dropped here and counted.

What makes a profile **incomplete** (status ``incomplete``: the caller retries, a bounded number of times, and
never reports 0 ns or an infinite MFU): records with a zero/missing timestamp or duration in a measured iteration;
a measured iteration whose launch sequence is a strict part of the others' (rows lost); missing iteration markers;
problems the backend found (launches without a kernel record). Status ``no_kernels``: no measured iteration launched
any kernel (the call did no device work) - an error for that case, not a retry. A launch sequence that differs
between iterations in another way is flagged (``sequence_mismatch``), never silently averaged into one pattern.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

HARNESS_PREFIX = "mfu_harness_"
MARKER_KERNEL = "mfu_harness_marker_kernel"
FLUSH_KERNEL = "mfu_harness_flush_kernel"
SPREAD_LIMIT = 0.05


def is_harness(name) -> bool:
    """True for the collector's own kernels (iteration markers, cache flush)."""
    return str(name or "").startswith(HARNESS_PREFIX)


def is_valid_record(row) -> bool:
    """A usable kernel record: positive start timestamp and positive duration."""
    s, d = row.get("start_ns"), row.get("duration_ns")
    return isinstance(s, (int, float)) and isinstance(d, (int, float)) and s > 0 and d > 0


# ------------------------------------------------------------------------------------------ iteration delimiting


def assign_by_markers(rows, n_iters: int, marker: str = MARKER_KERNEL):
    """Tag rows (in launch order) with their iteration using marker launches.

    The harness launches ``marker`` at the start of each of the ``n_iters`` iterations and once after the last,
    so a complete profile holds ``n_iters + 1`` markers and iteration i is everything between marker i and i+1.
    Returns ``(tagged_rows, info)``; ``info["problems"]`` is non-empty when markers are missing (rows lost).
    """
    pos = [i for i, r in enumerate(rows) if r.get("name") == marker]
    info = {"method": "marker kernels", "markers_expected": n_iters + 1, "markers_found": len(pos), "problems": [],
            "flags": []}
    tagged = [dict(r, iteration=None) for r in rows]
    if len(pos) < n_iters + 1:
        info["problems"].append(f"found {len(pos)} of {n_iters + 1} iteration markers ({marker}): rows were lost "
                                "(profiler buffer not drained or records dropped)")
        return tagged, info
    if len(pos) > n_iters + 1:
        info["flags"].append(f"{len(pos)} iteration markers where {n_iters + 1} were expected: the last "
                             f"{n_iters + 1} are used")
        pos = pos[-(n_iters + 1):]
    for it in range(n_iters):
        for j in range(pos[it] + 1, pos[it + 1]):
            tagged[j]["iteration"] = it
    return tagged, info


def assign_by_period(rows, n_iters: int):
    """Tag rows by periodicity when no marker exists (fallback): the smallest k such that the last
    ``(n_iters + 1) * k`` operator launches - the priming call's steady-state launches and the ``n_iters``
    iterations - repeat with period k; the last ``n_iters * k`` are the iterations, earlier rows stay untagged.
    Requiring the priming call's repetition too keeps a lost row at the end from shifting the split.
    ``info["problems"]`` is non-empty when no period fits (the trace does not repeat: never guessed)."""
    ops = [i for i, r in enumerate(rows) if not is_harness(r.get("name"))]
    names = [rows[i].get("name") for i in ops]
    tagged = [dict(r, iteration=None) for r in rows]
    info = {"method": "periodic kernel-name sequence (no markers)", "problems": [], "flags": []}
    for k in range(1, len(names) // (n_iters + 1) + 1):
        tail = names[len(names) - (n_iters + 1) * k:]
        if all(tail[j] == tail[j % k] for j in range(len(tail))):
            for j, idx in enumerate(ops[len(names) - n_iters * k:]):
                tagged[idx]["iteration"] = j // k
            info["period"] = k
            info["flags"].append(f"iterations delimited by a period of {k} launches (no iteration markers)")
            return tagged, info
    info["problems"].append(f"the kernel-name sequence of {len(names)} launches does not repeat {n_iters + 1} times "
                            "(priming call + iterations): iterations cannot be delimited")
    return tagged, info


# ------------------------------------------------------------------------------------------------ statistics


def interval_union_ns(rows) -> float:
    """Length of the union of the rows' [start_ns, start_ns + duration_ns) intervals (overlaps counted once)."""
    total, end = 0.0, None
    for s, e in sorted((r["start_ns"], r["start_ns"] + r["duration_ns"]) for r in rows):
        if end is None or s >= end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return float(total)


def _stats(values) -> dict:
    a = np.asarray(values, dtype=float)
    return {"mean_ns": float(a.mean()), "median_ns": float(np.median(a)), "min_ns": float(a.min()),
            "max_ns": float(a.max()), "std_ns": float(a.std())}


def is_strict_subsequence(short, long) -> bool:
    """True when ``short`` is ``long`` with at least one element left out (order kept): lost launch records."""
    if len(short) >= len(long):
        return False
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


def summarize(rows, warmup: int, repeats: int, extra_problems=(), spread_limit: float = SPREAD_LIMIT) -> dict:
    """Per-case kernel statistics from tagged launch rows (see the module docstring for every definition).

    Returns a dict: ``status`` (ok | incomplete | no_kernels), ``problems``, ``flags``, ``launches_per_iter``,
    ``sequence`` (kernel names of one iteration), ``kernels`` (per name, first-launch order),
    ``iteration_launches`` (per position in the iteration: median/min/max ns), ``iter_kernel_time_ns``,
    ``iter_span_ns``, ``kernel_time_ns``, ``kernel_time_mean_ns``, ``span_ns``, ``kernel_union_ns``,
    ``kernel_overlap_ns``, ``launch_overhead_ns``,
    ``repeat_spread``, ``pmu`` ({kernel: {counter: mean}}), ``median_iterations``, ``harness_launches_dropped``,
    ``launches_outside_iterations``.
    """
    n = warmup + repeats
    measured = list(range(warmup, n))
    harness = sum(1 for r in rows if is_harness(r.get("name")))
    by_iter = {i: [] for i in range(n)}
    outside = 0
    for r in rows:
        if is_harness(r.get("name")):
            continue
        it = r.get("iteration")
        if it is None or not 0 <= it < n:
            outside += 1
            continue
        by_iter[it].append(r)
    for it in by_iter:
        by_iter[it].sort(key=lambda r: (r.get("start_ns") or 0))
    out = {"status": "ok", "problems": list(extra_problems), "flags": [], "harness_launches_dropped": harness,
           "launches_outside_iterations": outside, "warmup": warmup, "repeats": repeats}
    if repeats < 1:
        out.update(status="no_kernels", problems=out["problems"] + ["--repeats must be >= 1"])
        return out
    counts = [len(by_iter[i]) for i in measured]
    if sum(counts) == 0:
        if out["problems"]:
            out["status"] = "incomplete"
        else:
            out["status"] = "no_kernels"
            out["problems"].append("no kernel was launched in any measured iteration: the call did no device work "
                                   "(it returns a view, a cached result, or computes on the host)")
        return out
    invalid = [(i, r.get("name")) for i in measured for r in by_iter[i] if not is_valid_record(r)]
    if invalid:
        out["problems"].append(f"{len(invalid)} kernel record(s) with a zero or missing timestamp/duration in the "
                               f"measured iterations (first: iteration {invalid[0][0]}, {invalid[0][1]!r})")
    seqs = {i: tuple(r.get("name") for r in by_iter[i]) for i in measured}
    freq = Counter(seqs.values())
    ref = max(freq, key=lambda s: (freq[s], len(s)))
    lost = [i for i in measured if is_strict_subsequence(seqs[i], ref) or (not seqs[i] and ref)]
    if lost:
        out["problems"].append(f"iterations {lost} have fewer launches ({[len(seqs[i]) for i in lost]}) than the "
                               f"others ({len(ref)}): the profiler window lost rows")
    differ = [i for i in measured if seqs[i] != ref and i not in lost]
    if differ:
        out["flags"].append(f"sequence_mismatch: iterations {differ} launch a different kernel sequence than the "
                            f"other measured iterations ({len(ref)} launches: {list(ref)[:6]}...)")
    warm_short = [i for i in range(warmup) if by_iter[i] and is_strict_subsequence(
        tuple(r.get("name") for r in by_iter[i]), ref)]
    if warm_short:
        out["flags"].append(f"warmup iterations {warm_short} lost kernel records (not used for timing)")
    if out["problems"]:
        out["status"] = "incomplete"
        return out

    iter_kt = [float(sum(r["duration_ns"] for r in by_iter[i])) for i in measured]
    iter_span = [float(max(r["start_ns"] + r["duration_ns"] for r in by_iter[i]) - min(r["start_ns"] for r in by_iter[i]))
                 for i in measured]
    iter_union = [interval_union_ns(by_iter[i]) for i in measured]
    overlapped = [i for i, kt_i, u in zip(measured, iter_kt, iter_union) if kt_i - u > 0]
    if overlapped:
        out["flags"].append(f"kernel_overlap: kernels of iterations {overlapped[:6]} overlap in time (several streams "
                            "or a foreign profile): kernel_time_ns is their sum (MFU uses it), kernel_union_ns the time "
                            "some kernel ran, kernel_overlap_ns the difference")
    order = list(dict.fromkeys(ref))
    ranked = sorted(range(len(iter_kt)), key=lambda j: iter_kt[j])  # stable: ties keep iteration order
    half = len(ranked) // 2
    mid = ranked[half - 1:half + 1] if len(ranked) % 2 == 0 else ranked[half:half + 1]
    kernels = []
    pmu = {}
    for name in order:
        durs = [r["duration_ns"] for i in measured for r in by_iter[i] if r.get("name") == name]
        per_iter = [sum(r["duration_ns"] for r in by_iter[i] if r.get("name") == name) for i in measured]
        k = {"name": name, "launches_per_iter": ref.count(name)}
        k.update(_stats(durs))
        k["time_per_iter_ns"] = float(np.mean([per_iter[j] for j in mid]))
        kernels.append(k)
        counters = {}
        for i in measured:
            for r in by_iter[i]:
                if r.get("name") == name:
                    for key, v in (r.get("pmu") or {}).items():
                        if isinstance(v, (int, float)):
                            counters.setdefault(key, []).append(float(v))
        if counters:
            pmu[name] = {key: float(np.mean(v)) for key, v in counters.items()}
    same = [i for i in measured if seqs[i] == ref]
    positions = []
    for p, name in enumerate(ref):
        durs = [by_iter[i][p]["duration_ns"] for i in same]
        positions.append({"index": p, "name": name, "median_ns": float(np.median(durs)), "min_ns": float(min(durs)),
                          "max_ns": float(max(durs))})
    kt = float(np.median(iter_kt))
    span = float(np.median(iter_span))
    union = float(np.median(iter_union))  # span_i >= union_i for every i, so the medians keep the order
    spread = (max(iter_kt) - min(iter_kt)) / kt if len(iter_kt) >= 2 and kt > 0 else None
    if spread is not None and spread > spread_limit:
        out["flags"].append(f"repeat_spread {spread:.1%} > {spread_limit:.0%}: per-iteration kernel time varies "
                            "(clock changes, contention or data-dependent work) - use more --repeats or a quiet device")
    out.update(launches_per_iter=len(ref), sequence=list(ref), kernels=kernels, iteration_launches=positions,
               iter_kernel_time_ns=iter_kt, iter_span_ns=iter_span, kernel_time_ns=kt,
               kernel_time_mean_ns=float(np.mean(iter_kt)), span_ns=span, kernel_union_ns=union,
               kernel_overlap_ns=max(kt - union, 0.0), launch_overhead_ns=span - union,
               repeat_spread=spread, pmu=pmu, median_iterations=[measured[j] for j in mid])
    return out
