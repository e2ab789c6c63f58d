#!/usr/bin/env python3
"""Find the largest legal scaled shapes of a work directory's cases (step 2 of triton-mfu-analyzer).

Symbol analysis first (mfulib/core/symbols.py): (tensor, axis) positions equal in every case form one symbol, each
tensor's last axis excluded, per layout group (BSH/SBH/BSND/BNSD...); symbols are classified batch / seq_q / seq_k /
seq / heads / head_dim / hidden with the evidence, and sequence + batch scale by default (--scale-dims). Per source
case, factors s = 2, 4, 8, ... <= --max-scale go to every chosen symbol, each candidate through five gates in cost
order (mfulib/search/probe.py): 1 input bytes (from the case description, before anything is allocated) <= --max-bytes,
host and free device memory; 2 the reference accepts the shape (--flops-tool --tracer-only as a subprocess: FLOPs
> 0, same seed as the timed run); 3 ModelNew matches Model within verify's tolerance (an OOM is recorded, not
fatal); 4 one run <= --max-ms; 5 effective bandwidth (input bytes / time) <= 1.3 x the memory bandwidth of
peak.json. Bisection between the last passing and the first failing factor. Gates 3 and 4 run in one persistent
child (a crash, hang or OOM of a candidate replaces it); gate 4 fails without running when the roofline floor
(traced FLOPs / 1.3 x the highest peak of peak.json) already exceeds --max-ms, and a source over --max-ms at
scale 1 - by that floor, or timed first when the floor is at least 1/8 of it - is replaced by the next case
(skipped_sources; each next case once). Each source case is first timed at scale 1; its ladder ends
early once a doubling raises the wall TFLOP/s by less than 5% (--no-saturation-stop: never). --budget-s bounds the
whole run, inside a candidate too; a candidate cut by it gets no verdict and a re-run resumes with it. probe.json
records the seconds of every candidate and gate (wall_s), so a slow probe shows where its time went.

Writes <dir>/probe.json (every candidate with each gate's numbers; appended cases keyed by their new case id with
source case and factors) and appends passing candidates to every case copy (<Op>_perf_cases.jsonl, model.json)
after backing up the originals (--restore puts them back); their verify rows go into verify.json. Artifacts
(verify_result*.json, perf_result*.json) and tool outputs are never written. Interrupted: the originals are intact,
probe.json is valid, and a re-run resumes.

Examples:
  python3 max_shape_probe.py --dir work/4_FFN --flops-tool scripts/check_flops.py --max-bytes 10e9 --max-ms 4000
  python3 max_shape_probe.py --dir work/4_FFN --dry-run            (candidates and their gate-1 bytes only)
  python3 max_shape_probe.py --dir work/4_FFN --restore            (original case files back)
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mfulib.core import cli  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def build_parser():
    p = cli.parser(__doc__, prog="max_shape_probe.py")
    p.add_argument("--dir", required=True, help="work directory made by prepare_op_dir.py")
    p.add_argument("--flops-tool", default=os.path.join(HERE, "check_flops.py"),
                   help="FLOPs tool run as a subprocess with --tracer-only (default: this checkout's check_flops.py)")
    p.add_argument("--max-bytes", type=float, default=10e9, help="gate 1: largest total input bytes")
    p.add_argument("--max-ms", type=float, default=4000.0, help="gate 4: longest single run in ms")
    p.add_argument("--backend", default="auto", help="auto|npu|cuda|cpu")
    p.add_argument("--device", type=int, default=0, help="device index")
    p.add_argument("--scale-dims", help="comma-separated symbol kinds or names to scale (default: sequence and "
                   "batch kinds: batch,seq_q,seq_k,seq)")
    p.add_argument("--max-scale", type=int, default=64, help="largest scale factor per symbol")
    p.add_argument("--cases", help="source case ids, e.g. 0,3-5 (default: the --top cases by traced FLOPs among "
                   "those verify runs on this backend - on cpu fp32/fp16 cases of at most 1 MB)")
    p.add_argument("--top", type=int, default=8, help="source cases when --cases is not given: the N with the most "
                   "traced FLOPs (input bytes for operators without matrix work, and in --dry-run) that the backend "
                   "can run")
    p.add_argument("--refine-steps", type=int, default=3, help="bisection steps after the ladder")
    p.add_argument("--trace-jobs", type=int, default=None,
                   help="gate-2 traces run ahead on the host while the device runs a candidate (default: "
                        "min(4, CPUs // 4); 0: none)")
    p.add_argument("--no-saturation-stop", action="store_true",
                   help="climb every ladder to its first failing factor; by default a source's ladder ends once a "
                        "doubling raises its wall TFLOP/s (GB/s without matrix work) by less than 5%% over the best "
                        "so far, scale 1 included (a larger case would cost more and not raise the limit)")
    p.add_argument("--seed", type=int, default=0, help="seed of every draw (tracer, verify, timing)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="per-subprocess limit of one candidate")
    p.add_argument("--budget-s", type=float, help="bound the whole run to this many seconds, counted from the start "
                   "(the ranking trace included) and enforced inside a candidate too: a candidate cut by it gets no "
                   "verdict, probe.json says complete: false, and a re-run resumes")
    p.add_argument("--peak-json", help="peak.json with bandwidth_gbps (default: <dir>/peak.json)")
    p.add_argument("--dry-run", action="store_true", help="list the ladder candidates and gate-1 bytes; run nothing")
    p.add_argument("--restore", action="store_true", help="put the original case files back and exit")
    return p


def rank_sources(od, args, infos, cases=None, t_start=None):
    """Case ids by traced FLOPs, most first, and {case: FLOPs} (one --flops-tool run over all cases, or over
    ``cases`` only; output in a temp dir). Limited by ``--timeout-s`` and by what ``--budget-s`` has left
    (counted from ``t_start``, monotonic s; the trace zygote's warm-up included). Raises UserError when the trace
    outlives ``--timeout-s`` (a reference that hangs) and :class:`mfulib.search.probe.OutOfBudget` when the budget cut it
    (nothing wrong with the operator)."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory(prefix="mfu_probe_rank_") as tmp:
        out = os.path.join(tmp, "flops_check.json")
        sel = ["--cases", ",".join(map(str, cases))] if cases else []
        from mfulib.core.errors import UserError
        from mfulib.search.probe import OutOfBudget
        t0 = t_start or time.monotonic()

        def limits():  # (budget left or None, wait limit): the zygote's warm-up counts against the budget too
            left = None if args.budget_s is None else args.budget_s - (time.monotonic() - t0)
            return left, args.timeout_s if left is None else max(0.0, min(args.timeout_s, left))
        left, limit = limits()
        from mfulib.run.trace_zygote import start_tool
        job = None
        try:
            if limit <= 0:
                raise subprocess.TimeoutExpired(args.flops_tool, 0)
            job = start_tool([args.flops_tool, "--op-dir", od.path, "--tracer-only", "--seed", str(args.seed),
                              "--quiet", "-o", out] + sel, os.path.join(tmp, "flops_tool.log"))
            if left is not None:
                left, limit = limits()
            rc = job.wait(timeout=limit)
            job = None
            if rc:  # the ranking falls back to input bytes below; say why rather than rank silently
                with open(os.path.join(tmp, "flops_tool.log"), errors="replace") as f:
                    tail = " | ".join(ln.strip() for ln in f.read().splitlines()[-3:] if ln.strip())
                print(f"warning: {args.flops_tool} --tracer-only exit status {rc} while ranking the source cases "
                      f"(cases without a traced FLOPs count rank by input bytes): {tail[-300:]}")
        except subprocess.TimeoutExpired:
            if job is not None:  # the group, and the process itself: a child forked a moment ago has no group yet
                from mfulib.run.trace_zygote import stop
                stop(job)
            if left is not None and left < args.timeout_s:
                raise OutOfBudget(f"--budget-s {args.budget_s:g} s reached while tracing the source cases at scale "
                                  f"1 (the ranking trace, {limit:.0f} s left for it): raise --budget-s") from None
            raise UserError(f"{args.flops_tool} --tracer-only did not trace the source cases at scale 1 within "
                            f"{limit:g} s (--timeout-s / --budget-s): a reference that hangs? fix model.py, or pick "
                            "sources with --cases") from None
        rows = json.load(open(out)).get("per_case", []) if os.path.exists(out) else []
    # FLOPs of a case the tracer counted; None where it could not (an error is not "no matrix work")
    flops = {r["case"]: (float((r.get("tracer") or {})["total_flops"])
                         if (r.get("tracer") or {}).get("status") == "ok"
                         and (r.get("tracer") or {}).get("total_flops") is not None else None) for r in rows}
    key = (lambda i: flops.get(i) or 0.0) if any(flops.values()) else (lambda i: infos[i].input_bytes)
    return sorted(range(len(infos)), key=lambda i: -key(i)), flops


def main(argv=None):
    t_start = time.monotonic()
    args = build_parser().parse_args(argv)
    from tabulate import tabulate
    from tqdm import tqdm

    from mfulib.core import device as dev
    from mfulib.search import probe
    from mfulib.core import symbols
    from mfulib.core.errors import UserError
    from mfulib.core.jsonio import provenance
    from mfulib.core.opdir import OpDir
    from mfulib.schemas import probe_json as pj
    from mfulib.schemas import verify_json
    from mfulib.verify.verified_cases import default_max_input_mb, skip_reason

    od = OpDir(args.dir)
    path = od.file(pj.FILE_NAME)
    old = pj.read_probe_json(path) if os.path.exists(path) else None
    if args.restore:
        if old is None:
            raise UserError(f"{path}: not found - nothing was appended, nothing to restore")
        names = probe.restore(od, old)
        # the probe's verdicts were about the appended cases, now gone: a later probe starts afresh (a kept
        # probe.json would resume them and append nothing), and make redoes probe and search
        from mfulib.core import workdir_state
        gone = [p for p in (path, od.file("grid_search.json")) if os.path.exists(p)]
        for p in gone:
            os.unlink(p)
        stamps = [s for s in ("probe", "search") if workdir_state.invalidate(od.path, s)]
        print(f"restored the original {', '.join(names)} in {od.path}; removed "
              f"{', '.join(os.path.basename(p) for p in gone)}" + (f" and the make stamps of {', '.join(stamps)}"
                                                                  if stamps else ""))
        return 0
    if args.max_scale < 2 or args.max_bytes <= 0 or args.max_ms <= 0 or args.top < 1:
        raise UserError("--max-scale must be >= 2 and --max-bytes, --max-ms, --top > 0")
    if (args.budget_s is not None and args.budget_s <= 0) or args.timeout_s <= 0 or \
            (args.trace_jobs is not None and args.trace_jobs < 0):
        raise UserError("--budget-s and --timeout-s must be > 0 seconds and --trace-jobs >= 0")
    if not os.path.isfile(args.flops_tool):
        raise UserError(f"--flops-tool {args.flops_tool}: not found - pass scripts/check_flops.py")
    if args.peak_json and not os.path.isfile(args.peak_json):  # silently ignored, it took gate 5 and the floor away
        raise UserError(f"--peak-json {args.peak_json}: not found - pass the file peak_calib.py -o wrote, or leave "
                        "the option out (<dir>/peak.json)")
    if old:
        probe.check_resumable(od, old)
    n_orig = old["backup"]["n_cases"] if old and old.get("backup") else len(od.read_cases())
    infos = od.describe_all()[:n_orig]
    groups = symbols.analyse(infos)
    symbols.unique_names(groups)
    scale_dims = [s.strip() for s in args.scale_dims.split(",") if s.strip()] if args.scale_dims else None
    chosen = symbols.choose(groups, scale_dims)
    if not chosen:
        names = sorted({s.name for g in groups for s in g.symbols})
        if not names:
            raise UserError(f"{od.cases_path}: no axis to scale - every tensor axis here is a last axis (excluded: "
                            "usually head_dim / hidden) or a 1-D tensor's only axis, so the case files give no batch "
                            "or sequence symbol; scale the cases by hand, or give the tensors a batch/sequence axis")
        raise UserError(f"--scale-dims {args.scale_dims!r} selects no symbol; symbols are {names}" if args.scale_dims
                        else f"{od.cases_path}: no batch or sequence symbol among {names} - pick the ones to scale "
                             "with --scale-dims")
    print("symbols (scaled marked *):")
    for g in groups:
        print(f"  group {g.key}: cases {g.cases[:10]}{'...' if len(g.cases) > 10 else ''}" +
              (f" - {'; '.join(g.notes)}" if g.notes else ""))
        for s in g.symbols:
            print(f"   {'*' if s.scaled else ' '} {s.name:<22} {s.kind:<8} {s.positions} values "
                  f"{sorted(set(s.values))[:6]} - {s.evidence[0]}")
    print("scaling: " + ", ".join(n for n, _w in chosen) + f" ({chosen[0][1]})")
    backend, why = dev.resolve_backend(args.backend)
    device = dev.device_string(backend, args.device)
    host, host_src = probe.host_free_bytes()
    limits = {"max_bytes": args.max_bytes, "max_ms": args.max_ms, "max_scale": args.max_scale,
              "host_bytes": host, "host_source": host_src,
              "device_free_bytes": None if args.dry_run else probe.device_free_bytes(backend, args.device)}
    rank_cut = None  # the budget ended during the ranking trace: probe.json records it, no candidate runs
    try:
        if args.cases:
            sources = cli.parse_case_list(args.cases)
            bad = [i for i in sources if i >= n_orig]
            if bad:
                raise UserError(f"--cases {args.cases}: no original case {bad} (ids 0..{n_orig - 1})")
            fits = [i for i in sources if probe.gate1(infos[i], limits)["ok"]]  # never build what gate 1 refuses
            traced = {} if args.dry_run or not fits else rank_sources(od, args, infos, fits, t_start)[1]
        elif args.dry_run:
            sources, traced = sorted(range(n_orig), key=lambda i: -infos[i].input_bytes), {}
        else:
            fits = [i for i in range(n_orig) if probe.gate1(infos[i], limits)["ok"]]
            sources, traced = rank_sources(od, args, infos, fits if len(fits) < n_orig else None, t_start)
            sources = [i for i in sources if i in fits] + [i for i in sources if i not in fits]
    except probe.OutOfBudget as exc:
        rank_cut, sources, traced = str(exc), [], {}
        print(f"stopped: {exc}")
    order = sources
    # chosen automatically, the sources are among the cases verify runs on this backend (the CPU interpreter: small
    # ones); cases named with --cases are the user's choice (only what the backend cannot run at all is skipped)
    cap = None if args.cases else default_max_input_mb(backend)
    skipped = {i: skip_reason(infos[i], backend, cap) for i in order if skip_reason(infos[i], backend, cap)}
    cap_skipped = dict(skipped)
    sources = [i for i in order if i not in skipped]
    reserve = [] if args.cases else sources[args.top:]  # ranked next: a source at the time limit is replaced
    if not args.cases:  # the top ones among the cases this backend can run; report the skipped ones ranked above
        sources = sources[: args.top]
        last = order.index(sources[-1]) if sources else len(order)
        skipped = {i: r for i, r in skipped.items() if order.index(i) < last}
    if args.dry_run:
        pr = probe.Probe(od, {"candidates": [], "appended": {}}, groups, {}, limits, {})
        rows = []
        for i in sources:
            for s in probe.ladder(args.max_scale):
                cand, _case, info, refusals = pr.plan(i, s)
                g1 = probe.gate1(info, limits)
                rows.append([i, s, ",".join(f"{k}x{v}" for k, v in cand["factors"].items()), info.input_bytes,
                             "ok" if g1["ok"] else "FAIL: " + g1["detail"][:60], "; ".join(refusals)[:40]])
        print(tabulate(rows, headers=["case", "scale", "factors", "input_bytes", "gate 1", "refusal"], tablefmt="plain"))
        for i, r in skipped.items():
            print(f"case {i} skipped: {r}")
        return 0
    if old and old.get("backup"):  # an interrupted run: the case files are re-derived from what it recorded
        probe.rewrite_case_files(od, old)
    bw = probe.bandwidth_limit(od.path, backend, args.device, args.peak_json)
    limits.update(bandwidth_gbps=bw["bandwidth_gbps"], bandwidth_source=bw["source"], l2_bytes=bw["l2_bytes"],
                  peak_tflops_max=bw["peak_tflops_max"])
    run_key = {"backend": backend, "seed": args.seed, "max_bytes": args.max_bytes, "max_ms": args.max_ms,
               "scale_dims": scale_dims, "peak": bw, "saturation_stop": not args.no_saturation_stop}
    strict = lambda k: {n: v for n, v in json.loads(json.dumps(k or {})).items() if n != "peak"}  # noqa: E731
    if old and strict(old.get("run_key")) != strict(run_key):
        # verdicts of another backend / seed / limits must not sit beside this run's (the search would reuse them)
        if old.get("appended"):
            diff = sorted(k for k in strict(run_key) if strict(old.get("run_key")).get(k) != strict(run_key)[k])
            raise UserError(f"{path}: made with other settings ({', '.join(diff)} differ) and "
                            f"{len(old['appended'])} case(s) appended under them - run --restore first, then probe "
                            "again with the new settings")
        old = dict(old, candidates=[], baselines={})  # nothing appended: start afresh
    doc = provenance(pj.TOOL, pj.SCHEMA, device={"backend": backend, "device": device, "why": why})
    doc.update(op_dir=od.path, limits=limits, groups=[{"key": g.key, "layout": g.layout, "cases": g.cases,
                                                       "notes": g.notes} for g in groups],
               symbols=[s.to_dict() for g in groups for s in g.symbols],
               scale_dims=[{"symbol": n, "why": w} for n, w in chosen], sources=sources,
               skipped_sources={str(k): v for k, v in skipped.items()}, traced_flops={str(k): v for k, v in traced.items()},
               candidates=(old or {}).get("candidates", []), appended=(old or {}).get("appended", {}),
               backup=(old or {}).get("backup"), resumed=[], complete=False, interrupted="running",
               inputs=verify_json.input_digests(od.path), run_key=run_key)
    save = lambda: pj.write_probe_json(path, doc)  # noqa: E731
    save()
    opts = {"flops_tool": os.path.abspath(args.flops_tool), "seed": args.seed, "timeout_s": args.timeout_s,
            "max_ms": args.max_ms, "device": device, "backend": backend, "budget_s": args.budget_s,
            "reuse_verdicts": bool(old) and old.get("run_key") == json.loads(json.dumps(run_key)),
            "saturation": not args.no_saturation_stop, "t0": t_start,
            "trace_jobs": args.trace_jobs if args.trace_jobs is not None else min(4, (os.cpu_count() or 1) // 4)}
    if opts["reuse_verdicts"]:
        doc["baselines"] = (old or {}).get("baselines") or {}
    bar = tqdm(total=len(sources) * len(probe.ladder(args.max_scale)), desc=f"probe {od.op_name}", unit="cand",
               file=sys.stderr, disable=not sys.stderr.isatty())
    pr = probe.Probe(od, doc, groups, opts, limits, bw, log=lambda m: (bar.write(m) if not bar.disable else print(m)))
    t_run = time.monotonic()
    import signal

    def _terminated(signum, _frame):  # kill / timeout(1): saved as interrupted, like Ctrl-C
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, _terminated)
    try:
        k = 0
        while k < len(sources):
            i = sources[k]
            no_matrix = traced.get(i) == 0.0 and not any(traced.values())  # traced, and nothing has matrix work
            pr.set_source(i, no_matrix, traced.get(i))
            # traced ahead while this source runs: not the sources that their scale-1 floor already rules out
            pr.upcoming = [u for u in sources[k + 1:]
                           if probe.gate4_floor(traced.get(u), infos[u].input_bytes, bw, args.max_ms) is None]
            why = pr.source_too_slow(i, no_matrix, traced.get(i))
            if why:  # at the time limit already: the next case by traced FLOPs takes its place (chosen sources)
                doc["skipped_sources"][str(i)] = why
                pr.end_source(i)  # traces started ahead for it (its x2, while the previous source ran) go
                nxt = reserve.pop(0) if reserve else None  # each reserve case once: a skipped one never returns
                pr.log(f"case {i}: not a source: {why}" + (f"; case {nxt} takes its place" if nxt is not None
                                                           else ""))
                sources.pop(k)
                if nxt is not None:
                    sources.append(nxt)
                    # the backend's size cap skipped these, ranked above the new last source: reported too
                    doc["skipped_sources"].update({str(j): r for j, r in cap_skipped.items()
                                                   if order.index(j) < order.index(nxt)
                                                   and str(j) not in doc["skipped_sources"]})
                doc["sources"] = list(sources)
                save()
                continue
            probe.search_factor(lambda s: (bar.update(1), pr.evaluate(i, s, no_matrix, save))[1], args.max_scale,
                                args.refine_steps)
            pr.end_source(i)
            k += 1
    except probe.OutOfBudget as exc:  # from a gate, or the scale-1 timing of a source near the limit
        pr.out_of_budget = True
        pr.log(f"stopped: {exc}; a re-run resumes from {path}")
    except KeyboardInterrupt as exc:
        doc["interrupted"] = f"{'SIGTERM' if str(exc).startswith('signal') else 'KeyboardInterrupt'}: a re-run resumes"
        doc["wall_s"] = round(time.monotonic() - t_run, 3)
        save()
        raise
    finally:
        bar.close()
        pr.close()
        earlier = (old or {}).get("wall_s") or 0.0 if opts["reuse_verdicts"] else 0.0
        doc["wall_s"] = round(earlier + time.monotonic() - t_run, 3)  # this run and the runs it resumed
    doc["interrupted"] = rank_cut or (f"--budget-s {args.budget_s:g} s reached" if pr.out_of_budget else None)
    doc["complete"] = not (pr.out_of_budget or rank_cut)
    save()
    unit = "GB/s" if traced and not any(traced.values()) else "TFLOP/s"
    table = [[c["source_case"], c.get("scale"), c.get("input_bytes"), c.get("verdict"), c.get("failed_gate") or "",
              c["new_case_id"] if c.get("new_case_id") is not None else "",
              "" if c.get("wall_figure") is None else f"{c['wall_figure']:.4g}",
              "" if c.get("wall_s") is None else f"{c['wall_s']:.1f}",
              ("saturated" if c.get("saturated") else
               (next((g["detail"] for g in c.get("gates") or [] if g["gate"] == c.get("failed_gate")), "")
                or ""))[:60]]
             for c in doc["candidates"]]
    print(tabulate(table, headers=["case", "scale", "input_bytes", "verdict", "gate", "new id", f"wall {unit}",
                                   "wall_s", "why"], tablefmt="plain"))
    print(f"{len(doc['appended'])} case(s) appended to {', '.join(od.case_file_names())}; {path}"
          + (f"; {doc['interrupted']}" if doc["interrupted"] else ""))
    if not doc["sources"] and doc["complete"]:  # every source skipped (or none chosen): say so, not an empty table
        sk = doc["skipped_sources"]
        print(f"no source case left to scale: case(s) {', '.join(sk) or 'none'} skipped (probe.json "
              f"skipped_sources" + (f"; case {next(iter(sk))}: {next(iter(sk.values()))}" if sk else "") +
              f"); the search measures the original cases at scale 1 - raise --max-ms (now {args.max_ms:g}) to "
              "scale them")
    return 0


if __name__ == "__main__":
    cli.run_main(main)
