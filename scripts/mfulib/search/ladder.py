"""The probe's scale ladder: factors 2, 4, 8, ... up to a maximum, then bisection between the last passing and the
first failing factor (:func:`search_factor`), ended early by a saturated pass (:data:`STOP`)."""
from __future__ import annotations


def ladder(max_scale: int) -> list:
    """Scale factors 2, 4, 8, ... up to ``max_scale`` (``max_scale`` itself last when it is not a power of 2)."""
    out, s = [], 2
    while s <= max_scale:
        out.append(s)
        s *= 2
    if max_scale >= 2 and out[-1] != max_scale:
        out.append(max_scale)
    return out


STOP = "stop"  # an evaluate() result: passed, but the ladder ends here (saturated)


def search_factor(evaluate, max_scale: int, refine_steps: int = 3) -> list:
    """Try the ladder then bisect: ``evaluate(s) -> bool | STOP`` (pass / fail / passed-but-saturated). Returns
    [(s, passed)] in the order tried.

    The ladder stops at the first failing s; bisection then runs between the last passing factor (1 when none
    passed: the original case) and the first failing one, until they are adjacent or ``refine_steps`` are used.
    A :data:`STOP` ends the ladder without bisection: a larger factor would not raise the figure (saturation)."""
    tried, lo, hi = [], 1, None
    for s in ladder(max_scale):
        ok = evaluate(s)
        tried.append((s, ok is True or ok == STOP))
        if ok == STOP:
            return tried
        if not ok:
            hi = s
            break
        lo = s
    steps = 0
    while hi is not None and hi - lo > 1 and steps < refine_steps:
        mid = (lo + hi) // 2
        ok = evaluate(mid)
        passed = ok is True or ok == STOP
        tried.append((mid, passed))
        lo, hi = (mid, hi) if passed else (lo, mid)
        steps += 1
    return tried

