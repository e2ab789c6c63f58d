#!/usr/bin/env python3
"""Concurrent gate-2 traces with torch's default CPU threads against the per-trace cap the probe now gives them.

When the probe prefetches (``--trace-jobs`` k > 0, the default ``min(4, cpus // 4)``: 4 on the 16-core H200 host),
k gate-2 traces (``check_flops.py --tracer-only``, forked from the trace zygote) run ahead beside the current
candidate's trace or its gate-3/4 child. Each trace is Python-bound dispatch on meta or small tensors, yet each
process's OpenMP pool has a thread per core, so k + 1 such processes oversubscribe the host.
``mfulib.search.probe_gates.trace_threads`` caps each trace at ``cpus // (k + 1)`` threads; this bench measures
what that buys.

It prepares a work dir for the bundled ``zoo/5_MHABlock`` (``scripts/prepare_op_dir.py --example``), writes one
causal case of ``--shape`` / ``--heads`` (default [4, 65536, 2048], 16 heads: the H200 probe candidate
``c8:batchx4,seqx4``, 1024 chunk masks) and runs ``--rounds`` rounds per mode, alternating (default, capped,
default, ...) after one untimed warm-up round. A round starts ``--jobs`` traces at once, each on its own staged copy
(``mfulib.search.probe.stage_candidate``), through the probe's own ``TraceJob`` / ``gate2``, and waits for all:

* ``default``: ``threads=None`` (torch's default, a thread per core);
* ``capped``: ``threads=trace_threads(cpus, jobs - 1)`` (the probe's rule for ``jobs - 1`` traces ahead; the
  threads shown are those asked for - tests/test_trace_zygote.py checks that a forked child gets them).

Every trace must pass gate 2 with the same traced FLOPs, equal to the hand count of the reference
(``bench_tracer_masks.hand_count``), else exit 1. Reported: median round wall s per mode (the slowest trace of the
round: what a probe waiting on them all pays), the median per-trace wall, ``speedup`` = default / capped round
medians, the threads each mode gave, and the host's load average. Writes JSON to ``--out`` (default
``$OUT/trace_threads.json``, else ./trace_threads.json). Exit status 0, 1 (a trace failed, was not forked from
the zygote or a count differs), 2 (bad arguments).

  python3 bench/bench_trace_threads.py --jobs 2 --rounds 3          # this host's cores, two traces at once
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_trace_zygote as btz  # noqa: E402  (prepare, the host, the load average, the commit)
from bench_tracer_masks import hand_count  # noqa: E402
from freshness import source_stamp  # noqa: E402

sys.path.insert(0, btz.SCRIPTS)
OP = "zoo/5_MHABlock"


def mha_case(od, shape, heads) -> dict:
    """Case 0 of the prepared 5_MHABlock work dir with ``x`` of ``shape``, ``head_num`` ``heads`` and causal on
    (the other fields as the case file has them)."""
    case = json.loads(json.dumps(od.read_cases()[0]))
    for inp in case["inputs"]:
        if inp["name"] == "x":
            inp["shape"], inp["dtype"] = list(shape), "float16"
        elif inp["name"] == "head_num":
            inp["value"] = int(heads)
        elif inp["name"] == "causal":
            inp["value"] = True
    return case


def one_round(od, case, n, threads, seed, timeout_s, input_bytes, tmp_root) -> dict:
    """``n`` gate-2 traces of ``case`` started at once with ``threads``: {wall_s (start to the last verdict),
    traces [{wall_s, ok, detail, flops, forked}]}."""
    from mfulib.run import trace_zygote
    from mfulib.search.probe import stage_candidate
    from mfulib.search.probe_gates import TraceJob, gate2
    staged = [stage_candidate(od, case, tempfile.mkdtemp(prefix="cand_", dir=tmp_root)) for _ in range(n)]
    t0 = time.perf_counter()
    jobs = [TraceJob(btz.CHECK_FLOPS, s, seed, threads=threads) for s in staged]
    out = []
    for s, job in zip(staged, jobs):
        g, flops = gate2(btz.CHECK_FLOPS, s, seed, timeout_s, False, input_bytes, [], job=job)
        out.append({"wall_s": g.get("wall_s"), "ok": bool(g.get("ok")), "detail": g.get("detail"), "flops": flops,
                    "forked": isinstance(job.proc, trace_zygote.ZygoteJob)})
    return {"wall_s": round(time.perf_counter() - t0, 3), "traces": out}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="4,65536,2048", help="x's shape b,s,hidden (default 4,65536,2048)")
    p.add_argument("--heads", type=int, default=16, help="head_num (default 16)")
    p.add_argument("--jobs", type=int, default=2, help="traces at once per round, >= 2 (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per mode (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=600.0, help="limit per trace (default 600 s)")
    p.add_argument("--out", default=None, help="result JSON (default $OUT/trace_threads.json, else "
                                               "./trace_threads.json)")
    args = p.parse_args(argv)
    try:
        shape = [int(x) for x in args.shape.split(",")]
    except ValueError:
        p.error(f"--shape {args.shape!r}: three integers b,s,hidden (e.g. 4,65536,2048)")
    if len(shape) != 3 or min(shape) < 1 or args.heads < 1 or shape[2] % args.heads:
        p.error(f"--shape {args.shape} / --heads {args.heads}: b,s,hidden >= 1 with hidden a multiple of heads >= 1")
    if args.jobs < 2 or args.rounds < 1:
        p.error("--jobs >= 2 (one trace at a time gets torch's default threads in the probe too, so both modes "
                "would be the same) and --rounds >= 1")
    if not sys.platform.startswith("linux"):
        p.error("the trace zygote forks: Linux only")
    out = os.path.abspath(args.out or os.path.join(os.environ.get("OUT") or ".", "trace_threads.json"))
    from mfulib import backends
    from mfulib.core.cases import describe_case
    from mfulib.core.jsonio import provenance, write_json_atomic
    from mfulib.core.opdir import OpDir
    from mfulib.run import trace_zygote
    from mfulib.search.probe_gates import trace_threads
    cpus = os.cpu_count()
    threads = {"default": None, "capped": trace_threads(cpus, args.jobs - 1)}
    tmp = tempfile.TemporaryDirectory(prefix="mfu_threads_bench_")
    rounds = {"default": [], "capped": []}
    load = []
    try:
        backends.prepare_process("cpu")  # the traces run on the host whatever the device (TRITON_INTERPRET on cpu)
        od = OpDir(btz.prepare(OP, os.path.join(tmp.name, "work")))
        case = mha_case(od, shape, args.heads)
        input_bytes = describe_case(case, 0).input_bytes
        if trace_zygote.shared() is None:
            raise RuntimeError(f"the trace zygote did not start: {trace_zygote._SHARED.get('failed')}")
        run = lambda mode: one_round(od, case, args.jobs, threads[mode], args.seed, args.timeout_s,  # noqa: E731
                                     input_bytes, tmp.name)
        print(f"{OP} x {shape}, {args.heads} heads: {args.jobs} traces at once, threads {threads} on {cpus} cpus",
              file=sys.stderr, flush=True)
        warm = run("capped")
        load.append(btz._load())
        for i in range(2 * args.rounds):
            mode = ("default", "capped")[i % 2]
            rounds[mode].append(run(mode))
            print(f"  round {i // 2 + 1} {mode}: {rounds[mode][-1]['wall_s']:.2f} s", file=sys.stderr, flush=True)
        load.append(btz._load())
    except RuntimeError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        trace_zygote.close_shared()
        tmp.cleanup()
    b, s, hidden = shape
    want = hand_count(b, s, hidden, args.heads)
    every = warm["traces"] + [t for rs in rounds.values() for r in rs for t in r["traces"]]
    flops = sorted({t["flops"] for t in every}, key=lambda v: (v is None, v or 0))
    med = {m: round(statistics.median(r["wall_s"] for r in rs), 3) for m, rs in rounds.items()}
    per_trace = {m: round(statistics.median(t["wall_s"] for r in rs for t in r["traces"]), 3)
                 for m, rs in rounds.items()}
    summary = {"round_median_s": med, "trace_median_s": per_trace, "threads": threads,
               "speedup": round(med["default"] / med["capped"], 2) if med["capped"] else None,
               "all_ok": all(t["ok"] and t["forked"] for t in every), "flops": flops, "hand_flops": want,
               "flops_ok": flops == [want]}
    res = dict(provenance("bench_trace_threads", 1, device={"backend": "cpu"}), bench="trace_threads",
               git_commit=btz._commit(), source=source_stamp(), host_detail=btz._host(), op=OP, shape=shape,
               heads=args.heads, jobs=args.jobs, rounds_per_mode=args.rounds, load_avg=load, warmup=warm,
               rounds=rounds, summary=summary, method=__doc__.split("\n\n")[1])
    os.makedirs(os.path.dirname(out), exist_ok=True)
    write_json_atomic(out, res)
    from tabulate import tabulate
    print(tabulate([[m, threads[m] or "torch default", med[m], per_trace[m],
                     " ".join(f"{r['wall_s']:.2f}" for r in rounds[m])] for m in ("default", "capped")],
                   headers=["mode", "threads per trace", "round median s", "trace median s", "rounds s"],
                   tablefmt="github"))
    print(f"\nspeed-up (default / capped, round medians): {summary['speedup']}x; {args.jobs} traces at once on "
          f"{cpus} cpus; traced FLOPs {flops} vs hand count {want}: {'equal' if summary['flops_ok'] else 'DIFFER'}")
    print(f"wrote {out}", file=sys.stderr)
    if not summary["all_ok"]:
        print("FAILED: a trace did not pass gate 2 or was not forked from the zygote", file=sys.stderr)
        return 1
    if not summary["flops_ok"]:
        print(f"FAILED: traced FLOPs {flops} differ from the hand count {want}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
