#!/usr/bin/env python3
"""Per-kernel times of the collector (torch.profiler / CUPTI) against Nsight Compute's gpu__time_duration, on the
bundled operators (CUDA only). Done-criterion: within 3% for every kernel of 50 us or more.

Per operator: prepare its work directory, run the collector (``--backend cuda --impl asc``, the largest case by
FLOPs, warmup 2 / repeats 3 by default: every launch under ncu costs a replay), then run the *same* child (same case, seed, iterations; no profiler, no markers) under::

    ncu --clock-control none --cache-control none --print-units base --csv --metrics gpu__time_duration.sum \\
        python3 scripts/mfulib/backends/runner.py --spec <spec.json>

(``--clock-control none``: clocks left as the driver sets them, as under the profiler; ``--cache-control none``: no
cache flush between kernels, as in the collector's back-to-back iterations - pass ``--cache-control all`` to see
the cold-cache figure). The last ``iterations x launches-per-iteration`` ncu launches are aligned with the
collector's iteration sequence (kernel function names must agree position by position), and per position the
median over the measured iterations is compared. Writes a Markdown table to --out and the rows as JSON to
<out>.json.

  python3 bench/ncu_vs_profiler.py --out $OUT/ncu_vs_profiler.md
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
COLLECTOR = os.path.join(ROOT, "scripts", "ops_profiling", "msprof_perf_summary.py")


def align(ncu_recs, sequence, n_iters, repeats):
    """Per position of ``sequence``: the ncu durations (ns) of the last ``repeats`` iterations, or raise
    ValueError when the last ``n_iters * len(sequence)`` launches do not match the sequence by name."""
    from mfulib.profiles.ncu import duration_ns, short_kernel_name
    k = len(sequence)
    tail = ncu_recs[len(ncu_recs) - n_iters * k:] if len(ncu_recs) >= n_iters * k else None
    if tail is None:
        raise ValueError(f"ncu profiled {len(ncu_recs)} launches, fewer than {n_iters} x {k}")
    want = [short_kernel_name(s) for s in sequence]
    got = [short_kernel_name(r["kernel_name"]) for r in tail]
    if any(got[j] != want[j % k] for j in range(len(got))):
        raise ValueError(f"ncu launch names do not repeat the collector's sequence {want}: last ones {got[-k:]}")
    per_pos = [[] for _ in range(k)]
    for it in range(n_iters - repeats, n_iters):
        for p in range(k):
            per_pos[p].append(duration_ns(tail[it * k + p]))
    return per_pos


def run_ncu(ncu, spec, cache_control, timeout_s):
    """Run the collector's child for ``spec`` under ncu; returns the parsed launch records."""
    from mfulib.backends.cuda import CudaBackend
    from mfulib.backends.runner import run_child
    from mfulib.profiles.ncu import parse_ncu_csv

    class UnderNcu(CudaBackend):
        # one fresh child under ncu: the persistent worker would run the case in a process ncu never wrapped
        persistent_worker = False

        def command(self, child_cmd, attempt_dir, opts):
            return [ncu, "--clock-control", "none", "--cache-control", cache_control, "--print-units", "base",
                    "--csv", "--metrics", "gpu__time_duration.sum"] + list(child_cmd)

    tmp = tempfile.mkdtemp(prefix="ncu_run_")
    try:
        res = run_child(UnderNcu(), spec, tmp, timeout_s)
        with open(os.path.join(tmp, "child.log"), encoding="utf-8", errors="replace") as f:
            text = f.read()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if res.status != "ok":
        raise RuntimeError(f"child under ncu: {res.error}\n{text[-1500:]}")
    recs = parse_ncu_csv(text)
    if not recs:
        raise RuntimeError(f"no ncu CSV rows in the output:\n{text[-1500:]}")
    return recs


def main(argv=None):
    from mfulib.sources import examples
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="Markdown table path (rows also as <out>.json)")
    p.add_argument("--ops", default=None, help="comma-separated bundled operators (default: every layout-B one)")
    p.add_argument("--work", default=None, help="scratch folder for work dirs (default: beside --out)")
    p.add_argument("--max-cases", type=int, default=1, help="cases per operator (largest FLOPs first)")
    p.add_argument("--warmup", type=int, default=2, help="collector warmup (few: every launch under ncu is slow)")
    p.add_argument("--repeats", type=int, default=3, help="collector repeats; medians over these")
    p.add_argument("--min-us", type=float, default=50.0, help="kernels at least this long must agree")
    p.add_argument("--tolerance", type=float, default=0.03, help="allowed relative difference")
    p.add_argument("--cache-control", choices=("none", "all"), default="none", help="ncu --cache-control")
    p.add_argument("--ncu", default=shutil.which("ncu") or "ncu", help="ncu executable")
    p.add_argument("--timeout-s", type=float, default=300, help="limit of one ncu run")
    args = p.parse_args(argv)
    out = os.path.abspath(args.out)
    work_root = os.path.abspath(args.work or os.path.join(os.path.dirname(out), "ncu_work"))
    os.makedirs(work_root, exist_ok=True)
    names = [n for n, src in examples.list_examples() if "(layout B)" in src]
    if args.ops:
        wanted = args.ops.split(",")
        names = [n for n in names if n in wanted or n.split("/")[-1] in wanted]
    rows, notes = [], []
    for name in names:
        work = os.path.join(work_root, name.replace("/", "__"))
        prep = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "prepare_op_dir.py"), "--example", name,
                               "--dst", work, "--force"], capture_output=True, text=True)
        if prep.returncode != 0:
            notes.append(f"{name}: not prepared ({prep.stderr.strip()[-200:]})")
            continue
        col = subprocess.run([sys.executable, COLLECTOR, "--quick", "--impl", "asc", "--backend", "cuda",
                              "--output-dir", work, "--max-cases", str(args.max_cases), "--warmup", str(args.warmup),
                              "--repeats", str(args.repeats)], capture_output=True, text=True)
        if col.returncode != 0:
            notes.append(f"{name}: collector failed ({col.stderr.strip()[-300:]})")
            continue
        with open(os.path.join(work, "performance.json")) as f:
            rep = json.load(f)
        for c in rep["per_case"]:
            if c.get("skipped") or c.get("asc_error") or not c.get("iteration_launches"):
                notes.append(f"{name} case {c['case']}: {c.get('skipped') or c.get('asc_error') or 'no data'}")
                continue
            spec = {"op_dir": work, "case_id": c["case"], "impl": "asc", "seed": rep["seed"], "warmup": rep["warmup"],
                    "repeats": rep["repeats"], "backend": "cuda", "device": f"cuda:{rep['device_id']}",
                    "markers": False, "profile": False, "flush_cache_mib": 0}
            try:
                recs = run_ncu(args.ncu, spec, args.cache_control, args.timeout_s)
                per_pos = align(recs, c["sequence"], rep["warmup"] + rep["repeats"], rep["repeats"])
            except (RuntimeError, ValueError) as exc:
                notes.append(f"{name} case {c['case']}: {exc}")
                continue
            for pos, ncu_ns in zip(c["iteration_launches"], per_pos):
                coll = pos["median_ns"]
                ref = statistics.median(v for v in ncu_ns if v is not None) if any(ncu_ns) else None
                diff = (coll - ref) / ref if ref else None
                long_enough = coll >= args.min_us * 1e3
                rows.append({"op": name, "case": c["case"], "position": pos["index"], "kernel": pos["name"],
                             "collector_median_us": coll / 1e3, "ncu_median_us": ref / 1e3 if ref else None,
                             "diff": diff, "eligible": long_enough,
                             "within_tolerance": (abs(diff) <= args.tolerance) if diff is not None else None})
    elig = [r for r in rows if r["eligible"]]
    ok = [r for r in elig if r["within_tolerance"]]
    head = (f"# Collector (CUPTI via torch.profiler) vs Nsight Compute gpu__time_duration\n\n"
            f"ncu --clock-control none --cache-control {args.cache_control}; warmup {args.warmup}, repeats "
            f"{args.repeats}; medians over the measured iterations. Kernels >= {args.min_us:g} us within "
            f"{args.tolerance:.0%}: **{len(ok)}/{len(elig)}**\n\n"
            "| op | case | # | kernel | collector us | ncu us | diff | >= min | within |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    body = "".join(
        f"| {r['op']} | {r['case']} | {r['position']} | {r['kernel'][:48]} | {r['collector_median_us']:.2f} | "
        + (f"{r['ncu_median_us']:.2f} | {r['diff']:+.2%} | " if r["ncu_median_us"] else "- | - | ")
        + f"{'yes' if r['eligible'] else 'no'} | {'yes' if r['within_tolerance'] else 'NO'} |\n" for r in rows)
    tail = "".join(f"\nnote: {n}" for n in notes)
    print(head + body + tail, flush=True)  # before any file is written: the table survives a bad --out
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(head + body + tail + "\n")
    with open(out + ".json", "w") as f:
        json.dump({"rows": rows, "notes": notes, "eligible": len(elig), "within": len(ok),
                   "tolerance": args.tolerance, "min_us": args.min_us, "cache_control": args.cache_control}, f,
                  indent=2)
    return 0 if elig and len(ok) == len(elig) else 1


if __name__ == "__main__":
    sys.exit(main())
