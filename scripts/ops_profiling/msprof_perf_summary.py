#!/usr/bin/env python3
"""Collect kernel times of an operator work directory on NPU (msprof), CUDA (torch.profiler) or CPU (Triton
interpreter) -> performance.json (step 4 of triton-mfu-analyzer; the ops-profiling collector extended with --mfu).

Run from the work directory, as SKILL.md step 4 does:
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
only kernel times are written (FLOPs null). Iterations come from the profile's own structure first (this tool's
ranges, ProfilerStep#N, record_function ranges - --range NAME picks one), the repeating kernel sequence only
without any; harness flushes (--l2-flush), a cut first iteration and autotuning are found in the data, left out and
listed in the flags and performance.json (see mfulib/collect/from_prof/).
ncu CSVs (--page raw, or --page details: gpu__time_duration.sum, else the SpeedOfLight section's Duration) give ncu
replay times - launches serialised, clocks and caches as ncu set them - marked "ncu_replay" in performance.json and
[ncu] in the tables. Nsight Systems reports are not read (.nsys-rep, nor its `nsys export` SQLite / JSON forms):
record the loop with torch.profiler (a chrome trace) or ncu instead.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mfulib.collect import console  # noqa: E402
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
    p.add_argument("--cases", default=None,
                   help="explicit 0-based case ids, e.g. 3,7,9 or 0-4, measured in the order given")
    p.add_argument("--search-json", default=None, metavar="GRID_SEARCH_JSON",
                   help="measure the cases a search chose (grid_search.json chosen_cases, best first) instead of "
                        "the top-k; each is marked with its origin (per_case[].search_origin). Without it (and "
                        "without --cases) <op-dir>/grid_search.json is used when it is complete and its recorded "
                        "inputs match the work directory, as make collect does after a search")
    p.add_argument("--no-search-json", action="store_true",
                   help="do not use <op-dir>/grid_search.json: measure the top-k (or --cases) even after a search")
    p.add_argument("--max-cases", type=int, default=None,
                   help="take the top N cases instead of --mfu-top-k (N >= number of cases: all)")
    p.add_argument("--mfu-peak", type=float, default=None, metavar="TFLOPS",
                   help="nominal peak in TFLOP/s used for MFU@nom instead of the device's own figure")
    p.add_argument("--seed", type=int, default=0, help="seed for inputs and weights")
    p.add_argument("--retry", type=int, default=2, help="retries of an incomplete profile (lost/zero records)")
    p.add_argument("--device", type=int, default=None, metavar="N",
                   help="device index (default: ASCEND_DEVICE_ID on npu, else 0); with --from-prof: the device read "
                        "from a multi-device profile (default: the one with the implementation's kernels)")
    p.add_argument("--backend", default="auto", metavar="{auto,npu,cuda,cpu}",
                   help="auto = npu if torch_npu + CANN are set up, else cuda, else cpu; a backend registered "
                        "through MFU_BACKEND_PLUGINS is accepted too")
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
                        "page: ncu replay times, marked) or --keep-prof dir; repeatable (Nsight Systems exports are "
                        "not read)")
    g.add_argument("--all-runs", action="store_true",
                   help="a --keep-prof dir: read every current case<N>_<impl> folder, whichever collection kept it "
                        "(profiles of different runs MIXED, as before the runs.json index); default: the latest "
                        "run's profiles only, the others listed as ignored")
    g.add_argument("--range", default=None, metavar="NAME",
                   help="the record_function (or ProfilerStep) range whose instances are the iterations, where a "
                        "foreign trace has several or nested ones (default: the one covering the most kernels)")
    g.add_argument("--l2-flush", choices=("exclude", "keep"), default="exclude",
                   help="harness cache flushes in a foreign profile (do_bench's zero_ of its cache buffer, "
                        "buffer.float(); buffer.sum()) at the head or tail of every iteration over a buffer >= the "
                        "L2 size: exclude them from the operator's time (default) or keep them")
    g.add_argument("--l2-mib", type=float, default=None,
                   help="L2 size in MiB for the flush rule (default: from the profile or the device facts)")
    return p


def main(argv=None):
    parser = build_parser()
    return console.run(parser.parse_args(argv), default=parser.get_default)


if __name__ == "__main__":
    cli.run_main(main)
