"""performance.json: what the collector measured (schema :data:`SCHEMA`): its builder (:func:`build_report`), its
reader and validator (:func:`load_report`, :func:`check_report_structure`); every reader of the file goes through them.

Top level
    provenance (mfulib.core.jsonio.provenance): ``schema, tool, tool_version, command_line, created_at, host, versions,
    env, device``;
    upstream ops-profiling fields (docs/sources.md#ops-profiling), same names and meaning:
    ``task`` (operator name), ``task_dir``, ``n_cases_total`` (entries in per_case, skipped ones included),
    ``n_cases_valid`` (cases whose requested implementations all have a kernel time),
    ``geomean_speedup, mean_speedup, median_speedup, min_speedup, max_speedup, total_speedup`` (ref_us / asc_us over
    cases with both; total = sum ref / sum asc), ``mean_ref_us, median_ref_us, geomean_ref_us, total_ref_us``, the
    same four for ``asc``, ``warmup, repeats, seed, device_id, device_select_source`` (cli | env | auto),
    ``timing_method`` (``msprof.op_summary.Task_Duration``; ``msprof.quick.Task_Duration`` when only task_time
    exists, as upstream quick mode; ``torch.profiler.cupti.kernel_duration``; cpu: the interpreter launch hook;
    --from-prof of ncu CSVs: ``ncu.gpu__time_duration.sum``, ``ncu.details.SpeedOfLight.Duration``),
    ``profiling_mode`` (``quick``); statistics are None where no case supplies them;
    ``backend`` (npu | cuda | cpu), ``backend_reason``, ``environment`` (CANN checks, ...), ``impl`` (asc | ref |
    both), ``mfu`` (bool: --mfu given), ``peak`` {``nominal_tflops``: {dtype: TFLOP/s}, ``used_for_mfu_nom``
    (dtype key, always the fp16/bf16 figure: MFU@nom is dtype-agnostic), ``value_tflops``, ``source``,
    ``override``}, ``device`` (identity: name, cores, memory...; npu adds ``runtime`` from info.json.N),
    ``compat`` (core counts the compatibility layer handed to the operator, with their source), ``flops_file``,
    ``kernel_parts`` (KERNEL_PARTS of flops.py), ``selection`` {rule, order, skipped (ids of
    every case not timed: the collector's skips and the verify gate's), not_verified [{case, reason (the gate's: not
    verified, and how to time it anyway), verify {status, reason, forced}, verify_reason (verify.json's own reason
    for the case)}] (every case the verify gate excluded, wherever it ranks: never timed, never a ``per_case`` row),
    reserve (ranked below the top-k, each one verify passed or has not seen: a case a rejected one hands its slot
    to; ``--cases`` picks them), verify_file, verified_now (cases the collector verified before timing them),
    unverified_ok, search_json (the grid_search.json whose chosen cases were measured, --search-json; None),
    search_not_run (with search_json only: [{case, reason}], the original cases the search could not run on this
    backend, never measured)},
    ``retry``, ``flush_cache_mib``, ``pmu_collection`` {requested (auto | ncu | none), tool ("ncu" or
    None), available (the probe's verdict, asked once per run), reason; with ncu also ncu, ncu_version,
    cache_control (all | none), clock_control ("none"), iterations (profiled per case), metrics {counter: [ncu
    metrics]}, metrics_dropped (unknown to this ncu)}, ``aic_metrics`` (npu),
    ``from_prof`` (``--from-prof`` only: paths, profiles, all_runs, kept_runs [what
    :func:`mfulib.collect.keep_index.select_kept` read and ignored per keep dir], ...), ``flags`` (run-level notes),
    ``wall_s`` (whole run, s); ``complete`` (every selected (case, impl) was run: false after Ctrl-C) and ``missing``
    [{case, impl, reason}] (what was not run) - make and mfu_decompose.py never take an incomplete file for a
    finished collection (:func:`completeness`).

``per_case`` entries (one per selected case, in selection order)
    upstream: ``case`` (0-based id), ``shape`` (``"[2, 64];[64, 8]"``), ``dtype``, ``ref_us``, ``asc_us`` (median
    per-iteration kernel time, us; None when not measured or failed - never 0), ``speedup``, ``ref_error``,
    ``asc_error``, ``ref_prof_dir``, ``asc_prof_dir`` (kept raw profile, relative to this file's directory, or None);
    or ``skipped`` (reason) for a case that was not run; ``verify`` {status (verify.json's status of the case, None:
    no row), reason, forced (timed without a passing verify because of --unverified-ok)} where the verify gate ran;
    per case, for the measured implementation ``measured_impl`` (asc when requested, else ref):
    ``compute_dtype``, ``tf32`` (fp32 tl.dot on CUDA uses TF32 unless TRITON_F32_DEFAULT=ieee), ``flops``,
    ``flops_source``, ``flops_tracer`` (the independent tracer's count from check_flops.py's flops_check.json, None
    when absent), ``flops_parts`` {part: FLOPs}, ``vector_flops`` (flops.py's vector arithmetic or None),
    ``numerator`` (check_flops.py's verdict on this case's flops: checked | unverified | failed | unchecked | None
    without flops.py) and ``numerator_reason``; ``flops_inputs_drawn`` ("timed": flops(case, args) got the timed
    child's seeded draw; "timed-ints": above the real-draw cap, big floats as shapes (meta) but every integer/bool
    input as timed (the random stream replayed, mfulib.flops.meta_build); "meta": shapes only, other random values; None
    when flops.py takes no args) and
    ``flops_data_values`` (the data-dependent inputs that entered the count: integer lists such as realised
    actual_seq_lengths, {"density"} of bool masks); ``flops`` 0 means no matrix work (no MFU, MBU is the figure),
    ``input_bytes``, ``output_bytes`` (MBU inputs, bytes), ``launches_per_iter``, ``sequence`` (kernel names of one
    iteration), ``kernels`` [{``name, launches_per_iter, mean_ns, median_ns, min_ns, max_ns, std_ns,
    time_per_iter_ns``}], ``iteration_launches`` [{``index, name, median_ns, min_ns, max_ns``}] (per position in
    the iteration), ``kernel_time_ns`` (median over measured iterations of the per-iteration kernel sum),
    ``kernel_time_mean_ns``, ``span_ns``, ``kernel_union_ns`` (median per-iteration length of the union of the kernel
    intervals: the kernel time unless kernels overlap), ``kernel_overlap_ns`` (kernel time - union; a ``kernel_overlap``
    flag says so), ``launch_overhead_ns`` (span - union: idle time), ``iter_kernel_time_ns`` [...], ``iter_span_ns``
    [...], ``actual_tflops`` (= flops / kernel_time_ns / 1e3), ``mfu_nom`` (ratio, not %; None when no peak or no
    FLOPs - never 0 or infinite), ``repeat_spread`` ((max - min) / median), ``flags`` [text], ``pmu``
    {kernel: {counter: mean}} (canonical counter names of :mod:`mfulib.profiles.pmu`: msprof PMU columns on npu; on cuda
    the ncu counters - duration_ns, sm_throughput_pct, dram_throughput_pct, tensor_pipe_pct, tensor_inst_executed,
    achieved_occupancy_pct, dram_bytes, l2_hit_rate_pct, grid_size, block_size - averaged over ``launches``
    profiled launches; a counter not measured is None, never 0), ``pmu_source`` ("ncu" |
    "msprof:<Group>[+<Group>...]" | None), ``mma_shapes`` {kernel: the MMA instructions of the compiled Triton variant
    that launch ran: {status (found | ambiguous | none), why, cache_dir, block_size, shared_mem_dynamic_bytes,
    launch_source (ncu | cupti: whose launch record gave the block size and shared memory), candidates, variants
    [{key, ptx_file, ptx_sha256, num_warps, shared, arch, wgmma [...], mma_sync [...]}]}}
    (:func:`mfulib.profiles.triton_ptx.launched_variant`; the wgmma N of :mod:`mfulib.flops.executed`; from CUPTI's
    launch records where no ncu pass gave them on cuda; None on other backends), ``pmu_unavailable`` (None, or why
    there are no counters: "ncu: ERR_NVGPUCTRPERM - ...", "ncu not found ...", "cpu backend: no hardware counters ..."),
    ``median_iterations`` (the measured iteration(s) whose kernel time is the median: the kernels'
    ``time_per_iter_ns``), ``attempts`` (profiling attempts used),
    ``ncu_replay`` (None when the kernel times come from a trace; for a case timed from an ``ncu --csv`` file with
    ``--from-prof``: {``serialized`` (true: ncu ran each launch alone), ``clock_control`` ("none" when the file
    holds ncu's unmodified-clocks warning, else None: not said, ncu's default locks clocks to base),
    ``cache_control`` (None: never in the CSV; ncu's default flushes caches before each pass), ``note``} - ncu
    replay times, not free-running ones; the tables mark them),
    ``harness_launches_dropped`` (the collector's marker/flush launches removed), ``launches_outside_iterations``
    (priming call and anything between iterations, not counted), ``impls``
    {impl: {status, error, kernel_time_ns, span_ns, kernels, flags, attempts, prof_dir, wall_s}};
    ``search_origin`` {source_case, factors {symbol: factor}, scale, grid_search_json, probe_json} for a case the
    (case, scale) search chose or the shape probe appended, None for the others (the decomposition marks them);
    with ``--from-prof`` also ``from_profile`` {impl: {path, format, iterations_from (mfu_iter | marker_kernels |
    profiler_step | range:NAME | repeating_sequence), device, excluded [{what (l2_flush | autotune | cut_iteration |
    warmup | outside_iterations), launches, time_ns, names}], l2_bytes, l2_flushes, ...}}
    (:mod:`mfulib.collect.from_prof.analyse`).
"""
from __future__ import annotations

import math
import os
import statistics

from mfulib.core.definitions import (LOW_PRECISION_MODES, NOISE_MARGIN, OPS_MODES, above_peak, actual_tflops, is_number,
                                     mfu as mfu_of, peak_key)
from mfulib.core.cli import script_command
from mfulib.core.errors import UserError
from mfulib.core.jsonio import write_json_atomic
from mfulib.core.nominal_peaks import dtype_nominal_tflops
from mfulib.schemas.common import read_work_json, wrong_type

SCHEMA = 1
TOOL = "msprof_perf_summary"


def _geomean(vals):
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals and all(v > 0 for v in vals) else None


def _describe(vals, prefix, suffix):
    """{mean_<x>, median_<x>, geomean_<x>, total_<x>} (None when ``vals`` is empty)."""
    name = f"{prefix}{suffix}"
    if not vals:
        return {f"mean_{name}": None, f"median_{name}": None, f"geomean_{name}": None, f"total_{name}": None}
    return {f"mean_{name}": statistics.fmean(vals), f"median_{name}": statistics.median(vals),
            f"geomean_{name}": _geomean(vals), f"total_{name}": sum(vals)}


def summary_stats(per_case) -> dict:
    """The upstream aggregate fields over ``per_case`` entries (see the module docstring)."""
    ref = [c["ref_us"] for c in per_case if c.get("ref_us")]
    asc = [c["asc_us"] for c in per_case if c.get("asc_us")]
    both = [(c["ref_us"], c["asc_us"]) for c in per_case if c.get("ref_us") and c.get("asc_us")]
    sp = [r / a for r, a in both]
    out = {"geomean_speedup": _geomean(sp), "mean_speedup": statistics.fmean(sp) if sp else None,
           "median_speedup": statistics.median(sp) if sp else None, "min_speedup": min(sp) if sp else None,
           "max_speedup": max(sp) if sp else None}
    out.update(_describe(ref, "ref", "_us"))
    out.update(_describe(asc, "asc", "_us"))
    out["total_speedup"] = (sum(r for r, _ in both) / sum(a for _, a in both)) if both else None
    return out


def mfu_fields(flops, kernel_time_ns, peak_tflops, dtype_nominal_tflops=None, dtype_key=None):
    """(actual_tflops, mfu_nom, flags) for one case; None where an input is missing (never 0 ns / infinite MFU).

    ``actual_tflops`` and ``mfu`` as :mod:`mfulib.core.definitions` defines them (docs/ARCHITECTURE.md#mfu-nom):
    MFU@nom divides by ``peak_tflops`` (the fp16/bf16 figure) for every dtype. Whether the throughput is impossibly
    high is judged against ``dtype_nominal_tflops`` (the nominal figure of the case's own dtype ``dtype_key``,
    :func:`mfulib.core.nominal_peaks.dtype_nominal_tflops`) where there is one: a healthy int8 kernel runs near 2x the fp16
    figure (H200: int8 dense 1979 TOPS, fp16 989.5 TFLOP/s). Without one, MFU@nom > 100% + margin is an error,
    except for int8/fp8, where it is a warning (above the fp16 figure is legitimate there; no own figure to check).
    """
    flags = []
    if not flops or not kernel_time_ns or kernel_time_ns <= 0:
        return None, None, flags
    tflops = actual_tflops(flops, kernel_time_ns)
    mfu = mfu_of(tflops, peak_tflops)
    own = mfu_of(tflops, dtype_nominal_tflops)
    if own is not None:
        level = above_peak(own)
        text = (f"{tflops:.4g} {'TOPS' if dtype_key in OPS_MODES else 'TFLOP/s'} is {own:.1%} of the nominal "
                f"{dtype_key} peak {dtype_nominal_tflops:g}" + (f" (MFU@nom {mfu:.1%} against the fp16/bf16 figure)"
                                                                 if mfu is not None else ""))
        if level == "error":
            flags.append(f"error: {text} - flops.py counts too many FLOPs (check it with check_flops.py) or the peak "
                         "is wrong (--mfu-peak)")
        elif level == "warning":
            flags.append(f"warning: {text}, within the {NOISE_MARGIN:.0%} noise margin")
    elif mfu is not None and mfu > 1.0 + NOISE_MARGIN and dtype_key in LOW_PRECISION_MODES:
        flags.append(f"warning: MFU@nom {mfu:.1%} is above the fp16/bf16 nominal peak, which {dtype_key} may exceed; "
                     f"no nominal {dtype_key} figure for this device to judge it against")
    elif mfu is not None and mfu > 1.0 + NOISE_MARGIN:
        flags.append(f"error: MFU@nom {mfu:.1%} is above 100% of the nominal peak - flops.py counts too many FLOPs "
                     "(check it with check_flops.py) or the peak is wrong (--mfu-peak)")
    elif mfu is not None and mfu > 1.0:
        flags.append(f"warning: MFU@nom {mfu:.1%} is within the {NOISE_MARGIN:.0%} noise margin above the nominal peak")
    return tflops, mfu, flags


def impl_entry(result: dict) -> dict:
    """The compact per-implementation block of ``impls`` from a collector result dict."""
    s = result.get("summary") or {}
    return {"status": result.get("status"), "error": result.get("error"), "kernel_time_ns": s.get("kernel_time_ns"),
            "span_ns": s.get("span_ns"), "launches_per_iter": s.get("launches_per_iter"),
            "kernels": s.get("kernels"), "flags": result.get("flags", []), "attempts": result.get("attempts"),
            "prof_dir": result.get("prof_dir"), "wall_s": result.get("wall_s"), "problems": s.get("problems"),
            "cpu_adaptations": result.get("cpu_adaptations")}


def case_entry(info, results: dict, flops: dict, peak_tflops, tf32: bool, nominal_by_mode=None) -> dict:
    """One ``per_case`` entry.

    ``info``: :class:`mfulib.core.cases.CaseInfo`; ``results``: {impl: {status, error, summary (kernels.summarize
    output), flags, attempts, prof_dir, output_bytes, wall_s, pmu}}; ``flops``: {flops, flops_source, flops_parts,
    compute_dtype}; ``peak_tflops``: the nominal fp16/bf16 peak or None; ``nominal_by_mode``: the peak block's
    ``nominal_tflops`` {mode: value} (the above-peak check uses the case dtype's own figure, see :func:`mfu_fields`).
    """
    e = {"case": info.case_id, "shape": info.shape_str, "dtype": info.dtype_str}
    for impl in ("ref", "asc"):
        r = results.get(impl)
        kt = (r or {}).get("summary", {}).get("kernel_time_ns") if r and r.get("status") == "ok" else None
        e[f"{impl}_us"] = kt / 1e3 if kt else None
        e[f"{impl}_error"] = None if r is None or r.get("status") == "ok" else r.get("error")
        e[f"{impl}_prof_dir"] = (r or {}).get("prof_dir")
    e["speedup"] = e["ref_us"] / e["asc_us"] if e["ref_us"] and e["asc_us"] else None
    primary = "asc" if "asc" in results else "ref"
    r = results[primary]
    s = r.get("summary") or {}
    e.update(measured_impl=primary, compute_dtype=flops.get("compute_dtype") or info.compute_dtype, tf32=tf32,
             flops=flops.get("flops"), flops_source=flops.get("flops_source"), flops_tracer=flops.get("flops_tracer"),
             flops_parts=flops.get("flops_parts"), vector_flops=flops.get("vector_flops"),
             numerator=flops.get("numerator"), numerator_reason=flops.get("numerator_reason"),
             flops_inputs_drawn=flops.get("inputs_drawn"), flops_data_values=flops.get("data_values"),
             input_bytes=info.input_bytes, output_bytes=r.get("output_bytes"))
    for key in ("launches_per_iter", "sequence", "kernels", "iteration_launches", "kernel_time_ns",
                "kernel_time_mean_ns", "span_ns", "kernel_union_ns", "kernel_overlap_ns", "launch_overhead_ns",
                "iter_kernel_time_ns", "iter_span_ns",
                "repeat_spread", "pmu", "median_iterations"):
        e[key] = s.get(key) if r.get("status") == "ok" else None
    # where the counters of ``pmu`` came from ("ncu" | "msprof:<Group>[+<Group>]") or why there are none
    e["pmu_source"] = r.get("pmu_source") if e.get("pmu") else None
    e["pmu_unavailable"] = r.get("pmu_unavailable")
    key = peak_key(e["compute_dtype"], tf32) if e["compute_dtype"] else None
    tflops, mfu, mflags = mfu_fields(e["flops"], e["kernel_time_ns"], peak_tflops,
                                     dtype_nominal_tflops(nominal_by_mode, e["compute_dtype"], tf32), key)
    e["actual_tflops"], e["mfu_nom"] = tflops, mfu
    e["flags"] = list(r.get("flags", [])) + mflags
    if flops.get("note"):
        e["flags"].append(flops["note"])
    e["attempts"] = r.get("attempts")
    e["ncu_replay"] = r.get("ncu_replay") if e["kernel_time_ns"] else None
    e["harness_launches_dropped"] = s.get("harness_launches_dropped")
    e["launches_outside_iterations"] = s.get("launches_outside_iterations")
    e["impls"] = {impl: impl_entry(res) for impl, res in results.items()}
    return e


def skipped_entry(info, reason: str, verify=None) -> dict:
    """A ``per_case`` entry for a case that was not run (``verify``: the verify gate's mark when it excluded it)."""
    e = {"case": info.case_id, "shape": info.shape_str, "dtype": info.dtype_str, "skipped": reason,
         "ref_us": None, "asc_us": None, "speedup": None, "ref_error": None, "asc_error": None,
         "ref_prof_dir": None, "asc_prof_dir": None}
    if verify is not None:
        e["verify"] = verify
    return e


FILE_NAME = "performance.json"


def write_performance_json(output_dir: str, report: dict) -> str:
    """Write ``report`` (:func:`build_report`'s result) atomically as ``<output_dir>/performance.json``; returns the
    path."""
    path = os.path.join(output_dir, FILE_NAME)
    write_json_atomic(path, report)
    return path


def build_report(header: dict, run: dict, per_case: list, impls, missing=None) -> dict:
    """The whole performance.json: ``header`` (provenance), ``run`` (top-level run fields), ``per_case``;
    ``missing`` [{case, impl, reason}]: the selected pairs that were not run (``complete`` is false when any)."""
    rep = dict(header)
    rep.update(run)
    rep.update(complete=not missing, missing=list(missing or []))
    measured = [c for c in per_case if not c.get("skipped")]
    valid = [c for c in measured if all(c.get(f"{i}_us") for i in impls)]
    rep.update(n_cases_total=len(per_case), n_cases_valid=len(valid))
    rep.update(summary_stats(per_case))
    rep["per_case"] = per_case
    return rep


# ----------------------------------------------------------------------------------------------------------------
# reading


def load_report(path: str) -> dict:
    """Read a performance.json; raises UserError (file + fix) when missing, not a collector result, or when a
    field the decomposition reads has the wrong type (see :func:`check_report_structure`)."""
    rep = read_work_json(path, "run the collector first, in the work directory: "
                         f"{script_command('ops_profiling/msprof_perf_summary.py')} --quick --mfu --impl asc "
                         "--output-dir . --keep-prof . (or `make OP=<op> collect`)", "re-run the collector")
    if not isinstance(rep, dict) or not isinstance(rep.get("per_case"), list):
        raise UserError(f"{path}: no \"per_case\" list - this is not a performance.json written by "
                        "msprof_perf_summary.py")
    check_report_structure(rep, path)
    return rep


def completeness(rep: dict) -> tuple:
    """(complete, missing texts) of a performance.json. A file without ``complete`` (an older collector) counts as
    incomplete when its flags say it was interrupted."""
    if "complete" in rep:
        missing = [f"case {m.get('case')} {m.get('impl')}: {m.get('reason')}" if isinstance(m, dict) else str(m)
                   for m in rep.get("missing") or []]
        return bool(rep["complete"]), missing
    interrupted = [f for f in rep.get("flags") or [] if isinstance(f, str) and f.startswith("interrupted")]
    return not interrupted, interrupted


#: who kept a case of a collection from being measured (:func:`not_measured`'s ``by``)
BY_COLLECTOR, BY_VERIFY, BY_SEARCH = "collector", "verify", "search"


def not_measured(rep: dict) -> list:
    """The cases of a collection that were never timed and why, as the file records it: [{case, by, status,
    reason}], collector-skipped ones first, each in the file's order.

    * a ``per_case`` entry with ``skipped``: by "collector" (the collector does not run it on this backend - bf16 on
      the CPU interpreter - or it has no work), status "skipped", reason the entry's;
    * a ``selection.not_verified`` entry: by "verify" (the verify gate excluded it: verify.json does not pass it),
      status verify.json's status of the case, reason verify.json's own reason (``verify_reason``; a file written
      before that was recorded gives the gate's ``reason``);
    * a ``selection.search_not_run`` entry (a collection of a search's chosen cases): by "search" - an original
      case the search could not run on this backend (:func:`mfulib.schemas.grid_search_json.not_run_cases`).

    Cases the selection rule left out although they may be timed are :func:`not_selected`."""
    out = [{"case": c.get("case"), "by": BY_COLLECTOR, "status": "skipped", "reason": str(c["skipped"])}
           for c in rep.get("per_case") or [] if isinstance(c, dict) and c.get("skipped")]
    for e in (rep.get("selection") or {}).get("not_verified") or []:
        if not isinstance(e, dict):  # an id alone: no reason recorded
            out.append({"case": e, "by": BY_VERIFY, "status": None, "reason": None})
            continue
        mark = e.get("verify") if isinstance(e.get("verify"), dict) else {}
        out.append({"case": e.get("case"), "by": BY_VERIFY, "status": mark.get("status"),
                    "reason": e["verify_reason"] if e.get("verify_reason") else e.get("reason")})
    for e in (rep.get("selection") or {}).get("search_not_run") or []:  # a collection of a search's chosen cases
        if isinstance(e, dict):
            out.append({"case": e.get("case"), "by": BY_SEARCH, "status": None, "reason": e.get("reason")})
    return out


def not_selected(rep: dict) -> dict | None:
    """{rule, cases}: the cases the collection's selection rule left out (``selection.reserve``: ranked below the
    top-k; since verify-excluded cases are :func:`not_measured`, these are cases that may be timed - ``--cases``
    picks them); None when there are none."""
    sel = rep.get("selection") or {}
    cases = list(sel.get("reserve") or [])
    return {"rule": sel.get("rule"), "cases": cases} if cases else None


def describe_not_measured(entries: list, limit: int = 8) -> list:
    """People's lines for :func:`not_measured` entries (an entry's optional ``label`` names its report): a head
    line counting the cases, then one indented line per (label, by, status, reason) with the case ids joined - at
    most ``limit`` lines, the rest counted. [] for no entries."""
    if not entries:
        return []
    groups = {}
    for e in entries:
        groups.setdefault((e.get("label"), e.get("by"), e.get("status"), e.get("reason")), []).append(e.get("case"))
    lines = [f"{len(entries)} case(s) never measured (no rows), with the reason the collection recorded:"]
    for (label, by, status, reason), ids in list(groups.items())[:limit]:
        who = ("not run by the collector" if by == BY_COLLECTOR else
               "not run by the search (grid_search.json excluded)" if by == BY_SEARCH else
               f"not verified (verify: {status or 'no verdict recorded'}), never timed")
        ids = sorted(ids, key=lambda c: (not isinstance(c, int), c if isinstance(c, int) else str(c)))
        lines.append(f"  {label + ' ' if label else ''}case {', '.join(map(str, ids))} - {who}: "
                     f"{reason or 'no reason recorded'}")
    if len(groups) > limit:
        rest = sum(len(ids) for ids in list(groups.values())[limit:])
        lines.append(f"  ... and {rest} more case(s) with other reasons (performance.json selection.not_verified, "
                     "selection.search_not_run and the skipped per_case entries)")
    return lines


REPORT_NUMBERS = ("kernel_time_ns", "span_ns", "flops", "input_bytes", "output_bytes")


def check_report_structure(rep: dict, path: str) -> None:
    """Check the types of the performance.json fields this module reads; UserError naming the file and field.

    ``peak``: an object whose ``value_tflops`` / ``nominal_tflops`` (a number or {dtype: number}) are > 0 where
    given; each ``per_case`` entry an object with an integer ``case``, numbers (or null) in
    :data:`REPORT_NUMBERS`, ``kernels`` a list of objects, ``flops_parts`` {part: number}, ``pmu``
    {kernel: {counter: value}}, ``flags`` a list.
    """
    fix = "re-run the collector (msprof_perf_summary.py) or fix the file"
    pblock = rep.get("peak")
    if pblock is not None:
        if not isinstance(pblock, dict):
            raise wrong_type(path, "peak", pblock, "an object {nominal_tflops, value_tflops, source}", fix)
        ntf = pblock.get("nominal_tflops")
        vals = {"peak.value_tflops": pblock.get("value_tflops")}
        if isinstance(ntf, dict):
            vals.update({f"peak.nominal_tflops.{k}": v for k, v in ntf.items()})
        else:
            vals["peak.nominal_tflops"] = ntf
        for field, v in vals.items():
            if v is not None and (not is_number(v) or not v > 0):
                raise wrong_type(path, field, v, "a peak in TFLOP/s > 0 (or null)", fix)
    for i, c in enumerate(rep["per_case"]):
        if not isinstance(c, dict):
            raise wrong_type(path, f"per_case[{i}]", c, "an object {case, kernels, kernel_time_ns, ...}", fix)
        cid = c.get("case")
        if not isinstance(cid, int) or isinstance(cid, bool):
            raise wrong_type(path, f"per_case[{i}].case", cid, "an integer case id", fix)
        where = f"per_case[{i}] (case {cid})"
        for key in REPORT_NUMBERS:
            if c.get(key) is not None and not is_number(c[key]):
                raise wrong_type(path, f"{where}.{key}", c[key], "a number (or null)", fix)
        kernels = c.get("kernels")
        if kernels is not None and not isinstance(kernels, list):
            raise wrong_type(path, f"{where}.kernels", kernels, "a list of kernel objects", fix)
        for j, k in enumerate(kernels or []):
            if not isinstance(k, dict):
                raise wrong_type(path, f"{where}.kernels[{j}]", k, "an object {name, time_per_iter_ns, ...}", fix)
        fparts = c.get("flops_parts")
        if fparts is not None:
            if not isinstance(fparts, dict):
                raise wrong_type(path, f"{where}.flops_parts", fparts, "an object {part: FLOPs}", fix)
            for part, v in fparts.items():
                if v is not None and not is_number(v):
                    raise wrong_type(path, f"{where}.flops_parts.{part}", v, "a number of FLOPs", fix)
        pmu = c.get("pmu")
        if pmu is not None and not (isinstance(pmu, dict) and all(isinstance(r, dict) for r in pmu.values())):
            raise wrong_type(path, f"{where}.pmu", pmu, "an object {kernel: {counter: value}}", fix)
        if c.get("flags") is not None and not isinstance(c["flags"], list):
            raise wrong_type(path, f"{where}.flags", c["flags"], "a list of strings", fix)
