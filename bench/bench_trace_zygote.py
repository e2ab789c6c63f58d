#!/usr/bin/env python3
"""The probe's gate-2 trace forked from the warm trace zygote against the same trace as a plain subprocess.

Gate 2 of the probe (``mfulib.search.probe_gates.gate2`` through ``mfulib.search.probe_gates.TraceJob``) runs ``check_flops.py
--tracer-only --cases 0`` on each staged candidate. ``mfulib.run.trace_zygote`` forks that run from one warm process
that imported torch and torch._dynamo once; ``MFU_TRACE_ZYGOTE=0`` turns it off, and each trace is then a fresh
``python3`` process. This bench prepares a work dir for a bundled operator (``scripts/prepare_op_dir.py --example``,
or takes ``--work``), stages one case the way the probe stages a candidate (``mfulib.search.probe.stage_candidate``: a
fresh directory per trace) and times ``--n`` gate-2 traces each way, with the probe's own functions:

* ``plain``: ``MFU_TRACE_ZYGOTE=0``; each run is the wall time of ``gate2`` (TraceJob start to verdict);
* ``zygote``: ``warmup_s`` = starting the zygote until it reports ready (``trace_zygote.shared()``: what the probe
  pays once per run, before its first trace), counted apart; then the ``--n`` runs forked from it, timed as above.

Before both, ``--prime`` untimed plain traces (default 1) fill the OS file cache, so the first timed run of either
side does not pay cold reads of torch's libraries. The plain runs come first, then the zygote's; both run on the
same staged case, seed and backend. Each run's gate must pass and its traced FLOPs (flops_check.json
``tracer.total_flops``) must be identical across every run of both sides, else the bench exits 1. A zygote run that
was not forked (the zygote did not start, so the probe would have fallen back to a plain subprocess) is an error.

Reported: median plain s, median zygote s, ``speedup`` = median plain / median zygote, the zygote's warm-up, and
what a probe of ``--n`` candidates pays each way (``probe_plain_s`` = n x median plain; ``probe_zygote_s`` =
warm-up + n x median zygote) with the break-even count of traces (warm-up / (median plain - median zygote)).
The host's load average is recorded before and after each side (the machine may be shared).

Writes JSON to ``--out`` (default ``$OUT/trace_zygote.json``, else ./trace_zygote.json) with the versions and the
host; prints the table. Exit status 0, 1 (a trace failed or the FLOPs differ), 2 (bad arguments or work dir).

  python3 bench/bench_trace_zygote.py --backend cpu --out /tmp/trace_zygote.json              # CPU
  python3 bench/bench_trace_zygote.py --backend cuda --out $OUT/trace_zygote.json             # GPU box
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
CHECK_FLOPS = os.path.join(SCRIPTS, "check_flops.py")
DEFAULT_OP = "zoo/5_MHABlock"
ZYGOTE_ENV = "MFU_TRACE_ZYGOTE"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from freshness import source_stamp  # noqa: E402  (the tree's content hashes, recorded with the result)


def _host() -> dict:
    """The host beyond provenance()'s name: platform, CPU count and the CPUs this process may use."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {"name": platform.node(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
            "cpus_usable": affinity, "machine": platform.machine()}


def _load() -> list:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _commit():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or None


def prepare(op: str, dst: str) -> str:
    """A work dir for the bundled example ``op`` at ``dst`` (scripts/prepare_op_dir.py --example)."""
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, "prepare_op_dir.py"), "--example", op, "--dst", dst],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"error: prepare_op_dir.py --example {op} failed (exit {r.returncode}): "
                         f"{(r.stderr or r.stdout)[-1500:]}\n(--list-examples names the bundled operators)")
    return dst


def one_trace(od, case: dict, seed: int, timeout_s: float, input_bytes: int, tmp_root: str, forked: bool) -> dict:
    """One gate-2 trace of ``case`` staged afresh under ``tmp_root``: {wall_s, gate_wall_s, ok, detail, flops,
    forked}. ``forked``: whether it must come from the zygote (True) or be a plain subprocess (False); a run of the
    other kind raises RuntimeError (the measurement would be of the wrong thing)."""
    from mfulib.run import trace_zygote
    from mfulib.search.probe import stage_candidate
    from mfulib.search.probe_gates import TraceJob, gate2
    staged = stage_candidate(od, case, tempfile.mkdtemp(prefix="cand_", dir=tmp_root))
    t0 = time.perf_counter()
    job = TraceJob(CHECK_FLOPS, staged, seed)
    g, flops = gate2(CHECK_FLOPS, staged, seed, timeout_s, False, input_bytes, [], job=job)
    wall = time.perf_counter() - t0
    was_forked = isinstance(job.proc, trace_zygote.ZygoteJob)
    if was_forked != forked:
        got = "forked from the zygote" if was_forked else "a plain subprocess"
        raise RuntimeError(f"a {'zygote' if forked else 'plain'} run was {got} (zygote: "
                           f"{trace_zygote._SHARED.get('failed') or 'running'})")
    return {"wall_s": round(wall, 3), "gate_wall_s": g.get("wall_s"), "ok": bool(g.get("ok")),
            "detail": g.get("detail"), "flops": flops, "forked": was_forked}


def _median(runs: list):
    vals = [r["wall_s"] for r in runs]
    return round(statistics.median(vals), 3) if vals else None


def summarize(plain: list, zygote: list, warmup_s: float, n: int, prime: list = ()) -> dict:
    """The derived figures from the runs (module docstring): medians, speed-up, probe totals, break-even, and the
    FLOPs check (every run ok, the priming ones included, and one FLOPs value over all of them)."""
    mp, mz = _median(plain), _median(zygote)
    every = list(prime) + plain + zygote
    flops = {r["flops"] for r in every}
    all_ok = all(r["ok"] for r in every) and bool(plain) and bool(zygote)
    gain = (mp - mz) if mp is not None and mz is not None else None
    return {"plain_median_s": mp, "zygote_median_s": mz,
            "speedup": round(mp / mz, 2) if mp and mz else None,
            "zygote_warmup_s": round(warmup_s, 3) if warmup_s is not None else None,
            "probe_plain_s": round(n * mp, 3) if mp is not None else None,
            "probe_zygote_s": round(warmup_s + n * mz, 3) if mz is not None and warmup_s is not None else None,
            "break_even_traces": round(warmup_s / gain, 2) if gain and gain > 0 and warmup_s is not None else None,
            "all_ok": all_ok, "flops_equal": all_ok and len(flops) == 1 and None not in flops,
            "flops": sorted(flops, key=lambda v: (v is None, v or 0))}


def table(res: dict) -> str:
    from tabulate import tabulate
    s = res["summary"]
    rows = [["plain (MFU_TRACE_ZYGOTE=0)", s["plain_median_s"], " ".join(f"{r['wall_s']:.2f}" for r in res["plain"]),
             s["probe_plain_s"], ""],
            ["zygote (forked)", s["zygote_median_s"], " ".join(f"{r['wall_s']:.2f}" for r in res["zygote"]),
             s["probe_zygote_s"], f"warm-up {s['zygote_warmup_s']} s once"]]
    text = tabulate(rows, headers=["gate-2 trace", "median s", "runs s", f"probe of {res['n']} traces s", "note"],
                    tablefmt="github")
    flops = s["flops"][0] if s["flops_equal"] else s["flops"]
    return (text + f"\n\nspeed-up per trace (median plain / median zygote): {s['speedup']}x; zygote warm-up "
            f"{s['zygote_warmup_s']} s; break-even after {s['break_even_traces']} traces; traced FLOPs "
            f"{'identical' if s['flops_equal'] else 'DIFFER'}: {flops}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", default=DEFAULT_OP, help=f"bundled example to prepare (default {DEFAULT_OP}; "
                                                    "scripts/prepare_op_dir.py --list-examples)")
    p.add_argument("--work", default=None, help="an already prepared work dir to use instead of --op (not modified)")
    p.add_argument("--case", type=int, default=0, help="case id of the work dir to stage and trace (default 0)")
    p.add_argument("--n", type=int, default=3, help="timed traces each way (default 3)")
    p.add_argument("--prime", type=int, default=1, help="untimed plain traces first, to warm the file cache "
                                                        "(default 1)")
    p.add_argument("--backend", default="auto", help="auto|cuda|cpu|npu, resolved as the probe does (default auto)")
    p.add_argument("--seed", type=int, default=0, help="seed of the traced draw (the probe's --seed; default 0)")
    p.add_argument("--timeout-s", type=float, default=300.0, help="limit per trace (default 300 s)")
    p.add_argument("--out", default=None, help="result JSON (default $OUT/trace_zygote.json, else "
                                               "./trace_zygote.json)")
    args = p.parse_args(argv)
    if args.n < 1 or args.prime < 0:
        p.error("--n must be >= 1 and --prime >= 0")
    if not sys.platform.startswith("linux"):
        p.error("the trace zygote forks: Linux only")
    out = os.path.abspath(args.out or os.path.join(os.environ.get("OUT") or ".", "trace_zygote.json"))
    sys.path.insert(0, SCRIPTS)
    from mfulib import backends
    from mfulib.run import trace_zygote
    from mfulib.core.cases import describe_case
    from mfulib.core.errors import UserError
    from mfulib.core.jsonio import provenance, write_json_atomic
    from mfulib.core.opdir import OpDir
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731

    user_env = os.environ.get(ZYGOTE_ENV)
    tmp = tempfile.TemporaryDirectory(prefix="mfu_zygote_bench_")
    try:
        backend, why = backends.resolve_backend(args.backend)
        backends.prepare_process(backend)  # as max_shape_probe.py: TRITON_INTERPRET=1 on cpu, inherited by the traces
        work = os.path.abspath(args.work) if args.work else prepare(args.op, os.path.join(tmp.name, "work"))
        od = OpDir(work)
        cases = od.read_cases()
        if not 0 <= args.case < len(cases):
            raise UserError(f"{od.cases_path}: --case {args.case} is not a case id (0..{len(cases) - 1})")
        case = cases[args.case]
        input_bytes = describe_case(case, args.case).input_bytes
        runs = lambda forked, k: [one_trace(od, case, args.seed, args.timeout_s, input_bytes, tmp.name,  # noqa: E731
                                            forked) for _ in range(k)]
        if trace_zygote._SHARED["zygote"] is not None:
            raise RuntimeError("a trace zygote already runs in this process: the plain runs would be forked")
        os.environ[ZYGOTE_ENV] = "0"
        log(f"{args.op if not args.work else work} case {args.case}: {args.prime} priming + {args.n} plain traces")
        prime = runs(False, args.prime)
        load_plain = [_load()]
        plain = runs(False, args.n)
        load_plain.append(_load())
        os.environ[ZYGOTE_ENV] = "1"
        log("starting the zygote")
        load_zygote = [_load()]
        t0 = time.perf_counter()
        if trace_zygote.shared() is None:
            raise RuntimeError(f"the trace zygote did not start: {trace_zygote._SHARED.get('failed')}")
        warmup_s = time.perf_counter() - t0
        log(f"zygote ready after {warmup_s:.2f} s; {args.n} forked traces")
        zygote = runs(True, args.n)
        load_zygote.append(_load())
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        trace_zygote.close_shared()
        if user_env is None:
            os.environ.pop(ZYGOTE_ENV, None)
        else:
            os.environ[ZYGOTE_ENV] = user_env
        tmp.cleanup()
    res = dict(provenance("bench_trace_zygote", 1, device={"backend": backend, "why": why}),
               bench="trace_zygote", git_commit=_commit(), source=source_stamp(), host_detail=_host(),
               op=None if args.work else args.op, work=args.work, case=args.case, input_bytes=input_bytes,
               seed=args.seed, n=args.n, load_avg={"plain": load_plain, "zygote": load_zygote},
               prime=prime, plain=plain, zygote=zygote, summary=summarize(plain, zygote, warmup_s, args.n, prime),
               method=__doc__.split("\n\n")[1])
    os.makedirs(os.path.dirname(out), exist_ok=True)
    write_json_atomic(out, res)
    print(table(res))
    log(f"wrote {out}")
    s = res["summary"]
    if not s["all_ok"]:
        bad = [r["detail"] for r in prime + plain + zygote if not r["ok"]]
        print(f"FAILED: a gate-2 trace did not pass: {bad[:2]}", file=sys.stderr)
        return 1
    if not s["flops_equal"]:
        print(f"FAILED: traced FLOPs differ between the runs: {s['flops']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
