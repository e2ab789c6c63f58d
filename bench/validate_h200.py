#!/usr/bin/env python3
"""The end-to-end validation on real hardware: runs the validation stages, packs what each measured.

GPU time comes in short device calls (~9 minutes each), so the validation is a list of **stages**, each a bench
script of bench/ with its own time limit, and is resumable across calls: a stage whose packed result already exists
in ``--pack-dir`` (committed to the repository between calls, so it travels with the tree) is not run again. Each
call runs the stages that are left, in order, until ``--deadline-s``; every stage that finished is written to
``$OUT/pack.tgz`` as ``<stage>.json`` (the bench's own JSON result wrapped with the stage's command, exit status,
wall time, git commit, ``source`` and the log's tail) - small tables, never profiles. Unpack it into
``--pack-dir``, commit, and ``bench/make_results.py`` turns the pack directory into ``bench/RESULTS.md``.
``source`` is bench/freshness.py's content hash of the tree the call ran, computed on the device from the files
(the device copy's ``.git`` can be stale); run ``MFU_TREE_SHA256=$(python3 bench/freshness.py)`` computed before
the call and the pack also records whether the device's tree matched it.

Stages (``--stages`` picks and orders them; default: all, in this order):

=============  ===========================================================================================
env            device, driver, clocks, versions, and whether Nsight Compute may read counters (a probe run)
makeall        ``make OP=<op> BACKEND=cuda all`` from an empty work dir, cold peak cache (timed by
               bench_tool_overhead.run_all, wall + host CPU + device-busy): Triton cache cold,
               then warm (the <= 60 s target), for zoo/5_MHABlock and zoo/1_BatchMatmul
overhead       bench/bench_tool_overhead.py: wall / host CPU / device-busy per step (warm Triton cache; makeall has cold)
peaks          bench/bench_peaks_h200.py: calibrated int8 / fp8 peaks vs a torch._int_mm / _scaled_mm sweep
peaks_wide     bench/bench_peak_calib.py: calibrated bf16 / fp16 / fp32 peaks vs a 100-shape sweep per dtype
gemm           bench/bench_gemm_mfu.py: an 8192^3 bf16 GEMM through the pipeline vs CUDA events (independent)
ncu            bench/ncu_vs_profiler.py: collector kernel times vs Nsight Compute's gpu__time_duration
pmu            bench/pmu_h200.sh: the MHA block with Nsight Compute counters, bound classes, the HTML report
               (report.html is written beside pack.tgz, for examples/reports/)
pmu_micro      bench/pmu_bound_h200.py: GEMMs, a copy and a small layer_norm under ncu, classified
gemm_grid      bench/gemm_grid_h200.py: the MHA example's matmul_kernel and variants (grid, B layout, stages,
               unmasked K loop) timed and classified under ncu - why its GEMM is latency-bound
executed       bench/executed_flops_h200.py: executed vs traced FLOPs on Hopper (the MHA GEMM, tril_bmm); the
               launched kernels' PTX come back as executed_fixtures.tar.gz
cupti          bench/cupti_variants_h200.py: the compiled variant each launch ran, told by CUPTI's launch record
               (what the search's stage 2 reads) vs by ncu's; a count the compiled kernels settle vs the count
referee        bench/bench_search_vs_bruteforce.py: the limit search (probe + grid search) vs a brute force
batch          scripts/mfu_batch.py over the bundled and real-case operators (SEARCH=1), the MFU tables
=============  ===========================================================================================

**Resumable stages** (referee, batch) are packed with ``complete: false`` until they are done, and run again by
the next call, which continues from the state tar packed beside them (``bench_search_vs_bruteforce.tar.gz``,
``batch_state.tar.gz``; both inside pack.tgz, unpacked into ``--pack-dir`` with the JSONs). The batch stage:
restores its tar (job records, summary, every operator's work-dir JSONs, case files the probe appended to,
model/flops sources, make stamps and the probe's backup - never ``prof/``, profiles or pictures; JSON paths
rewritten to the new directory), runs only the operators without a final job record (ok / failed / timeout;
``--batch-retry-failed`` also the failed ones), sends ``mfu_batch.py`` SIGINT ``BATCH_STOP_MARGIN_S`` before the
stage's limit (it kills the running operator, writes its summary and exits 130; that operator resumes next call
from its make stamps and probe.json), then packs the state again. Each operator's probe and search are bounded by
``--batch-probe-args`` / ``--batch-search-args`` (make PROBE_ARGS / SEARCH_ARGS) and ``--batch-op-timeout-s``;
batch.json records every call's settings, exit status, and the operators it ran and finished.

A stage whose script does not exist in this checkout is recorded as ``absent`` (not packed, so a later call with
the script runs it). The real-case operators need ../shared/data, which does not travel to the device: carry it as
``.shared_data/data`` (git-ignored) - ``MFU_SHARED_DATA`` is set to it.

  python3 bench/validate_h200.py --pack-dir bench/validation/h200 --stages env,makeall,peaks   # one device call
  python3 bench/validate_h200.py --stages batch --deadline-s 560         # as often as it takes (complete: true)
  tar xzf $OUT/pack.tgz -C bench/validation/h200                                                # afterwards
"""
import argparse
import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_tool_overhead  # noqa: E402
from benchlib import load_json, run_tree  # noqa: E402
from freshness import source_stamp  # noqa: E402
PY = sys.executable
MAKEALL_OPS = ("zoo/5_MHABlock", "zoo/1_BatchMatmul")
# extra bench_search_vs_bruteforce.py arguments (e.g. "--ops zoo/5_MHABlock,zoo/6_GQAAttention": the operators one
# call works on), recorded in the stage's command line
REFEREE_EXTRA = os.environ.get("MFU_REFEREE_EXTRA", "").split()
# the referee's own state from an earlier call (its tar, committed beside the pack): it resumes from it
REFEREE_RESUME_NAME = "bench_search_vs_bruteforce.tar.gz"
# the batch's state from earlier calls (job records, per-operator work-dir JSONs and case files, stamps; never
# profiles), packed into pack.tgz beside batch.json: a fresh machine restores it, so finished operators are skipped
BATCH_STATE_NAME = "batch_state.tar.gz"
# the batch stage's settings (--batch-* options change them; every call records the ones it used in batch.json):
# one operator's probe + search + make all bounded so that ~11 operators fit in a few ~9-minute calls
BATCH_DEFAULTS = {
    "examples": "zoo,npukernelbench",
    "backend": "cuda",
    "op_timeout_s": 200.0,
    # measured on the H200 (bench/RESULTS.md "Batch", 2026-12-01): at --budget-s 20 no probe finished a candidate
    # (ranking trace, gate child start, first compile); 45 s with the warm trace zygote, 2 sources, no refinement
    "probe_args": "--budget-s 45 --max-scale 8 --top 2 --refine-steps 0 --timeout-s 90",
    "search_args": "--top-n 3 --stage2-k 2 --case-timeout-s 90",
    "pmu": "none",
    "keep_prof": 0,
    "retry_failed": False,
    "make": "make",
    "rerun": [],  # operators measured again from scratch this call (--batch-rerun); not a measuring setting
}
# SIGINT this long before the stage's limit; the batch then has BATCH_GRACE_S to stop cleanly (kill the running
# operator, write its summary, exit 130) before its tree is killed; the rest is this stage's packing
BATCH_STOP_MARGIN_S, BATCH_GRACE_S = 40.0, 25.0
BATCH_FINAL = ("ok", "failed", "timeout")  # a job record with one of these is not run again (retry_failed: "ok")
# the settings that change an operator's numbers: a final record made under other values is run again, so one
# batch's table never mixes settings (examples, keep_prof and retry_failed change which operators run, not how)
BATCH_MEASURE_KEYS = ("backend", "op_timeout_s", "probe_args", "search_args", "pmu", "make")
# per operator work-dir files that travel in the state tar: everything small but profiles and pictures
STATE_SKIP_DIRS = ("prof",)
STATE_SKIP_SUFFIXES = (".png", ".svg", ".html", ".pt", ".ncu-rep", ".nsys-rep", ".gz", ".trace.json", ".log")
STATE_MAX_FILE_BYTES = 2_000_000
STAGES = ("env", "makeall", "overhead", "peaks", "peaks_wide", "gemm", "ncu", "pmu", "pmu_micro", "gemm_grid",
          "executed", "cupti", "referee", "batch")
# per stage: (script that must exist, time limit s); the limit is also capped by the call's deadline
LIMITS = {"env": (None, 60), "makeall": (None, 330), "overhead": ("bench/bench_tool_overhead.py", 420),
          "peaks": ("bench/bench_peaks_h200.py", 150), "peaks_wide": ("bench/bench_peak_calib.py", 200),
          "gemm": ("bench/bench_gemm_mfu.py", 90),
          "ncu": ("bench/ncu_vs_profiler.py", 200), "pmu": ("bench/pmu_h200.sh", 300),
          "pmu_micro": ("bench/pmu_bound_h200.py", 150), "gemm_grid": ("bench/gemm_grid_h200.py", 200),
          "executed": ("bench/executed_flops_h200.py", 420), "cupti": ("bench/cupti_variants_h200.py", 240),
          "referee": ("bench/bench_search_vs_bruteforce.py", 540), "batch": ("scripts/mfu_batch.py", 540)}
# peaks_wide: a 5 x 5 x 4 grid (100 shapes per dtype, m, n in 2048..12288, k in 2048..16384, 10 ms each) instead
# of bench_peak_calib's 448: the three dtypes' sweeps and the calibration fit in ~100 s of the stage's 200
PEAKS_WIDE_ARGS = ["--grid-mn", "2048,4096,6144,8192,12288", "--grid-k", "2048,4096,8192,16384", "--target-ms", "10"]


def log(msg):
    print(f"[validate {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_cmd(cmd, limit_s, log_path, env=None, cwd=ROOT, interrupt=None, grace_s=30.0):
    """Run ``cmd`` (list) with output appended to ``log_path``; after ``limit_s`` its whole process tree is killed
    (:func:`benchlib.run_tree`; ``interrupt``: a signal sent first, ``grace_s`` before the kill). Returns (exit
    status or "timeout", wall s)."""
    with open(log_path, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        rc, _, _, wall = run_tree(cmd, limit_s, env=env, cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                                  interrupt=interrupt, grace_s=grace_s)
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


# ---------------------------------------------------------------------------------------------- batch (resumable)
def _state_files(batch_out):
    """The batch state that travels between calls: summary, job records, and each operator's small work files
    (JSONs, case files, model/flops sources, make stamps, the probe's backup) - never prof/ or pictures."""
    keep = sorted(glob.glob(os.path.join(batch_out, "batch_summary.*")) +
                  glob.glob(os.path.join(batch_out, "jobs", "*.json")))
    skipped = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(batch_out, "ops")):
        dirnames[:] = sorted(d for d in dirnames if d not in STATE_SKIP_DIRS and not d.startswith((".tmp", "PROF_"))
                             and ".bak-" not in d)  # prepare's backups of an older work dir
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if name.endswith(STATE_SKIP_SUFFIXES) or os.path.islink(path):
                continue
            if os.path.getsize(path) > STATE_MAX_FILE_BYTES:
                skipped.append(os.path.relpath(path, batch_out))
                continue
            keep.append(path)
    return keep, skipped


def pack_batch_state(batch_out, tar_path):
    """Write ``tar_path`` (gzip) with the state files of ``batch_out`` and a manifest naming ``batch_out`` (paths
    inside the JSONs are rewritten to the next call's directory on restore). Returns the manifest."""
    files, skipped = _state_files(batch_out)
    manifest = {"batch_out": batch_out, "files": len(files), "skipped_large": skipped}
    mpath = os.path.join(batch_out, "state_manifest.json")
    with open(mpath, "w") as f:
        json.dump(manifest, f)
    with tarfile.open(tar_path, "w:gz") as tar:
        for path in [mpath] + files:
            tar.add(path, arcname=os.path.relpath(path, batch_out))
    manifest["bytes"] = os.path.getsize(tar_path)
    return manifest


def _rewrite(obj, old, new):
    if isinstance(obj, str):
        return new + obj[len(old):] if obj.startswith(old) else obj.replace(f"={old}", f"={new}")
    if isinstance(obj, list):
        return [_rewrite(v, old, new) for v in obj]
    if isinstance(obj, dict):
        return {k: _rewrite(v, old, new) for k, v in obj.items()}
    return obj


def restore_batch_state(tar_path, batch_out):
    """Unpack an earlier call's state into ``batch_out``; every JSON's paths under the old batch dir now point into
    ``batch_out`` (modification times kept, so make's stamps stay in order). Returns the number of files."""
    os.makedirs(batch_out, exist_ok=True)
    with tarfile.open(tar_path) as tar:
        tar.extractall(batch_out, filter="data")
        names = tar.getnames()
    man = load_json(os.path.join(batch_out, "state_manifest.json")) or {}
    old = man.get("batch_out")
    if old and old != batch_out:
        for rel in names:
            path = os.path.join(batch_out, rel)
            if not rel.endswith(".json") or not os.path.isfile(path):
                continue
            doc, st = load_json(path), os.stat(path)
            if doc is None:
                continue
            with open(path, "w") as f:
                json.dump(_rewrite(doc, old, batch_out), f, indent=1)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return len(names)


def batch_jobs(settings, batch_out, env):
    """(jobs, skipped) of the batch's source, found as mfu_batch.py finds them (MFU_SHARED_DATA from ``env``)."""
    from mfulib.batch.plan import discover_jobs
    saved = os.environ.get("MFU_SHARED_DATA")
    try:
        if env.get("MFU_SHARED_DATA"):
            os.environ["MFU_SHARED_DATA"] = env["MFU_SHARED_DATA"]
        jobs, skipped, broken = discover_jobs({"kind": "examples", "sets": settings["examples"]}, batch_out)
    finally:
        if saved is None:
            os.environ.pop("MFU_SHARED_DATA", None)
        else:
            os.environ["MFU_SHARED_DATA"] = saved
    return jobs, skipped + broken


def batch_argv(settings, batch_out, ops):
    """mfu_batch.py's command line for ``ops`` under ``settings`` (BATCH_DEFAULTS' keys)."""
    argv = [PY, "scripts/mfu_batch.py", "--examples", settings["examples"], "--out", batch_out, "--backend",
            settings["backend"], "--search", "--keep-prof", str(settings["keep_prof"]), "--no-progress",
            "--op-timeout-s", f"{settings['op_timeout_s']:g}", "--make", settings["make"], "--ops", ",".join(ops),
            "--make-arg", f"PROBE_ARGS={settings['probe_args']}", "--make-arg",
            f"SEARCH_ARGS={settings['search_args']}", "--make-arg", f"PMU={settings['pmu']}"]
    return argv


def _rows_of(parts):
    return [{k: p.get(k) for k in ("part", "mfu_ach", "mfu_nom", "time_share", "flops_share")}
            | {"bound": p.get("bound"), "headroom": (p.get("roofline") or {}).get("headroom")} for p in parts or []]


def op_result(job, out_root):
    """What RESULTS.md shows of one operator, read from its job record and work directory (None where absent)."""
    rec, work = load_json(job["record"]) or {}, job["work"]
    res = {"name": job["name"], "status": rec.get("status") or "not_run", "wall_s": rec.get("wall_s"),
           "reason": rec.get("reason"), "failed_step": rec.get("failed_step"), "started_at": rec.get("started_at"),
           "log_tail": tail(job["log"], 1500) or None}
    dec = load_json(os.path.join(work, "mfu_decompose.json"))
    if dec:
        rows = [r for rep in dec.get("reports") or [] for r in rep.get("rows") or [] if r.get("status") == "ok"]
        res["maxima"] = dec.get("maxima")
        res["peak_label"] = dec.get("peak_label")
        res["rows"] = [{k: r.get(k) for k in ("case", "dtype", "shape", "mfu_ach", "mfu_nom", "mbu", "numerator",
                                              "kernel_time_ns", "pmu_source", "pmu_unavailable")}
                       | {"bound": r.get("bound"), "parts": _rows_of(r.get("parts"))} for r in rows]
    gs = load_json(os.path.join(work, "grid_search.json"))
    if gs:
        res["search"] = {"best": gs.get("best"), "metric": gs.get("metric"), "pool": len(gs.get("pool") or []),
                         "scaled": sum(1 for p in gs.get("pool") or [] if not p.get("original")),
                         "cost_s": gs.get("cost_s"), "complete": gs.get("complete")}
    pr = load_json(os.path.join(work, "probe.json"))
    if pr:
        cands = pr.get("candidates") or []
        res["probe"] = {"candidates": len(cands), "passed": sum(1 for c in cands if c.get("verdict") == "pass"),
                        "appended": len(pr.get("appended") or {}), "complete": pr.get("complete"),
                        "interrupted": pr.get("interrupted"), "cut": pr.get("cut_candidate"),
                        # the ladder's early stop ("saturated": a doubling no longer raised wall TFLOP/s), wherever
                        # the probe records it (top level or per candidate)
                        "stop_reason": ", ".join(sorted({str(x) for x in [pr.get("stop_reason")]
                                                         + [c.get("stop_reason") for c in cands] if x})) or None,
                        "wall_s": sum(c.get("wall_s") or 0 for c in cands) or None}
    fc = load_json(os.path.join(work, "flops_check.json"))
    if fc:
        summ = fc.get("summary") or {}
        res["flops_check"] = {k: summ.get(k) for k in ("verdict", "n_cases", "by_status", "ratio_min", "ratio_max")}
    return res


def batch_complete(ops, calls, skipped, final=BATCH_FINAL):
    """(done, sets covered): every operator has a final status, every set of BATCH_DEFAULTS["examples"] was run by
    some call (one set per call is fine), and no operator was skipped for want of its case data (carry
    .shared_data: the module docstring)."""
    covered = {x for c in calls for x in ((c.get("settings") or {}).get("examples") or "").split(",") if x}
    wanted = {x for x in BATCH_DEFAULTS["examples"].split(",") if x}
    no_data = [n for n, w in skipped if str(w).startswith("case data absent")]
    return all(o["status"] in final for o in ops) and wanted <= covered and not no_data, covered


def finishing_calls(calls):
    """{operator: 1-based index of the last call that gave it a final status} from batch.json's call list."""
    out = {}
    for i, c in enumerate(calls or [], 1):
        for name in c.get("finished") or []:
            out[name] = i
    return out


def same_measure(a, b):
    """Whether two batch settings dicts agree on every key that changes an operator's numbers (BATCH_MEASURE_KEYS)."""
    return all((a or {}).get(k) == (b or {}).get(k) for k in BATCH_MEASURE_KEYS)


def drop_stale(jobs, calls, settings, final, rerun=()):
    """Operators whose final record was made under other measuring settings than ``settings`` (or by no recorded
    call), and those named in ``rerun`` (--batch-rerun: measured again after a fix): their job record and work
    directory are removed so that they run again from scratch. Returns [(name, why)]."""
    by_call, stale = finishing_calls(calls), []
    for j in jobs:
        rec = load_json(j["record"]) or {}
        if rec.get("status") not in final:
            continue
        i = by_call.get(j["name"])
        if j["name"] in rerun:
            why = "--batch-rerun"
        elif i is not None and same_measure(calls[i - 1].get("settings"), settings):
            continue
        else:
            why = (f"finished by call {i} under other settings" if i is not None else "finished by no recorded call")
        stale.append((j["name"], why))
        os.remove(j["record"])
        shutil.rmtree(j["work"], ignore_errors=True)
    return stale


def stage_batch(out, limit_s, env, final_out, settings, pack_dir, fresh=False):
    """mfu_batch.py over the bundled and real-case operators with the search, resumable across device calls.

    Restores the state tar of the earlier calls (``<pack_dir>/batch_state.tar.gz``; not with ``fresh``, which
    starts the batch over and forgets the earlier calls), runs the operators without a final job record (ok /
    failed / timeout) and those finished under other measuring settings (``drop_stale``), sends the batch SIGINT at
    the stage's limit (it kills the running operator, writes its summary and exits 130; the operator runs again next
    call, from its make stamps), then packs the state again beside pack.tgz and returns every operator's result so
    far, each with the call that finished it."""
    batch_out = os.path.join(out, "batch")
    state_in = os.path.join(pack_dir, BATCH_STATE_NAME)
    restored = restore_batch_state(state_in, batch_out) if os.path.exists(state_in) and not fresh else 0
    prev = {} if fresh else load_json(os.path.join(pack_dir, "batch.json")) or {}
    prev_calls = (prev.get("result") or {}).get("calls") or []
    jobs, skipped = batch_jobs(settings, batch_out, env)
    final = ("ok",) if settings["retry_failed"] else BATCH_FINAL
    unknown = sorted(set(settings.get("rerun") or ()) - {j["name"] for j in jobs})
    if unknown:
        raise SystemExit(f"--batch-rerun {','.join(unknown)}: no such operator in {settings['examples']}")
    stale = drop_stale(jobs, prev_calls, settings, final, settings.get("rerun") or ())
    for name, why in stale:
        log(f"batch: {name} runs again ({why})")
    pending = [j["name"] for j in jobs if (load_json(j["record"]) or {}).get("status") not in final]
    log_path = os.path.join(out, "batch.log")
    rc, argv, t0 = None, None, time.perf_counter()
    if pending:
        argv = batch_argv(settings, batch_out, pending)
        # SIGINT before the limit: the batch's own clean stop (summary written, exit 130), then this packing
        rc, _ = run_cmd(argv, max(1.0, limit_s - BATCH_STOP_MARGIN_S), log_path, env, interrupt=signal.SIGINT,
                        grace_s=BATCH_GRACE_S)
    # operators of an earlier call's sets (--batch-examples narrower this time) stay in the results
    names = {j["name"] for j in jobs}
    for path in sorted(glob.glob(os.path.join(batch_out, "jobs", "*.json"))):
        rec = load_json(path) or {}
        if rec.get("name") and rec["name"] not in names and rec.get("work"):
            jobs.append({"name": rec["name"], "work": rec["work"], "log": rec.get("log") or "", "record": path})
            names.add(rec["name"])
    ops = [op_result(j, batch_out) for j in jobs]
    manifest = pack_batch_state(batch_out, os.path.join(final_out, BATCH_STATE_NAME))
    call = {"created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git_commit": git_commit(),
            "source": tree_source(),
            "rc": rc, "wall_s": round(time.perf_counter() - t0, 1), "restored_files": restored, "ran": pending,
            "finished": [o["name"] for o in ops if o["name"] in pending and o["status"] in final],
            "stale": [{"name": n, "why": w} for n, w in stale],
            "settings": dict(settings), "command": None if argv is None else shlex.join(argv)}
    calls = prev_calls + [call]
    by_call = finishing_calls(calls)
    for o in ops:
        o["finished_by_call"] = by_call.get(o["name"]) if o["status"] in final else None
    complete, covered = batch_complete(ops, calls, skipped, final)
    return {"rc": rc if rc is not None else 0, "complete": complete, "command": call["command"],
            "log_tail": tail(log_path), "pack_files": [os.path.join(final_out, BATCH_STATE_NAME)],
            "result": {"settings": dict(settings), "measure_keys": list(BATCH_MEASURE_KEYS), "calls": calls,
                       "sets_covered": sorted(covered),
                       "ops": ops, "skipped": [{"name": n, "why": w} for n, w in skipped], "complete": complete,
                       "state": manifest, "shared_data": bool(env.get("MFU_SHARED_DATA"))}}


def bench_stage(name):
    """Stages that run one bench script writing one JSON: (argv builder, result JSON path under the stage dir)."""
    specs = {
        "overhead": (lambda o: [PY, "bench/bench_tool_overhead.py", "--backend", "cuda", "--modes", "warm",
                                "--out", os.path.join(o, "tool_overhead.json"), "--budget-s", "360"],
                     "tool_overhead.json"),
        "peaks": (lambda o: [PY, "bench/bench_peaks_h200.py", "--out", o], "bench_peaks_h200.json"),
        "peaks_wide": (lambda o: [PY, "bench/bench_peak_calib.py", "--out", o] + PEAKS_WIDE_ARGS,
                       "bench_peak_calib.json"),
        "gemm": (lambda o: [PY, "bench/bench_gemm_mfu.py", "--out", o], "bench_gemm_mfu.json"),
        "ncu": (lambda o: [PY, "bench/ncu_vs_profiler.py", "--out", os.path.join(o, "ncu_vs_profiler.md"),
                           "--work", os.path.join(o, "work"), "--ops", "zoo/5_MHABlock,zoo/1_BatchMatmul,zoo/4_FFN"],
                "ncu_vs_profiler.md.json"),
        "pmu_micro": (lambda o: [PY, "bench/pmu_bound_h200.py", "--out", o], "result.json"),
        "executed": (lambda o: [PY, "bench/executed_flops_h200.py", "--out", o], "result.json"),
        "cupti": (lambda o: [PY, "bench/cupti_variants_h200.py", "--out", o], "result.json"),
        "gemm_grid": (lambda o: [PY, "bench/gemm_grid_h200.py", "--out", o], "result.json"),
        "referee": (lambda o, lim, resume: [PY, "bench/bench_search_vs_bruteforce.py", "--out", o, "--shared-data",
                                            os.path.join(ROOT, ".shared_data", "data"),
                                            "--max-minutes", f"{max(1.0, (lim - 45) / 60):.1f}"]
                    + (["--resume-from", resume] if resume else []) + REFEREE_EXTRA,
                    "bench_search_vs_bruteforce.json"),
    }
    return specs[name]


def referee_resume(pack_dir):
    """The referee's tar of an earlier call when it can resume there, else None (logged): a tar whose work dirs
    hold no model.py would make every later part fail."""
    path = os.path.join(pack_dir, REFEREE_RESUME_NAME)
    if not os.path.exists(path):
        return None
    with tarfile.open(path) as tar:
        names = tar.getnames()
    works = {os.path.dirname(n) for n in names if n.endswith("/work/prepare.json")}
    lacking = sorted(w for w in works if f"{w}/model.py" not in names)
    if lacking:
        log(f"referee: not resuming from {path}: {', '.join(lacking)} without model.py (the bench starts afresh)")
        return None
    return path


def run_stage(name, out_root, limit_s, env, final_out, pack_dir=None, batch_settings=None, fresh=False):
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    t0 = time.perf_counter()
    pack_dir = pack_dir or os.path.join(ROOT, "bench", "validation", "h200")
    if name == "env":
        res = stage_env(out, limit_s, env)
    elif name == "makeall":
        res = stage_makeall(out, limit_s, env)
    elif name == "pmu":
        res = stage_pmu(out, limit_s, env, final_out)
    elif name == "batch":
        res = stage_batch(out, limit_s, env, final_out, batch_settings or dict(BATCH_DEFAULTS), pack_dir, fresh)
    else:
        argv_of, result_rel = bench_stage(name)
        argv = (argv_of(out, limit_s, None if fresh else referee_resume(pack_dir)) if name == "referee"
                else argv_of(out))
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
        if name == "peaks_wide":  # the calibration's every dtype and bandwidth (the bench's JSON has three dtypes)
            pk = load_json(os.path.join(out, "peak.json")) or {}
            res["peak_json"] = {k: pk.get(k) for k in ("peak_tflops", "peak_tops", "bandwidth_gbps", "regime")}
        if name == "executed" and os.path.isdir(os.path.join(out, "fixtures")):  # the launched kernels' PTX
            fx = os.path.join(final_out, "executed_fixtures.tar.gz")  # -> tests/fixtures/h200_triton_cache/
            with tarfile.open(fx, "w:gz") as tar:
                tar.add(os.path.join(out, "fixtures"), arcname="fixtures")
            res["pack_files"] = [fx]
        if name == "referee":  # resumable: done when the bench has no part pending; its tar travels in the pack
            res["complete"] = bool(res["result"]) and not res["result"].get("pending")
            if os.path.exists(os.path.join(out, REFEREE_RESUME_NAME)):
                shutil.copy(os.path.join(out, REFEREE_RESUME_NAME), final_out)  # the next call resumes from it
                res["pack_files"] = [os.path.join(final_out, REFEREE_RESUME_NAME)]
    res.update({"stage": name, "wall_s": round(time.perf_counter() - t0, 1),
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git_commit": git_commit(),
                "source": tree_source()})
    return res


_SOURCE = []


def tree_source():
    """bench/freshness.py's source stamp of the tree this call runs, hashed here from the files (never the copy's
    .git), once per call; checked against MFU_TREE_SHA256 when the caller computed it before the call."""
    if not _SOURCE:
        _SOURCE.append(source_stamp())
        if _SOURCE[0].get("tree_matches_expected") is False:
            log(f"WARNING: this tree hashes to {_SOURCE[0]['tree_sha256']}, not MFU_TREE_SHA256 "
                f"{_SOURCE[0]['tree_sha256_expected']}: the packs record the mismatch")
    return _SOURCE[0]


def git_commit():
    if os.environ.get("MFU_GIT_COMMIT"):  # the device's copy of the tree may carry a stale .git: say it explicitly
        return os.environ["MFU_GIT_COMMIT"]
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or None


def stage_done(pack_dir, name, batch_settings=None, referee_extra=None):
    """Packed and complete: a resumable stage (referee, batch) packed with ``complete: false`` runs again, and so does
    a batch with an operator finished under other measuring settings than ``batch_settings`` (``same_measure``) and a
    referee asked to measure operators again (``--redo`` or ``--redo-search`` in ``referee_extra``, default
    ``MFU_REFEREE_EXTRA``)."""
    doc = load_json(os.path.join(pack_dir, f"{name}.json"))
    if doc is None or doc.get("complete") is False:
        return False
    extra = REFEREE_EXTRA if referee_extra is None else referee_extra
    if name == "referee" and any(a.split("=")[0] in ("--redo", "--redo-search") for a in extra):
        return False
    if name == "batch" and batch_settings is not None:
        if batch_settings.get("rerun"):
            return False
        r = doc.get("result") or {}
        calls = r.get("calls") or []
        by_call = finishing_calls(calls)
        return all(by_call.get(o.get("name")) and same_measure(calls[by_call[o["name"]] - 1].get("settings"),
                                                               batch_settings) for o in r.get("ops") or [])
    return True


def device_name():
    """The accelerator's name (torch.cuda.get_device_name, in a child), or None without one."""
    try:
        r = subprocess.run([PY, "-c", "import torch; print(torch.cuda.get_device_name(0) if "
                            "torch.cuda.is_available() else '')"], capture_output=True, text=True, timeout=120)
        return r.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def card_mismatch(pack_dir, name):
    """Why this call must not pack into ``pack_dir``, or None: a pack holds one card's measurements (its env.json
    names the card), and a device call can land on another (an H100 for an H200); the referee's kept brute force
    and peaks, and every comparison of the pack, would then mix two cards."""
    env = load_json(os.path.join(pack_dir, "env.json")) or {}
    packed = ((env.get("result") or {}).get("versions") or {}).get("name")
    if packed and name and packed != name:
        return (f"{pack_dir} holds measurements of a {packed} (env.json), this machine has a {name}: pack into a "
                f"directory of this card (--pack-dir bench/validation/<card>) - never mix two cards in one pack")
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pack-dir", default=os.path.join(ROOT, "bench", "validation", "h200"),
                   help="packed results of earlier calls (stages found here are not run again)")
    p.add_argument("--stages", default=",".join(STAGES), help="stages to run, in order (default: all)")
    p.add_argument("--deadline-s", type=float, default=540.0, help="start no stage after this many seconds, and "
                                                                     "cap each stage's limit by what is left")
    p.add_argument("--force", action="store_true", help="run stages even when packed already; a resumable stage "
                   "(referee, batch) then starts afresh, ignoring its state tar and earlier calls")
    p.add_argument("--out", default=os.environ.get("OUT") or "validate_out", help="where pack.tgz is written")
    b = p.add_argument_group("batch stage (defaults: BATCH_DEFAULTS; each call records what it used)")
    b.add_argument("--batch-examples", default=BATCH_DEFAULTS["examples"], help="bundled sets (mfu_batch --examples)")
    b.add_argument("--batch-op-timeout-s", type=float, default=BATCH_DEFAULTS["op_timeout_s"],
                   help="one operator's limit (mfu_batch --op-timeout-s)")
    b.add_argument("--batch-probe-args", default=BATCH_DEFAULTS["probe_args"], help="make PROBE_ARGS")
    b.add_argument("--batch-search-args", default=BATCH_DEFAULTS["search_args"], help="make SEARCH_ARGS")
    b.add_argument("--batch-pmu", default=BATCH_DEFAULTS["pmu"], choices=("none", "auto", "ncu"), help="make PMU")
    b.add_argument("--batch-retry-failed", action="store_true", help="run failed / timed-out operators again")
    b.add_argument("--batch-rerun", default="", help="operators to measure again from scratch (comma-separated "
                   "names, e.g. zoo/6_GQAAttention after a fix); the call records them as stale")
    args = p.parse_args(argv)
    batch_settings = dict(BATCH_DEFAULTS, examples=args.batch_examples, op_timeout_s=args.batch_op_timeout_s,
                          probe_args=args.batch_probe_args, search_args=args.batch_search_args, pmu=args.batch_pmu,
                          retry_failed=args.batch_retry_failed,
                          rerun=[x for x in args.batch_rerun.split(",") if x])
    stages = [s for s in args.stages.split(",") if s]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        p.error(f"--stages {bad}: choose from {','.join(STAGES)}")
    why = card_mismatch(args.pack_dir, device_name())
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
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
        if not args.force and stage_done(args.pack_dir, name, batch_settings):
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
        res = run_stage(name, work_root, min(limit, left), env, args.out, args.pack_dir, batch_settings,
                        fresh=args.force)
        path = os.path.join(args.out, f"{name}.json")
        extra = res.pop("pack_files", [])
        with open(path + ".tmp", "w") as f:
            json.dump(res, f, indent=1, default=str)
        os.replace(path + ".tmp", path)
        packed += [path] + [x for x in extra if os.path.exists(x)]
        summary.append((name, f"rc={res.get('rc')} {res['wall_s']} s"
                        + ("" if res.get("complete") is not False else " (partial: the next call resumes)")))
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
