"""The probe's scale ladders: per source case, one ladder per scaled symbol alone, then the joint ladder of the two
symbols whose single ladders gained most (:func:`run_ladders`). A ladder is factors 2, 4, 8, ... up to a maximum, then
bisection between the last passing and the first failing factor (:func:`search_factor`), ended early by a saturated
pass (:data:`STOP`).

Why per symbol: one factor for all scaled symbols tries batch x2,seq x2 but never batch x4 alone - on a public
attention layer the joint point fell (73 TF/s) while batch x4 alone rose to 131 TF/s, and on a batched matmul m, k and
n grow the arithmetic intensity differently. The joint ladder then tries the two best levers together.
"""
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


def search_factor(evaluate, max_scale: int, refine_steps: int = 3) -> tuple:
    """Try the ladder then bisect: ``evaluate(s) -> bool | STOP`` (pass / fail / passed-but-saturated). Returns
    ([(s, passed)] in the order tried, why the ladder stopped).

    The ladder stops at the first failing s; bisection then runs between the last passing factor (1 when none
    passed: the original case) and the first failing one, until they are adjacent or ``refine_steps`` are used.
    A :data:`STOP` ends the ladder and its bisection alike: a larger factor would not raise the figure (saturation),
    so none is tried."""
    tried, lo, hi = [], 1, None
    for s in ladder(max_scale):
        ok = evaluate(s)
        tried.append((s, ok is True or ok == STOP))
        if ok == STOP:
            return tried, f"saturated at x{s}: larger factors are not tried"
        if not ok:
            hi = s
            break
        lo = s
    if hi is None:
        return tried, f"every factor up to --max-scale {max_scale} passed"
    first_fail, steps = hi, 0
    while hi - lo > 1 and steps < refine_steps:
        mid = (lo + hi) // 2
        ok = evaluate(mid)
        tried.append((mid, ok is True or ok == STOP))
        if ok == STOP:
            return tried, f"x{first_fail} failed; bisection saturated at x{mid}: larger factors are not tried"
        lo, hi = (mid, hi) if ok else (lo, mid)
        steps += 1
    if lo == 1:
        return tried, f"nothing passed: x{first_fail} failed" + (f", bisection down to x{hi}" if hi != first_fail
                                                                   else "")
    return tried, (f"x{first_fail} failed; largest passing x{lo}" + (f" (x{hi} failed)" if hi - lo == 1 else
                                                                    f" after {steps} bisection step(s)"))


def run_ladders(symbols: list, evaluate, figure, max_scale: int, refine_steps: int = 3, log=None, records=None,
                extra=None, on_end=None) -> list:
    """The ladders of one source case over its scaled ``symbols`` (names, in order). ``evaluate(factors, key) ->
    bool | STOP`` runs one candidate ({symbol: factor}) of the ladder ``key`` (its symbols joined by ``+``: each
    ladder has its own saturation stop); ``figure(factors)`` is a passed candidate's wall figure (TFLOP/s, GB/s
    without matrix work; None when unknown). First one ladder per symbol alone; then, with two or more symbols, the
    joint ladder (both symbols at the same factor) of the two whose single ladders reached the highest figure -
    not run when fewer than two single ladders passed. ``log(line)`` gets the decision as it is carried out.

    Returns ``records`` (a new list by default) with one record per ladder appended as it starts, ``extra``'s keys
    first: {symbols, joint, tried [[factor, passed]], best {factors, wall_figure} | None, stopped, why}. An
    interruption (the budget, Ctrl-C) leaves the records so far, the cut one saying so, and re-raises.
    ``on_end(names)`` is called when a ladder is over (its traces started ahead can go)."""
    records = [] if records is None else records

    def climb(names, why):
        rec = dict(extra or {}, symbols=list(names), joint=len(names) > 1, tried=[], best=None, stopped=None,
                   why=why)
        records.append(rec)
        key = "+".join(names)

        def one(s):
            ok = evaluate({n: s for n in names}, key)
            rec["tried"].append([s, ok is True or ok == STOP])
            return ok
        try:
            _tried, rec["stopped"] = search_factor(one, max_scale, refine_steps)
        except BaseException as exc:
            rec["stopped"] = f"cut: {exc or type(exc).__name__}"
            raise
        finally:
            if on_end:
                on_end(names)
        passed = [(figure({n: s for n in names}), s) for s, ok in rec["tried"] if ok]
        passed = [(f, s) for f, s in passed if f is not None]
        if passed:  # the highest figure; of equal ones the smallest factor (the same figure for less work)
            f, s = max(passed, key=lambda fs: (fs[0], -fs[1]))
            rec["best"] = {"factors": {n: s for n in names}, "wall_figure": f}
        return rec

    singles = [climb([n], "single: this symbol alone") for n in symbols]
    if len(symbols) < 2:
        return records
    ranked = sorted((r for r in singles if r["best"]), key=lambda r: -r["best"]["wall_figure"])
    if len(ranked) < 2:
        why = (f"not run: {len(ranked)} of {len(singles)} single ladders passed a candidate with a figure (the joint "
               "ladder needs two)")
        records.append(dict(extra or {}, symbols=[], joint=True, tried=[], best=None, stopped=why, why=why))
        if log:
            log(why)
        return records
    pair = [ranked[0]["symbols"][0], ranked[1]["symbols"][0]]
    why = ("joint: the two single ladders that gained most - " +
           ", ".join(f"{r['symbols'][0]} {r['best']['wall_figure']:.4g} at x{r['best']['factors'][r['symbols'][0]]}"
                     for r in ranked[:2]))
    if log:
        log(f"joint ladder of {' and '.join(pair)} ({why.split(' - ', 1)[1]})")
    climb(pair, why)
    return records
