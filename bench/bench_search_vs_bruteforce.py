#!/usr/bin/env python3
"""A brute-force referee for the limit search: does the search, run as a user runs it, find the limit?

Per operator, in resumable parts (each skipped when its result is in the state directory; ``--max-minutes`` stops
between parts, and a part that runs long - the brute force - stops at its deadline and goes on next call):

1. ``prepare``: prepare_op_dir.py --example <op> into ``<state>/<op>/work`` (flops.py is the bundled
   ``<op>_flops.py``; the real case files come from ``--shared-data``, the folder holding ``npukernelbench/``); the
   original case file is kept as ``orig_cases.jsonl``, the state's ``peak.json`` copied in (``peak``: peak_calib.py
   once per state directory, so both sides share one set of peaks); then verify_op.py over the original cases, as
   ``make all`` runs step 1's verify before the probe whether or not it searches (its wall clock is recorded,
   ``verify_wall_s``, and is not the search's cost);
2. ``probe`` and ``search``: the search as a user runs it, ``max_shape_probe.py --budget-s <--probe-budget-s>``
   (one call: a probe cut by its budget stays cut, probe.json says so) then ``mfu_grid_search.py`` -> the search's
   limit, grid_search.json's ``best``; each part's wall clock is the search's cost;
3. ``brute``: bench/referee_bruteforce.py in a child, independent of the search's code (mfulib.search is never
   imported): the top ``--top`` original cases by flops.py FLOPs x every non-empty subset of their scalable axes
   (batch and sequence symbols, and k of a matmul of two data operands; never a weight) x powers of two per axis
   up to ``--max-scale``, under the probe's limits (inputs + outputs <= 10e9 B, one call <= 4000 ms, verify as far
   as the reference runs), timed by its own method (ModelNew only, device events after an L2 flush, median), at
   most ``--brute-budget-s`` of timing per operator (points left untimed are counted: ``not run``, and the cost of
   the whole brute force is then estimated from the mean cost of the points timed); its best verified point is
   the brute force's limit; its wall clock (first calls, i.e. compilation, shown apart) is its cost;
4. ``retime``: both limits re-timed by the collector (msprof_perf_summary.py --cases, ModelNew only, no PMU pass)
   in ``--retimes`` separate, interleaved runs on a copy of the work dir with the brute force's best case appended:
   one timing method, one peak.json, one numerator (flops.py) for both;
5. report: per operator MFU@ach (MBU without matrix work) search / brute force from the re-timings' medians, TF/s
   beside it, each side's cost, and where the two points differ; **pass** = ratio >= 0.97 or a gap within the
   combined spread (max - min) of the two re-timings, at a search cost <= 25% of the brute force's.

One Triton cache, ``<state>/triton-cache`` (``TRITON_CACHE_DIR``, handed to every child), serves every part. Each
call writes ``<out>/bench_search_vs_bruteforce.json`` + ``.md`` and ``<out>/bench_search_vs_bruteforce.tar.gz``
(the state: part results, brute-force rows, the work dirs' JSON, JSONL and operator .py files - never profiles or
the Triton cache); ``--resume-from <tar>`` continues on a fresh machine. Plan ~4 device minutes per operator.

  python3 bench/bench_search_vs_bruteforce.py --shared-data <dir> --out "$OUT" --ops zoo/5_MHABlock,zoo/6_GQAAttention
  python3 bench/bench_search_vs_bruteforce.py --cpu-tiny --ops zoo/1_BatchMatmul --out /tmp/ref     # smoke test
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, SCRIPTS)
sys.path.insert(0, BENCH)
from benchlib import load_json, pack_state, run_tree, save_json, unpack_state  # noqa: E402
import referee_bruteforce as bf  # noqa: E402

NAME = "bench_search_vs_bruteforce"
OPS = ("zoo/5_MHABlock", "zoo/6_GQAAttention", "zoo/1_BatchMatmul", "20_FlashAttentionV2",
       "npukernelbench/level4/2_FFN", "npukernelbench/level3/1_BatchMatmul", "npukernelbench/level4/3_FusionAttention")
PARTS = ("prepare", "probe", "search", "brute", "retime")
RATIO_MIN, COST_MAX = 0.97, 0.25
MAX_BYTES, MAX_MS = 10e9, 4000.0  # the probe's limits (the Makefile's PROBE_CMD)
CPU_INPUT_BYTES = 1e6  # verify's input cap on cpu (the interpreter): the smoke test keeps to it
T0 = time.monotonic()


def left_s(args):
    return args.max_minutes * 60 - (time.monotonic() - T0)


def min_left_s(part, args):
    """Seconds a part needs left in the call to start: the probe its whole budget, the others a floor."""
    return {"prepare": 20, "probe": args.probe_budget_s + 45, "search": 90, "brute": 60,
            "retime": 45}.get(part, 30)


def next_part(st: dict, left: float, need) -> tuple:
    """(part to run or None, why): the first of :data:`PARTS` not done in ``st``; None when all are done
    ("done"), when the operator failed or was skipped, or when the call has less than ``need(part)`` s left
    ("time: <part> needs N s")."""
    if st.get("skipped"):
        return None, f"skipped: {st['skipped']}"
    if st.get("failed"):
        return None, f"failed in {st['failed']}"
    for part in PARTS:
        if part not in st:
            return (part, "run") if left > need(part) else (None, f"time: {part} needs {need(part):.0f} s")
    return None, "done"


def run(cmd, timeout=None, env=None):
    rc, out, err, wall = run_tree(cmd, timeout, env=env)
    return rc, (out or "") + (err or ""), wall


def _fail(what, rc, text):
    raise RuntimeError(f"{what} (exit {rc}): {text.strip()[-800:]}")


def backend_device(args):
    return args.backend, "cpu" if args.backend == "cpu" else f"{args.backend}:0"


def part_peak(state, args, env):
    path = os.path.join(state, "peak.json")
    if os.path.exists(path):
        return
    cmd = [sys.executable, os.path.join(SCRIPTS, "peak_calib.py"), "-o", path, "--backend", args.backend,
           "--device", "0", "--cache", "off", "-q"] + (["--dtypes", "fp32,fp16", "--budget-s", "4"] if args.cpu_tiny
                                                       else ["--dtypes", "bf16,fp16,fp32,tf32"])
    rc, text, wall = run(cmd, env=env, timeout=300)
    if rc != 0 or not os.path.exists(path):
        _fail("peak_calib", rc, text)
    save_json(os.path.join(state, "peak_run.json"), {"wall_s": wall, "command": " ".join(cmd)})


def other_card(state, name, backend="cuda"):
    """Why ``state`` cannot go on on this machine (``backend`` and ``name``, its device), or None: both sides of
    every operator are measured on one card with one peak.json, and the state's peak.json names the backend and
    card it was made on (on cpu the backend alone is compared: the interpreter validates the pipeline only)."""
    made = (load_json(os.path.join(state, "peak.json")) or {}).get("device") or {}
    if made.get("backend") and made["backend"] != backend:
        made_on = f"{made['backend']} backend"
    elif backend != "cpu" and made.get("name") and name and made["name"] != name:
        made_on = made["name"]
    else:
        return None
    return (f"{state} was measured on a {made_on} (peak.json), this machine has a {name}: resume it on that "
            "card, or start a state of this card (--state <new dir>, and a pack directory of its own)")


def part_prepare(op, d, args, env, st):
    work = os.path.join(d, "work")
    rc, text, wall = run([sys.executable, os.path.join(SCRIPTS, "prepare_op_dir.py"), "--example", op, "--dst",
                          work, "--force"], env=env)
    if rc:
        _fail(f"prepare {op}", rc, text)
    from mfulib.core.opdir import OpDir
    shutil.copy(OpDir(work).cases_path, os.path.join(d, "orig_cases.jsonl"))
    shutil.copy(os.path.join(os.path.dirname(d), "peak.json"), os.path.join(work, "peak.json"))
    # step 1's verify of the original cases, as `make all` runs it before the probe with or without SEARCH=1 (the
    # collector needs it too): not the search's cost; a case that fails is recorded in verify.json, not fatal
    vrc, vtext, vwall = run([sys.executable, os.path.join(SCRIPTS, "verify_op.py"), "--op-dir", work, "--backend",
                             args.backend, "--device", "0", "--seed", "0"], env=env)
    if not os.path.exists(os.path.join(work, "verify.json")):
        _fail(f"verify {op}", vrc, vtext)
    st["prepare"] = {"wall_s": wall, "verify_wall_s": vwall, "verify_rc": vrc}


def part_probe(op, d, args, env, st):
    work = os.path.join(d, "work")
    cmd = [sys.executable, os.path.join(SCRIPTS, "max_shape_probe.py"), "--dir", work, "--flops-tool",
           os.path.join(SCRIPTS, "check_flops.py"), "--max-bytes", str(MAX_BYTES), "--max-ms", str(MAX_MS),
           "--backend", args.backend, "--device", "0", "--budget-s", f"{args.probe_budget_s:.0f}"] + args.probe_arg
    rc, text, wall = run(cmd, env=env, timeout=args.probe_budget_s + 90)
    doc = load_json(os.path.join(work, "probe.json")) or {}
    if rc not in (0, 130) and not doc:
        _fail(f"probe {op}", rc, text)
    st["probe"] = {"wall_s": wall, "rc": rc, "complete": bool(doc.get("complete")), "interrupted": doc.get(
        "interrupted"), "appended": len(doc.get("appended") or {}), "candidates": len(doc.get("candidates") or []),
        "command": " ".join(cmd[1:]), "tail": text[-600:]}


def part_search(op, d, args, env, st):
    work = os.path.join(d, "work")
    cmd = [sys.executable, os.path.join(SCRIPTS, "mfu_grid_search.py"), "--dir", work, "--backend", args.backend,
           "--device", "0", "--quiet"] + args.search_arg
    rc, text, wall = run(cmd, env=env, timeout=max(60.0, left_s(args) - 20))
    gs = load_json(os.path.join(work, "grid_search.json"))
    if rc != 0 or not gs or not gs.get("best"):
        _fail(f"search {op}", rc, text)
    st["search"] = {"wall_s": wall, "best": gs["best"], "metric": gs.get("metric"), "command": " ".join(cmd[1:]),
                    "cost_s": gs.get("cost_s"), "pool": len(gs.get("pool") or [])}


def _cpu_runs(case):
    """The smoke test's filter: what the interpreter runs (no bf16; inputs within verify's cpu cap)."""
    from mfulib.core.cases import describe_case
    info = describe_case(case)
    return info.compute_dtype != "bfloat16" and info.input_bytes <= CPU_INPUT_BYTES


def write_brute_dir(d, args):
    """The brute force's points (``points.json``) and its work dir ``brute/`` (the operator files, a case file of
    every point); made once per operator."""
    from mfulib.core.cases import dump_case_lines, read_case_file
    work, bdir = os.path.join(d, "work"), os.path.join(d, "brute")
    cases = read_case_file(os.path.join(d, "orig_cases.jsonl"))
    ranks, metric = bf.source_ranks(cases, os.path.join(work, "flops.py"), args.top,
                                    _cpu_runs if args.cpu_tiny else None)
    points = bf.enumerate_points(cases, ranks, args.max_scale, CPU_INPUT_BYTES if args.cpu_tiny else MAX_BYTES)
    bf.point_work(points, os.path.join(work, "flops.py"), metric)
    os.makedirs(bdir, exist_ok=True)
    for f in ("model.py", "model_new.py", "flops.py", "prepare.json"):
        if os.path.exists(os.path.join(work, f)):
            shutil.copy(os.path.join(work, f), os.path.join(bdir, f))
    text = dump_case_lines([p["case"] for p in points])
    from mfulib.core.opdir import OpDir
    for name in {os.path.basename(OpDir(work).cases_path), "model.json"}:
        with open(os.path.join(bdir, name), "w", encoding="utf-8") as f:
            f.write(text)
    save_json(os.path.join(d, "points.json"), points)
    return {"sources": ranks, "metric": metric, "n_points": len(points)}


def part_brute(op, d, args, env, st):
    """Run the brute-force child until it is done or the call's time is up (then it goes on next call); a child
    that dies is charged to the point it had started (``crashed``) and a fresh one goes on."""
    if "brute_plan" not in st:
        st["brute_plan"] = write_brute_dir(d, args)
    backend, device = backend_device(args)
    rows = os.path.join(d, "brute_rows.jsonl")
    spec = {"work": os.path.join(d, "brute"), "points": os.path.join(d, "points.json"), "rows": rows,
            "backend": backend, "device": device, "seed": 0, "max_bytes": MAX_BYTES, "max_ms": MAX_MS,
            "metric": st["brute_plan"]["metric"], "peaks": load_json(os.path.join(work_of(d), "peak.json")) or {},
            "max_verify": args.max_verify, "deadline": time.time() + max(10.0, left_s(args) - 40)}
    spent = sum(c["wall_s"] for c in st.get("brute_calls", []))
    spec["timing_deadline"] = time.time() + max(0.0, args.brute_budget_s - spent)
    st["brute_budget_s"] = args.brute_budget_s
    save_json(os.path.join(d, "brute_spec.json"), spec)
    calls = st.setdefault("brute_calls", [])
    while time.time() < spec["deadline"]:
        rc, text, wall = run([sys.executable, os.path.join(BENCH, "referee_bruteforce.py"),
                              os.path.join(d, "brute_spec.json")], env=env, timeout=left_s(args) - 20)
        calls.append({"rc": rc, "wall_s": wall, "tail": text[-400:] if rc else ""})
        _timed, _verified, started = bf.read_rows(rows)
        if rc == 0:
            st["brute"] = brute_summary(d, st)
            return
        if rc == 3 or rc == "timeout":
            return  # the call's time is up: the next call resumes from the rows
        if started is None:
            _fail(f"brute force {op}", rc, text)
        reason = f"the child died (exit {rc}): {text.strip()[-300:]}"
        line = ({"verify": started, "status": "crashed", "reason": reason, "verified": None} if started in _timed
                else {"row": {"point": started, "status": "crashed", "reason": reason}})
        with open(rows, "a", encoding="utf-8") as f:  # the child died inside this point: its verdict
            f.write(json.dumps(line) + "\n")


#: the parts --redo-search measures again, with their state keys and directories; the brute force's stay
SEARCH_SIDE = {"keys": ("prepare", "probe", "search", "retime", "retime_cases", "retime_runs", "failed", "errors"),
               "dirs": ("work", "retime")}


def drop_search_side(state, op) -> bool:
    """Drop operator ``op``'s search side from ``state`` (:data:`SEARCH_SIDE`: the work dir the probe appended to,
    the re-timing dir, their part results and tree stamps) and keep its brute force (``brute*`` keys, ``brute/``,
    ``points.json``, ``brute_rows.jsonl``, ``orig_cases.jsonl``); the next call prepares the work dir afresh and
    re-times both limits again. False when ``op`` has no state."""
    key = op.replace("/", "__")
    st_path = os.path.join(state, f"{key}.json")
    st = load_json(st_path)
    if not st:
        return False
    for k in SEARCH_SIDE["keys"]:
        st.pop(k, None)
    st["trees"] = {p: t for p, t in (st.get("trees") or {}).items() if p not in SEARCH_SIDE["keys"]}
    for sub in SEARCH_SIDE["dirs"]:
        shutil.rmtree(os.path.join(state, key, sub), ignore_errors=True)
    save_json(st_path, st)
    return True


def work_of(d):
    return os.path.join(d, "work")


def brute_summary(d, st):
    points = load_json(os.path.join(d, "points.json"))
    timed, verified, _ = bf.read_rows(os.path.join(d, "brute_rows.jsonl"))
    best = next((pid for pid, v in verified.items() if v["status"] == "pass"), None)
    statuses = {}
    for p in points:
        s = (timed.get(p["point"]) or {}).get("status") or p["status"] or "not run"
        statuses[s] = statuses.get(s, 0) + 1
    wall = sum(c["wall_s"] for c in st.get("brute_calls", []))
    first = sum(r.get("first_call_s") or 0 for r in timed.values())
    # cut by its budget: the cost of the whole brute force estimated from the mean cost of the points it timed
    ran = [r.get("wall_s") or 0 for r in timed.values() if r.get("status") != "dominated"]
    left = statuses.get("not run", 0)
    full = wall + left * (sum(ran) / len(ran)) if left and ran else wall
    out = {"wall_s": wall, "first_call_s": first, "statuses": statuses, "best_point": best,
           "complete": left == 0, "full_cost_s": full,
           "verified": verified[best]["verified"] if best is not None else None,
           "verify_tried": len(verified)}
    if best is not None:
        p, r = points[best], timed[best]
        out.update(source_case=p["source_case"], factors=p["factors"], case=p["case"], time_ns=r["time_ns"],
                   shape=r.get("shape"), compute_dtype=r.get("compute_dtype"))
    return out


def write_retime_dir(d, st):
    """``retime/``: a copy of the work dir's operator files, case copies (with the probe's appended cases) and
    verify.json, the brute force's best case appended unless a line already equals it. Returns (search case id,
    brute case id)."""
    from mfulib.core.cases import dump_case_lines, read_case_file
    from mfulib.core.opdir import OpDir
    work, rdir = work_of(d), os.path.join(d, "retime")
    os.makedirs(rdir, exist_ok=True)
    od = OpDir(work)
    for f in os.listdir(work):
        if os.path.isfile(os.path.join(work, f)) and (f.endswith(".py") or f in ("verify.json", "peak.json",
                                                                               "prepare.json", "flops_check.json")):
            shutil.copy(os.path.join(work, f), os.path.join(rdir, f))
    cases = read_case_file(od.cases_path)
    brute_case = st["brute"]["case"]
    bid = next((i for i, c in enumerate(cases) if c == brute_case), None)
    if bid is None:
        cases, bid = cases + [brute_case], len(cases)
    for name in od.case_file_names():
        with open(os.path.join(rdir, name), "w", encoding="utf-8") as f:
            f.write(dump_case_lines(cases))
    return st["search"]["best"]["case"], bid


def part_retime(op, d, args, env, st):
    if not st["brute"].get("case"):
        st["retime"] = {"skipped": "the brute force has no verified point"}
        return
    if "retime_cases" not in st:
        st["retime_cases"] = list(write_retime_dir(d, st))
    sid, bid = st["retime_cases"]
    runs = st.setdefault("retime_runs", [])
    while len(runs) < args.retimes and left_s(args) > min_left_s("retime", args):
        k = len(runs)
        order = [sid, bid] if k % 2 == 0 else [bid, sid]  # interleaved: neither side always runs first
        out = os.path.join(d, "retime", f"run{k}")
        cmd = [sys.executable, os.path.join(SCRIPTS, "ops_profiling", "msprof_perf_summary.py"), "--op-dir",
               os.path.join(d, "retime"), "--output-dir", out, "--impl", "asc", "--mfu", "--cases",
               ",".join(str(c) for c in dict.fromkeys(order)), "--backend", args.backend, "--pmu", "none",
               "--unverified-ok", "--quiet"]
        rc, text, wall = run(cmd, env=env, timeout=max(30.0, left_s(args) - 15))
        perf = load_json(os.path.join(out, "performance.json"))
        if not perf:
            _fail(f"retime {op}", rc, text)
        runs.append({"rc": rc, "wall_s": wall, "per_case": {str(pc["case"]): {k2: pc.get(k2) for k2 in (
            "asc_us", "flops", "compute_dtype", "tf32", "input_bytes", "output_bytes", "shape", "dtype", "verify",
            "asc_error")} for pc in perf.get("per_case") or []}})
    if len(runs) >= args.retimes:
        st["retime"] = {"runs": len(runs)}


PART_FNS = {"prepare": part_prepare, "probe": part_probe, "search": part_search, "brute": part_brute,
            "retime": part_retime}


def collector_figure(pc: dict, peaks: dict, metric: str, backend_name: str):
    """(figure, TF/s or GB/s) of one collector per_case row, by the brute force's formula (:func:`bf.figure`)."""
    if not pc or not pc.get("asc_us"):
        return None, None
    row = {"status": "ok", "time_ns": pc["asc_us"] * 1e3, "flops": pc.get("flops") or 0.0,
           "bytes": (pc.get("input_bytes") or 0) + (pc.get("output_bytes") or 0),
           "compute_dtype": pc.get("compute_dtype")}
    return bf.figure(row, peaks, metric, backend_name)


def judge(search_vals: list, brute_vals: list, search_cost_s, brute_cost_s) -> dict:
    """The referee's verdict from the re-timings' figures (each side's runs) and the two costs (s): ratio = median
    search / median brute force; ``limit_ok`` when ratio >= :data:`RATIO_MIN` or the gap (brute - search) is
    within the combined spread (max - min of each side); ``cost_ok`` when search cost <= :data:`COST_MAX` x brute
    force cost; ``pass`` both. None values where a side has no figure."""
    out = {"ratio": None, "gap": None, "combined_spread": None, "limit_ok": None, "cost_ratio": None, "cost_ok": None,
           "pass": None}
    if search_vals and brute_vals:
        ms, mb = statistics.median(search_vals), statistics.median(brute_vals)
        spread = (max(search_vals) - min(search_vals)) + (max(brute_vals) - min(brute_vals))
        out.update(ratio=ms / mb if mb else None, gap=mb - ms, combined_spread=spread)
        out["limit_ok"] = bool((out["ratio"] is not None and out["ratio"] >= RATIO_MIN) or mb - ms <= spread)
    if search_cost_s is not None and brute_cost_s:
        out["cost_ratio"] = search_cost_s / brute_cost_s
        out["cost_ok"] = out["cost_ratio"] <= COST_MAX
    if out["limit_ok"] is not None and out["cost_ok"] is not None:
        out["pass"] = out["limit_ok"] and out["cost_ok"]
    return out


def differ(search_best: dict, brute: dict, search_shape, brute_shape) -> str:
    """Where the two limits differ: the source case, the factors per axis, the shapes (from the re-timing rows)."""
    parts = []
    if search_best.get("source_case") != brute.get("source_case"):
        parts.append(f"source case {search_best.get('source_case')} vs {brute.get('source_case')}")
    sf, bfac = search_best.get("factors") or {}, brute.get("factors") or {}
    if sf != bfac:
        parts.append(f"factors {sf or 'x1'} vs {bfac or 'x1'}")
    if search_shape != brute_shape:
        parts.append(f"shape {search_shape} vs {brute_shape}")
    return "; ".join(parts) or "same point"


def cost_parts(st: dict) -> dict:
    """Where the search's wall cost (s) went: the probe's process, and the grid search's stage 1, stage 2 (collector
    runs, with the PMU pass under ``--counts-on all``), cross-run retime, the counting pass on the leaders
    (``counts``) and the rest of its process (start, imports, pool), from grid_search.json ``cost_s``; empty parts
    are left out."""
    grid = (st.get("search") or {}).get("cost_s") or {}
    out = {"probe": (st.get("probe") or {}).get("wall_s")}
    parts = ("stage1", "stage2", "retime", "counts")
    for k in parts:
        out[k] = grid.get(k)
    if "search" in st:
        out["grid_other"] = max(0.0, st["search"]["wall_s"] - sum(grid.get(k) or 0 for k in parts))
    return {k: v for k, v in out.items() if v is not None}


def summarize(op, st, peaks, backend_name):
    # which tree measured each part: the brute force's is judged by its own code (make_results)
    part_trees = {part: t for part, t in (st.get("trees") or {}).items() if t and part != "prepare"}
    out = {"op": op, "parts_done": [p for p in PARTS if p in st], "errors": st.get("errors", []),
           "skipped": st.get("skipped"), "trees": sorted(set(part_trees.values())), "part_trees": part_trees}
    if "search" in st:
        out["search_best"] = st["search"]["best"]
        out["probe"] = {k: (st.get("probe") or {}).get(k) for k in ("complete", "interrupted", "appended",
                                                                      "candidates", "wall_s")}
        out["search_cost_s"] = (st.get("probe") or {}).get("wall_s", 0) + st["search"]["wall_s"]
        out["search_cost_parts_s"] = cost_parts(st)
        # step 1's verify of the originals (not the search's cost; absent in rows measured before it ran here)
        out["step1_verify_s"] = (st.get("prepare") or {}).get("verify_wall_s")
    if "brute" in st:
        out["brute"] = {k: v for k, v in st["brute"].items() if k != "case"}
        out["brute_plan"] = st.get("brute_plan")
        # the cost the search is held against: the whole brute force's (estimated when its budget cut it)
        out["brute_cost_s"] = st["brute"].get("full_cost_s", st["brute"]["wall_s"])
        out["brute_cost_estimated"] = not st["brute"].get("complete", True)
    if "retime" in st and st.get("retime_runs"):
        sid, bid = st["retime_cases"]
        metric = (st.get("brute_plan") or {}).get("metric", "mfu")
        sv = [collector_figure(r["per_case"].get(str(sid)), peaks, metric, backend_name) for r in st["retime_runs"]]
        bv = [collector_figure(r["per_case"].get(str(bid)), peaks, metric, backend_name) for r in st["retime_runs"]]
        first = st["retime_runs"][0]["per_case"]
        out.update(metric=metric, retime_cases=[sid, bid], search_values=[v for v, _ in sv if v is not None],
                   brute_values=[v for v, _ in bv if v is not None],
                   search_rate=_median([r for _, r in sv if r is not None]),
                   brute_rate=_median([r for _, r in bv if r is not None]),
                   differ=differ(st["search"]["best"], st["brute"], (first.get(str(sid)) or {}).get("shape"),
                                 (first.get(str(bid)) or {}).get("shape")),
                   figure_kind=("MBU" if metric == "mbu" else "MFU@ach") if peaks.get("peak_tflops") else "TF/s")
        out.update(judge(out["search_values"], out["brute_values"], out.get("search_cost_s"), out.get("brute_cost_s")))
    return out


def _median(vals):
    return statistics.median(vals) if vals else None


def _f(v, pct=True):
    if v is None:
        return "-"
    return f"{v:.2%}" if pct else f"{v:.4g}"


def markdown(results) -> str:
    lines = ["| operator | search limit | brute-force best | search / brute | TF/s (GB/s) search / brute | search "
             "cost s | brute cost s (first calls) | cost ratio | pass | where they differ |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "ratio" not in r:
            lines.append(f"| {r['op']} | {r.get('skipped') or 'parts done: ' + (', '.join(r['parts_done']) or 'none')}"
                         + "".join(f"; {e[:120]}" for e in r.get("errors") or []) + " |" + " |" * 8)
            continue
        pct = r["figure_kind"] != "TF/s"
        sb, b = r.get("search_best") or {}, r.get("brute") or {}
        lines.append(f"| {r['op']} | {_f(_median(r['search_values']), pct)} (case {sb.get('case')}, "
                     f"{sb.get('factors') or 'x1'}) | {_f(_median(r['brute_values']), pct)} (case "
                     f"{b.get('source_case')}, {b.get('factors') or 'x1'}) | {_f(r['ratio'], False)} | "
                     f"{_f(r['search_rate'], False)} / "
                     f"{_f(r['brute_rate'], False)} | {r['search_cost_s']:.0f} | {r['brute_cost_s']:.0f} "
                     f"({b.get('first_call_s', 0):.0f}) | {_f(r['cost_ratio'])} | "
                     f"{ {True: 'yes', False: 'NO', None: '-'}[r['pass']]} | {r['differ']} |")
    trees = [f"{r['op']}: {', '.join(t[:12] for t in r['trees'])}" for r in results if r.get("trees")]
    if trees:  # resumed packs: the parts of one operator may have been measured by an earlier tree
        lines.append("\nMeasured by tree (bench/freshness.py hash, first 12 hex): " + "; ".join(trees) + "\n")
    return "\n".join(lines) + "\n"


def resolve(op, listed):
    """The bundled example name for ``op`` (exact, or the one whose last part is ``op``), or None."""
    if op in listed:
        return op
    hits = [n for n in listed if n.split("/")[-1] == op]
    return hits[0] if len(hits) == 1 else None


def list_examples(env):
    rc, text, _ = run([sys.executable, os.path.join(SCRIPTS, "prepare_op_dir.py"), "--list-examples"], env=env)
    return [ln.split()[0] for ln in text.splitlines() if ln.strip()] if rc == 0 else []


def keep_in_tar(rel, size):
    """Small state files: part results, rows, the work dirs' JSON / JSONL / operator sources; no profiles, no
    scratch (``search/``, ``prof/``), no Triton cache."""
    top = rel.split(os.sep)
    return (size <= 2 * 2 ** 20 and top[0] != "triton-cache" and not {"search", "prof", ".state"} & set(top)
            and rel.endswith((".json", ".jsonl", ".py")))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shared-data", default=None, help="folder holding npukernelbench/ (the real case files)")
    p.add_argument("--out", default=os.environ.get("OUT", "referee_out"), help="results folder")
    p.add_argument("--state", default=os.path.join(ROOT, "work", NAME), help="state directory, kept between calls")
    p.add_argument("--resume-from", default=None, help=f"a previous call's {NAME}.tar.gz")
    p.add_argument("--ops", default=",".join(OPS), help="operators this call works on (the report lists every "
                   "operator with state as well)")
    p.add_argument("--max-minutes", type=float, default=8.5, help="start no part after this much wall time")
    p.add_argument("--probe-budget-s", type=float, default=75.0, help="the probe's --budget-s (as a user gives it)")
    p.add_argument("--probe-arg", action="append", default=[], help="extra max_shape_probe.py argument")
    p.add_argument("--search-arg", action="append", default=[], help="extra mfu_grid_search.py argument")
    p.add_argument("--top", type=int, default=8, help="brute force: source cases, most FLOPs first")
    p.add_argument("--max-scale", type=int, default=16, help="brute force: largest power-of-two factor per axis")
    p.add_argument("--max-verify", type=int, default=6, help="brute force: best points verified at most")
    p.add_argument("--brute-budget-s", type=float, default=150.0, help="brute force: seconds of timing per operator "
                   "(over all calls); the points left untimed are counted in the report (statuses: not run)")
    p.add_argument("--retimes", type=int, default=3, help="collector runs re-timing both limits")
    p.add_argument("--backend", default="cuda", help="cuda on the device")
    p.add_argument("--cpu-tiny", action="store_true", help="smoke test on cpu: backend cpu, --top 2, --max-scale 2, "
                   "interpreter-sized cases, a small probe")
    p.add_argument("--retry-failed", action="store_true", help="retry the part an operator failed in before")
    p.add_argument("--redo", default="", help="operators (comma-separated) whose state is dropped first, so this "
                   "call measures them afresh (after a fix in the code they measure); the others resume")
    p.add_argument("--redo-search", default="", help="operators (comma-separated) whose search side is measured "
                   "afresh (prepare, probe, search and the re-timing of both limits) while their brute force is "
                   "kept: after a change in the search's code, not the brute force's (each part records its tree)")
    args = p.parse_args(argv)
    if args.cpu_tiny:
        args.backend, args.top, args.max_scale = "cpu", min(args.top, 2), min(args.max_scale, 2)
        args.probe_budget_s = min(args.probe_budget_s, 120.0)
        args.probe_arg = ["--max-scale", "2", "--top", "2", "--refine-steps", "0"] + args.probe_arg
        args.search_arg = ["--top-n", "3", "--stage2-k", "1"] + args.search_arg
    return args


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.state, exist_ok=True)
    if args.resume_from:
        unpack_state(args.resume_from, args.state)
    os.environ["TRITON_CACHE_DIR"] = os.path.join(os.path.abspath(args.state), "triton-cache")
    os.makedirs(os.environ["TRITON_CACHE_DIR"], exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.shared_data:
        env["MFU_SHARED_DATA"] = os.path.abspath(args.shared_data)
    why = other_card(args.state, _device(args.backend), args.backend)  # before anything in the state is dropped
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    listed = list_examples(env)
    todo = [o for o in args.ops.split(",") if o]
    for op in [o for o in args.redo.split(",") if o]:
        key = op.replace("/", "__")
        shutil.rmtree(os.path.join(args.state, key), ignore_errors=True)
        if os.path.exists(os.path.join(args.state, f"{key}.json")):
            os.remove(os.path.join(args.state, f"{key}.json"))
            print(f"note: {op}: state dropped (--redo)")
    for op in [o for o in args.redo_search.split(",") if o]:
        if drop_search_side(args.state, op):
            print(f"note: {op}: search side dropped, brute force kept (--redo-search)")
    known = list(dict.fromkeys(list(OPS) + todo))
    try:
        part_peak(args.state, args, env)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    peaks = load_json(os.path.join(args.state, "peak.json")) or {}
    results, pending = [], []
    for op in known:
        key = op.replace("/", "__")
        d, st_path = os.path.join(args.state, key), os.path.join(args.state, f"{key}.json")
        st = load_json(st_path) or {"op": op}
        if op in todo and "prepare" not in st and not st.get("skipped"):
            name = resolve(op, listed)
            if name is None:
                st["skipped"] = f"{op} is not a bundled example in this checkout (prepare_op_dir.py --list-examples)"
                print(f"note: {st['skipped']}: skipped")
            else:
                st["op"] = name
        if args.retry_failed:
            st.pop("failed", None)
        while op in todo:
            part, why = next_part(st, left_s(args), lambda p: min_left_s(p, args))
            if part is None:
                if why.startswith("time"):
                    pending.append(f"{op}: {why}")
                break
            os.makedirs(d, exist_ok=True)
            # which tree measured each part (bench/freshness.py's hash, when the driver passed it)
            st.setdefault("trees", {})[part] = os.environ.get("MFU_TREE_SHA256")
            before = json.dumps(st, sort_keys=True, default=str)
            try:
                PART_FNS[part](st["op"], d, args, env, st)
            except Exception as exc:  # noqa: BLE001 - one operator failing never stops the others
                st.setdefault("errors", []).append(f"{part}: {type(exc).__name__}: {exc}"[:1500])
                st["failed"] = part
            save_json(st_path, st)
            if part not in st and json.dumps(st, sort_keys=True, default=str) == before:
                pending.append(f"{op}: {part} made no progress this call")
                break
            if part not in st and not st.get("failed"):
                pending.append(f"{op}: {part} goes on next call")
                break
        if op in OPS and op not in todo and not os.path.exists(st_path):
            pending.append(f"{op}: not started (not in --ops this call)")
        if os.path.exists(st_path) or op in todo:
            if op not in todo and next_part(st, 1e9, lambda p: 0)[0] is not None:
                pending.append(f"{op}: not in --ops this call")
            results.append(summarize(op, st, peaks, args.backend))
    doc = {"device": _device(args.backend), "backend": args.backend, "ops": results, "pending": pending,
           "wall_s": time.monotonic() - T0, "peaks": {k: peaks.get(k) for k in ("peak_tflops", "bandwidth_gbps")},
           "criteria": {"ratio_min": RATIO_MIN, "cost_max": COST_MAX, "retimes": args.retimes},
           "settings": {"top": args.top, "max_scale": args.max_scale, "probe_budget_s": args.probe_budget_s,
                        "probe_arg": args.probe_arg, "search_arg": args.search_arg, "max_bytes": MAX_BYTES,
                        "max_ms": MAX_MS, "cpu_tiny": args.cpu_tiny}}
    save_json(os.path.join(args.out, f"{NAME}.json"), doc)
    with open(os.path.join(args.out, f"{NAME}.md"), "w", encoding="utf-8") as f:
        f.write(markdown(results))
    pack_state(os.path.join(args.out, f"{NAME}.tar.gz"), args.state, keep_in_tar,
               [os.path.join(args.out, f"{NAME}.json")])
    print(markdown(results))
    print("pending: " + ("; ".join(pending) if pending else "nothing - every part is done"))
    return 0


def _device(backend):
    if backend == "cpu":
        return "cpu"
    try:
        import torch
        return torch.cuda.get_device_name(0)
    except Exception as exc:  # noqa: BLE001 - descriptive only
        return f"unknown ({exc})"


if __name__ == "__main__":
    sys.exit(main())
