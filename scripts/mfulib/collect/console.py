"""The collector's command line behind ``ops_profiling/msprof_perf_summary.py``: :func:`run` turns its parsed
arguments into :class:`mfulib.collect.driver.Options` (or :class:`mfulib.collect.from_prof.FromProfOptions`
with ``--from-prof``), runs the core, prints :func:`print_table` and gives the exit status."""
import os
import sys
import textwrap

from mfulib.core.fmt import TFLOPS_DIGITS, pct, sig


def print_table(report):
    """The collector's terminal table: one row per measured case; cases never measured - skipped by the collector
    (bf16 on the CPU interpreter) or excluded by verify - are no rows but grouped below it by the reason recorded
    (:func:`mfulib.schemas.performance_json.describe_not_measured`); flag and error text is wrapped
    (``maxcolwidths``), never cut off."""
    from tabulate import tabulate
    from mfulib.schemas.performance_json import describe_not_measured, not_measured
    rows, skipped = [], []
    for c in report["per_case"]:
        if c.get("skipped"):
            skipped.append(c)
            continue
        err = c.get("asc_error") or c.get("ref_error")
        spread = c.get("repeat_spread")
        note = err if err else "; ".join(c.get("flags") or [])
        rows.append([c["case"], c.get("measured_impl"), c.get("compute_dtype"), c["shape"],
                     c.get("launches_per_iter"),
                     (f"{c['kernel_time_ns'] / 1e3:.2f}" + (" [ncu]" if c.get("ncu_replay") else ""))
                     if c.get("kernel_time_ns") else "-",
                     f"{c['span_ns'] / 1e3:.2f}" if c.get("span_ns") else "-",
                     sig(c["actual_tflops"], TFLOPS_DIGITS) if c.get("actual_tflops") else "-",
                     pct(c.get("mfu_nom"), 2), pct(spread, 1), note])
    headers = ["case", "impl", "dtype", "shape", "launch/it", "kernel us", "span us", "TFLOP/s", "MFU@nom", "spread",
               "flags / error"]
    widths = [None, None, None, 28, None, None, None, None, None, None, 60]
    if any(c.get("ref_us") for c in report["per_case"]):  # --impl both: the reference and the speedup too
        by_case = {c["case"]: c for c in report["per_case"]}
        for r in rows:
            c = by_case[r[0]]
            r[-1:-1] = [f"{c['ref_us']:.2f}" if c.get("ref_us") else "-",
                        f"{c['speedup']:.3g}x" if c.get("speedup") else "-"]
        headers[-1:-1] = ["ref us", "speedup"]
        widths[-1:-1] = [None, None]
    if rows:
        print(tabulate(rows, headers=headers, maxcolwidths=widths))
    for line in describe_not_measured(not_measured(report)):
        print(textwrap.fill(line, width=116, subsequent_indent="      "))
    peak = report.get("peak") or {}
    measured = len(report["per_case"]) - len(skipped)
    print(f"backend {report['backend']} ({report['device'].get('name', '?')}); peak for MFU@nom: "
          f"{peak.get('value_tflops')} TFLOP/s ({peak.get('source')}); valid cases {report['n_cases_valid']}/"
          f"{measured} measured")
    if any(c.get("ncu_replay") for c in report["per_case"]):
        print("note: kernel us [ncu]: ncu replay times (each launch serialised and replayed, clocks and caches as ncu "
              "set them; the case's flags say which) - not comparable with free-running trace times")
    for f in report.get("flags") or []:
        print(f"note: {f}")


#: flags that steer a live run only (what is run and how): refused with --from-prof, which runs nothing
LIVE_ONLY = ("keep_prof", "mfu_top_k", "search_json", "max_cases", "retry", "backend", "aic_metrics",
             "msprof", "case_timeout_s", "flush_cache_mib", "unverified_ok", "pmu", "ncu", "ncu_cache_control",
             "pmu_iterations")


def refuse_live_only(args, default) -> None:
    """UserError naming the live-only flags given with ``--from-prof`` (``default(dest)``: the parser's default)."""
    given = [d for d in LIVE_ONLY if getattr(args, d, None) != default(d)]
    if given:
        from mfulib.core.errors import UserError
        flags = ", ".join("--" + d.replace("_", "-") for d in given)
        raise UserError(f"{flags}: steer(s) a live run, and --from-prof runs nothing - leave them out (or drop "
                        "--from-prof to measure)")


def run(args, default=None) -> int:
    """Run the collector (or ``--from-prof``) for the parsed arguments ``args`` of msprof_perf_summary.py; returns
    the exit status (0; 1 when no selected case got a kernel time, live or from a profile). ``default``: the
    parser's ``get_default``, to refuse live-only flags given with ``--from-prof``. Raises UserError on bad input."""
    if args.from_prof:
        if default is not None:
            refuse_live_only(args, default)
        from mfulib.collect.from_prof import FromProfOptions, from_prof, parse_case_sequence
        opts = FromProfOptions(
            paths=args.from_prof, output_dir=args.output_dir, op_dir=args.op_dir,
            cases=parse_case_sequence(args.cases) if args.cases is not None else None, impl=args.impl,
            warmup=args.warmup, repeats=args.repeats, l2_flush=args.l2_flush, l2_mib=args.l2_mib, mfu=args.mfu,
            mfu_peak=args.mfu_peak, seed=args.seed, range_name=args.range, device=args.device,
            all_runs=getattr(args, "all_runs", False))
        report = from_prof(opts, log=None if args.quiet else lambda m: print(m, file=sys.stderr))
        return _finish(report, args.output_dir, "no case of the profile(s) has a kernel time")
    if getattr(args, "all_runs", False):
        from mfulib.core.errors import UserError
        raise UserError("--all-runs: chooses which kept profiles --from-prof reads - give it with --from-prof")
    from mfulib.collect.driver import Options, collect
    from mfulib.collect.from_prof import parse_case_sequence  # in the order given: the search's re-timing interleaves
    cases, origins = list(dict.fromkeys(parse_case_sequence(args.cases))) if args.cases is not None else None, {}
    if args.search_json and getattr(args, "no_search_json", False):
        from mfulib.core.errors import UserError
        raise UserError("--search-json and --no-search-json contradict each other - give one of them")
    if not args.search_json and args.cases is None and not getattr(args, "no_search_json", False):
        args.search_json = current_search(args.op_dir or args.output_dir)
    if args.search_json:
        from mfulib.core.errors import UserError
        from mfulib.schemas.grid_search_json import chosen_cases
        if args.cases is not None:
            raise UserError("--cases and --search-json both choose the cases - give one of them")
        cases, origins = chosen_cases(os.path.abspath(args.search_json))
    else:  # cases the shape probe appended are marked with their origin even when no search chose them
        from mfulib.search.pool import probe_origins
        origins = probe_origins(os.path.join(args.op_dir or args.output_dir, "probe.json"))
    opts = Options(op_dir=args.op_dir or args.output_dir, output_dir=args.output_dir, impl=args.impl,
                   warmup=args.warmup, repeats=args.repeats, seed=args.seed, retry=args.retry, device_id=args.device,
                   backend=args.backend, cases=cases, search_json=args.search_json, search_origins=origins,
                   top_k=args.mfu_top_k, max_cases=args.max_cases, mfu=args.mfu, mfu_peak=args.mfu_peak,
                   keep_prof=args.keep_prof, case_timeout_s=args.case_timeout_s, flush_cache_mib=args.flush_cache_mib,
                   aic_metrics=args.aic_metrics, msprof=args.msprof, quick=True, progress=not args.quiet,
                   unverified_ok=args.unverified_ok, pmu=args.pmu, ncu=args.ncu,
                   ncu_cache_control=args.ncu_cache_control, pmu_iterations=args.pmu_iterations)
    return _finish(collect(opts), args.output_dir, "no selected case has a kernel time")


def current_search(op_dir: str):
    """``<op_dir>/grid_search.json`` when the collector should measure its chosen cases without being told (the
    search is complete, chose cases, and the files it recorded are unchanged: :func:`mfulib.pipeline.workdir_state.
    judge_report`), else None; says on screen (stderr) which, and that ``--cases`` / ``--no-search-json``
    override."""
    from mfulib.pipeline.workdir_state import judge_report
    from mfulib.schemas import grid_search_json
    from mfulib.schemas.provenance import stale_reasons
    path = os.path.join(os.path.abspath(op_dir), grid_search_json.FILE_NAME)
    if not os.path.exists(path):
        return None
    try:
        doc = grid_search_json.read_grid_search_json(path)
    except Exception as exc:  # a bad file is reported and not used: the collection itself does not need it
        print(f"note: {path} not used ({exc})", file=sys.stderr)
        return None
    why = [] if doc.get("complete") and doc.get("chosen_cases") else ["the search is incomplete or chose no case"]
    why += stale_reasons(judge_report(path, doc))
    if why:
        print(f"note: {path} not used: {'; '.join(why)} - the top-k cases are measured (make search redoes the "
              "search)", file=sys.stderr)
        return None
    print(f"measuring the search's chosen cases {doc['chosen_cases']} from {path} (its recorded inputs match); "
          "--cases or --no-search-json measures others", file=sys.stderr)
    return path


def _finish(report: dict, output_dir: str, none_timed: str) -> int:
    """Print the table and where performance.json is; exit status 1 (``none_timed`` said) when no case has a kernel
    time, else 0 - the same rule live and with --from-prof."""
    print_table(report)
    out = os.path.join(os.path.abspath(output_dir), "performance.json")
    print(f"wrote {out}")
    if not report["n_cases_valid"]:
        print(f"FAILED: {none_timed} (why in {out})", file=sys.stderr)
        return 1
    return 0
