#!/usr/bin/env python3
"""The tool's own overhead per pipeline step: wall time against device-busy time.

For each operator (default: zoo/5_MHABlock and zoo/1_BatchMatmul) and each Triton-cache mode, an empty work
directory is run through the Makefile one step at a time, exactly as a user runs it (``make OP=<op> WORK=<dir>
BACKEND=<b> <step>`` for prepare, verify, flops, collect, peak, decompose), with a cold peak cache
(``MFU_PEAK_CACHE_DIR`` = a fresh directory, so step 5 calibrates). Per step it reports:

* ``wall_s``: wall time of the make call (process start-up, imports, compilation, input building, device work);
* ``host_cpu_s``: user + system CPU time of the make call and every process it waited for (getrusage
  RUSAGE_CHILDREN): the host work, less sensitive than wall time to other load on a shared machine;
* ``device_busy_s``: the kernel time the step made the device spend, from the step's own results -
  collect: Σ over measured (case, impl) of median kernel time x (warmup + repeats + 1 priming call), from
  performance.json; peak: Σ over every timed calibration shape of median time x iterations, from peak.json (0 when
  the calibration came from the cache); verify: a lower bound, one call of each implementation for the cases
  performance.json measured (verify.json records no kernel times); prepare, flops (the tracer runs on meta/CPU
  tensors) and decompose: 0 (host-only steps);
* ``wall_per_busy``: wall_s / device_busy_s (how many seconds of tool per second of device work).

Triton-cache modes: ``cold`` - ``TRITON_CACHE_DIR`` is a fresh empty directory (every kernel compiles); ``warm`` -
the same directory again after the cold run (or ``--triton-cache-dir`` when given), so kernels are loaded, not
compiled. On cpu the interpreter compiles nothing, so only ``warm`` runs by default. ``--skill-dir`` measures another
checkout (e.g. the state before a change) with the same method; ``MFU_WORKER=0`` in the environment measures this one
with one process per case.

``--all-runs MODES`` (default ``warm``; ``none`` to skip) adds, per operator and mode, the figure the issue's target
is stated in: ``make OP=<op> all`` from an empty work directory with a cold peak cache, as one make call (the
Makefile's own parallelism: verify | flops | peak under its device lock, then collect, decompose). Its row
``ALL (make all)`` has the wall and host CPU time of that call, the device-busy time from its results, and
``step_end_s``: when each step's stamp was written, seconds after the start (shows the overlap).

Writes JSON to ``--out`` (default ``$OUT/tool_overhead.json``) and the table as Markdown beside it (``.md``); prints
the table. Stops starting new runs once ``--budget-s`` has passed (recorded as skipped), so one call fits a time limit.

  python3 bench/bench_tool_overhead.py --backend cpu --out /tmp/tool_overhead.json          # CPU (smoke)
  python3 bench/bench_tool_overhead.py --backend cuda --modes cold,warm --out $OUT/tool_overhead.json   # H200
  MFU_HOST_DRAW=1 python3 bench/bench_tool_overhead.py ...    # every input drawn on the host (mfulib.core.input_draw)
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import load_json, run_tree  # noqa: E402
STEPS = ("prepare", "verify", "flops", "collect", "peak", "decompose")
DEFAULT_OPS = ("zoo/5_MHABlock", "zoo/1_BatchMatmul")
HOST_ONLY = {"prepare": "host only", "flops": "host only (tracer on meta/CPU tensors)", "decompose": "host only"}


def collect_busy_ns(perf: dict):
    """(device-busy ns, note) of a collection: Σ median kernel time x (warmup + repeats + 1 priming call)."""
    n_calls = int(perf.get("warmup") or 0) + int(perf.get("repeats") or 0) + 1
    total, n = 0, 0
    for case in perf.get("per_case") or []:
        for impl in (case.get("impls") or {}).values():
            t = impl.get("kernel_time_ns")
            if isinstance(t, (int, float)) and t > 0:
                total += t * n_calls * max(1, int(impl.get("attempts") or 1))
                n += 1
    return total, f"{n} (case, impl) x {n_calls} calls x median kernel time"


def verify_busy_ns(perf: dict):
    """(lower-bound device-busy ns, note) of verify: one call per implementation of the cases collect measured."""
    total, n = 0, 0
    for case in (perf or {}).get("per_case") or []:
        for impl in (case.get("impls") or {}).values():
            t = impl.get("kernel_time_ns")
            if isinstance(t, (int, float)) and t > 0:
                total += t
                n += 1
    return total, f"lower bound: one call for {n} collected (case, impl); other cases' kernel times unknown"


def _timed_ns(obj):
    """Σ median_ns x iters over every dict inside ``obj`` that carries both (peak.json timing records)."""
    if isinstance(obj, dict):
        own = obj["median_ns"] * obj["iters"] if isinstance(obj.get("median_ns"), (int, float)) and \
            isinstance(obj.get("iters"), (int, float)) else 0
        return own + sum(_timed_ns(v) for v in obj.values())
    if isinstance(obj, list):
        return sum(_timed_ns(v) for v in obj)
    return 0


def peak_busy_ns(peak: dict):
    """(device-busy ns, note) of the calibration: Σ median time x iterations of every timed shape (0 if cached)."""
    cache = peak.get("cache") or {}
    if isinstance(cache, dict) and cache.get("hit"):
        return 0, "reused from the peak cache: nothing measured"
    return _timed_ns({"measured": peak.get("measured"), "bandwidth": peak.get("bandwidth")}), \
        "Σ median x iterations of the timed GEMM/copy shapes"


def child_phases(perf: dict) -> dict:
    """Σ over measured (case, impl) of each collect child phase (imports, setup, build, prime, iterations, ...)."""
    out = {}
    for case in perf.get("per_case") or []:
        for impl in (case.get("impls") or {}).values():
            for k, v in (impl.get("wall_s") or {}).items():
                if isinstance(v, (int, float)):
                    out[k] = round(out.get(k, 0.0) + v, 3)
    return out


def timed_make(cmd, env, timeout_s):
    """(exit status or "timeout", output tail, wall s, host CPU s) of one make call; on timeout its whole process
    tree is killed (benchlib.run_tree). Host CPU: user + system time of every process it waited for."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rc, out, err, wall = run_tree(cmd, timeout_s, env=env)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return rc, ((out or "") + (err or ""))[-1500:], wall, cpu


def run_pipeline(skill_dir, op, backend, work, env, steps, step_timeout_s, log):
    """Run ``steps`` of ``op`` into the empty ``work``; returns the per-step records."""
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(os.path.dirname(work), exist_ok=True)
    records = []
    for step in steps:
        cmd = ["make", "-s", "-C", skill_dir, f"OP={op}", f"WORK={work}", f"BACKEND={backend}", step]
        rc, tail, wall, cpu = timed_make(cmd, env, step_timeout_s)
        rec = {"step": step, "wall_s": round(wall, 2), "host_cpu_s": round(cpu, 2), "rc": rc}
        if rc != 0:
            rec["log_tail"] = tail
        log(f"  {op} {step}: {wall:.1f} s (rc {rc})")
        records.append(rec)
    perf = load_json(os.path.join(work, "performance.json")) or {}
    peak = load_json(os.path.join(work, "peak.json")) or {}
    for rec in records:
        step = rec["step"]
        if step in HOST_ONLY:
            busy, note = 0, HOST_ONLY[step]
        elif step == "collect":
            busy, note = collect_busy_ns(perf) if perf else (None, "no performance.json")
        elif step == "verify":
            busy, note = verify_busy_ns(perf) if perf else (None, "no performance.json to bound it")
        else:
            busy, note = peak_busy_ns(peak) if peak else (None, "no peak.json")
        rec["device_busy_s"] = None if busy is None else round(busy / 1e9, 4)
        rec["device_busy_note"] = note
        rec["wall_per_busy"] = round(rec["wall_s"] / rec["device_busy_s"], 1) if rec["device_busy_s"] else None
    extra = {"collect_child_phases_s": child_phases(perf) if perf else {},
             "collect_wall_s_in_tool": perf.get("wall_s"), "device": (perf.get("device") or {}).get("name"),
             "backend": perf.get("backend")}
    return records, extra


def run_all(skill_dir, op, backend, work, env, timeout_s, log):
    """One ``make all`` into the empty ``work``: its record (wall, host CPU, device-busy, per-step stamp times)."""
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(os.path.dirname(work), exist_ok=True)
    cmd = ["make", "-s", "-C", skill_dir, f"OP={op}", f"WORK={work}", f"BACKEND={backend}", "all"]
    t_wall0 = time.time()
    rc, tail, wall, cpu = timed_make(cmd, env, timeout_s)
    ends = {}
    for step in STEPS[1:]:
        stamp = os.path.join(work, ".state", f"{step}.ok")
        if os.path.exists(stamp):
            ends[step] = round(os.path.getmtime(stamp) - t_wall0, 2)
    perf = load_json(os.path.join(work, "performance.json")) or {}
    peak = load_json(os.path.join(work, "peak.json")) or {}
    busy = (collect_busy_ns(perf)[0] if perf else 0) + (verify_busy_ns(perf)[0] if perf else 0) + \
        (peak_busy_ns(peak)[0] if peak else 0)
    rec = {"step": "ALL (make all)", "wall_s": round(wall, 2), "host_cpu_s": round(cpu, 2), "rc": rc,
           "device_busy_s": round(busy / 1e9, 4), "step_end_s": ends,
           "wall_per_busy": round(wall / (busy / 1e9), 1) if busy else None,
           "device_busy_note": "collect + verify (lower bound) + peak, as in the per-step rows"}
    if rc != 0:
        rec["log_tail"] = tail
    log(f"  {op} make all: {wall:.1f} s (rc {rc}); stamps at {ends}")
    return rec


def table(runs) -> list:
    rows = []
    for run in runs:
        for rec in run.get("steps") or []:
            rows.append([run["op"], run["mode"], rec["step"], rec["wall_s"], rec.get("host_cpu_s"),
                         rec.get("device_busy_s"), rec.get("wall_per_busy"), rec["rc"]])
        if run.get("all"):
            rec = run["all"]
            rows.append([run["op"], run["mode"], rec["step"], rec["wall_s"], rec.get("host_cpu_s"),
                         rec.get("device_busy_s"), rec.get("wall_per_busy"), rec["rc"]])
            continue
        if run.get("steps"):
            busy = [r.get("device_busy_s") or 0 for r in run["steps"]]
            cpu = sum(r.get("host_cpu_s") or 0 for r in run["steps"])
            rows.append([run["op"], run["mode"], "TOTAL", run["total_wall_s"], round(cpu, 2), round(sum(busy), 4),
                         round(run["total_wall_s"] / sum(busy), 1) if sum(busy) else None, ""])
        elif run.get("skipped"):
            rows.append([run["op"], run["mode"], "skipped", "", "", "", "", run["skipped"]])
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="result JSON (default $OUT/tool_overhead.json); a .md table beside it")
    p.add_argument("--ops", default=",".join(DEFAULT_OPS), help="bundled operators, comma-separated")
    p.add_argument("--backend", default="auto", help="make BACKEND= (auto|cuda|cpu|npu)")
    p.add_argument("--modes", default=None, help="Triton-cache modes, comma-separated: cold,warm (default: "
                                                 "cold,warm; warm on --backend cpu)")
    p.add_argument("--steps", default=",".join(STEPS), help="steps to run, in order (default: all six)")
    p.add_argument("--skill-dir", default=ROOT, help="checkout whose Makefile runs (default: this one)")
    p.add_argument("--work", default=None, help="work root (default: a temp dir, removed afterwards)")
    p.add_argument("--triton-cache-dir", default=None, help="warm mode's cache (default: the cold run's)")
    p.add_argument("--all-runs", default="warm", help="Triton-cache modes of the extra `make all` run per operator "
                                                      "(cold,warm; 'none' = no such run)")
    p.add_argument("--step-timeout-s", type=float, default=300.0)
    p.add_argument("--budget-s", type=float, default=520.0, help="start no new run after this many seconds")
    args = p.parse_args(argv)
    out = args.out or os.path.join(os.environ.get("OUT") or ".", "tool_overhead.json")
    out = os.path.abspath(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    steps = [s for s in args.steps.split(",") if s]
    bad = [s for s in steps if s not in STEPS]
    if bad:
        p.error(f"--steps {bad}: choose from {','.join(STEPS)}")
    modes = [m for m in (args.modes or ("warm" if args.backend == "cpu" else "cold,warm")).split(",") if m]
    if any(m not in ("cold", "warm") for m in modes):
        p.error(f"--modes {args.modes}: choose cold and/or warm")
    all_modes = [] if args.all_runs == "none" else [m for m in args.all_runs.split(",") if m]
    if any(m not in ("cold", "warm") for m in all_modes):
        p.error(f"--all-runs {args.all_runs}: choose cold and/or warm, or none")
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    t_start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="mfu_overhead_")
    work_root = os.path.abspath(args.work) if args.work else os.path.join(tmp, "work")
    # warm mode without a cold run before it: the given cache, else the per-user one every step uses
    triton_cache = args.triton_cache_dir or os.environ.get("TRITON_CACHE_DIR") or \
        os.path.join(os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache")
    runs = []
    commit = subprocess.run(["git", "-C", args.skill_dir, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None

    def write_results() -> str:
        """The JSON and the Markdown table of the runs so far (after every run: a killed bench keeps its rows)."""
        from tabulate import tabulate
        headers = ["op", "triton cache", "step", "wall s", "host CPU s", "device-busy s", "wall/busy", "rc"]
        text = tabulate(table(runs), headers=headers, tablefmt="github")
        result = {"bench": "tool_overhead", "skill_dir": os.path.abspath(args.skill_dir), "git_commit": commit,
                  "backend": args.backend, "modes": modes, "all_runs": all_modes, "steps": steps,
                  "host_draw": os.environ.get("MFU_HOST_DRAW", "0"), "mfu_worker": os.environ.get("MFU_WORKER", "1"),
                  "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": runs,
                  "elapsed_s": round(time.perf_counter() - t_start, 1), "method": __doc__.split("\n\n")[1]}
        with open(out + ".tmp", "w") as f:
            json.dump(result, f, indent=2)
        os.replace(out + ".tmp", out)
        with open(os.path.splitext(out)[0] + ".md", "w") as f:
            f.write(text + "\n")
        return text

    try:
        for op in [o for o in args.ops.split(",") if o]:
            for mode in modes:
                run = {"op": op, "mode": mode}
                runs.append(run)
                if time.perf_counter() - t_start > args.budget_s:
                    run["skipped"] = f"--budget-s {args.budget_s:g} reached"
                    continue
                cache = triton_cache if mode == "warm" else os.path.join(tmp, f"triton_cold_{len(runs)}")
                if mode == "cold" and not args.triton_cache_dir:
                    triton_cache = cache  # the warm run after it reuses what it compiled
                peak_cache = os.path.join(tmp, f"peak_cache_{len(runs)}")  # cold peak cache every run
                env = dict(os.environ, TRITON_CACHE_DIR=cache, MFU_PEAK_CACHE_DIR=peak_cache, PYTHONUNBUFFERED="1")
                log(f"{op} ({mode} Triton cache {cache})")
                work = os.path.join(work_root, op.replace("/", "_") + "_" + mode)
                t0 = time.perf_counter()
                run["steps"], extra = run_pipeline(args.skill_dir, op, args.backend, work, env, steps,
                                                   args.step_timeout_s, log)
                run["total_wall_s"] = round(time.perf_counter() - t0, 2)
                run["triton_cache_dir"] = cache
                run.update(extra)
                write_results()
            for mode in all_modes:
                run = {"op": op, "mode": mode}
                runs.append(run)
                if time.perf_counter() - t_start > args.budget_s:
                    run["skipped"] = f"--budget-s {args.budget_s:g} reached (make all)"
                    continue
                cache = triton_cache if mode == "warm" else os.path.join(tmp, f"triton_cold_{len(runs)}")
                env = dict(os.environ, TRITON_CACHE_DIR=cache, PYTHONUNBUFFERED="1",
                           MFU_PEAK_CACHE_DIR=os.path.join(tmp, f"peak_cache_{len(runs)}"))
                log(f"{op} make all ({mode} Triton cache {cache})")
                run["all"] = run_all(args.skill_dir, op, args.backend,
                                     os.path.join(work_root, op.replace("/", "_") + "_all_" + mode), env,
                                     args.step_timeout_s * len(STEPS), log)
                run["triton_cache_dir"] = cache
                write_results()
    finally:
        if not args.work:
            shutil.rmtree(tmp, ignore_errors=True)
    text = write_results()
    print(text)
    log(f"wrote {out}")
    failed = [r for run in runs for r in (run.get("steps") or []) + ([run["all"]] if run.get("all") else [])
              if r["rc"] != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
