#!/usr/bin/env python3
"""The end-to-end validation on real hardware (issue 18): runs the validation stages, packs what each measured.

GPU time comes in short device calls (~9 minutes each), so the validation is a list of **stages**, each a bench
script of bench/ with its own time limit, and is resumable across calls: a stage whose packed result already exists
in ``--pack-dir`` (committed to the repository between calls, so it travels with the tree) is not run again. Each
call runs the stages that are left, in order, until ``--deadline-s``; every stage that finished is written to
``$OUT/pack.tgz`` as ``<stage>.json`` (the bench's own JSON result wrapped with the stage's command, exit status,
wall time, git commit and the log's tail) - small tables, never profiles. Unpack it into ``--pack-dir``, commit,
and ``bench/make_results.py`` turns the pack directory into ``bench/RESULTS.md``.

Stages (``--stages`` picks and orders them; default: all, in this order):

=============  ===========================================================================================
env            device, driver, clocks, versions, and whether Nsight Compute may read counters (a probe run)
makeall        ``make OP=<op> BACKEND=cuda all`` from an empty work dir, cold peak cache (timed by
               bench_tool_overhead.run_all, wall + host CPU + device-busy): Triton cache cold,
               then warm (issue 13's <= 60 s target), for zoo/5_MHABlock and zoo/1_BatchMatmul
overhead       bench/bench_tool_overhead.py: wall / host CPU / device-busy per step (warm Triton cache; makeall has cold)
peaks          bench/bench_peaks_h200.py: calibrated int8 / fp8 peaks vs a torch._int_mm / _scaled_mm sweep
peaks_wide     bench/bench_peak_calib.py: calibrated bf16 / fp16 / fp32 peaks vs a 448-shape sweep
gemm           bench/bench_gemm_mfu.py: an 8192^3 bf16 GEMM through the pipeline vs CUDA events (independent)
ncu            bench/ncu_vs_profiler.py: collector kernel times vs Nsight Compute's gpu__time_duration
pmu            bench/pmu_h200.sh: the MHA block with Nsight Compute counters, bound classes, the HTML report
               (report.html is written beside pack.tgz, for examples/reports/)
pmu_micro      bench/pmu_bound_h200.py: GEMMs, a copy and a small layer_norm under ncu, classified
search         bench/bench_search_h200.py: the limit-MFU search vs an exhaustive measurement of its pool
batch          scripts/mfu_batch.py over the bundled and real-case operators (SEARCH=1), the MFU tables
=============  ===========================================================================================

A stage whose script does not exist in this checkout is recorded as ``absent`` (not packed, so a later call with
the script runs it). The real-case operators need ../shared/data, which does not travel to the device: carry it as
``.shared_data/data`` (git-ignored) - ``MFU_SHARED_DATA`` is set to it.

  python3 bench/validate_h200.py --pack-dir bench/validation/h200 --stages env,makeall,peaks   # one device call
  tar xzf $OUT/pack.tgz -C bench/validation/h200                                                # afterwards
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_tool_overhead  # noqa: E402
from benchlib import load_json, run_tree  # noqa: E402
PY = sys.executable
MAKEALL_OPS = ("zoo/5_MHABlock", "zoo/1_BatchMatmul")
BATCH_OPS = ("zoo", "npukernelbench")
SEARCH_OPS = os.environ.get("MFU_SEARCH_OPS", "mha,ffn")
# the search bench's own state from an earlier call (its tar, committed beside the pack): it resumes from it
SEARCH_RESUME = os.path.join(ROOT, "bench", "validation", "h200", "bench_search_h200.tar.gz")
STAGES = ("env", "makeall", "overhead", "peaks", "peaks_wide", "gemm", "ncu", "pmu", "pmu_micro", "search",
          "batch")
# per stage: (script that must exist, time limit s); the limit is also capped by the call's deadline
LIMITS = {"env": (None, 60), "makeall": (None, 330), "overhead": ("bench/bench_tool_overhead.py", 420),
          "peaks": ("bench/bench_peaks_h200.py", 150), "peaks_wide": ("bench/bench_peak_calib.py", 200),
          "gemm": ("bench/bench_gemm_mfu.py", 90),
          "ncu": ("bench/ncu_vs_profiler.py", 200), "pmu": ("bench/pmu_h200.sh", 300),
          "pmu_micro": ("bench/pmu_bound_h200.py", 150),
          "search": ("bench/bench_search_h200.py", 540), "batch": ("scripts/mfu_batch.py", 540)}


def log(msg):
    print(f"[validate {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_cmd(cmd, limit_s, log_path, env=None, cwd=ROOT):
    """Run ``cmd`` (list) with output appended to ``log_path``; after ``limit_s`` its whole process tree is killed
    (:func:`benchlib.run_tree`). Returns (exit status or "timeout", wall s)."""
    with open(log_path, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        rc, _, _, wall = run_tree(cmd, limit_s, env=env, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
    return rc, round(wall, 2)


def tail(path, n=3000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def stage_env(out, limit_s, env):
    info = {}
    q = "name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu,clocks_throttle_reasons.active"
    r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True)
    info["nvidia_smi"] = dict(zip(q.split(","), [s.strip() for s in r.stdout.strip().split(",")])) \
        if r.returncode == 0 else {"error": r.stderr.strip()[-300:]}
    code = ("import json,torch,triton,platform;print(json.dumps({'python':platform.python_version(),"
            "'torch':torch.__version__,'triton':triton.__version__,'cuda':torch.version.cuda,"
            "'gpus':torch.cuda.device_count(),'name':torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))")
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True)
    info["versions"] = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr[-300:]}
    ncu = shutil.which("ncu") or ("/usr/local/cuda/bin/ncu" if os.path.exists("/usr/local/cuda/bin/ncu") else None)
    info["ncu"] = {"path": ncu}
    if ncu:
        v = subprocess.run([ncu, "--version"], capture_output=True, text=True)
        info["ncu"]["version"] = v.stdout.strip().splitlines()[-1] if v.returncode == 0 else None
        probe = ("import torch;x=torch.ones(1024,device='cuda');torch.cuda.synchronize();(x*2).sum().item()")
        p = subprocess.run([ncu, "--csv", "--clock-control", "none", "--metrics", "gpu__time_duration.sum",
                            PY, "-c", probe], capture_output=True, text=True, timeout=min(limit_s, 120))
        text = p.stdout + p.stderr
        info["ncu"]["counters_permitted"] = "ERR_NVGPUCTRPERM" not in text and '"gpu__time_duration.sum"' in text
        info["ncu"]["probe_tail"] = text[-600:]
    return {"rc": 0, "result": info}


CASE_KEYS = ("case", "shape", "dtype", "flops", "flops_tracer", "numerator", "kernel_time_ns", "actual_tflops",
             "mfu_nom", "repeat_spread", "sequence", "pmu_source")


def slim_cases(perf):
    """The per-case numbers RESULTS.md shows (FLOPs vs tracer, kernel time), from a performance.json; [] without."""
    return [{k: c.get(k) for k in CASE_KEYS} for c in (perf or {}).get("per_case") or [] if not c.get("skipped")]


def stage_makeall(out, limit_s, env):
    """make all per operator: Triton cache cold, then warm; always an empty work dir and a cold peak cache."""
    tmp = tempfile.mkdtemp(prefix="mfu_makeall_")
    runs, t_start = [], time.perf_counter()
    try:
        for op in MAKEALL_OPS:
            triton_cache = os.path.join(tmp, "triton_" + op.replace("/", "_"))
            for mode in ("cold", "warm"):
                left = limit_s - (time.perf_counter() - t_start)
                if left < 30:
                    runs.append({"op": op, "mode": mode, "skipped": "stage time limit"})
                    continue
                work = os.path.join(tmp, "work", f"{op.replace('/', '_')}_{mode}")
                e = dict(env, TRITON_CACHE_DIR=triton_cache, MFU_PEAK_CACHE_DIR=os.path.join(tmp, f"pc_{len(runs)}"))
                # the overhead bench's own `make all` run (one owner of how it is timed)
                rec = bench_tool_overhead.run_all(ROOT, op, "cuda", work, e, left, log)
                rc, wall = rec["rc"], rec["wall_s"]
                row = {"op": op, "mode": mode, **{k: v for k, v in rec.items() if k != "step"}}
                dec = load_json(os.path.join(work, "mfu_decompose.json"))
                if dec:
                    row["maxima"] = dec.get("maxima")
                row["cases"] = slim_cases(load_json(os.path.join(work, "performance.json")))
                runs.append(row)
                log(f"makeall {op} {mode}: rc={rc} {wall} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rc = 0 if all(r.get("rc") == 0 for r in runs) else 1
    return {"rc": rc, "result": {"runs": runs, "target_s": 60,
                                 "method": "make OP=<op> WORK=<empty dir> BACKEND=cuda all; MFU_PEAK_CACHE_DIR a "
                                           "fresh dir (cold peak cache); TRITON_CACHE_DIR fresh (cold) then the "
                                           "same again (warm)"}}


def stage_pmu(out, limit_s, env, final_out):
    """bench/pmu_h200.sh (the MHA block with ncu counters, then make report); packs the per-case bound classes and
    counters, and copies report.html beside pack.tgz."""
    log_path = os.path.join(out, "pmu.log")
    e = dict(env, OUT=out, LIMIT_ALL_S=str(int(max(60, limit_s - 90))))
    rc, _ = run_cmd(["bash", "bench/pmu_h200.sh"], limit_s, log_path, e)
    r = os.path.join(out, "pmu_h200")
    perf, dec = load_json(os.path.join(r, "performance.json")), load_json(os.path.join(r, "mfu_decompose.json"))
    if os.path.exists(os.path.join(r, "report.html")):
        shutil.copy(os.path.join(r, "report.html"), os.path.join(final_out, "pmu_report.html"))
    cases = []
    for c in (perf or {}).get("per_case") or []:
        if c.get("skipped"):
            continue
        cases.append({k: c.get(k) for k in ("case", "dtype", "shape", "kernel_time_ns", "pmu_source", "pmu_unavailable",
                                            "pmu", "sequence")})
    rows = []
    for rep in (dec or {}).get("reports") or []:
        for row in rep.get("rows") or []:
            rows.append({k: row.get(k) for k in ("case", "dtype", "mfu_ach", "mfu_nom", "actual_tflops", "bound",
                                                 "roofline", "kernel_bounds", "payoff_order", "pmu_view")}
                        | {"parts": row.get("parts")})
    return {"rc": rc, "command": "bash bench/pmu_h200.sh", "log_tail": tail(log_path) + tail(os.path.join(r, "steps.log")),
            "result": {"pmu_collection": (perf or {}).get("pmu_collection"), "cases": cases, "rows": rows,
                       "regime": (dec or {}).get("regime"), "reading_aid": (dec or {}).get("reading_aid")}}


def bench_stage(name):
    """Stages that run one bench script writing one JSON: (argv builder, result JSON path under the stage dir)."""
    specs = {
        "overhead": (lambda o: [PY, "bench/bench_tool_overhead.py", "--backend", "cuda", "--modes", "warm",
                                "--out", os.path.join(o, "tool_overhead.json"), "--budget-s", "360"],
                     "tool_overhead.json"),
        "peaks": (lambda o: [PY, "bench/bench_peaks_h200.py", "--out", o], "bench_peaks_h200.json"),
        "peaks_wide": (lambda o: [PY, "bench/bench_peak_calib.py", "--out", o], "bench_peak_calib.json"),
        "gemm": (lambda o: [PY, "bench/bench_gemm_mfu.py", "--out", o], "bench_gemm_mfu.json"),
        "ncu": (lambda o: [PY, "bench/ncu_vs_profiler.py", "--out", os.path.join(o, "ncu_vs_profiler.md"),
                           "--work", os.path.join(o, "work"), "--ops", "zoo/5_MHABlock,zoo/1_BatchMatmul,zoo/4_FFN"],
                "ncu_vs_profiler.md.json"),
        "pmu_micro": (lambda o: [PY, "bench/pmu_bound_h200.py", "--out", o], "result.json"),
        "search": (lambda o, lim: [PY, "bench/bench_search_h200.py", "--out", o, "--shared-data",
                                   os.path.join(ROOT, ".shared_data", "data"), "--ops", SEARCH_OPS,
                                   "--max-minutes", f"{max(1.0, (lim - 45) / 60):.1f}"]
                   + (["--resume-from", SEARCH_RESUME] if os.path.exists(SEARCH_RESUME) else []),
                   "bench_search_h200.json"),
        "batch": (lambda o: [PY, "scripts/mfu_batch.py", "--examples", ",".join(BATCH_OPS), "--out",
                             os.path.join(o, "batch"), "--backend", "cuda", "--search", "--keep-prof", "0"],
                  os.path.join("batch", "batch_summary.json")),
    }
    return specs[name]


def run_stage(name, out_root, limit_s, env, final_out):
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    if name == "env":
        res = stage_env(out, limit_s, env)
    elif name == "makeall":
        res = stage_makeall(out, limit_s, env)
    elif name == "pmu":
        res = stage_pmu(out, limit_s, env, final_out)
    else:
        argv_of, result_rel = bench_stage(name)
        argv = argv_of(out, limit_s) if name == "search" else argv_of(out)
        log_path = os.path.join(out, f"{name}.log")
        rc, _ = run_cmd(argv, limit_s, log_path, env)
        res = {"rc": rc, "command": " ".join(argv), "result": load_json(os.path.join(out, result_rel)),
               "log_tail": tail(log_path)}
        # small extra artefacts the report generator reads (markdown tables, summaries), never profiles
        extras = {}
        for path in sorted(glob.glob(os.path.join(out, "**", "*.md"), recursive=True))[:20]:
            if os.path.getsize(path) < 200_000:
                extras[os.path.relpath(path, out)] = tail(path, 200_000)
        res["extras"] = extras
        if name == "search" and os.path.exists(os.path.join(out, "bench_search_h200.tar.gz")):
            shutil.copy(os.path.join(out, "bench_search_h200.tar.gz"), final_out)  # the next call resumes from it
    res.update({"stage": name, "wall_s": round(time.perf_counter() - t0, 1),
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git_commit": git_commit()})
    return res


def git_commit():
    if os.environ.get("MFU_GIT_COMMIT"):  # the device's copy of the tree may carry a stale .git: say it explicitly
        return os.environ["MFU_GIT_COMMIT"]
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pack-dir", default=os.path.join(ROOT, "bench", "validation", "h200"),
                   help="packed results of earlier calls (stages found here are not run again)")
    p.add_argument("--stages", default=",".join(STAGES), help="stages to run, in order (default: all)")
    p.add_argument("--deadline-s", type=float, default=540.0, help="start no stage after this many seconds, and "
                                                                     "cap each stage's limit by what is left")
    p.add_argument("--force", action="store_true", help="run stages even when packed already")
    p.add_argument("--out", default=os.environ.get("OUT") or "validate_out", help="where pack.tgz is written")
    args = p.parse_args(argv)
    stages = [s for s in args.stages.split(",") if s]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        p.error(f"--stages {bad}: choose from {','.join(STAGES)}")
    os.makedirs(args.out, exist_ok=True)
    work_root = tempfile.mkdtemp(prefix="mfu_validate_")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    shared = os.path.join(ROOT, ".shared_data")
    if os.path.isdir(os.path.join(shared, "data")):
        env.update(MFU_SHARED_DATA=os.path.join(shared, "data"), MFU_SHARED_DIR=shared)
    if os.path.exists("/usr/local/cuda/bin/ncu"):
        env["PATH"] = env.get("PATH", "") + ":/usr/local/cuda/bin"
    t_start = time.perf_counter()
    packed, summary = [], []
    for name in stages:
        script, limit = LIMITS[name]
        if not args.force and os.path.exists(os.path.join(args.pack_dir, f"{name}.json")):
            summary.append((name, "packed already"))
            continue
        if script and not os.path.exists(os.path.join(ROOT, script)):
            summary.append((name, f"absent: {script} not in this checkout"))
            continue
        left = args.deadline_s - (time.perf_counter() - t_start)
        if left < 30:
            summary.append((name, "not started: deadline"))
            continue
        log(f"stage {name} (limit {min(limit, left):.0f} s)")
        res = run_stage(name, work_root, min(limit, left), env, args.out)
        path = os.path.join(args.out, f"{name}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(res, f, indent=1, default=str)
        os.replace(path + ".tmp", path)
        packed.append(path)
        summary.append((name, f"rc={res.get('rc')} {res['wall_s']} s"))
        log(f"stage {name}: rc={res.get('rc')} in {res['wall_s']} s")
    if packed:
        with tarfile.open(os.path.join(args.out, "pack.tgz"), "w:gz") as tar:
            for path in packed:
                tar.add(path, arcname=os.path.basename(path))
        for path in packed:
            os.remove(path)
    shutil.rmtree(work_root, ignore_errors=True)
    for name, what in summary:
        print(f"{name:10s} {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
