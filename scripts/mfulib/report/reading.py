"""Reading an MFU decomposition: the best cases (:func:`maxima`) and SKILL.md's reading steps made concrete.

SKILL.md's "输出怎么读" (how to read the output): 1. compare dtypes only on MFU@ach; 2. find the part that drags
(time share >= :data:`DRAG_MIN_TIME_SHARE` and >= :data:`DRAG_RATIO` x its FLOPs share); 3. fp32 vs fp16/bf16
throughput of the same part against the measured peak ratio (is the cube/tensor unit waiting?); 4. the bound of
each part (PMU counters, :mod:`mfulib.report.bound`) and the parts ranked by what fixing them buys (:mod:`mfulib.report.roofline`).
CPU-interpreter rows get no optimisation advice (their times validate the pipeline only). Also the cache regime
the operator and the peak were measured in (:func:`regime`) and the fp32-vs-fp16 fallback bound
(:func:`apply_fallback_bounds`). Input: the rows :func:`mfulib.report.decompose.decompose_case` builds.
"""
from __future__ import annotations

import os

from mfulib.backends import matrix_unit, validates_only
from mfulib.report.bound import fallback_bound
from mfulib.core.definitions import HALF_DTYPES, NOISE_MARGIN, above_peak, finite_or_none, is_number, is_positive
from mfulib.core.fmt import pct, sig, times
from mfulib.flops.kernel_parts import OTHER
from mfulib.report import cells

DRAG_MIN_TIME_SHARE = 0.20  # a part "drags" when it holds >= 20% of the time ...
DRAG_RATIO = 2.0  # ... and at least twice its FLOPs share
# fp32 and fp16/bf16 runs of one part are compared only at the same shape or within this factor of the part's
# FLOPs: a kernel's throughput moves with its size (occupancy, tile quantisation, launch overhead), so a small fp32
# case beside a large bf16 one measures the sizes, not the dtypes. 2x is a judgment: near enough that the same
# tiling regime usually holds, stated on every line that uses it.
COMPARABLE_FLOPS_FACTOR = 2.0


def _in_error(r: dict, key: str) -> bool:
    """The row's figure ``key`` is above the peak beyond the noise band (an error, not a result); MFU@nom only for
    fp16/bf16 rows (other dtypes are divided by the fp16 figure: int8 / fp8 exceed it legitimately)."""
    if key == "mfu_nom" and cells.nom_caveat(r):
        return False
    return key in ("mfu_ach", "mfu_nom") and above_peak(r.get(key)) == "error"


def maxima(rows: list) -> dict:
    """The best measured case by MFU@ach and by MFU@nom (the "maximum" of SKILL.md step 2), and by MBU (the headline of
    operators without matrix work). A figure above the peak beyond the noise band is an error in the inputs, never
    a maximum: those rows are left out of that key (the reading aid names them)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    out = {}
    for key in ("mfu_ach", "mfu_nom", "actual_tflops", "mbu"):
        cand = [r for r in ok if r.get(key) is not None and not _in_error(r, key)]
        if cand:
            b = max(cand, key=lambda r: r[key])
            out[key] = {"value": b[key], "report": b.get("report"), "case": b["case"], "dtype": b.get("dtype")}
    return out


def reading_aid(rows: list, peak_tflops: dict) -> list:
    """The reading steps of SKILL.md ("输出怎么读"), made concrete for these rows: dtype, the part that
    drags, fp32 vs fp16 (fallback), then the PMU bound per part and the largest payoff (accelerator rows only;
    CPU-interpreter rows get no optimisation advice). Returns lines "<n>. ...", numbered consecutively over the
    items present (one item may take several lines, e.g. one fp32-vs-fp16 line per part, which share its number).
    An operator without matrix work is compared on MBU (step 1) and its parts by time and bytes (step 2)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    cpu = any(validates_only(r.get("backend")) for r in rows)
    items = [line for line in (_band_line(ok, rows), _spread_line(ok, rows)) if line]
    items = [[line] for line in items] + [[_dtype_line(ok)], [_drag_line(ok, rows, cpu)]]
    # fp32 vs fp16/bf16 throughput of the same part: is the cube/tensor unit waiting?
    if cpu:
        items.append(["skipped: CPU-interpreter kernel times against torch CPU GEMM peaks say nothing about a "
                      "cube/tensor unit; run on the NPU or GPU for this step."])
    else:
        items.append(_dtype_throughput_lines(ok, peak_tflops, multi=len({r.get("report") for r in rows}) > 1))
    # bounds (PMU or fallback) and payoff, accelerator rows only
    if not cpu:
        bl = [f"case {r['case']}{_rep(r, rows)} {p['part']}: {p['bound']['label']} ({p['bound']['note']})"
              for r in ok for p in r.get("parts") or [] if str((p.get("bound") or {}).get("source")).startswith("pmu")]
        if bl:
            items.append(["bound per part from PMU counters (thresholds and sources: kb mfu_pmu_guide.md): " +
                          "; ".join(bl[:8]) + ("; ..." if len(bl) > 8 else "") + "."])
        pay = []
        for r in ok:
            if _in_error(r, "mfu_ach"):  # an impossible MFU@ach buys nothing to rank
                continue
            top = next((p for p in r.get("parts") or [] if p["part"] == (r.get("payoff_order") or [None])[0]), None)
            rf = (top or {}).get("roofline") or {}
            if top and rf.get("payoff") and rf["payoff"] > 0:
                pay.append(f"case {r['case']}{_rep(r, rows)}: fixing {top['part']} (to {rf['target_source']}) "
                           f"raises MFU@ach {pct(r['mfu_ach'], 1)} -> {pct(rf['mfu_if_fixed'], 1)}")
        if pay:
            items.append(["largest payoff: " + "; ".join(pay[:6]) + "."])
    return [f"{n}. {line}" for n, item in enumerate(items, 1) for line in item]


def _band_line(ok: list, rows: list) -> str:
    """Read first: figures above the peak (:func:`mfulib.core.definitions.above_peak`): beyond the noise band an
    error (left out of the maximum), within it a warning; MFU@nom of a dtype other than fp16/bf16 is not judged
    here (its caveat, :func:`mfulib.report.cells.nom_caveat`). '' when none."""
    err, warn = [], []
    for r in ok:
        for key, name in (("mfu_ach", "MFU@ach"), ("mfu_nom", "MFU@nom")):
            if key == "mfu_nom" and cells.nom_caveat(r):
                continue
            level = above_peak(r.get(key))
            if level:
                (err if level == "error" else warn).append(f"case {r['case']}{_rep(r, rows)} {name} {pct(r[key], 1)}")
    if not err and not warn:
        return ""
    text = "above the peak: "
    if err:
        text += (f"{', '.join(err[:6])} - ERROR: more than the {NOISE_MARGIN:.0%} noise margin above it is "
                 "impossible, an error in flops.py (FLOPs too high: run check_flops.py) or peak.json (too low, "
                 "another device: re-run peak_calib.py); not a result, left out of the maximum")
    if warn:
        text += ("; " if err else "") + (f"{', '.join(warn[:6])} - warning: within the {NOISE_MARGIN:.0%} noise "
                                         "margin of the peak, read as the peak")
    return text + "."


def _spread_line(ok: list, rows: list) -> str:
    """Read second: cases whose repeat spread the collector flagged (:func:`mfulib.report.cells.spread_flagged`);
    '' when none."""
    noisy = [r for r in ok if cells.spread_flagged(r)]
    if not noisy:
        return ""
    return ("noisy timing: " + "; ".join(f"case {r['case']}{_rep(r, rows)} {cells.spread_text(r)}"
                                         for r in noisy[:6]) + ("; ..." if len(noisy) > 6 else "")
            + " - differences smaller than that spread are noise; collect again with more --repeats or on a quiet "
            "device before reading these cases.")


def _dtype_line(ok: list) -> str:
    """Reading step 1: which figure compares the cases - MFU@ach across dtypes, MBU when no case does matrix work."""
    if ok and not any(r.get("matrix_work", True) for r in ok):
        best = max((r for r in ok if r.get("mbu") is not None), key=lambda r: r["mbu"], default=None)
        top = f" - best MBU {pct(best['mbu'], 2)} (case {best['case']}, {best.get('dtype')})" if best else ""
        return ("dtype: no case does matrix work (flops 0, every MFU is —): compare the cases on MBU (bytes moved "
                f"per second against the measured bandwidth), across dtypes too{top}.")
    dtypes = sorted({r["dtype"] for r in ok if r.get("dtype")})
    non_half = [r for r in ok if r.get("dtype") not in HALF_DTYPES and r.get("mfu_nom") is not None
                and r.get("mfu_ach") is not None]
    if len(dtypes) > 1 or non_half:
        ex = "; ".join(f"case {r['case']} {r['dtype']}{' (tf32)' if r.get('tf32') else ''}: MFU@nom "
                       f"{pct(r['mfu_nom'], 1)} vs MFU@ach {pct(r['mfu_ach'], 1)}" for r in non_half[:3])
        return ("dtype: compare cases of different dtypes only on MFU@ach (MFU@nom divides every dtype by the "
                "fp16/bf16 nominal peak)" + (f" - {ex}" if ex else "") + ".")
    one = f"dtype: all cases are {dtypes[0] if dtypes else '?'}"
    if not any(r.get("mfu_nom") is not None for r in ok):  # no nominal peak (the CPU, an unknown device)
        return f"{one}; compare them on MFU@ach (no nominal peak here, so no MFU@nom)."
    return f"{one}; MFU@nom and MFU@ach rank them alike."


def _drag_line(ok: list, rows: list, cpu: bool) -> str:
    """Reading step 2: the part whose time share is far above its FLOPs share - or why no such comparison exists
    (no KERNEL_PARTS; no flops_parts; parts without matrix work, judged by time and bytes)."""
    drags = []
    for r in ok:
        named = any(p["part"] != OTHER for p in r.get("parts") or [])
        for p in r.get("parts") or []:
            ts, fs = p.get("time_share"), p.get("flops_share")
            if ts is None or ts < DRAG_MIN_TIME_SHARE:
                continue
            if p["part"] == OTHER:
                if named:  # without KERNEL_PARTS every kernel is 'other': nothing to single out
                    drags.append(f"case {r['case']}{_rep(r, rows)}: unmatched kernels ('other') take {ts:.0%} of "
                                 "the time and do no counted FLOPs")
                continue
            if fs is None:
                continue
            if fs == 0 or ts >= DRAG_RATIO * fs:
                if fs == 0:  # vector work (rope, norm, softmax): no MFU to quote, its time is the figure
                    drags.append(f"case {r['case']}{_rep(r, rows)}: {p['part']} takes {ts:.0%} of the time and does "
                                 "no matrix work (no MFU: judge it by its bytes moved / MBU)")
                    continue
                mfu = f", MFU@ach {pct(p['mfu_ach'], 1)}" if p.get("mfu_ach") is not None else ""
                drags.append(f"case {r['case']}{_rep(r, rows)}: {p['part']} takes {ts:.0%} of the time for "
                             f"{fs:.1%} of the FLOPs{mfu}")
    if drags:
        return ("the part that drags (time share far above FLOPs share): " + "; ".join(drags[:6]) +
                (" - CPU-interpreter times: a pipeline check, no optimisation advice." if cpu else
                 " - optimise it first."))
    parts = [p for r in ok for p in r.get("parts") or [] if p["part"] != OTHER]
    if any(p.get("flops_share") is not None for p in parts):
        return "no part takes >= 2x its FLOPs share of the time: time follows the work."
    if any(p.get("flops") is not None for p in parts):  # flops_parts given, but no case does matrix work
        names = sorted({p["part"] for p in parts})
        shares = "; ".join(f"case {r['case']}{_rep(r, rows)}: " + ", ".join(
            f"{p['part']} {p['time_share']:.0%}" for p in r.get("parts") or [] if p.get("time_share") is not None)
            for r in ok[:3] if r.get("parts")) if len(names) > 1 else ""  # one part: 100% of the time, nothing to add
        return (f"the parts ({', '.join(names)}) do no matrix work (flops_parts gives them 0 FLOPs): there is no "
                "FLOPs share to compare, so judge each part by its time share and bytes moved (MBU)"
                + (f" - time share {shares}" if shares else "") + ".")
    if parts:
        return ("no per-part FLOPs (flops.py has KERNEL_PARTS but no flops_parts): add flops_parts to flops.py to "
                "see which part drags.")
    return ("one part only (flops.py has no KERNEL_PARTS: every kernel is 'other'): add KERNEL_PARTS (and "
            "flops_parts for parts with matrix work) to flops.py to see which part drags.")


def _rep(r, rows):
    return f" [{r['report']}]" if len({x.get("report") for x in rows}) > 1 else ""


def comparable(r32: dict, p32: dict, r16: dict, p16: dict):
    """Why an fp32 and an fp16/bf16 run of one part are comparable evidence - ``"same shape"``, or ``"FLOPs within
    2x (1.37x)"`` (:data:`COMPARABLE_FLOPS_FACTOR`) - or None when they are not (sizes too far apart to tell the
    dtypes from the sizes). Rows and parts as :func:`mfulib.report.decompose.decompose_case` builds them."""
    shape32, shape16 = (str(r.get("shape") or "").replace(" ", "") for r in (r32, r16))
    if shape32 and shape32 == shape16:
        return "same shape"
    f32, f16 = finite_or_none(p32.get("flops")), finite_or_none(p16.get("flops"))
    if f32 and f16 and f32 > 0 and f16 > 0:
        ratio = max(f32, f16) / min(f32, f16)
        if ratio <= COMPARABLE_FLOPS_FACTOR:
            return f"FLOPs within {COMPARABLE_FLOPS_FACTOR:g}x ({ratio:.2f}x)"
    return None


def _flops_ratio(p32: dict, p16: dict) -> float:
    f32, f16 = finite_or_none(p32.get("flops")) or 0.0, finite_or_none(p16.get("flops")) or 0.0
    return max(f32, f16) / min(f32, f16) if f32 > 0 and f16 > 0 else float("inf")


def _dtype_runs(ok: list) -> dict:
    """{(report, part): (fp32 [(row, part)], fp16/bf16 [(row, part)])} of parts with a throughput."""
    by = {}
    for r in ok:
        for p in r.get("parts") or []:
            if p.get("tflops"):
                by.setdefault((r.get("report"), p["part"]), []).append((r, p))
    return {key: ([(r, p) for r, p in items if r["dtype"] == "float32"],
                  [(r, p) for r, p in items if r["dtype"] in HALF_DTYPES])
            for key, items in sorted(by.items(), key=lambda kv: str(kv[0]))}


def fp32_fp16_pairs(ok: list, peak_tflops: dict) -> list:
    """Per (report, part) measured in fp32 and in fp16/bf16 at a comparable size (:func:`comparable`): the closest
    pair - the same shape first, then the nearest FLOPs, then the faster fp16/bf16 run - and their throughput ratio
    against the expected (measured peak) ratio. Parts run in both dtypes only at sizes too far apart give no pair
    (:func:`incomparable_parts` lists them). Returns [{report, part, r32, p32, r16, p16, ratio, expect, src, why}]."""
    out = []
    for (rep, part), (f32, f16) in _dtype_runs(ok).items():
        cand = [(a, b, why) for a in f32 for b in f16 if (why := comparable(a[0], a[1], b[0], b[1]))]
        if not cand:
            continue
        (r32, p32), (r16, p16), why = min(cand, key=lambda c: (c[2] != "same shape", _flops_ratio(c[0][1], c[1][1]),
                                                                -c[1][1]["tflops"]))
        k32, k16 = r32["peak_key"], r16["peak_key"]
        if peak_tflops.get(k32) and peak_tflops.get(k16):
            expect, src = peak_tflops[k32] / peak_tflops[k16], f"measured {k32}/{k16} peak ratio"
        else:
            expect, src = 0.25, "the ~1/4 fp32:fp16 cube ratio (docs/sources.md#npu-fp32-ratio)"
        out.append({"report": rep, "part": part, "r32": r32, "p32": p32, "r16": r16, "p16": p16,
                    "ratio": p32["tflops"] / p16["tflops"], "expect": expect, "src": src, "why": why})
    return out


def incomparable_parts(ok: list) -> list:
    """(report, part, fp32 case ids, fp16/bf16 case ids, nearest FLOPs ratio) of the parts run in both dtypes but at
    no comparable size (:func:`comparable`): no dtype comparison can be read from them."""
    out = []
    for (rep, part), (f32, f16) in _dtype_runs(ok).items():
        if f32 and f16 and not any(comparable(a[0], a[1], b[0], b[1]) for a in f32 for b in f16):
            near = min(_flops_ratio(a[1], b[1]) for a in f32 for b in f16)
            out.append((rep, part, [r["case"] for r, _ in f32], [r["case"] for r, _ in f16], near))
    return out


def apply_fallback_bounds(rows: list, peak_tflops: dict) -> None:
    """Give parts without PMU counters (``bound.source`` None) the fp32-vs-fp16 fallback bound of
    :func:`mfulib.report.bound.fallback_bound` where the part ran in both dtypes (in place; accelerator rows only: CPU
    interpreter times say nothing about a cube/tensor unit). Each part is judged with its own MFU@ach. A row
    without counters takes the bound of its longest part."""
    ok = [r for r in rows if r.get("status") == "ok" and not validates_only(r.get("backend"))]
    for pair in fp32_fp16_pairs(ok, peak_tflops):
        word = matrix_unit(pair["r16"].get("backend"))
        for r, p in ((pair["r32"], pair["p32"]), (pair["r16"], pair["p16"])):
            for q in r.get("parts") or []:
                if q["part"] == pair["part"] and not (q.get("bound") or {}).get("source"):
                    q["bound"] = fallback_bound(pair["ratio"], pair["expect"], q.get("mfu_ach"), word)
    for r in ok:
        if (r.get("bound") or {}).get("source") is None and r.get("parts"):
            longest = max(r["parts"], key=lambda q: q.get("time_ns") or 0.0)
            if (longest.get("bound") or {}).get("source"):
                r["bound"] = dict(longest["bound"], note=f"part {longest['part']}: {longest['bound']['note']}")


def _dtype_throughput_lines(ok: list, peak_tflops: dict, multi: bool) -> list:
    out = []
    for x in fp32_fp16_pairs(ok, peak_tflops):
        r32, p32, r16, p16, ratio, expect = x["r32"], x["p32"], x["r16"], x["p16"], x["ratio"], x["expect"]
        verdict = fallback_bound(ratio, expect, p16.get("mfu_ach"))
        if verdict["label"] == "tensor-bound":
            text = "this part is compute-bound (fallback without counters)"
        else:
            text = verdict["note"]
        rep = f" [{x['report']}]" if multi else ""
        out.append(f"{x['part']}{rep}: "
                   f"{sig(p32['tflops'], 3)} TFLOP/s in fp32 (case {r32['case']}) vs {sig(p16['tflops'], 3)} in "
                   f"{r16['dtype']} (case {r16['case']}; {x['why']}) = {ratio:.2f}, expected ~{expect:.2f} "
                   f"({x['src']}) - {text}.")
    for rep, part, c32, c16, near in incomparable_parts(ok):
        tag = f" [{rep}]" if multi else ""
        apart = f"nearest pair {times(near)} apart in FLOPs" if near != float("inf") else "FLOPs unknown"
        out.append(f"{part}{tag}: no comparable fp32 / fp16-bf16 pair - fp32 case(s) {c32} and fp16/bf16 case(s) "
                   f"{c16} differ in shape and by more than {COMPARABLE_FLOPS_FACTOR:g}x in FLOPs ({apart}), so "
                   "their throughputs measure the sizes, not the dtypes; time both dtypes at one shape to read them "
                   "against each other.")
    if not out:
        out.append("fp32 vs fp16: no part ran in both fp32 and fp16/bf16 here; measure a case in each dtype to "
                   "tell whether the cube/tensor unit is waiting.")
    return out


def speedups(reports: list) -> None:
    """Side-by-side reports: add ``speedup`` {``baseline``, ``value``} to every ok row (and part) of every report
    but the baseline - the report labelled ``baseline`` if any, else the first - for the same case id (and part):
    ``value = baseline kernel time / this kernel time`` (> 1: faster than the baseline). In place; one report: no-op.
    """
    if len(reports) < 2:
        return
    base = next((r for r in reports if r.get("label") == "baseline"), reports[0])
    ref = {r["case"]: r for r in base["rows"] if r.get("status") == "ok"}
    for rep in reports:
        if rep is base:
            continue
        for r in rep["rows"]:
            b = ref.get(r.get("case"))
            if r.get("status") != "ok" or b is None or not r.get("kernel_time_ns"):
                continue
            r["speedup"] = {"baseline": base["label"], "value": b["kernel_time_ns"] / r["kernel_time_ns"]}
            bparts = {p["part"]: p for p in b.get("parts") or []}
            for p in r.get("parts") or []:
                bp = bparts.get(p["part"])
                if bp and bp.get("time_ns") and p.get("time_ns"):
                    p["speedup"] = {"baseline": base["label"], "value": bp["time_ns"] / p["time_ns"]}


def peak_flush_mib(peak: dict):
    """The L2 flush of peak.json's timing in MiB: its structured ``method.flush_cache_mib`` (0: no flush); None
    when peak.json does not record it (a calibration written before the field existed: measure again to know)."""
    m = peak.get("method") or {}
    mib = finite_or_none(m.get("flush_cache_mib"))
    return float(mib) if mib is not None and mib >= 0 else None


def regime(reports: list, peak: dict) -> dict:
    """The top-level ``regime`` of mfu_decompose.json: ``flush_cache_mib_collect`` (performance.json's
    ``flush_cache_mib``, the first report's; reports that differ are named in the note), ``flush_cache_mib_peak``
    (:func:`peak_flush_mib`) and ``note``: which cache regime the operator time and the peak share."""
    col = [(rep.get("label"), finite_or_none(rep.get("flush_cache_mib"))) for rep in reports]
    c = col[0][1] if col else None
    pk = peak_flush_mib(peak)
    if validates_only(peak.get("backend"), peak.get("accelerator")):
        note = ("CPU interpreter: no cache regime to share (its times validate the pipeline only; the flush "
                "matters on the NPU or GPU)")
    elif c is None or pk is None:
        note = ("regime unknown: " + ("performance.json records no flush_cache_mib" if c is None else
                                      "peak.json does not say how it flushed the cache (one from before "
                                      "method.flush_cache_mib: measure again, make FORCE=1 peak)"))
    elif c > 0 and pk > 0:
        note = f"both cold: L2 flushed before every iteration (operator {c:g} MiB, peak {pk:g} MiB)"
    elif c == 0 and pk == 0:
        note = "both warm: no cache flush in the operator's iterations nor in the peak's"
    elif c == 0:
        note = (f"operator warm (no flush), peak cold ({pk:g} MiB flushed per iteration): small cases may read from "
                f"L2 and look better than the peak's regime - collect with --flush-cache-mib {pk:g} (make "
                f"FLUSH_CACHE_MIB={pk:g}) to share it")
    else:
        note = f"operator cold ({c:g} MiB flush), peak warm: MFU@ach is pessimistic against this peak"
    differ = [lab for lab, v in col[1:] if v != c]
    if differ:
        note += f"; reports {differ} were collected with another flush_cache_mib than {col[0][0]}"
    return {"flush_cache_mib_collect": c, "flush_cache_mib_peak": pk, "note": note}


# Two timings of one point in two processes that differ by at most this are the same time: the spread of one
# run's repeats understates the spread between processes (the H200 batch's Softmax: 0.3% apart, repeat spreads 0.2%)
SAME_POINT_REL = 0.01


def search_note(op_dir, rows) -> list:
    """One note tying the search's answer to this table when ``op_dir`` holds a grid_search.json: the search's best
    point (stage 2, measured by the collector) and the same case in this collection, which timed it again in another
    process. The note quotes both figures and compares their kernel-time difference with :data:`SAME_POINT_REL` and
    the two runs' own repeat spreads ((max - min) / median): within them it is the same time or the runs' noise;
    beyond them the note says so and how to tell which holds (it never guesses a cause). Another case of this
    collection above the limit's figure is named, with what to do. The limit is the search's figure. [] without a
    search or on an unreadable file."""
    path = os.path.join(op_dir, "grid_search.json") if op_dir else None
    if not path or not os.path.exists(path):
        return []
    try:
        from mfulib.schemas.grid_search_json import read_grid_search_json
        doc = read_grid_search_json(path) or {}
    except Exception:  # noqa: BLE001 - a note, never a failure of the decomposition
        return []
    best = doc.get("best") or {}
    if best.get("case") is None:
        return []
    metric = best.get("metric") or "mfu"
    value = best.get("mbu") if metric == "mbu" else best.get("mfu")
    kind = "MBU" if metric == "mbu" else ("MFU@ach" if best.get("mfu_kind") == "ach" else "MFU@nom")
    here = next((r for r in rows if r.get("case") == best["case"] and r.get("status") == "ok"), None)
    key = "mbu" if metric == "mbu" else ("mfu_ach" if best.get("mfu_kind") == "ach" else "mfu_nom")
    again = (f"; this collection timed case {best['case']} again: {pct(here[key], 2)}" if here and here.get(key)
             is not None else f"; case {best['case']} is not in this collection")
    fig = pct(value, 2)
    rt = best.get("retimed") or {}
    where = (f"the median of its {rt['runs']} collector runs, spread {rt['spread']:.1%}"
             if rt.get("runs") and is_number(rt.get("spread")) else "its stage 2")
    head = (f"search (grid_search.json): limit {kind} {fig} at case {best['case']} (scale {best.get('scale')}, "
            f"{where}){again}")
    above = max((r for r in rows if r.get("status") == "ok" and r.get("case") != best["case"]
                 and is_number(r.get(key)) and is_number(value) and r[key] > value), key=lambda r: r[key], default=None)
    beaten = (f"; case {above['case']} reads {pct(above[key], 2)} in this collection, above the limit: one collection "
              "is one process's timing, the limit the search's over its runs - re-run make search (or compare "
              "grid_search.json's stage2 and retime) before taking one over the other") if above else ""
    return [head + _agreement(best, doc.get("stage2") or [], here) + beaten + "; the limit is the search's figure"]


def _agreement(best, stage2, here) -> str:
    """' - <how the two kernel times compare>' for :func:`search_note`, '' when either time is missing."""
    t_search, t_here = best.get("kernel_time_ns"), (here or {}).get("kernel_time_ns")
    if not (is_positive(t_search) and is_positive(t_here)):
        return ""
    entry = next((e for e in stage2 if isinstance(e, dict) and e.get("case") == best["case"]), {})
    spreads = [v for v in (entry.get("repeat_spread"), here.get("repeat_spread"),  # within a run
                           (best.get("retimed") or {}).get("spread"))  # across the search's collector runs
               if is_number(v) and v >= 0]
    diff = abs(t_here - t_search) / t_search
    said = f" - kernel time {sig(t_search / 1e3)} us in the search, {sig(t_here / 1e3)} us here ({diff:.1%} apart"
    if diff <= SAME_POINT_REL:
        return said + ": the same time)"
    if not spreads:
        return said + "; no repeat spread recorded to compare with)"
    if diff <= max(spreads):
        return said + f", within the runs' spread of up to {max(spreads):.1%}: run-to-run noise)"
    return said + (f", more than the runs' spread of up to {max(spreads):.1%} (each run's repeats, the search's "
                   "re-timings): the two differ beyond their own noise - collect again (make collect) and compare: "
                   "a gap that stays is not noise)")
