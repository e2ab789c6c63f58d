"""The ``performance.json`` of a collection: the device record (npu-smi identity, runtime), the nominal peak
MFU@nom divides by (:func:`resolve_peak`), the per_case entries (FLOPs, PMU counters, verify marks) and the
run block (:func:`build_report` from a :class:`Collection`, the state of one finished or interrupted run)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from mfulib.backends import fp32_dot_is_tf32
from mfulib.collect.options import Options
from mfulib.core.definitions import MATH_MODES
from mfulib.core.jsonio import provenance
from mfulib.schemas import provenance as made
from mfulib.core.opdir import OpDir
from mfulib.core import nominal_peaks as _peaks
from mfulib.schemas import performance_json as _perf

NOMINAL_DTYPE = "float16"  # MFU@nom uses the fp16/bf16 dense peak for every dtype (docs/ARCHITECTURE.md#mfu-nom)


def resolve_peak(backend_name: str, device: dict, runtime: dict | None, mfu_peak) -> dict:
    """The ``peak`` block: nominal TFLOP/s per dtype and the one MFU@nom uses, with its source."""
    if mfu_peak:
        return {"nominal_tflops": {"float16": mfu_peak, "bfloat16": mfu_peak}, "used_for_mfu_nom": NOMINAL_DTYPE,
                "value_tflops": float(mfu_peak), "source": "--mfu-peak (given on the command line)", "override": True}
    info = dict(device or {}, backend=backend_name)
    if runtime:
        info.update({k: runtime.get(k) for k in ("ai_core_num", "aic_frequency_mhz", "info_json_path")})
    nominal = {}
    for mode in MATH_MODES:
        v, _src = _peaks.nominal_peak_tflops(info, mode)
        if v is not None:
            nominal[mode] = v
    value, source = _peaks.nominal_peak_tflops(info, NOMINAL_DTYPE)
    return {"nominal_tflops": nominal, "used_for_mfu_nom": NOMINAL_DTYPE, "value_tflops": value, "source": source,
            "override": False}


@dataclass
class Collection:
    """What one collector run chose and measured: the inputs of :func:`build_report`."""
    opts: Options
    opdir: OpDir
    backend: object  # mfulib.backends.base.Backend
    backend_reason: str
    env_facts: dict | None
    device_source: str
    pmu: object  # mfulib.backends.ncu_pmu pmu_plan(): probe(), run_record()
    gate: object | None  # mfulib.verify.verified_cases.Gate, None for --impl ref
    ff: object | None  # mfulib.flops.contract.FlopsFile
    selection: dict
    selected: list
    skipped: list  # [(CaseInfo, reason, verify mark or None)]
    flops: dict  # case id -> mfulib.collect.case_flops.flops_entry
    results: dict  # case id -> {impl: result of mfulib.collect.run_case.run_case_impl}
    impls: list
    interrupted: bool
    t_start: float  # time.perf_counter() at the start of the run


#: options of the collector that do not change what is measured (where things are written, how it is shown)
_NOT_SETTINGS = ("progress", "search_origins", "search_json", "msprof", "ncu", "flags")


def collect_made_from(opts, opdir, selection: dict) -> dict:
    """performance.json's ``made_from`` (:mod:`mfulib.schemas.provenance`), relative to ``opts.output_dir``: the
    operator files, the case file, verify.json, flops_check.json and the search's grid_search.json when it chose the
    cases; settings: the collector's options (the measured case order as ``measured``)."""
    files = [opdir.model_py, opdir.model_new_py, opdir.flops_py, opdir.cases_path,
             os.path.join(opdir.path, "verify.json"), os.path.join(opdir.path, "flops_check.json")]
    if opts.search_json:
        files.append(os.path.abspath(opts.search_json))
    settings = made.settings_of(opts, drop=_NOT_SETTINGS)
    settings["measured"] = list(selection.get("order") or [])
    return made.made_from(opts.output_dir, files, settings, step="collect")


def _cupti_shapes(backend, configs):
    """``mma_shapes`` from the timed launches' CUPTI configurations where no ncu pass read them (None without any):
    the compiled variants of the child's Triton cache (:func:`mfulib.profiles.triton_ptx.cupti_kernel_records`)."""
    if not configs:
        return None
    from mfulib.profiles.triton_ptx import cupti_kernel_records
    from mfulib.run.worker import child_env, triton_cache_dir
    return cupti_kernel_records(configs, triton_cache_dir(child_env(backend.child_env(os.environ))))


def build_report(c: Collection) -> dict:
    """The performance.json document of ``c`` (:func:`mfulib.schemas.performance_json.build_report`); ``missing``
    lists the selected (case, impl) pairs not run."""
    opts, opdir, backend, pmu, gate, ff = c.opts, c.opdir, c.backend, c.pmu, c.gate, c.ff
    selection, skipped, selected, results, impls = c.selection, c.skipped, c.selected, c.results, c.impls
    flops = c.flops
    ok = [r for per in results.values() for r in per.values() if r.get("device")]
    device = dict(ok[0]["device"]) if ok else {"backend": backend.name}
    runtime = next((r["runtime"] for per in results.values() for r in per.values() if r.get("runtime")), None)
    backend.complete_identity(device, c.env_facts, opts.device_id)
    if runtime:  # the runtime facts a device run reported (npu: info.json.N)
        device["runtime"] = runtime
    peak = resolve_peak(backend.name, device, runtime, opts.mfu_peak)
    nominal = peak["value_tflops"] if opts.mfu else None
    # a case the verify gate refused is never timed and never a per_case row (no MFU row, no plot point): it is
    # listed, with the gate's reason and verify.json's own, under selection.not_verified only
    selection["not_verified"] = [{"case": i.case_id, "reason": why, "verify": mark,
                                  "verify_reason": gate.recorded_reason(i.case_id) if gate is not None else None}
                                 for i, why, mark in skipped if mark is not None]
    selection["search_json"] = opts.search_json
    if opts.search_json:  # the original cases the search could not run here: never measured, with its reason
        from mfulib.schemas.grid_search_json import not_run_cases
        selection["search_not_run"] = not_run_cases(opts.search_json)
    per_case = [_perf.skipped_entry(i, why, verify=mark) for i, why, mark in skipped if mark is None]
    missing = [{"case": i.case_id, "impl": impl, "reason": "not run: the collection was interrupted"}
               for i in selected for impl in impls if impl not in results.get(i.case_id, {})]
    for info in selected:
        if info.case_id not in results:
            continue
        tf32 = fp32_dot_is_tf32(backend.name, flops[info.case_id].get("compute_dtype") or info.compute_dtype)
        entry = _perf.case_entry(info, results[info.case_id], flops.get(info.case_id) or {}, nominal, tf32,
                                 nominal_by_mode=peak["nominal_tflops"] if opts.mfu else None)
        if not backend.pmu_in_profile:  # else the counters came with the profile's own columns (msprof)
            last = results[info.case_id][impls[-1]]
            got = last.get("pmu_run") or {}
            entry.update(pmu=got.get("pmu") if got.get("pmu") is not None else entry.get("pmu") or None,
                         pmu_source=got.get("pmu_source"),
                         pmu_unavailable=got.get("pmu_unavailable", pmu.probe()["reason"]),
                         mma_shapes=got.get("mma_shapes") or _cupti_shapes(backend, last.get("launch_configs")))
            entry["flags"] += got.get("flags") or []
        if gate is not None:
            entry["verify"] = gate.admits(info.case_id)[1]
            if entry["verify"]["forced"]:
                entry["flags"].append(entry["verify"]["reason"])
        per_case.append(entry)
    for e in per_case:  # the case the (case, scale) search chose, with its origin; None otherwise
        e["search_origin"] = opts.search_origins.get(e["case"])
    run = {
        "task": opdir.op_name, "task_dir": opdir.path, "warmup": opts.warmup, "repeats": opts.repeats,
        "seed": opts.seed, "device_id": opts.device_id, "device_select_source": c.device_source,
        "timing_method": next((r["timing_method"] for per in results.values() for r in per.values()
                               if r.get("status") == "ok"), backend.timing_method),
        "profiling_mode": "quick", "backend": backend.name, "backend_reason": c.backend_reason,
        "environment": c.env_facts,
        "device": device, "compat": next((r["compat"] for per in results.values() for r in per.values()
                                          if r.get("compat")), None),
        "impl": opts.impl, "mfu": opts.mfu, "peak": peak, "flops_file": opdir.flops_py if ff else None,
        "kernel_parts": ff.kernel_parts if ff else None, "selection": selection, "retry": opts.retry,
        "flush_cache_mib": opts.flush_cache_mib, "pmu_collection": pmu.run_record(),
        "aic_metrics": opts.aic_metrics if backend.pmu_in_profile else None,
        "flags": (["interrupted: not every selected case was measured"] if c.interrupted else []) + list(opts.flags),
        "wall_s": time.perf_counter() - c.t_start,
    }
    if opts.mfu and peak["value_tflops"] is None:
        run["flags"].append(f"MFU@nom not reported: {peak['source']}")
    if opts.mfu and ff is None:
        run["flags"].append("MFU not reported: no flops.py in the work directory")
    header = provenance(_perf.TOOL, _perf.SCHEMA, device=device)
    header[made.KEY] = collect_made_from(opts, opdir, selection)
    report = _perf.build_report(header, run, per_case, impls, missing=missing)
    return report
