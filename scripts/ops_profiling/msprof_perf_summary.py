#!/usr/bin/env python3
"""Collect kernel times of an operator work directory on NPU (msprof), CUDA (torch.profiler) or CPU (Triton
interpreter) -> performance.json (step 4 of triton-mfu-analyzer; the ops-profiling collector extended with --mfu).

Run from the work directory, as the spec does:
  python3 $SKILL_DIR/scripts/ops_profiling/msprof_perf_summary.py --quick --mfu --impl asc --output-dir . \\
      --warmup 5 --repeats 5 --keep-prof .

--search-json grid_search.json measures the cases the (case, scale) search chose (mfu_grid_search.py), each
marked with its origin (per_case[].search_origin). Without --cases the top-3 cases by theoretical FLOPs (flops.py)
are measured (--mfu-top-k N, --max-cases N);
without flops.py, by input bytes, and no MFU is reported. Only cases that verify passed on this backend are timed
(verify.json): a selected case without a verify row is verified first (and recorded in verify.json); one verify
skipped, rejected or failed is never timed (listed under selection.not_verified with the reason) and its slot
goes to the next case;
--unverified-ok times them anyway, marked per case. On cuda/cpu the cases run one after another in one kept worker
process per device (MFU_WORKER=0: a fresh process per case; on npu each case has its own child under msprof): a
crash, hang (--case-timeout-s) or out-of-memory is recorded for that case, the next case gets a fresh worker and
the others go on.
Kernel time per iteration = sum of the kernel durations of that iteration; the per-case figure is the median over
the --repeats measured iterations (the --warmup ones are dropped; a priming call before them absorbs compilation
and autotuning). MFU@nom = FLOPs / kernel time / nominal fp16/bf16 dense peak (info.json.N / platform ini /
torch_npu on NPU, a datasheet table on CUDA, none on CPU; --mfu-peak overrides). A repeat spread above 5% is
flagged. The cpu backend caps work for CI: smallest cases first, bf16 cases skipped, warmup 1 / repeats 2 unless
given. Only --quick (task-time) collection is implemented; it is also what runs without the flag.
performance.json records complete/missing: Ctrl-C writes what was measured with complete=false (exit 130).
PMU counters per kernel on cuda (--pmu auto|ncu|none): each measured case's child runs once more under Nsight Compute
(ncu --csv --page raw --clock-control none --cache-control all|none, only the launches of --pmu-iterations
iterations); per_case "pmu" gets {kernel: {counter: mean}}, "pmu_source" "ncu", or "pmu_unavailable" the reason
(ERR_NVGPUCTRPERM, ncu not found, ...) and the run goes on. Kernel times always come from CUPTI.
Exit status: 0; 1 when no selected case got a kernel time; 2 on bad input; 130 when interrupted.

Kept or foreign profiles are re-parsed without running anything:
  msprof_perf_summary.py --from-prof <PROF_* | *_ascend_pt | trace.json[.gz] | ncu.csv | keep dir> \
      [--cases 3,7] [--warmup W --repeats R] [--op-dir <work dir> --mfu] --output-dir D
--cases names the case of each profile found, in order (kept profiles name their own). Without a work directory
only kernel times are written (FLOPs null); iterations, L2-flush kernels (--l2-flush), missing head launches and
autotuning are found in the data and reported as flags (see mfulib/collect/from_prof/).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mfulib.core import cli  # noqa: E402


def build_parser():
    p = cli.parser(__doc__, prog="msprof_perf_summary.py")
    p.add_argument("--quick", action="store_true", help="quick (task-time) collection, as upstream; the only mode")
    p.add_argument("--mfu", action="store_true", help="compute actual TFLOP/s and MFU@nom (needs flops.py)")
    p.add_argument("--impl", choices=("asc", "ref", "both"), default="both",
                   help="asc = ModelNew only, ref = Model only, both = both and their speedup")
    p.add_argument("--output-dir", default=".", help="where performance.json is written; also the work directory "
                                                     "unless --op-dir is given")
    p.add_argument("--op-dir", default=None, help="work directory (model.py, model_new.py, cases, flops.py); "
                                                  "default: --output-dir")
    p.add_argument("--warmup", type=int, default=None,
                   help="warmup iterations per case, dropped at parse time (default 5; cpu backend 1)")
    p.add_argument("--repeats", type=int, default=None,
                   help="measured iterations per case (default 5; cpu backend 2)")
    p.add_argument("--keep-prof", nargs="?", const=".", default=None, metavar="DIR",
                   help="keep raw profiles under DIR/prof/case<N>_<impl>/ (PROF_* dirs or chrome traces)")
    p.add_argument("--mfu-top-k", type=int, default=3, help="without --cases: how many cases, largest FLOPs first")
    p.add_argument("--cases", default=None, help="explicit 0-based case ids, e.g. 3,7,9 or 0-4")
    p.add_argument("--search-json", default=None, metavar="GRID_SEARCH_JSON",
                   help="measure the cases a search chose (grid_search.json chosen_cases, best first) instead of "
                        "the top-k; each is marked with its origin (per_case[].search_origin)")
    p.add_argument("--max-cases", type=int, default=None,
                   help="take the top N cases instead of --mfu-top-k (N >= number of cases: all)")
    p.add_argument("--mfu-peak", type=float, default=None, metavar="TFLOPS",
                   help="nominal peak in TFLOP/s used for MFU@nom instead of the device's own figure")
    p.add_argument("--seed", type=int, default=0, help="seed for inputs and weights")
    p.add_argument("--retry", type=int, default=2, help="retries of an incomplete profile (lost/zero records)")
    p.add_argument("--device", type=int, default=None, metavar="N",
                   help="device index (default: ASCEND_DEVICE_ID on npu, else 0)")
    p.add_argument("--backend", choices=("auto", "npu", "cuda", "cpu"), default="auto",
                   help="auto = npu if torch_npu + CANN are set up, else cuda, else cpu")
    p.add_argument("--aic-metrics", default="PipeUtilization",
                   help="msprof --aic-metrics group(s) (npu); a comma-separated list runs msprof once per group, "
                        "the first run timing the kernels, e.g. PipeUtilization,ArithmeticUtilization,Memory")
    p.add_argument("--msprof", default=None, metavar="PATH", help="msprof executable (default: the one on PATH)")
    p.add_argument("--case-timeout-s", type=float, default=600.0, help="wall-clock limit of one case's child")
    p.add_argument("--flush-cache-mib", type=float, default=0.0,
                   help="write a buffer of this many MiB before each iteration (outside it) for a cold cache; 0 = off")
    p.add_argument("--unverified-ok", action="store_true",
                   help="also time cases verify did not pass (skipped, failed, or without a verify row), each marked "
                        "in performance.json (per_case[].verify.forced)")
    p.add_argument("--pmu", choices=("auto", "ncu", "none"), default="auto",
                   help="per-kernel PMU counters on cuda: ncu = run each measured case once more under Nsight Compute; "
                        "auto = ncu when it is found and counters are permitted (probed once); none = no counters")
    p.add_argument("--ncu", default=None, metavar="PATH", help="ncu executable (default: the one on PATH)")
    p.add_argument("--ncu-cache-control", choices=("auto", "all", "none"), default="auto",
                   help="ncu --cache-control: all = caches flushed before each profiled launch, none = warm; auto = "
                        "all when --flush-cache-mib > 0, else none (the regime the kernel times were measured in)")
    p.add_argument("--pmu-iterations", type=int, default=2,
                   help="iterations profiled under ncu per case (counters are averaged per kernel)")
    p.add_argument("--quiet", action="store_true", help="no per-case progress lines")
    g = p.add_argument_group("re-parsing kept or foreign profiles (nothing is run)")
    g.add_argument("--from-prof", action="append", default=None, metavar="PATH",
                   help="a PROF_* / *_ascend_pt dir, chrome trace (.json/.json.gz), ncu --csv output (raw or details "
                        "page) or --keep-prof dir; repeatable")
    g.add_argument("--l2-flush", choices=("exclude", "keep"), default="exclude",
                   help="fill/zero/memset/cast/sum kernels over buffers >= the L2 size inside the window: exclude "
                        "them from the operator's time (default) or keep them")
    g.add_argument("--l2-mib", type=float, default=None,
                   help="L2 size in MiB for the flush rule (default: from the profile or the device facts)")
    return p


def print_table(report):
    """The collector's terminal table: one row per measured case (cases never measured - skipped by the
    selection, e.g. bf16 cases on the CPU - are counted in one line, not listed); flag and error text is wrapped
    (``maxcolwidths``), never cut off."""
    from tabulate import tabulate
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
                     f"{c['kernel_time_ns'] / 1e3:.2f}" if c.get("kernel_time_ns") else "-",
                     f"{c['span_ns'] / 1e3:.2f}" if c.get("span_ns") else "-",
                     f"{c['actual_tflops']:.3g}" if c.get("actual_tflops") else "-",
                     f"{c['mfu_nom']:.2%}" if c.get("mfu_nom") is not None else "-",
                     f"{spread:.1%}" if spread is not None else "-", note])
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
    if skipped:
        why = sorted({str(c["skipped"]) for c in skipped})
        print(f"{len(skipped)} case(s) not measured (never selected): {', '.join(str(c['case']) for c in skipped)}"
              f" - {'; '.join(why[:3])}" + ("; ..." if len(why) > 3 else ""))
    peak = report.get("peak") or {}
    measured = len(report["per_case"]) - len(skipped)
    print(f"backend {report['backend']} ({report['device'].get('name', '?')}); peak for MFU@nom: "
          f"{peak.get('value_tflops')} TFLOP/s ({peak.get('source')}); valid cases {report['n_cases_valid']}/"
          f"{measured} measured")
    for f in report.get("flags") or []:
        print(f"note: {f}")


def main(argv=None):
    from mfulib.collect.driver import Options, collect
    args = build_parser().parse_args(argv)
    if args.from_prof:
        from mfulib.collect import from_prof as profiles
        opts = profiles.FromProfOptions(
            paths=args.from_prof, output_dir=args.output_dir, op_dir=args.op_dir,
            cases=profiles.parse_case_sequence(args.cases) if args.cases is not None else None, impl=args.impl,
            warmup=args.warmup, repeats=args.repeats, l2_flush=args.l2_flush, l2_mib=args.l2_mib, mfu=args.mfu,
            mfu_peak=args.mfu_peak, seed=args.seed)
        report = profiles.from_prof(opts, log=None if args.quiet else lambda m: print(m, file=sys.stderr))
        print_table(report)
        print(f"wrote {os.path.join(os.path.abspath(args.output_dir), 'performance.json')}")
        return 0
    cases, origins = cli.parse_case_list(args.cases) if args.cases is not None else None, {}
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
    report = collect(opts)
    print_table(report)
    out = os.path.join(os.path.abspath(args.output_dir), 'performance.json')
    print(f"wrote {out}")
    if not report["n_cases_valid"]:
        print(f"FAILED: no selected case has a kernel time (errors in {out})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    cli.run_main(main)
