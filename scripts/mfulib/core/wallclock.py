"""The shape search's profiler-free wall clock of one operator call: back-to-back calls, amortised.

Used by the probe's gate 4 (:mod:`mfulib.search.probe_child`) and the grid search's stage 1
(:mod:`mfulib.backends.runner`, spec ``burst_target_ms``), so that both rank candidates by one method.

Why not one call between two device synchronizes: such a call pays the host's launch and synchronize latency
un-overlapped. On an H100 with a Triton GEMM (real ``npukernelbench/level3/1_BatchMatmul``: its probe.json in the
state tar and its referee row in ``bench/validation/h100/`` as of commit 9c8d686) that latency was about 65 us per
call: a [1, 2048, 4096] x [4096, 2048] case whose kernel runs about 56 us showed 121 us of wall clock (284 TFLOP/s
where the collector measured 617), so the ranking preferred ever larger shapes and the search's limit was a
24x-scaled case 12% below the brute force's. In a run of ``n`` calls with one synchronize at its end, the launches
overlap the device's work, and the wall time per call tends to the larger of the kernel time and the host's time per
call (the launch rate); the synchronize's latency is paid once. ``n`` is sized from one synchronised call so the run
lasts about :data:`BURST_TARGET_MS`; a call longer than that runs alone (n = 1: the old measurement, where the
latency is negligible).

Both callers time ``model(*args)`` with the operator's directory entered once around the whole timing, not per call:
entering it per call (``BuiltCase.run``) added about 5 us to every gate-4 call on this CPU host and none to stage 1's,
a 1.35x gap between the two on a launch-bound case - the very cases this method is for.

Not a kernel time: that is the collector's (CUPTI / msprof). This is a ranking and gate 4's bound on one call.
"""
from __future__ import annotations

import math
import time

BURST_TARGET_MS = 10.0  # ms: a timed run of back-to-back calls lasts about this long (a 65 us latency: < 1% of it)
BURST_MAX_CALLS = 256  # calls: at most this many in one run (a call of a few us is launch-bound anyway)
METHOD = "back_to_back"  # probe.json run_key.wall_clock: timings of another method are neither resumed nor reused


def calls_per_burst(single_ms: float, target_ms: float = BURST_TARGET_MS, max_calls: int = BURST_MAX_CALLS) -> int:
    """How many back-to-back calls one timed run makes: ``ceil(target_ms / single_ms)`` within [1, ``max_calls``].

    ``single_ms``: the wall time of one synchronised call (ms; it includes the latency, so it over-estimates the
    call and the run comes out a little shorter than ``target_ms``); <= 0 or None gives ``max_calls``."""
    if not single_ms or single_ms <= 0:
        return max_calls
    return max(1, min(max_calls, math.ceil(target_ms / single_ms)))


def size_burst(call, sync, target_ms: float = BURST_TARGET_MS, clock=time.perf_counter) -> tuple:
    """(single_ms, n): the wall time of one synchronised ``call()`` (ms; the device idle before it, the call compiled
    already) and :func:`calls_per_burst` of it - the sizing both callers run before their timed runs."""
    t0 = clock()
    call()
    sync()
    single_ms = (clock() - t0) * 1e3
    return single_ms, calls_per_burst(single_ms, target_ms)


def burst_ms(call, sync, n: int, clock=time.perf_counter) -> float:
    """Wall time per call (ms) of ``n`` back-to-back ``call()``s followed by one ``sync()``.

    The device must be idle when it starts (the caller synchronised after its previous work)."""
    t0 = clock()
    for _ in range(n):
        call()
    sync()
    return (clock() - t0) * 1e3 / n


def oom_advice(n: int | None) -> str:
    """The advice an out-of-memory error gets (:func:`mfulib.core.failures.classify`'s ``oom_advice``) when it
    happened in a timing of ``n`` back-to-back calls per run (None: before the runs were sized). ``n`` > 1: single
    calls of the shape ran before the run, so the memory that ran out was kept from call to call (outputs or buffers
    ModelNew holds), which the search would misread as the shape being too large; else the shape itself did not fit
    (:data:`mfulib.core.failures.OOM_ADVICE`)."""
    if not n or n <= 1:
        from mfulib.core.failures import OOM_ADVICE
        return OOM_ADVICE
    return (f" - during a run of {n} back-to-back calls, after single calls of this shape ran: ModelNew seems to "
            "keep memory from call to call (outputs or buffers held across calls); free it per call, or the search "
            "treats the shape as too large")
