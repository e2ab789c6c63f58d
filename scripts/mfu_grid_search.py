#!/usr/bin/env python3
"""Search the (case, scale) point of maximum MFU of an operator work directory (step 2 of triton-mfu-analyzer,
after max_shape_probe.py) -> grid_search.json.

  python3 $SKILL_DIR/scripts/mfu_grid_search.py --dir <work dir> [--backend auto] [--device 0]

Pool: the top --top-n (8) original cases by FLOPs (flops.py when present, else the reference's tracer via
--flops-tool --tracer-only) at scale 1, plus the scaled variants probe.json appended for them; the original top 3
are always in it. Stage 1 ranks the pool by wall clock per call, without the profiler, in one persistent worker (a
compiling prime call, --warmup 1, then up to --repeats 10 iterations of back-to-back calls with one device
synchronize, ~10 ms each so the launch latency is amortised, stopped once at least 2 sum to --stage1-budget-s 0.1 s;
median per call; wall_s per case); stage 2 measures the top --stage2-k (3), and the cases ranked within --stage2-tie
(5%) of stage 1's leader up to --stage2-max (2 x k) in all, and up to --stage2-host (2) host-bound cases (calls at
most 2 x the lightest call's wall time, where that call is host time: the host's launch rate, not the kernel, sets
their wall clock, so stage 1 cannot rank them; npu and cuda only), with the collector (msprof_perf_summary.py --cases;
precise kernel time; PMU: cuda --pmu from --stage2-pmu, default auto). The result is the maximum MFU (MFU@ach with
peak.json, else MFU@nom) of the precise kernel time; an operator without matrix work gets MBU (bytes moved = inputs +
outputs). Numerator = min(traced, executed) where hardware counts exist (CUDA tensor instructions on mma.sync
devices; none on NPU), else the tracer's, with num_src and why.
Re-timing: the top --retime-top (3) of stage 2 are timed again in --retime-runs (2) separate collector runs, each
a fresh process measuring them in a rotated order, without the PMU pass (--pmu none: only the kernel time is
measured again); the limit is the highest median over the runs (stage 2's counts as one), printed with its min..max
and spread ((max - min) / median); a re-timed case whose median differs from the leader's by less than the sum of
their ranges ties with it (every such case is printed). 0 for either turns it off. A probe.json its --budget-s cut
makes the search incomplete (said so).
grid_search.json records the pool, both stages, the cost of each in seconds and chosen_cases, which the collector
then measures (msprof_perf_summary.py --search-json grid_search.json; make collect does it after make search).
Make's state: a run writing <work dir>/grid_search.json (the default) after make's own search counts as make's step
only with make's settings and inputs (its stamp renewed: make re-collects); otherwise, or when stopped, the stamp
is removed and make status shows the search not done - the next make redoes the search before it collects (in a
work directory make never searched, make search or SEARCH=1 does). A run writing another file (-o) leaves make's
state alone.
Scratch files (the stage-2, re-timing and counting collector runs, the tracer's counts) go to <work dir>/search/
for <work dir>/grid_search.json, else beside the -o file, to <its path without .json>.search/ (-o /tmp/a.json:
/tmp/a.search/), never into make's <work dir>/search/ (stage 1's temporary per-case folders, unique and removed
when it ends, are made there either way). Exit status: 0; 1 when stage 2 measured no case; 2 on bad input; 130
interrupted by Ctrl-C or SIGTERM (grid_search.json then records complete=false and ``interrupted``: why and
after which stages; make status shows it).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mfulib.core import cli  # noqa: E402
from mfulib.core.fmt import pct  # noqa: E402


def build_parser():
    from mfulib.search.grid import CHECK_FLOPS, SearchOptions
    from mfulib.search.stage1 import STAGE2_HOST, STAGE2_TIE
    p = cli.parser(__doc__, prog="mfu_grid_search.py")
    p.add_argument("--dir", required=True, help="operator work directory (prepared; probe.json from the probe)")
    p.add_argument("--backend", default="auto", metavar="{auto,npu,cuda,cpu}",
                   help="auto = npu if torch_npu + CANN are set up, else cuda, else cpu; a backend registered "
                        "through MFU_BACKEND_PLUGINS is accepted too")
    p.add_argument("--device", type=int, default=0, metavar="N", help="device index (default 0)")
    p.add_argument("--seed", type=int, default=0, help="seed for inputs and weights (the tracer gets the same; default 0)")
    p.add_argument("--top-n", type=int, default=8, help="original cases in the pool, most FLOPs first (>= 3)")
    p.add_argument("--stage2-k", type=int, default=3, help="stage-1 leaders measured by the collector")
    p.add_argument("--stage2-tie", type=float, default=STAGE2_TIE,
                   help="also measure in stage 2 the cases ranked within this fraction of stage 1's leader (default "
                        f"{STAGE2_TIE:g}: a wall clock per call cannot order cases that close; 0: the top --stage2-k "
                        "only)")
    p.add_argument("--stage2-max", type=int, default=None,
                   help="stage-2 cases at most, ties included (default 2 x --stage2-k)")
    p.add_argument("--stage2-host", type=int, default=STAGE2_HOST,
                   help="also measure in stage 2 this many of the best host-bound cases, beyond --stage2-max "
                        f"(default {STAGE2_HOST}; 0: none; npu and cuda only): near the host's per-call floor a wall "
                        "clock measures the launch rate, not the kernel")
    p.add_argument("--warmup", type=int, default=None,
                   help="stage-1 warmup iterations after the compiling prime call (default 1)")
    p.add_argument("--repeats", type=int, default=None,
                   help="stage-1 timed iterations at most (default 10; cpu 2); --stage1-budget-s stops them earlier")
    p.add_argument("--stage1-retime", action="store_true",
                   help="time every pool case in stage 1, also those the probe already timed (gate 4 of a passed "
                        "candidate, the scale-1 baseline of a source case: the same wall clock per call, reused "
                        "by default when backend, seed and operator files are the probe's)")
    p.add_argument("--stage1-budget-s", type=float, default=None,
                   help="stage-1 timed iterations stop once at least 2 of them sum to this many seconds (default "
                        "0.1; cpu: off): ranking needs a few iterations, not a precise median")
    p.add_argument("--stage2-warmup", type=int, default=None, help="collector --warmup (its default otherwise)")
    p.add_argument("--stage2-repeats", type=int, default=None, help="collector --repeats (its default otherwise)")
    p.add_argument("--stage2-pmu", choices=("auto", "ncu", "none"), default="auto",
                   help="collector --pmu on cuda (tensor instruction counts for the executed-FLOPs numerator): auto "
                        "= Nsight Compute when found and permitted; ncu = required; none = no counters (numerator "
                        "from the tracer). A --collect-arg=--pmu ... wins")
    p.add_argument("--counts-on", choices=("leaders", "all"), default="leaders",
                   help="where the counters run on cuda: leaders (default) = stage 2 and the re-timing time without "
                        "them, then the leaders are counted one run each until no uncounted case can beat the "
                        "counted limit (a count only lowers the figure); all = stage 2 counts every case")
    p.add_argument("--retime-top", type=int, default=SearchOptions.retime_top, metavar="K",
                   help=f"stage-2 leaders timed again across collector runs (default {SearchOptions.retime_top}; "
                        "0: no re-timing)")
    p.add_argument("--retime-runs", type=int, default=SearchOptions.retime_runs, metavar="R",
                   help=f"separate, interleaved collector runs re-timing them, PMU off (default "
                        f"{SearchOptions.retime_runs}; 0: no re-timing); the limit is the median over these and "
                        "stage 2's own run")
    p.add_argument("--case-timeout-s", type=float, default=600.0, help="wall-clock limit of one case")
    p.add_argument("--flops-tool", default=CHECK_FLOPS, help="FLOPs tool run with --tracer-only (check_flops.py)")
    p.add_argument("--probe-json", default=None, help="probe result (default: <dir>/probe.json; absent: scale 1)")
    p.add_argument("--peak-json", default=None, help="measured peaks for MFU@ach (default: <dir>/peak.json if any)")
    p.add_argument("-o", "--output", default=None,
                   help="result file (default: <dir>/grid_search.json, make's search step); another file leaves "
                        "make's state alone and gets its scratch beside it, in <path without .json>.search/; an existing "
                        "file that is not a grid search result (another step's report) is refused, never overwritten")
    p.add_argument("--collect-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for the stage-2 collector, repeatable (e.g. --collect-arg=--flush-cache-mib "
                        "--collect-arg=256)")
    p.add_argument("--unverified-ok", action="store_true", help="also time cases verify did not pass (marked)")
    p.add_argument("--quiet", action="store_true", help="no progress bars or log lines")
    return p


def print_summary(doc):
    from tabulate import tabulate
    pool = {p["case"]: p for p in doc["pool"]}
    rows = []
    for r in doc["stage1"]:
        p = pool[r["case"]]
        rows.append([r["rank"] or "-", r["case"], p["source_case"], _factors(p), r["status"],
                     f"{r['wall_median_ns'] / 1e3:.2f}" if r["wall_median_ns"] else "-",
                     f"{r['rank_value']:.4g}" if r["rank_value"] is not None else "-", _sec(r.get("wall_s")),
                     (r["error"] or "")[:50]])
    print(tabulate(rows, headers=["rank", "case", "from", "factors", "status", "wall us / call", "stage-1 key",
                                  "cost s", "error"]))
    print("stage-1 key: wall TFLOP/s per call over the dtype's peak (bytes moved per second for MBU; TFLOP/s itself "
          "without a peak) - a ranking, not an MFU")
    fig = "MFU" if doc["metric"] == "mfu" else "MBU"
    rank1 = {r["case"]: r["rank"] for r in doc["stage1"]}
    rows = []
    for r in doc["stage2"]:
        p = pool[r["case"]]
        rows.append([r["case"], rank1.get(r["case"]) or "-", p["source_case"], _factors(p), r["status"],
                     f"{r['kernel_time_ns'] / 1e3:.2f}" if r["kernel_time_ns"] else "-", pct(r.get("mfu_nom"), 2),
                     pct(r.get("mfu_ach"), 2), pct(r.get("mbu"), 2), r.get("num_src") or "-", _sec(r.get("wall_s")),
                     (r.get("error") or "")[:40]])
    print(tabulate(rows, headers=["case", "stage-1 rank", "from", "factors", "status", "kernel us", "MFU@nom",
                                  "MFU@ach", "MBU", "num_src", "cost s", "error"]))
    best, cost = doc["best"], doc["cost_s"]
    if doc.get("retime"):
        print_retime(doc, pool)
    if best:
        value = best["mfu"] if doc["metric"] == "mfu" else best["mbu"]
        s2 = next(r for r in doc["stage2"] if r["case"] == best["case"])
        kind = f" ({best['mfu_kind']})" if best.get("mfu_kind") else ""
        shown = pct(value, 2) + kind if value is not None else (  # no peak (cpu): the throughput itself
            f"- (no peak; {s2['actual_tflops']:.4g} TFLOP/s)" if s2.get("actual_tflops") is not None else
            f"- (no bandwidth; {s2['achieved_gbps']:.4g} GB/s)" if s2.get("achieved_gbps") is not None else "-")
        rt = best.get("retimed")
        if rt:
            f, unit = rt["figure"], _unit(rt["figure"])
            over = (f"median of {rt['runs']} run(s), {_figure(rt['min'], f)}..{_figure(rt['max'], f)}{unit}, "
                    f"spread {pct(rt['spread'], 1)}")
            shown = f"{_figure(rt['median'], f)}{kind}, {over}," if not unit else \
                f"- (no {'peak' if doc['metric'] == 'mfu' else 'bandwidth'}; {_figure(rt['median'], f)}{unit}, {over})"
        cut = " (search incomplete: the probe was cut by its budget - see the note)" if doc.get("probe_cut") else ""
        print(f"limit {fig}{cut}: {shown} at case "
              f"{best['case']} (case {best['source_case']} {_factors(pool[best['case']])}); numerator "
              f"{best['num_src']}: {best['num_src_why']}")
        tie = (rt or {}).get("tie")
        if tie:
            by = {r["case"]: r["retimed"] for r in doc["stage2"] if r.get("retimed")}
            named = [f"case {c} ({_figure(by[c]['median'], f)}{unit})" for c in tie]
            print(f"re-timing tie: {', '.join(named[:-1])} and {named[-1]}: the leader's median and each other's "
                  "differ by less than the sum of their ranges over the runs - any of them is the limit")
    print(f"cost: flops {cost['flops']:.1f} s, verify {cost['verify']:.1f} s, stage 1 {cost['stage1']:.1f} s, "
          f"stage 2 {cost['stage2']:.1f} s, re-timing {cost.get('retime') or 0.0:.1f} s, counting "
          f"{cost.get('counts') or 0.0:.1f} s; chosen cases "
          f"{doc['chosen_cases']}")
    for n in doc.get("notes") or []:
        print(f"note: {n}")


def print_retime(doc, pool):
    """The re-timed leaders: per run value, median, min..max and spread, best median first."""
    from tabulate import tabulate
    rt = doc["retime"]
    f = rt["figure"]
    rows = [[r["case"], pool[r["case"]]["source_case"], _factors(pool[r["case"]]), r["retimed"]["runs"],
             " ".join(_figure(v, f) for v in r["retimed"]["values"]), _figure(r["retimed"]["median"], f),
             f"{_figure(r['retimed']['min'], f)}..{_figure(r['retimed']['max'], f)}",
             pct(r["retimed"]["spread"], 1)] for r in doc["stage2"] if r.get("retimed")]
    unit = _unit(f) or " " + f.upper().replace("_", "@")
    print(f"re-timed in {rt['runs']} more collector run(s), interleaved, PMU off (run 0 = stage 2):")
    print(tabulate(rows, headers=["case", "from", "factors", "runs", f"values ({unit.strip()})", "median", "min..max",
                                  "spread"]))
    for run in rt["runs_done"]:
        if run["error"]:
            print(f"re-timing run {run['run']} failed: {run['error'][:200]}")


def _figure(v, figure):
    """A value of the figure ``figure``: a percentage (mfu_ach, mfu_nom, mbu), else a number in :func:`_unit`."""
    if v is None:
        return "-"
    return pct(v, 2) if not _unit(figure) else f"{v:.4g}"


def _unit(figure):
    """' TFLOP/s' (actual_tflops), ' GB/s' (achieved_gbps), '' for the utilisations."""
    return {"actual_tflops": " TFLOP/s", "achieved_gbps": " GB/s"}.get(figure, "")


def _factors(p):
    from mfulib.core.symbols import factors_label
    return factors_label(p["factors"])


def _sec(v):
    return "-" if v is None else f"{v:.1f}"


def main(argv=None):
    args = build_parser().parse_args(argv)
    cli.sigterm_as_interrupt()  # kill / timeout(1): recorded as interrupted, like Ctrl-C
    from mfulib.search.grid import SearchOptions, run_search
    opts = SearchOptions(op_dir=args.dir, backend=args.backend, device_id=args.device, seed=args.seed,
                         top_n=args.top_n, stage2_k=args.stage2_k, stage2_tie=args.stage2_tie,
                         stage2_max=args.stage2_max, stage2_host=args.stage2_host, warmup=args.warmup,
                         repeats=args.repeats,
                         stage2_warmup=args.stage2_warmup, stage2_repeats=args.stage2_repeats,
                         stage2_pmu=args.stage2_pmu, counts_on=args.counts_on, stage1_budget_s=args.stage1_budget_s,
                         stage1_retime=args.stage1_retime,
                         case_timeout_s=args.case_timeout_s, flops_tool=args.flops_tool, probe_json=args.probe_json,
                         peak_json=args.peak_json, output=args.output, collect_args=args.collect_arg,
                         unverified_ok=args.unverified_ok, progress=not args.quiet,
                         retime_top=args.retime_top, retime_runs=args.retime_runs)
    doc = run_search(opts, log=(lambda m: None) if args.quiet else None)
    print_summary(doc)
    out = args.output or os.path.join(os.path.abspath(args.dir), "grid_search.json")
    print(f"wrote {out}")
    if not doc["chosen_cases"]:
        print("FAILED: stage 2 measured no case (see the stage2 errors above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    cli.run_main(main)
