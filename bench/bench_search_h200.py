#!/usr/bin/env python3
"""Is the two-stage (case, scale) search as good as measuring everything, at a fraction of the cost?

For each operator (zoo/5_MHABlock, the real FFN npukernelbench/level4/2_FFN, optionally the real
npukernelbench/level4/3_FusionAttention), in resumable parts, each skipped when its result is already in the state
directory:

1. ``prepare``: prepare_op_dir.py --example <op> into ``<state>/<op>/work`` (the real case files come from
   ``--shared-data``: the folder holding ``npukernelbench/``, e.g. a copy of ../shared/data carried into the tree);
2. ``probe``: scripts/max_shape_probe.py (five gates, appends the legal scaled cases), bounded by the call's time
   left (``--budget-s``; a re-run resumes until probe.json says complete);
3. ``search``: scripts/mfu_grid_search.py (pool -> stage 1 wall clock -> stage 2 collector) -> grid_search.json;
4. ``exhaustive``: the collector over the **whole pool** (the same code and the same collector settings as stage 2,
   mfulib.search.grid.stage2 with the search's --stage2-* options and --collect-arg: PMU included, ``--pmu auto``
   on cuda), in chunks of at most ``--chunk`` cases, fewer when the call's time left would not hold them at the
   search's stage-2 cost per case (each chunk pays one collector start-up: ``exhaustive_n_chunks`` says how many);
5. ``spread``: the search's best point measured 3 more times by the collector (run-to-run spread of the limit;
   these runs skip the PMU pass, ``--pmu none``: the spread is of the kernel-time figure and cheap);
6. ``report``: per operator the search's best MFU vs the exhaustive best (done when within 3%), the wall cost of
   the search vs the exhaustive measurement (done when <= 25%) - both the two stages alone against the exhaustive
   collection and with the parts common to both (FLOPs tracing, verify) added to each side - the search's cost
   split (flops, verify, stage 1, stage 2), the spread, and the limit MFU beside the dataset-shape MFU (the best
   original case at scale 1 in the exhaustive measurement).

Compile cache: realistic use is probe -> search (or probe -> exhaustive), both after the probe has compiled every
scaled candidate. So every part runs with ONE shared Triton cache, ``<state>/triton-cache`` (``TRITON_CACHE_DIR``,
which mfulib.run.worker.child_env hands to every worker and child), warm from the probe when the search and the
exhaustive measurement are timed; the search runs first, so cases the probe did not compile (originals at scale 1
that verify had not run) are compiled on the search's bill, not the exhaustive one's. The cache travels in the tar
(when under 48 MiB) so a call on a fresh machine resumes warm; each part records the cache's file count at its start
(``cache_files_at_start``) and the output says whether it was warm.

Every call stops starting parts when ``--max-minutes`` (8.5) would be exceeded and says what is left; call it
again (same machine: the state directory is kept; a fresh machine: pass the previous call's tar with
``--resume-from``). Results: ``<out>/bench_search_h200.json`` + ``.md``, and everything in one
``<out>/bench_search_h200.tar.gz`` (state JSONs, no raw profiles).

    python3 bench/bench_search_h200.py --shared-data <dir holding npukernelbench/> --out "$OUT" [--with-fa]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
sys.path.insert(0, SCRIPTS)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import run_tree  # noqa: E402

OPS = {"mha": "zoo/5_MHABlock", "ffn": "npukernelbench/level4/2_FFN", "fa": "npukernelbench/level4/3_FusionAttention"}
WITHIN = 0.03  # search best within 3% of the exhaustive best
COST_RATIO = 0.25  # at <= 25% of its wall cost
T0 = time.monotonic()


def left_s(args):
    return args.max_minutes * 60 - (time.monotonic() - T0)


def run(cmd, env=None, timeout=None):
    """subprocess.run's contract (CompletedProcess; subprocess.TimeoutExpired after ``timeout``), but the whole
    process tree is killed on timeout - the probe's gate children too (:func:`benchlib.run_tree`)."""
    rc, out, err, wall = run_tree(cmd, timeout, env=env)
    if rc == "timeout":
        raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err)
    return subprocess.CompletedProcess(cmd, rc, out, err), wall


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def save(path, obj):
    from mfulib.core.jsonio import write_json_atomic
    write_json_atomic(path, obj)


def part_prepare(op, work, args, env, st):
    r, wall = run([sys.executable, os.path.join(SCRIPTS, "prepare_op_dir.py"), "--example", op, "--dst", work,
                   "--force"], env=env)
    if r.returncode:
        raise RuntimeError(f"prepare {op}: {r.stderr.strip()[-800:]}")
    st["prepare"] = {"wall_s": wall}


def part_probe(op, work, args, env, st):
    budget = max(60.0, left_s(args) - 45)
    cmd = [sys.executable, os.path.join(SCRIPTS, "max_shape_probe.py"), "--dir", work, "--flops-tool",
           os.path.join(SCRIPTS, "check_flops.py"), "--max-bytes", "10e9", "--max-ms", "4000", "--backend",
           args.backend, "--device", "0", "--budget-s", f"{budget:.0f}"] + args.probe_arg
    r, wall = run(cmd, env=env, timeout=budget + 60)
    probe = os.path.join(work, "probe.json")
    doc = load(probe) if os.path.exists(probe) else {}
    st.setdefault("probe_calls", []).append({"rc": r.returncode, "wall_s": wall, "tail": (r.stdout + r.stderr)[-600:]})
    if doc.get("complete"):
        st["probe"] = {"wall_s": sum(c["wall_s"] for c in st["probe_calls"]), "appended": len(doc.get("appended")
                                                                                               or {})}
    elif r.returncode not in (0, 130):
        raise RuntimeError(f"probe {op} (exit {r.returncode}): {(r.stdout + r.stderr).strip()[-800:]}")


def cache_files():
    """Files in the shared Triton cache now (``TRITON_CACHE_DIR``, set by main for every part)."""
    return sum(len(f) for _d, _s, f in os.walk(os.environ["TRITON_CACHE_DIR"]))


def part_search(op, work, args, env, st):
    at_start = cache_files()  # warm from the probe (the same shared cache as every other part)
    r, wall = run([sys.executable, os.path.join(SCRIPTS, "mfu_grid_search.py"), "--dir", work, "--backend",
                   args.backend, "--quiet"] + args.search_arg + [f"--collect-arg={a}" for a in args.collect_arg],
                  env=env, timeout=max(60, left_s(args)))
    gs = os.path.join(work, "grid_search.json")
    if r.returncode or not os.path.exists(gs):
        raise RuntimeError(f"search {op} (exit {r.returncode}): {(r.stdout + r.stderr).strip()[-800:]}")
    st["search"] = {"wall_s": wall, "stdout": r.stdout[-3000:], "cache_files_at_start": at_start}


def _opts(args, work, pmu=None):
    """The stage-2 collector settings the search used (its --stage2-* options from --search-arg, --collect-arg),
    so that the exhaustive measurement is the same precise measurement; ``pmu`` overrides --stage2-pmu."""
    from mfu_grid_search import build_parser
    from mfulib.search.grid import SearchOptions
    a = build_parser().parse_args(["--dir", work] + list(args.search_arg))
    return SearchOptions(backend=args.backend, progress=False, collect_args=list(args.collect_arg), seed=a.seed,
                         stage2_warmup=a.stage2_warmup, stage2_repeats=a.stage2_repeats,
                         stage2_pmu=pmu or a.stage2_pmu, case_timeout_s=a.case_timeout_s,
                         unverified_ok=a.unverified_ok, device_id=a.device)


def chunk_size(gs: dict, args) -> int:
    """Pool cases the next exhaustive chunk may take: ``--chunk`` at most, and no more than fit in the call's time
    left (minus 45 s) at 1.3 x the median per-case cost of the search's stage 2 (the same collector settings; 60 s
    per case when stage 2 recorded none), at least 1."""
    walls = [r["wall_s"] for r in gs.get("stage2") or [] if r.get("wall_s")]
    per_case = 1.3 * (statistics.median(walls) if walls else 60.0)
    return max(1, min(args.chunk, int((left_s(args) - 45) // per_case)))


def part_exhaustive_chunk(op, work, args, env, st):
    """Measure the next ``--chunk`` pool cases not yet measured exhaustively; done when every pool case is."""
    from mfulib.search.grid import load_peaks, stage2
    from mfulib.core.opdir import OpDir
    gs = load(os.path.join(work, "grid_search.json"))
    done = {c for ch in st.get("exhaustive_chunks", []) for c in ch["cases"]}  # attempted (verify may refuse some)
    todo = [p["case"] for p in gs["pool"] if p["case"] not in done][:chunk_size(gs, args)]
    if todo:
        cost = {}  # the shared cache, warm from the probe (and the search), as in realistic use
        at_start = cache_files()
        k = len(st.get("exhaustive_chunks", []))
        rows, _perf = stage2(OpDir(work), todo, gs["pool"], args.backend, _opts(args, work),
                             load_peaks(os.path.join(work, "peak.json")), gs["metric"], lambda m: None, cost,
                             out_name=f"exhaustive{k}")
        st.setdefault("exhaustive_chunks", []).append({"cases": todo, "wall_s": cost["stage2"], "rows": rows,
                                                       "cache_files_at_start": at_start})
    if all(p["case"] in done | set(todo) for p in gs["pool"]):
        st["exhaustive"] = {"wall_s": sum(ch["wall_s"] for ch in st["exhaustive_chunks"])}


def part_spread(op, work, args, env, st):
    from mfulib.search.grid import load_peaks, stage2
    from mfulib.core.opdir import OpDir
    gs = load(os.path.join(work, "grid_search.json"))
    best = gs["best"]["case"]
    runs = st.setdefault("spread_runs", [])
    while len(runs) < 3 and left_s(args) > 60:
        rows, _ = stage2(OpDir(work), [best], gs["pool"], args.backend, _opts(args, work, pmu="none"),
                         load_peaks(os.path.join(work, "peak.json")), gs["metric"], lambda m: None, {},
                         out_name=f"spread{len(runs)}")
        runs.append(rows[0])
    if len(runs) >= 3:
        st["spread"] = {"case": best}


PARTS = [("prepare", part_prepare), ("probe", part_probe), ("search", part_search),
         ("exhaustive", part_exhaustive_chunk), ("spread", part_spread)]
MIN_LEFT_S = {"prepare": 30, "probe": 90, "search": 150, "exhaustive": 75, "spread": 60}  # chunks shrink to fit


def figure(row, metric):
    return row.get("metric_value") if row and row.get("status") == "ok" else None


def summarize(name, st):
    """The per-operator result block (None values where a part has not run)."""
    work = st["work"]
    gs = load(os.path.join(work, "grid_search.json")) if os.path.exists(os.path.join(work, "grid_search.json")) \
        else None
    out = {"op": name, "parts_done": [p for p, _ in PARTS if p in st], "errors": st.get("errors", [])}
    if not gs:
        return out
    metric, pool = gs["metric"], {p["case"]: p for p in gs["pool"]}
    best = gs.get("best") or {}
    kind = best.get("mfu_kind") if metric == "mfu" else ("measured" if best.get("mbu") is not None else None)
    out.update(metric=metric, figure_field=kind, pool_size=len(gs["pool"]),
               n_scaled=sum(1 for p in gs["pool"] if not p["original"]), search_best=gs.get("best"),
               search_cost_s={k: gs["cost_s"].get(k) for k in ("flops", "verify", "stage1", "stage2", "total")},
               search_case_wall_s={"stage1": {r["case"]: r.get("wall_s") for r in gs["stage1"]},
                                   "stage2": {r["case"]: r.get("wall_s") for r in gs["stage2"]}},
               cache_files_at_start={"search": (st.get("search") or {}).get("cache_files_at_start"),
                                     "exhaustive": [ch.get("cache_files_at_start")
                                                    for ch in st.get("exhaustive_chunks", [])]})
    best_s = figure(gs["stage2"][0], metric) if gs["stage2"] else None
    out["search_best_value"] = best_s
    if "exhaustive" in st:
        rows = [r for ch in st["exhaustive_chunks"] for r in ch["rows"]]
        ok = [r for r in rows if figure(r, metric) is not None]
        ex = max(ok, key=lambda r: r["metric_value"]) if ok else None
        orig = [r for r in ok if pool[r["case"]]["original"]]
        ds = max(orig, key=lambda r: r["metric_value"]) if orig else None
        # the two stages replace the exhaustive collection; the tracer and verify costs are common to both
        search_wall = (gs["cost_s"].get("stage1") or 0) + (gs["cost_s"].get("stage2") or 0)
        ex_wall = st["exhaustive"]["wall_s"]
        common = (gs["cost_s"].get("flops") or 0) + (gs["cost_s"].get("verify") or 0)
        out["cost_ratio_with_flops_and_verify"] = (search_wall + common) / (ex_wall + common) if ex_wall else None
        out["common_cost_s"] = common
        out["exhaustive_n_chunks"] = len(st["exhaustive_chunks"])  # each pays one collector start (a few s)
        ex_case = [r.get("wall_s") for r in rows if r.get("wall_s") is not None]
        out["exhaustive_case_wall_s"] = {"n": len(ex_case), "median": statistics.median(ex_case) if ex_case else None}
        out.update(exhaustive_best_case=ex["case"] if ex else None, exhaustive_best_value=figure(ex, metric),
                   exhaustive_cost_s=ex_wall, search_cost_stages_s=search_wall,
                   cost_ratio=search_wall / ex_wall if ex_wall else None,
                   dataset_best_case=ds["case"] if ds else None, dataset_value=figure(ds, metric),
                   exhaustive_rows=[{k: r.get(k) for k in ("case", "status", "kernel_time_ns", "metric_value",
                                                           "mfu_nom", "mfu_ach", "mbu", "num_src")} for r in rows])
        if ex and best_s is not None:
            out["gap"] = (ex["metric_value"] - best_s) / ex["metric_value"]
            out["within_3pct"] = out["gap"] <= WITHIN
        if out["cost_ratio"] is not None:
            out["cost_le_25pct"] = out["cost_ratio"] <= COST_RATIO
    if "spread" in st:
        vals = [figure(r, metric) for r in st["spread_runs"] if figure(r, metric) is not None]
        if vals:
            med = statistics.median(vals)
            out.update(spread_case=st["spread"]["case"], spread_values=vals,
                       spread=(max(vals) - min(vals)) / med if med else None)
    return out


def pct(v, r=None):
    """A utilisation as %, or (no peak known: cpu) the raw figure with its unit."""
    if v is None:
        return "-"
    if r is not None and not r.get("figure_field") and r.get("metric") == "mfu":
        return f"{v:.4g} TFLOP/s"
    if r is not None and not r.get("figure_field") and r.get("metric") == "mbu":
        return f"{v:.4g} GB/s"
    return f"{v:.2%}"


def _s(v):
    return "-" if v is None else f"{v:.1f}"


def markdown(results):
    lines = ["| operator | metric | pool (scaled) | search best | exhaustive best | gap | search cost s (flops / "
             "verify / stage 1 / stage 2) | exhaustive cost s | cost ratio (stages; with flops+verify) | "
             "best-point spread (3x) | limit | dataset shapes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "metric" not in r:
            lines.append(f"| {r['op']} | parts done: {', '.join(r['parts_done'])} |" + " |" * 10)
            continue
        fig = r["metric"].upper() + (f"@{r['figure_field']}" if r["metric"] == "mfu" and r.get("figure_field") else "")
        lim = max([v for v in (r.get("exhaustive_best_value"), r.get("search_best_value")) if v is not None],
                  default=None)
        cr, crc, c = r.get("cost_ratio"), r.get("cost_ratio_with_flops_and_verify"), r.get("search_cost_s") or {}
        lines.append(f"| {r['op']} | {fig} | {r['pool_size']} ({r['n_scaled']}) | "
                     f"{pct(r.get('search_best_value'), r)} (case {(r.get('search_best') or {}).get('case')}) | "
                     f"{pct(r.get('exhaustive_best_value'), r)} (case {r.get('exhaustive_best_case')}) | "
                     f"{pct(r.get('gap'))} | {_s(r.get('search_cost_stages_s'))} ({_s(c.get('flops'))} / "
                     f"{_s(c.get('verify'))} / {_s(c.get('stage1'))} / {_s(c.get('stage2'))}) | "
                     f"{_s(r.get('exhaustive_cost_s'))} | "
                     f"{'-' if cr is None else f'{cr:.0%}'}; {'-' if crc is None else f'{crc:.0%}'} | "
                     f"{pct(r.get('spread'))} | {pct(lim, r)} | "
                     f"{pct(r.get('dataset_value'), r)} (case {r.get('dataset_best_case')}) |")
    warm = [f"{r['op']}: Triton cache files at the start of the search {r['cache_files_at_start']['search']}, of "
            f"the exhaustive chunks {r['cache_files_at_start']['exhaustive']}" for r in results
            if r.get("cache_files_at_start")]
    return "\n".join(lines + [""] + [f"* {w} (one shared cache, warm from the probe; 0 = cold)" for w in warm]) + "\n"


def resume(tar_path: str, state: str) -> None:
    """Unpack a previous call's tar into ``state`` (whatever the state folder was called there); files already in
    ``state`` are overwritten by the tar's. Raises RuntimeError for a tar without a state folder."""
    import tempfile
    tmp = tempfile.mkdtemp(prefix="bench_search_resume_")
    try:
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp, filter="data")
        tops = [d for d in os.listdir(tmp) if os.path.isdir(os.path.join(tmp, d))]
        if len(tops) != 1:
            raise RuntimeError(f"{tar_path}: expected one state folder in the tar, found {tops}")
        shutil.copytree(os.path.join(tmp, tops[0]), state, dirs_exist_ok=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def state_files(state: str) -> list:
    """What a call on a fresh machine needs to resume (``--resume-from``): the part results and every work dir
    whole - operator files, case copies, probe backup, verify/probe/search JSONs - except raw profiles (under
    ``search/`` only the collectors' performance.json) and files over 8 MiB; the Triton cache is added apart."""
    out = []
    for d, dirs, files in os.walk(state):
        rel = os.path.relpath(d, state)
        if rel.split(os.sep)[0] == "triton-cache":
            dirs[:] = []
            continue
        in_search = f"{os.sep}search" in f"{os.sep}{rel}"
        for f in files:
            path = os.path.join(d, f)
            if (in_search and f != "performance.json") or os.path.getsize(path) > 8 * 2 ** 20:
                continue
            out.append(path)
    return sorted(out)


CACHE_TAR_MAX_BYTES = 48 * 2 ** 20  # the shared Triton cache travels in the tar (warm resume) when no larger


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shared-data", required=True, help="folder holding npukernelbench/ (the real case files)")
    p.add_argument("--out", default=os.environ.get("OUT", "bench_search_out"), help="results folder")
    p.add_argument("--state", default=os.path.join(ROOT, "work", "bench_search_h200"),
                   help="work dirs + part results, kept between calls (an ignored path of the tree)")
    p.add_argument("--resume-from", default=None, help="a previous call's bench_search_h200.tar.gz")
    p.add_argument("--ops", default="mha,ffn", help="comma list of mha, ffn, fa (or bundled operator names)")
    p.add_argument("--with-fa", action="store_true", help="add fa (FusionAttention) to --ops")
    p.add_argument("--max-minutes", type=float, default=8.5, help="start no part after this much wall time")
    p.add_argument("--chunk", type=int, default=40, help="pool cases per exhaustive-collector call at most (each call "
                   "pays one collector start: keep it large, so the exhaustive cost is not inflated); fewer when the "
                   "call's time left would not hold them at the search's stage-2 cost per case")
    p.add_argument("--probe-arg", action="append", default=[], help="extra max_shape_probe.py argument")
    p.add_argument("--search-arg", action="append", default=[], help="extra mfu_grid_search.py argument")
    p.add_argument("--collect-arg", action="append", default=[],
                   help="extra collector argument for stage 2 and the exhaustive measurement alike (e.g. the PMU "
                        "option, so the precise measurement is SKILL.md step 2's stage 2: with counters)")
    p.add_argument("--backend", default="cuda", help="cuda on the H200; cpu only to smoke-test the script")
    p.add_argument("--no-probe", action="store_true", help="skip the probe (pool at scale 1 only; a smoke test)")
    p.add_argument("--retry-failed", action="store_true", help="retry the part an operator failed in before")
    args = p.parse_args()
    ops = [o for o in args.ops.split(",") if o] + (["fa"] if args.with_fa and "fa" not in args.ops else [])
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.state, exist_ok=True)
    if args.resume_from:
        resume(args.resume_from, args.state)
    # one shared Triton compile cache for every part (the probe fills it; search and exhaustive both reuse it)
    os.environ["TRITON_CACHE_DIR"] = os.path.join(os.path.abspath(args.state), "triton-cache")
    os.makedirs(os.environ["TRITON_CACHE_DIR"], exist_ok=True)
    env = dict(os.environ, MFU_SHARED_DATA=os.path.abspath(args.shared_data))
    results, pending = [], []
    for key in ops:
        name = OPS.get(key, key)  # a key of OPS or any bundled operator name
        key = key.replace("/", "__")
        st_path = os.path.join(args.state, f"{key}.json")
        st = load(st_path) if os.path.exists(st_path) else {"op": name}
        st["work"] = os.path.join(args.state, key, "work")
        if "prepare" in st and not os.path.exists(os.path.join(st["work"], "model.py")):
            shutil.rmtree(st["work"], ignore_errors=True)  # its leftovers (an old probe.json) must not be resumed
            st = {"op": name, "work": st["work"], "restarted": "the state had no work dir (an older tar?): "
                                                               "the operator starts over"}
        if args.retry_failed:
            st.pop("failed", None)
        if args.no_probe:
            st.setdefault("probe", {"skipped": "--no-probe"})
        for part, fn in PARTS:
            while part not in st and left_s(args) > MIN_LEFT_S[part] and not st.get("failed"):
                before = json.dumps(st, sort_keys=True, default=str)
                try:
                    fn(name, st["work"], args, env, st)
                except Exception as exc:  # noqa: BLE001 - one operator failing never stops the others
                    st.setdefault("errors", []).append(f"{part}: {type(exc).__name__}: {exc}"[:1500])
                    st["failed"] = part
                save(st_path, st)
                if json.dumps(st, sort_keys=True, default=str) == before:
                    break  # no progress this round (a part that needs another call)
            if part not in st:
                pending.append(f"{key}:{part}")
                break
        results.append(summarize(name, st))
    doc = {"device": _device(), "ops": results, "pending": pending, "wall_s": time.monotonic() - T0,
           "criteria": {"within": WITHIN, "cost_ratio": COST_RATIO}}
    save(os.path.join(args.out, "bench_search_h200.json"), doc)
    with open(os.path.join(args.out, "bench_search_h200.md"), "w", encoding="utf-8") as f:
        f.write(markdown(results))
    with tarfile.open(os.path.join(args.out, "bench_search_h200.tar.gz"), "w:gz") as tar:
        for path in state_files(args.state):
            tar.add(path, arcname=os.path.relpath(path, os.path.dirname(os.path.abspath(args.state))))
        for name in ("bench_search_h200.json", "bench_search_h200.md"):
            tar.add(os.path.join(args.out, name), arcname=name)
        cache = os.environ["TRITON_CACHE_DIR"]
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _s, fs in os.walk(cache) for f in fs)
        if size <= CACHE_TAR_MAX_BYTES:
            tar.add(cache, arcname=os.path.relpath(cache, os.path.dirname(os.path.abspath(args.state))))
        else:
            print(f"note: the Triton cache ({size / 2 ** 20:.0f} MiB) is not in the tar: a resume on a fresh machine "
                  "compiles again (its parts record cache_files_at_start)")
    print(markdown(results))
    print("pending: " + (", ".join(pending) if pending else "nothing - every part is done"))
    return 0


def _device():
    try:
        import torch
        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception as exc:  # noqa: BLE001 - descriptive only
        return f"unknown ({exc})"


if __name__ == "__main__":
    sys.exit(main())
