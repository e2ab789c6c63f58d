"""Step 4, kernel-time collection: select cases, run each (case, implementation) in a child process with bounded
retries, summarise its kernels, attach FLOPs and the nominal peak, write ``performance.json``.

Case selection (docs/ARCHITECTURE.md#case-ids: 0-based lines of the work directory's case file); only cases verify
passed on this backend are timed (:mod:`mfulib.verify.verified_cases`: a case without a verify row is verified first and
its row merged into verify.json; a case verify skipped or rejected is never a per_case row: it is listed under
selection.not_verified with verify's reason and hands its top-k slot to the next one; ``--unverified-ok`` times such
cases anyway, marked per case):

* ``--cases 3,7,9``: exactly those (``--max-cases`` truncates);
* otherwise the top ``--mfu-top-k`` (3) cases by theoretical FLOPs from ``flops.py`` - ``--max-cases N`` takes the
  top N instead (N >= the number of cases: all of them); without ``flops.py``, by input bytes, saying so, and no
  MFU is reported;
* cpu backend: the **smallest** eligible cases first (CI stays fast), bf16 cases skipped with the reason, and
  warmup 1 / repeats 2 unless given.

Completeness: performance.json records ``complete`` and ``missing`` (the selected (case, impl) pairs not run, e.g.
after Ctrl-C), so make and decompose never take an interrupted collection for a finished one.

PMU counters (``--pmu auto|ncu|none``, default auto): on cuda each measured case's child runs once more under
Nsight Compute (:class:`mfulib.backends.ncu_pmu.NcuPmu`, probed once per run) and per_case ``pmu`` {kernel:
{canonical counter: mean}}, ``pmu_source`` ("ncu") and ``pmu_unavailable`` (None, or why not: ERR_NVGPUCTRPERM,
ncu not found, ...) are filled; kernel times stay CUPTI's. The run's ``pmu_collection`` records the verdict.

Retries (``--retry``, default 2 as upstream): only an *incomplete* profile is retried - lost rows, zero-timestamp
records, missing iteration markers, no export. A crash, timeout, out-of-memory, rejected case or a call that
launched no kernel is recorded for that case at once and the run goes on.

This module is the core, usable without the command line: :func:`collect` with an :class:`Options`. Its parts:
:mod:`~mfulib.collect.options` (options and their checks), :mod:`~mfulib.collect.selection`,
:mod:`~mfulib.collect.case_flops`, :mod:`~mfulib.collect.run_case` (the run loop) and
:mod:`~mfulib.collect.assemble` (the report); ``msprof_perf_summary.py`` (via :mod:`mfulib.collect.console`) is
the command line.
"""
from __future__ import annotations

import os
import sys
import time

from mfulib.backends import select_backend
from mfulib.backends.ncu_pmu import pmu_plan
from mfulib.collect.assemble import Collection, build_report, resolve_peak
from mfulib.collect.case_flops import (case_flops, flops_entry, load_flops, numerator_of, numerator_verdicts,
                                       tracer_flops)
from mfulib.collect.options import Options, apply_iteration_defaults, check_options, device_select
from mfulib.collect.selection import select_cases, select_verified
from mfulib.collect.run_case import measure_cases
from mfulib.core.errors import UserError
from mfulib.core.jsonio import ensure_writable_dir
from mfulib.core.opdir import OpDir
from mfulib.schemas import performance_json as _perf
from mfulib.verify.verified_cases import Gate

# the collector's public names (tests and callers import them from here; each lives in the module named above)
__all__ = ["Options", "case_flops", "collect", "load_flops", "numerator_of", "resolve_peak", "select_cases",
           "tracer_flops"]


def collect(opts: Options, log=None) -> dict:
    """Run the collection described by ``opts``; writes ``<output_dir>/performance.json`` and returns it.

    Raises UserError for bad options (see :func:`mfulib.collect.options.check_options`) before anything is
    measured; writes nothing when no case was measured (an interrupt before the first result), so an earlier
    performance.json stays."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    t_start = time.perf_counter()
    check_options(opts)
    output_dir = ensure_writable_dir(opts.output_dir, f"--output-dir {opts.output_dir}")
    keep_root = ensure_writable_dir(opts.keep_prof, f"--keep-prof {opts.keep_prof}") if opts.keep_prof else None
    opdir = OpDir(opts.op_dir)
    infos = opdir.describe_all()
    for need in ([opdir.model_py] + ([opdir.model_new_py] if opts.impl != "ref" else [])):
        if not os.path.exists(need):
            raise UserError(f"{need}: missing - run prepare_op_dir.py first (make prepare)")
    backend, reason, env_facts = select_backend(opts.backend, aic_metrics=opts.aic_metrics, msprof_path=opts.msprof)
    opts.device_id, dev_source = device_select(opts, backend.name)
    apply_iteration_defaults(opts, backend.name)
    log(f"backend: {backend.name} ({reason}); warmup {opts.warmup}, repeats {opts.repeats}")
    pmu = pmu_plan(backend.name, opts.pmu, opts.ncu, opts.ncu_cache_control, opts.flush_cache_mib,
                   opts.pmu_iterations, opts.case_timeout_s, log=log if opts.progress else None)
    if not backend.pmu_in_profile:  # a separate PMU pass: probed first, a device run says at once if it can read
        verdict = pmu.probe()
        log(f"PMU: {pmu.source} (--cache-control {pmu.cache_control})" if verdict["available"] else
            f"PMU: none - {verdict['reason']}")
    ff = load_flops(opdir)
    if ff is None:
        log(f"note: {opdir.flops_py} not found: cases ranked by input bytes and no MFU reported "
            "(write flops.py, step 3)")
    # ModelNew is timed only on cases verify passed (the reference alone needs no verdict)
    gate = None if opts.impl == "ref" else Gate(opdir, backend.name, backend.device_string(opts.device_id),
                                                seed=opts.seed, case_timeout_s=opts.case_timeout_s,
                                                forced=opts.unverified_ok, log=log)
    selected, skipped, selection = select_verified(infos, ff, opdir, opts, backend.name, gate, log)
    tracer, verdicts = tracer_flops(opdir), numerator_verdicts(opdir)

    def flops_of(info):
        return flops_entry(ff, opdir, info, opts.seed, tracer, verdicts)
    flops = {info.case_id: flops_of(info) for info in selected}
    res = selection.get("reserve") or []
    log(f"cases: {selection['rule']}: {selection['order']}" +
        (f" (skipped {selection['skipped']})" if selection["skipped"] else "") +
        (f"; not selected (reserve, take a slot a case gives up; --cases picks them): {res[:12]}"
         f"{' ...' if len(res) > 12 else ''}" if res else ""))
    impls = ["ref", "asc"] if opts.impl == "both" else [opts.impl]
    by_id = {i.case_id: i for i in infos}
    reserve = [by_id[c] for c in selection["reserve"]]
    results, interrupted = measure_cases(backend, opdir, opts, pmu, gate, selected, reserve, skipped, flops,
                                         flops_of, impls, keep_root, output_dir, log)
    if interrupted and not results:
        log("interrupted before any case was measured: performance.json left as it was")
        raise KeyboardInterrupt
    report = build_report(Collection(opts, opdir, backend, reason, env_facts, dev_source, pmu, gate, ff, selection,
                                     selected, skipped, flops, results, impls, interrupted, t_start))
    _perf.write_performance_json(output_dir, report)
    from mfulib.pipeline.workdir_state import invalidate, record_run
    if report["missing"] or not report["n_cases_valid"]:  # make must redo this step (its stamp no longer holds)
        invalidate(opdir.path, "collect")
    elif os.path.samefile(output_dir, opdir.path):
        record_run(opdir.path, "collect", report["made_from"], log)
    if interrupted:
        raise KeyboardInterrupt
    return report
