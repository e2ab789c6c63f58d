"""The probe's scale ladders: per source case, one ladder per scaled symbol alone, then the joint ladder of the two
symbols whose single ladders gained most (:func:`run_ladders`), then a greedy forward selection of larger joint
ladders - three symbols, four, ... - while each gains (:func:`extend_joint`). A ladder is factors 2, 4, 8, ... up to
a maximum, then bisection between the last passing and the first failing factor (:func:`search_factor`), ended early
by a saturated pass (:data:`STOP`).

Why per symbol: one factor for all scaled symbols tries batch x2,seq x2 but never batch x4 alone - on a public
attention layer the joint point fell (73 TF/s) while batch x4 alone rose to 131 TF/s, and on a batched matmul m, k and
n grow the arithmetic intensity differently. The joint ladder then tries the two best levers together, and the
greedy step adds a third and more: a GEMM needs m, k and n to grow together (:func:`extend_joint`).
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


def _climb(names, why, evaluate, figure, max_scale, refine_steps, records, extra, on_end) -> dict:
    """One ladder of ``names`` (all at the same factor): its record appended to ``records`` as it starts, filled as
    it runs (see :func:`run_ladders`); an interruption marks it cut and re-raises."""
    rec = dict(extra or {}, symbols=list(names), joint=len(names) > 1, tried=[], best=None, stopped=None, why=why)
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


def _ranked_singles(records: list, last=()) -> list:
    """The single ladders of ``records`` that passed a candidate with a figure, highest best figure first - those of
    the symbols ``last`` (batch axes: they replicate independent work) after every other."""
    return sorted((r for r in records if not r["joint"] and r["best"]),
                  key=lambda r: (r["symbols"][0] in last, -r["best"]["wall_figure"]))


def run_ladders(symbols: list, evaluate, figure, max_scale: int, refine_steps: int = 3, log=None, records=None,
                extra=None, on_end=None, last=()) -> list:
    """The single ladders and the joint pair of one source case over its scaled ``symbols`` (names, in order).
    ``evaluate(factors, key) -> bool | STOP`` runs one candidate ({symbol: factor}) of the ladder ``key`` (its
    symbols joined by ``+``: each ladder has its own saturation stop); ``figure(factors)`` is a passed candidate's
    wall figure (TFLOP/s, GB/s without matrix work; None when unknown). First one ladder per symbol alone; then,
    with two or more symbols, the joint ladder (both symbols at the same factor) of the two whose single ladders
    reached the highest figure - not run when fewer than two single ladders passed. ``log(line)`` gets the decision
    as it is carried out. The joint ladders of three or more symbols are :func:`extend_joint`'s (run after every
    source's pair, so that a budget cuts them first).

    ``last``: the batch symbols, ranked after every other single ladder that passed (the pair takes them only when
    fewer than two others passed). A batch axis replicates independent work: it raises parallelism, never the
    arithmetic intensity, and its wall-clock gain on a small source case (launch overhead amortised) says nothing
    about the limit - on the H200 a batched matmul's pair seq+batch (from its figures) led to 35.3% MFU@ach where
    m, k and n x16 reach 76.4% (bench/RESULTS.md, the referee).

    Returns ``records`` (a new list by default) with one record per ladder appended as it starts, ``extra``'s keys
    first: {symbols, joint, tried [[factor, passed]], best {factors, wall_figure} | None, stopped, why}. An
    interruption (the budget, Ctrl-C) leaves the records so far, the cut one saying so, and re-raises.
    ``on_end(names)`` is called when a ladder is over (its traces started ahead can go)."""
    records = [] if records is None else records
    run = (evaluate, figure, max_scale, refine_steps, records, extra, on_end)
    singles = [_climb([n], "single: this symbol alone", *run) for n in symbols]
    if len(symbols) < 2:
        return records
    ranked = _ranked_singles(singles, last)
    if len(ranked) < 2:
        why = (f"not run: {len(ranked)} of {len(singles)} single ladders passed a candidate with a figure (the joint "
               "ladder needs two)")
        records.append(dict(extra or {}, symbols=[], joint=True, tried=[], best=None, stopped=why, why=why))
        if log:
            log(why)
        return records
    chosen = sorted(ranked[:2], key=lambda r: -r["best"]["wall_figure"])  # named highest figure first
    pair = [r["symbols"][0] for r in chosen]
    why = ("joint: the two single ladders that gained most - " +
           ", ".join(f"{r['symbols'][0]} {r['best']['wall_figure']:.4g} at x{r['best']['factors'][r['symbols'][0]]}"
                     for r in chosen))
    if log:
        log(f"joint ladder of {' and '.join(pair)} ({why.split(' - ', 1)[1]})")
    _climb(pair, why, *run)
    return records


def extend_joint(ladders: list, evaluate, figure, max_scale: int, min_gain: float, base=None, refine_steps: int = 3,
                 log=None, records=None, extra=None, on_end=None, last=()) -> list:
    """The greedy forward selection after the joint pair: ``ladders`` are one source's records from
    :func:`run_ladders` (its singles and pair). While the last joint ladder gained - its best figure exceeds
    (1 + ``min_gain``) x the best of every earlier ladder of the source (for the pair: the best single) - and
    another symbol's single ladder gained - its best exceeds (1 + ``min_gain``) x the figure at scale 1, ``base()``
    (None: unknown, then a single ladder that passed a candidate counts as gained) -, the joint ladder of the last
    one's symbols plus that symbol (the highest single figure first; all at the same factor: powers of two up to
    ``max_scale``, then bisection, its own saturation stop) runs; at most every gaining symbol joins. ``min_gain``
    is the probe's saturation threshold (:data:`mfulib.search.probe.SATURATION_GAIN`).

    Why: a GEMM's arithmetic intensity m k n / (m k + k n + m n) grows with each of m, k and n, and most when all
    three grow - on the H200 a batched matmul's best point scales m, k and n x16 (bench/RESULTS.md), which a
    joint ladder of two symbols cannot reach.

    The symbols ``last`` (batch axes) join after every other gaining symbol, as in :func:`run_ladders`. The other
    arguments are :func:`run_ladders`'. Appends to ``records`` (a new list by default) one record per
    joint ladder run (``why`` says why it ran) and, where a larger one was possible but is not run, one record with
    ``tried`` [] and ``stopped`` = ``why`` = "not run: ..." (``symbols`` the ones it would have joined, [] when no
    symbol was left to join). Returns ``records``; an interruption re-raises as in :func:`run_ladders`."""
    records = [] if records is None else records
    singles = [r for r in ladders if not r["joint"]]
    ranked = _ranked_singles(singles, last)
    joint = [r for r in ladders if r["joint"] and r["tried"]]
    if not joint or len(singles) < 3:  # no pair ran, or the pair already holds every symbol
        return records
    done, cur = list(ladders), joint[-1]
    x1 = base() if base else None

    def gained(r):
        return x1 is None or r["best"]["wall_figure"] > (1.0 + min_gain) * x1

    def fig(r):
        return f"{'+'.join(r['symbols'])} {r['best']['wall_figure']:.4g} at x{max(r['best']['factors'].values())}"
    while len(cur["symbols"]) < len(singles):
        earlier = [r for r in done if r is not cur and r["best"]]
        prev = max(earlier, key=lambda r: r["best"]["wall_figure"])
        rest = [r for r in ranked if r["symbols"][0] not in cur["symbols"]]
        grown = [r for r in rest if gained(r)]
        nxt = cur["symbols"] + [grown[0]["symbols"][0]] if grown else []
        if not cur["best"] or cur["best"]["wall_figure"] <= (1.0 + min_gain) * prev["best"]["wall_figure"]:
            why = (f"not run: the joint ladder {'+'.join(cur['symbols'])} " +
                   (f"reached {fig(cur).split(' ', 1)[1]}, not more than (1 + {min_gain:g}) x the best earlier "
                    f"ladder, {fig(prev)}"
                    if cur["best"] else "passed no candidate with a figure"))
        elif not grown:
            others = ", ".join(fig(r) for r in rest) if rest else "none passed a candidate with a figure"
            why = (f"not run: no other single ladder gained more than (1 + {min_gain:g}) x scale 1" +
                   (f" ({x1:.4g})" if x1 is not None else "") + f": {others}")
        else:
            add = grown[0]
            why = (f"joint (greedy): {fig(cur)} gained over the best earlier ladder, {fig(prev)}, and "
                   f"{fig(add)} gained over scale 1" + (f" ({x1:.4g})" if x1 is not None else " (not timed)"))
            if log:
                log(f"joint ladder of {' and '.join(nxt)} ({why.split(': ', 1)[1]})")
            cur = _climb(nxt, why, evaluate, figure, max_scale, refine_steps, records, extra, on_end)
            done.append(cur)
            continue
        records.append(dict(extra or {}, symbols=nxt, joint=True, tried=[], best=None, stopped=why, why=why))
        if log:
            log(why)
        break
    return records
