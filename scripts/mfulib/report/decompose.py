"""Step 6: per-case MFU (nominal and measured peak), MBU, and the per-kernel-part decomposition.

Input is ``performance.json`` (the collector's result: cases, kernels per case, FLOPs, bytes) and ``peak.json``
(:mod:`mfulib.peaks.calib`). Nothing is re-measured. Definitions (docs/ARCHITECTURE.md#definitions):

* ``actual_tflops = flops / kernel_time_ns / 1e3`` (= FLOPs / (ns * 1e-9) / 1e12), kernel time = the median over
  measured iterations of the per-iteration kernel sum;
* ``mfu_nom = actual_tflops / nominal fp16/bf16 dense peak`` (every dtype, as msprof-analyze's operator_mfu does:
  comparable within one dtype only);
* ``mfu_ach = actual_tflops / measured peak of the case's compute dtype`` (``tf32`` key for fp32 with TF32/HF32);
* ``mbu = (input_bytes + output_bytes) / kernel_time_ns / measured bandwidth (GB/s = bytes per ns)``;
* a case with ``flops`` 0 has no matrix work: no MFU (None, shown "—"), MBU is its headline (``headline``), and its
  ``vector_flops`` give ``vector_tflops``; ``numerator`` carries check_flops.py's verdict on its flops
  (checked | unverified | failed | unchecked), and anything but checked is flagged.

Per part (``KERNEL_PARTS`` in flops.py: part -> fnmatch patterns; the first matching part wins; unmatched kernels
form ``other``): ``time_ns`` = sum over its kernels of the per-iteration time (``time_per_iter_ns``), time share of
the sum over all kernels, FLOPs share from ``flops_parts``, and the part's own MFU. With those shares
``mfu_op = sum_k (t_k / T) * mfu_k`` (docs/ARCHITECTURE.md#decomposition).

Checks: MFU above the measured peak by more than :data:`NOISE_MARGIN` is an **error** (FLOPs in flops.py too high,
or a peak.json from another device / too low); 100-103% is a warning (docs/ARCHITECTURE.md#noise-band). The same
check runs against the nominal peak of the case's own dtype where one exists (int8 in TOPS, fp8; never against the
fp16/bf16 figure MFU@nom divides by, which a healthy int8 kernel exceeds ~2x).
"""
from __future__ import annotations

import os

from mfulib.backends import validates_only
from mfulib.report import bound as _bound
from mfulib.flops import executed as _executed
from mfulib.profiles import pmu as _pmu
from mfulib.report import roofline as _roofline
from mfulib.core.definitions import (NOISE_MARGIN, above_peak, actual_tflops, canonical_dtype, finite_or_none, mbu,
                                     measured_peak_tflops, mfu)
from mfulib.core.errors import REJECT_PREFIX, UserError
from mfulib.flops.contract import load_flops
from mfulib.report.cells import spread_flagged
from mfulib.report.peaks_match import check_same_device, device_cores, peaks_for
from mfulib.report.reading import apply_fallback_bounds, maxima, reading_aid, regime, search_note, speedups
from mfulib.flops.kernel_parts import OTHER, check_kernel_parts, match_part
from mfulib.core.nominal_peaks import dtype_nominal_tflops
from mfulib.schemas.peak_json import read_peak_json
from mfulib.schemas.performance_json import completeness, load_report, not_measured, not_selected
from mfulib.pipeline.workdir_state import check_current, seed_mismatch


# --------------------------------------------------------------------------------------------------------------
# inputs


def load_kernel_parts(flops_py: str) -> dict:
    """``KERNEL_PARTS`` of a flops.py ({part: [fnmatch patterns]}), {} when it defines none.

    Loaded through :func:`mfulib.flops.contract.load_flops`, which raises UserError for a broken file.
    """
    return load_flops(flops_py).kernel_parts or {}


def find_kernel_parts(report: dict, report_path: str, op_dir: str | None) -> tuple:
    """(KERNEL_PARTS, source): the report's own copy if the collector stored one, else flops.py beside the
    report, else the work directory's flops.py; ({}, reason) when none defines it."""
    if isinstance(report.get("kernel_parts"), dict):
        return check_kernel_parts(report["kernel_parts"], report_path), f"{report_path}: kernel_parts"
    seen = []
    for d in (os.path.dirname(os.path.abspath(report_path)), op_dir):
        if not d:
            continue
        path = os.path.join(d, "flops.py")
        if path in seen or not os.path.exists(path):
            continue
        seen.append(path)
        parts = load_kernel_parts(path)
        if parts:
            return parts, path
    return {}, "no KERNEL_PARTS (flops.py defines none): every kernel is reported under 'other'"


# --------------------------------------------------------------------------------------------------------------
# one case


def kernel_time_per_iter_ns(k: dict):
    """A kernel row's time per iteration (ns): ``time_per_iter_ns``, else launches x median (or mean)."""
    t = finite_or_none(k.get("time_per_iter_ns"))
    if t is not None:
        return t
    per = finite_or_none(k.get("median_ns")) or finite_or_none(k.get("mean_ns"))
    n = finite_or_none(k.get("launches_per_iter")) or 1.0
    return per * n if per is not None else None


def _flag(flags, level, message):
    flags.append({"level": level, "message": message})


def check_utilisation(value, what: str, flags: list, error_hint: str, demoted_by: str | None = None) -> None:
    """Flag ``value`` (a fraction) above 1: warning up to 1 + NOISE_MARGIN, error beyond. ``demoted_by`` (a label such
    as "CPU numbers"): where peaks only validate the pipeline, beyond the margin is a warning led by that label."""
    level = above_peak(value)
    if level is None:
        return
    if level == "error" and demoted_by:
        _flag(flags, "warning", f"{demoted_by}: {what} {value:.1%} exceeds the peak by more than the "
                                f"{NOISE_MARGIN:.0%} noise margin - {error_hint}")
    elif level == "warning":
        _flag(flags, "warning", f"{what} {value:.1%} is above the peak but within the {NOISE_MARGIN:.0%} noise "
                                "margin")
    else:
        _flag(flags, "error", f"{what} {value:.1%} exceeds the peak by more than the {NOISE_MARGIN:.0%} noise "
                              f"margin - {error_hint}")


MFU_HINT = ("the FLOPs in flops.py are too high (run check_flops.py; causal or sparse work counted dense?) or "
            "peak.json is too low / from another device (re-run peak_calib.py here)")


def decompose_case(case: dict, parts: dict, peaks: dict, where: str, above_peak_demoted_by: str | None = None) -> dict:
    """Decompose one ``per_case`` entry of a performance.json.

    ``peaks``: ``{"nominal_tflops": float|None, "nominal_source": str, "peak_tflops": {key: TFLOP/s},
    "bandwidth_gbps": float|None}``. Returns the row written to mfu_decompose.json (see module docstring).
    Raises UserError (``where``: case <i>: what - fix) when a measured case lacks kernel time or FLOPs.
    """
    cid = case.get("case")
    row = {"case": cid, "shape": case.get("shape"), "status": "ok", "flags": []}
    if case.get("search_origin"):  # a case the probe appended: which original case, scaled how
        row["search_origin"] = case["search_origin"]
    if case.get("skipped"):
        row.update(status="skipped", reason=str(case["skipped"]))
        return row
    impl = case.get("measured_impl") or "asc"
    err = case.get(f"{impl}_error") or case.get("asc_error") or case.get("ref_error")
    if err and not case.get("kernel_time_ns"):
        rejected = str(err).strip().lower().startswith(REJECT_PREFIX)
        row.update(status="rejected" if rejected else "error", reason=str(err))
        return row
    dtype_raw = case.get("compute_dtype") or case.get("dtype")
    try:
        dtype = canonical_dtype(dtype_raw) if dtype_raw else None
    except UserError:
        dtype = str(dtype_raw)
    tf32 = bool(case.get("tf32"))
    t_ns = finite_or_none(case.get("kernel_time_ns"))
    flops = finite_or_none(case.get("flops"))
    if t_ns is None or t_ns <= 0:
        row.update(status="error", reason="no kernel_time_ns: the collector recorded no kernels for this case - "
                                          "check its flags in performance.json and re-run the collector")
        return row
    if flops is None:
        row.update(status="no_flops", reason="no flops for this case - run the collector with --mfu and a flops.py "
                                             "in the work dir (check_flops.py checks it)")
        return row
    peak_ach, key = measured_peak_tflops(peaks.get("peak_tflops"), dtype, tf32) if dtype else (None, None)
    nom = peaks.get("nominal_tflops")
    bw = peaks.get("bandwidth_gbps")
    matrix = flops > 0  # flops 0: no matrix work - no MFU ("—"), MBU is the case's headline (docs/ARCHITECTURE.md#mbu)
    tflops = actual_tflops(flops, t_ns) if matrix else None
    vflops = finite_or_none(case.get("vector_flops"))
    nbytes = sum(v for v in (finite_or_none(case.get("input_bytes")), finite_or_none(case.get("output_bytes"))) if v is not None)
    row.update(dtype=dtype, tf32=tf32, peak_key=key, kernel_time_ns=t_ns, kernel_time_us=t_ns / 1e3,
               span_ns=finite_or_none(case.get("span_ns")), flops=flops, flops_source=case.get("flops_source"),
               actual_tflops=tflops, nominal_peak_tflops=nom, measured_peak_tflops=peak_ach,
               mfu_nom=mfu(tflops, nom) if matrix else None, mfu_ach=mfu(tflops, peak_ach) if matrix else None,
               matrix_work=matrix, headline="mfu_ach" if matrix else "mbu",
               vector_flops=vflops, vector_tflops=actual_tflops(vflops, t_ns) if vflops else None,
               numerator=case.get("numerator"), numerator_reason=case.get("numerator_reason"),
               ncu_replay=case.get("ncu_replay"), bytes=nbytes or None, bandwidth_gbps=bw,
               mbu=mbu(nbytes, t_ns, bw),
               repeat_spread=case.get("repeat_spread"))
    if not matrix:
        _flag(row["flags"], "note", "no matrix work (flops 0): no MFU - read this case through MBU"
                                    + (f"; vector arithmetic {vflops:.4g} FLOPs" if vflops else ""))
    if row["numerator"] in ("unverified", "failed", "unchecked"):
        why = row["numerator_reason"] or "see flops_check.json"
        _flag(row["flags"], "warning", f"numerator {row['numerator']}: {why} - the MFU rests on a flops.py "
                                       "check_flops.py could not confirm")
    if row["span_ns"] is not None:  # idle time: span - union of the kernel intervals (= sum without overlap)
        row["launch_overhead_ns"] = max(row["span_ns"] - (finite_or_none(case.get("kernel_union_ns")) or t_ns), 0.0)
    row["spread_flagged"] = spread_flagged(row)  # the collector's repeat-spread flag, carried to every view
    for f in case.get("flags") or []:
        spread_flag = row["spread_flagged"] and str(f).startswith("repeat_spread")
        _flag(row["flags"], "warning" if spread_flag else "note", f"collector: {f}")
    if peak_ach is None and matrix:
        _flag(row["flags"], "warning", f"peak.json has no measured peak for {key!r}: MFU@ach not computed - "
                                       f"re-run peak_calib.py with --dtypes including it")
    if case.get("output_bytes") is None:
        _flag(row["flags"], "note", "output_bytes missing: MBU counts input bytes only")
    check_utilisation(row["mfu_ach"], f"MFU@ach ({key})", row["flags"], MFU_HINT, above_peak_demoted_by)
    # MFU@nom keeps the fp16/bf16 figure (int8 legitimately reaches ~2x it); "impossibly high" is judged against the
    # dtype's own nominal figure where one exists (peaks.dtype_nominal_tflops)
    own_nom = dtype_nominal_tflops(peaks.get("nominal_by_mode"), dtype, tf32) if dtype else None
    check_utilisation(mfu(tflops, own_nom), f"throughput vs the nominal {key} peak ({own_nom:g})" if own_nom else "",
                      row["flags"], MFU_HINT, above_peak_demoted_by)
    if row["mbu"] is not None and row["mbu"] > 1.0:
        _flag(row["flags"], "warning", f"MBU {row['mbu']:.1%} is above the measured bandwidth: the data was served "
                                       "from cache (small case) or input/output bytes are over-counted")
    row["parts"] = _parts(case, parts, flops, peak_ach, nom, row["flags"], where, above_peak_demoted_by)
    row["bound_hint"] = _bound_hint(row)
    attach_bounds_and_roofline(row, case, peaks)
    if above_peak_demoted_by == CPU_NUMBERS:
        withhold_advice(row)
    return row


#: the demotion tag of CPU-interpreter numbers (decompose_case's ``above_peak_demoted_by``)
CPU_NUMBERS = "CPU numbers"
CPU_NO_ADVICE = ("none on the CPU interpreter: its kernel times validate the pipeline only, so no bound class, "
                 "headroom or payoff is read from them (run on the NPU or GPU for those)")


def withhold_advice(row: dict) -> None:
    """CPU-interpreter rows (README: "no bound class and no optimisation advice"), in place: the roofline's
    ``headroom``, ``mfu_if_fixed`` and ``payoff`` of the case and of its parts become None with ``withheld`` saying
    why, the bound hint and the bound notes say the same (never "no PMU counters collected", which counters would
    not change on the CPU). The arithmetic intensity and the roof stay: they are the operator's, not the CPU's."""
    row["bound_hint"] = CPU_NO_ADVICE
    for holder in [row] + list(row.get("parts") or []):
        rf = holder.get("roofline")
        if isinstance(rf, dict):
            rf.update(headroom=None, mfu_if_fixed=None, withheld=CPU_NO_ADVICE)
            if "payoff" in rf:  # a part's
                rf["payoff"] = None
        b = holder.get("bound")
        if isinstance(b, dict) and b.get("source") is None:
            b["note"] = CPU_NO_ADVICE


def _kernel_dram_bytes(counters: dict, time_ns):
    """DRAM bytes of one kernel per iteration: ncu ``dram_bytes`` (per launch; scaled by the caller), or msprof
    main-memory GB/s x its time (GB/s = bytes per ns); None when neither is counted."""
    if counters.get("dram_bytes") is not None:
        return counters["dram_bytes"]
    bw = counters.get("main_mem_bw_gbps")
    return bw * time_ns if bw is not None and time_ns else None


def attach_bounds_and_roofline(row: dict, case: dict, peaks: dict) -> None:
    """Add ``bound``, ``roofline``, ``kernel_bounds``, ``payoff_order`` and ``pmu_view`` to a decomposed row and
    ``bound`` / ``roofline`` / ``dram_bytes`` to its parts (in place; :mod:`mfulib.report.bound`, :mod:`mfulib.report.roofline`).
    ``bound`` stays ``unknown`` (source None) without counters; the fp32-vs-fp16 fallback is applied across rows
    later (:func:`mfulib.report.reading.apply_fallback_bounds`)."""
    counters = {k: _pmu.normalise(c) for k, c in (case.get("pmu") or {}).items() if isinstance(c, dict)}
    source = case.get("pmu_source") or _pmu.source_of(counters)
    kind = (source or "").split(":")[0]
    kinfo = {str(k.get("name")): k for k in case.get("kernels") or []}
    ktime = {n: kernel_time_per_iter_ns(k) for n, k in kinfo.items()}
    row["pmu_source"], row["pmu_unavailable"] = source, case.get("pmu_unavailable")
    row["kernel_bounds"] = {n: _bound.classify(c, kind) for n, c in counters.items()}
    dram, executed, active = {}, {}, []
    cores = peaks.get("cores")
    for n, c in counters.items():
        per_launch = c.get("dram_bytes") is not None
        b = _kernel_dram_bytes(c, ktime.get(n))
        launches = finite_or_none((kinfo.get(n) or {}).get("launches_per_iter")) or 1.0
        dram[n] = b * launches if b is not None and per_launch else b
        ex, how = _executed.kernel_flops(c, kind, peaks.get("capability"), row.get("peak_key"),
                                         (case.get(_executed.SHAPES_FIELD) or {}).get(n))
        executed[n] = (ex * launches if ex is not None else None, how)
        used = c.get("block_dim") if kind == "msprof" else c.get("grid_size")
        if cores and used and ktime.get(n):
            active.append((ktime[n], min(float(used), cores) / cores))
    empty = {"label": "unknown", "source": None, "evidence": {}, "note": row.get("pmu_unavailable") or
             "no PMU counters for this case (fp32-vs-fp16 fallback where both dtypes were measured)"}
    kb = row["kernel_bounds"]
    for p in row.get("parts") or []:
        kc = [(ktime.get(n) or 0.0, kb[n]) for n in p["kernels"] if n in kb]
        p["bound"] = _bound.majority_bound(kc) if kc else dict(
            empty, note=empty["note"] if not counters else "no PMU counters for this part's kernels")
        known = [dram.get(n) for n in p["kernels"]]
        p["dram_bytes"] = float(sum(known)) if known and all(v is not None for v in known) else None
    allk = [(ktime.get(n) or 0.0, b) for n, b in kb.items()]
    row["bound"] = _bound.majority_bound(allk) if allk else dict(empty)
    case_dram = [dram.get(n) for n in kinfo]
    flops = row.get("flops") if row.get("matrix_work") else None
    row["roofline"] = _roofline.roofline(flops, row.get("bytes"), row.get("kernel_time_ns"),
                                         row.get("measured_peak_tflops"), row.get("bandwidth_gbps"),
                                         sum(case_dram) if case_dram and all(v is not None for v in case_dram) else None)
    if flops:
        _roofline.part_rooflines(row.get("parts") or [], flops, row.get("kernel_time_ns"),
                                 row.get("measured_peak_tflops"), row.get("bandwidth_gbps"), row.get("bytes"))
        row["payoff_order"] = _roofline.rank_by_payoff(row.get("parts") or [])
    ex = [v for v, _ in executed.values()]
    frac = (sum(t * f for t, f in active) / sum(t for t, _ in active)) if active else None
    row["pmu_view"] = _roofline.pmu_view(flops, sum(ex) if ex and all(v is not None for v in ex) else None,
                                         row.get("kernel_time_ns"), row.get("measured_peak_tflops"), frac)
    row["pmu_view"]["executed_how"] = sorted({how for _, how in executed.values()}) or None


def _parts(case, parts, flops, peak_ach, nom, flags, where, above_peak_demoted_by=None):
    kernels = case.get("kernels") or []
    fparts = case.get("flops_parts") if isinstance(case.get("flops_parts"), dict) else None
    acc = {p: {"part": p, "kernels": [], "time_ns": 0.0} for p in list(parts) + [OTHER]}
    for k in kernels:
        name = str(k.get("name", "?"))
        t = kernel_time_per_iter_ns(k)
        if t is None:
            raise UserError(f"{where}: case {case.get('case')}: kernel {name!r} has no time_per_iter_ns/median_ns "
                            "- re-run the collector")
        p = match_part(name, parts)
        acc[p]["kernels"].append(name)
        acc[p]["time_ns"] += t
    total_t = sum(a["time_ns"] for a in acc.values())
    out = []
    for p, a in acc.items():
        if p == OTHER and not a["kernels"]:
            continue
        pf = None
        if fparts is not None:
            pf = float(fparts.get(p, 0.0)) if p != OTHER else 0.0
        a.update(time_us=a["time_ns"] / 1e3, time_share=a["time_ns"] / total_t if total_t else None,
                 flops=pf, flops_share=(pf / flops if (pf is not None and flops) else None))
        if pf is not None and flops and a["time_ns"] > 0 and p != OTHER:
            a["tflops"] = actual_tflops(pf, a["time_ns"])
            a["mfu_ach"] = mfu(a["tflops"], peak_ach)
            a["mfu_nom"] = mfu(a["tflops"], nom)
            check_utilisation(a["mfu_ach"], f"part {p!r} MFU@ach", flags,
                              "flops_parts gives this part FLOPs that other kernels do, or KERNEL_PARTS matches "
                              "too few kernels (check the patterns against the kernel names)", above_peak_demoted_by)
        else:
            a["tflops"] = a["mfu_ach"] = a["mfu_nom"] = None
        if pf and not a["kernels"]:
            _flag(flags, "warning", f"part {p!r} has {pf:.3g} FLOPs but no kernel matched its KERNEL_PARTS patterns "
                                    f"{parts.get(p)} - check them against the kernel names")
        out.append(a)
    if fparts is not None:
        extra = sorted(set(fparts) - set(parts))
        if extra and parts:
            _flag(flags, "warning", f"flops_parts has parts {extra} that KERNEL_PARTS does not map to kernels: "
                                    "their FLOPs are attributed to no time")
        s = sum(float(v) for v in fparts.values())
        if flops and abs(s - flops) > 1e-6 * flops:
            _flag(flags, "warning", f"sum(flops_parts) = {s:.6g} != flops = {flops:.6g} (check_flops.py checks this)")
    return out


def _bound_hint(row: dict) -> str:
    """Which roof the case is nearer, from MFU@ach and MBU alone (no counters; the ``bound`` field is the
    classification): both below 30% -> neither roof is near."""
    mfu, mbu = row.get("mfu_ach"), row.get("mbu")
    if mfu is None and mbu is None:
        return "unknown (no measured peak or bandwidth)"
    vals = {"compute": mfu or 0.0, "memory": mbu or 0.0}
    near = max(vals, key=vals.get)
    if vals[near] < 0.3:
        return (f"neither roof is near (MFU@ach {vals['compute']:.0%}, MBU {vals['memory']:.0%}): launch overhead, "
                "latency or too little parallelism")
    return f"nearer the {near} roof (MFU@ach {vals['compute']:.0%}, MBU {vals['memory']:.0%}); see bound"


# --------------------------------------------------------------------------------------------------------------
# reports


def report_label(path: str, taken: set) -> str:
    stem = os.path.splitext(os.path.basename(path))[0]
    base = os.path.basename(os.path.dirname(os.path.abspath(path))) if stem == "performance" else stem
    label, i = base, 2
    while label in taken:
        label, i = f"{base}#{i}", i + 1
    taken.add(label)
    return label


def decompose_report(path: str, label: str, peak: dict, peak_path: str, op_dir: str | None,
                     cases=None, allow_incomplete: bool = False, current: bool = False) -> dict:
    """Decompose every (or the selected) measured case of one performance.json. An incomplete collection
    (interrupted: ``complete`` false) raises UserError unless ``allow_incomplete``; then it is marked
    (``complete``/``missing``). ``stale``: :func:`mfulib.pipeline.workdir_state.check_current` (refused for the
    work directory's own report, ``current``, when a changed input is a failed step's report)."""
    rep = load_report(path)
    stale = check_current(path, rep, refuse=current)
    complete, missing_runs = completeness(rep)
    if not complete and not allow_incomplete:
        raise UserError(f"{path}: incomplete collection ({'; '.join(missing_runs[:4]) or 'interrupted'}) - re-run "
                        "the collector (make collect), or pass --allow-incomplete to decompose what was measured "
                        "(marked incomplete)")
    parts, parts_src = find_kernel_parts(rep, path, op_dir)
    notes = check_same_device(rep, peak, path, peak_path)
    cpu_numbers = validates_only(rep.get("backend"), (rep.get("device") or {}).get("accelerator"))
    if cpu_numbers:
        notes.append(f"{path}: CPU-interpreter numbers (Triton interpreter, torch CPU GEMM peak) - they validate the "
                     "pipeline and are never compared with accelerator numbers")
    peaks = peaks_for(rep, peak)
    peaks["cores"] = device_cores(rep.get("device"))
    peaks["capability"] = (rep.get("device") or {}).get("capability")  # CUDA FLOPs per tensor instruction
    rows = []
    for c in rep["per_case"]:
        if cases is not None and c.get("case") not in cases:
            continue
        # CPU "peaks" are a few seconds of torch CPU GEMM on a shared host: an interpreter kernel beating them
        # says nothing about flops.py, so above-peak is a warning there, never the accelerator's error
        r = decompose_case(c, parts, peaks, path, CPU_NUMBERS if cpu_numbers else None)
        r["report"] = label
        r["backend"] = rep.get("backend")
        rows.append(r)
    if cases is not None:
        missing = sorted(set(cases) - {r["case"] for r in rows})
        if missing:
            notes.append(f"cases {missing} are not in {path} (measured: "
                         f"{sorted(c.get('case') for c in rep['per_case'])})")
    unmeasured = [e for e in not_measured(rep) if cases is None or e["case"] in cases]
    left_out = not_selected(rep) if cases is None else None
    return {"label": label, "path": os.path.abspath(path), "backend": rep.get("backend"),
            "measured_cases": sorted({c["case"] for c in rep["per_case"] if not c.get("skipped")}),
            "not_measured": unmeasured, "not_selected": left_out,
            "device": rep.get("device"), "kernel_parts": parts, "kernel_parts_source": parts_src,
            "nominal_tflops": peaks["nominal_tflops"], "nominal_source": peaks["nominal_source"],
            "warmup": rep.get("warmup"), "repeats": rep.get("repeats"), "timing_method": rep.get("timing_method"),
            "flush_cache_mib": rep.get("flush_cache_mib"),
            "complete": complete, "missing": missing_runs, "stale": stale, "notes": notes, "rows": rows}


def decompose(op_dir: str | None, peak_path: str, reports=None, cases=None, include_current: bool = True,
              allow_incomplete: bool = False) -> dict:
    """The body of mfu_decompose.json: reports (each with rows), maxima, reading aid, errors/warnings, and
    ``complete`` / ``missing`` (false / what was not measured when an incomplete collection was decomposed with
    ``allow_incomplete``; otherwise an incomplete one raises UserError).

    ``reports``: list of ``(label or None, path)`` decomposed after the work directory's own performance.json
    (left out with ``include_current=False``).
    """
    if cases is not None and not cases:
        raise UserError("--cases selects no case - give case ids, e.g. --cases 46 or 3,7,9 (or leave it out)")
    peak = read_peak_json(peak_path)
    todo = []
    if include_current:
        if not op_dir:
            raise UserError("--op-dir is needed to find performance.json (or give --report and --no-current)")
        todo.append((None, os.path.join(op_dir, "performance.json")))
    todo.extend(reports or [])
    if not todo:
        raise UserError("nothing to decompose: give --op-dir with a performance.json or --report PATH")
    taken, out_reports = set(), []
    for label, path in todo:
        if label:
            taken.add(label)
        out_reports.append(decompose_report(path, label or report_label(path, taken), peak, peak_path, op_dir,
                                            cases, allow_incomplete, current=include_current and not out_reports))
    rows = [r for rep in out_reports for r in rep["rows"]]
    if cases is not None and not rows:
        have = "; ".join(f"{rep['path']}: {rep['measured_cases']}" for rep in out_reports)
        raise UserError(f"--cases {','.join(map(str, cases))}: no such case was measured (measured cases - {have}) - "
                        "pick measured cases, or run the collector with --cases for these")
    if not any(r["status"] == "ok" for r in rows):
        why = "; ".join(sorted({f"{r['status']}: {r.get('reason')}" for r in rows})) or "no cases"
        raise UserError(f"{', '.join(rep['path'] for rep in out_reports)}: no case can be decomposed ({why})")
    apply_fallback_bounds(rows, peak.get("peak_tflops") or {})
    speedups(out_reports)
    errors = [f"{r['report']} case {r['case']}: {f['message']}" for r in rows for f in r.get("flags", [])
              if f["level"] == "error"]
    warnings = [f"INCOMPLETE collection {rep['path']} (decomposed what was measured): {'; '.join(rep['missing'])}"
                for rep in out_reports if not rep["complete"]]
    warnings += [f"{r['report']} case {r['case']}: {f['message']}" for r in rows for f in r.get("flags", [])
                 if f["level"] == "warning"]
    stale = [f"{rep['path']}: {why}" for rep in out_reports for why in rep["stale"]] + \
        [f"{os.path.abspath(peak_path)}: {why}" for why in check_current(peak_path, peak, refuse=False)]
    warnings += [f"STALE {s}" for s in stale]
    if op_dir and (mixed := seed_mismatch(op_dir)):
        warnings.append(mixed)
    trust = peak.get("trust") or {}
    if trust.get("trusted") is False:  # calib.trust_verdict: a noisy calibration is kept, never cached or hidden
        again = ("a CPU calibration on a shared machine: these numbers only validate the pipeline" if
                 validates_only(peak.get("backend"), peak.get("accelerator")) else "the next make measures the peak "
                 "again")
        warnings.append(f"{peak_path}: the peak calibration is NOT trusted ("
                        f"{'; '.join(trust.get('untrusted') or []) or 'interrupted'}) - MFU@ach, headroom and the "
                        f"roofline divide by it; {again}")
    return {"peak_json": os.path.abspath(peak_path), "peak_label": peak.get("label"),
            "peak_trusted": trust.get("trusted") is not False,
            "peak_backend": peak.get("backend"), "peak_device": peak.get("device"),
            "peak_tflops": peak.get("peak_tflops"), "bandwidth_gbps": peak.get("bandwidth_gbps"),
            "reports": out_reports, "maxima": maxima(rows),
            "regime": regime(out_reports, peak),
            "reading_aid": reading_aid(rows, peak.get("peak_tflops") or {}),
            "errors": errors, "warnings": warnings, "stale": stale,
            "notes": [n for rep in out_reports for n in rep["notes"]] + search_note(op_dir, rows),
            "complete": all(rep["complete"] for rep in out_reports),
            "missing": [f"{rep['label']}: {m}" for rep in out_reports for m in rep["missing"]]}
