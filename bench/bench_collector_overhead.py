#!/usr/bin/env python3
"""The collector's own overhead: wall time of SKILL.md step 4's collection (top-3 cases x (warmup 5 + repeats 5),
--impl asc) of one bundled operator (default: the MHA block), compilation excluded. Target <= 30 s on the H200
(the same collection under msprof on an NPU was quoted at about 4 minutes; not measured here).

Method: prepare the operator's work directory, run the collector CLI once to fill Triton's kernel cache (the
"cold" run, compilation included), then run the exact same command again and time it ("warm" run: the parent's
start-up, three child processes, profiling, parsing, writing). Compilation and autotuning happen in each child's
priming call, which the child times (``wall_s.prime``); the headline figure is the warm run's wall time minus those
priming calls, and the per-phase sums (imports, device set-up, case build, priming, iterations, trace export, parse)
are listed beside it. Writes JSON to --out and a Markdown table to <out>.md.

  python3 bench/bench_collector_overhead.py --out $OUT/collector_overhead.json
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTOR = os.path.join(ROOT, "scripts", "ops_profiling", "msprof_perf_summary.py")
TARGET_S = 30.0


def run(cmd, cwd):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return wall, r


def phase_sums(report):
    """Sum over measured cases of each child phase (s), and the parent-side parse time."""
    sums = {}
    for c in report["per_case"]:
        for impl in (c.get("impls") or {}).values():
            for k, v in (impl.get("wall_s") or {}).items():
                if isinstance(v, (int, float)):
                    sums[k] = sums.get(k, 0.0) + v
    return sums


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="result JSON path (a Markdown table is written to <out>.md)")
    p.add_argument("--op", default="5_MHABlock", help="bundled operator (prepare_op_dir.py --list-examples)")
    p.add_argument("--backend", default="auto", help="collector --backend")
    p.add_argument("--work", default=None, help="work directory (default: beside --out)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    out = os.path.abspath(args.out)
    work = os.path.abspath(args.work or os.path.join(os.path.dirname(out), "overhead_work", args.op))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    run([sys.executable, os.path.join(ROOT, "scripts", "prepare_op_dir.py"), "--example", args.op, "--dst", work,
         "--force"], ROOT)
    cmd = [sys.executable, COLLECTOR, "--quick", "--mfu", "--impl", "asc", "--output-dir", ".", "--warmup",
           str(args.warmup), "--repeats", str(args.repeats), "--keep-prof", ".", "--backend", args.backend]
    cold_s, _ = run(cmd, work)
    warm_s, r = run(cmd, work)
    with open(os.path.join(work, "performance.json")) as f:
        rep = json.load(f)
    sums = phase_sums(rep)
    prime = sums.get("prime", 0.0)
    overhead = warm_s - prime
    result = {
        "op": args.op, "backend": rep["backend"], "device": rep["device"].get("name"), "command": " ".join(cmd),
        "cases": [c["case"] for c in rep["per_case"] if not c.get("skipped")], "warmup": rep["warmup"],
        "repeats": rep["repeats"], "cold_wall_s": cold_s, "warm_wall_s": warm_s, "prime_s_sum": prime,
        "overhead_s_compilation_excluded": overhead, "phase_s_sums": sums, "target_s": TARGET_S,
        "meets_target": overhead <= TARGET_S,
        "kernel_time_us": {c["case"]: c.get("asc_us") for c in rep["per_case"] if not c.get("skipped")},
        "collector_stderr_tail": r.stderr[-1500:],
    }
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    lines = [f"# Collector overhead: {args.op} on {result['device']} ({result['backend']})", "",
             f"command (run twice, timed the second time): `{result['command']}`", "",
             "| quantity | seconds |", "|---|---|",
             f"| cold run (Triton compilation included) | {cold_s:.2f} |",
             f"| warm run, wall | {warm_s:.2f} |",
             f"| priming calls (compilation/cache load), sum | {prime:.2f} |",
             f"| **overhead, compilation excluded** | **{overhead:.2f}** (target <= {TARGET_S:.0f}: "
             f"{'met' if result['meets_target'] else 'NOT met'}) |"]
    lines += [f"| child phase `{k}`, sum over cases | {v:.2f} |" for k, v in sorted(sums.items())]
    lines += ["", f"cases {result['cases']}, warmup {result['warmup']}, repeats {result['repeats']}; kernel time per "
                  f"case (us): {result['kernel_time_us']}"]
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
