"""Reading an MFU decomposition: the best cases (:func:`maxima`) and the skill spec's reading steps made concrete.

The spec's "输出怎么读" (how to read the output): 1. compare dtypes only on MFU@ach; 2. find the part that drags
(time share >= :data:`DRAG_MIN_TIME_SHARE` and >= :data:`DRAG_RATIO` x its FLOPs share); 3. fp32 vs fp16/bf16
throughput of the same part against the measured peak ratio (is the cube/tensor unit waiting?); 4. PMU bound labels.
Input: the rows :func:`mfulib.decompose.decompose_case` builds.
"""
from __future__ import annotations

from .definitions import HALF_DTYPES
from .kernel_parts import OTHER

DRAG_MIN_TIME_SHARE = 0.20  # a part "drags" when it holds >= 20% of the time ...
DRAG_RATIO = 2.0  # ... and at least twice its FLOPs share


def maxima(rows: list) -> dict:
    """The best measured case by MFU@ach and by MFU@nom (the spec's "maximum"), and by MBU (the headline of
    operators without matrix work)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    out = {}
    for key in ("mfu_ach", "mfu_nom", "actual_tflops", "mbu"):
        cand = [r for r in ok if r.get(key) is not None]
        if cand:
            b = max(cand, key=lambda r: r[key])
            out[key] = {"value": b[key], "report": b.get("report"), "case": b["case"], "dtype": b.get("dtype")}
    return out


def reading_aid(rows: list, peak_tflops: dict) -> list:
    """The three reading steps of the skill spec ("输出怎么读"), made concrete for these rows. Returns lines."""
    ok = [r for r in rows if r.get("status") == "ok"]
    lines = []
    # 1. dtypes: only MFU@ach compares across dtypes
    dtypes = sorted({r["dtype"] for r in ok if r.get("dtype")})
    non_half = [r for r in ok if r.get("dtype") not in HALF_DTYPES and r.get("mfu_nom") is not None
                and r.get("mfu_ach") is not None]
    if len(dtypes) > 1 or non_half:
        ex = "; ".join(f"case {r['case']} {r['dtype']}{' (tf32)' if r.get('tf32') else ''}: MFU@nom "
                       f"{r['mfu_nom']:.1%} vs MFU@ach {r['mfu_ach']:.1%}" for r in non_half[:3])
        lines.append("1. dtype: compare cases of different dtypes only on MFU@ach (MFU@nom divides every dtype by "
                     "the fp16/bf16 nominal peak)" + (f" - {ex}" if ex else "") + ".")
    else:
        lines.append(f"1. dtype: all cases are {dtypes[0] if dtypes else '?'}; MFU@nom and MFU@ach rank them "
                     "alike.")
    # 2. the part that drags
    drags = []
    for r in ok:
        for p in r.get("parts") or []:
            ts, fs = p.get("time_share"), p.get("flops_share")
            if ts is None or ts < DRAG_MIN_TIME_SHARE:
                continue
            if p["part"] == OTHER:
                drags.append(f"case {r['case']}{_rep(r, rows)}: unmatched kernels ('other') take {ts:.0%} of the "
                             "time and do no counted FLOPs")
                continue
            if fs is None:
                continue
            if fs == 0 or ts >= DRAG_RATIO * fs:
                mfu = f", MFU@ach {p['mfu_ach']:.1%}" if p.get("mfu_ach") is not None else ""
                drags.append(f"case {r['case']}{_rep(r, rows)}: {p['part']} takes {ts:.0%} of the time for "
                             f"{fs:.1%} of the FLOPs{mfu}")
    if drags:
        lines.append("2. the part that drags (time share far above FLOPs share): " + "; ".join(drags[:6]) +
                     " - optimise it first.")
    elif any(r.get("parts") and any(p.get("flops_share") is not None for p in r["parts"]) for r in ok):
        lines.append("2. no part takes >= 2x its FLOPs share of the time: time follows the work.")
    else:
        lines.append("2. no per-part FLOPs (flops_parts/KERNEL_PARTS absent): add them to flops.py to see which "
                     "part drags.")
    # 3. fp32 vs fp16/bf16 throughput of the same part: is the cube/tensor unit waiting?
    if any(r.get("backend") == "cpu" for r in rows):
        lines.append("3. skipped: CPU-interpreter kernel times against torch CPU GEMM peaks say nothing about a "
                     "cube/tensor unit; run on the NPU or GPU for this step.")
    else:
        lines.extend(_dtype_throughput_lines(ok, peak_tflops, multi=len({r.get("report") for r in rows}) > 1))
    # 4. PMU bound labels, where the collector recorded pipe counters
    pmu = [f"case {r['case']}{_rep(r, rows)} {k}: {b['bound']} ({b['why']})" for r in ok
           for k, b in (r.get("pmu_bounds") or {}).items() if b.get("bound")]
    if pmu:
        lines.append("4. PMU bound per kernel (pipe >= 80% busy bounds it; below, latency-bound): " +
                     "; ".join(pmu[:8]) + ("; ..." if len(pmu) > 8 else "") + ".")
    return lines


def _rep(r, rows):
    return f" [{r['report']}]" if len({x.get("report") for x in rows}) > 1 else ""


def _dtype_throughput_lines(ok: list, peak_tflops: dict, multi: bool) -> list:
    out = []
    by = {}
    for r in ok:
        for p in r.get("parts") or []:
            if p.get("tflops"):
                by.setdefault((r.get("report"), p["part"]), []).append((r, p))
    for (rep, part), items in sorted(by.items(), key=lambda kv: str(kv[0])):
        f32 = [(r, p) for r, p in items if r["dtype"] == "float32"]
        f16 = [(r, p) for r, p in items if r["dtype"] in HALF_DTYPES]
        if not f32 or not f16:
            continue
        r32, p32 = max(f32, key=lambda rp: rp[1]["tflops"])
        r16, p16 = max(f16, key=lambda rp: rp[1]["tflops"])
        ratio = p32["tflops"] / p16["tflops"]
        k32, k16 = r32["peak_key"], r16["peak_key"]
        if peak_tflops.get(k32) and peak_tflops.get(k16):
            expect, src = peak_tflops[k32] / peak_tflops[k16], f"measured {k32}/{k16} peak ratio"
        else:
            expect, src = 0.25, "the ~1/4 fp32:fp16 cube ratio (skill spec)"
        same = r32.get("shape") == r16.get("shape")
        if ratio > 2 * expect:
            verdict = ("fp32 did not drop with the peak: the cube/tensor unit is waiting (memory, vector or scalar "
                       "work bounds it), so raising cube utilisation will not help")
        elif ratio < expect / 2:
            verdict = ("fp32 dropped much further than the peak: the fp32 path of this part is less efficient than "
                       "its half-precision path (tiling, TF32/HF32 off, or the shapes differ) - look there first")
        else:
            verdict = "fp32 dropped about as far as the peak: this part is compute-bound"
        out.append(f"3. {part}{f' [{rep}]' if multi else ''}: {p32['tflops']:.3g} TFLOP/s in fp32 (case "
                   f"{r32['case']}) vs {p16['tflops']:.3g} in {r16['dtype']} (case {r16['case']}) = {ratio:.2f}, "
                   f"expected ~{expect:.2f} ({src}){'' if same else ' [different shapes]'} - {verdict}.")
    if not out:
        out.append("3. fp32 vs fp16: no part ran in both fp32 and fp16/bf16 here; measure a case in each dtype to "
                   "tell whether the cube/tensor unit is waiting.")
    return out
