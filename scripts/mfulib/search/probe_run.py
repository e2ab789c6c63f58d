"""The max-shape probe as a command (``max_shape_probe.py``): restore, argument checks, symbol choice, the ranking
trace of the source cases, resume, the source loop with its replacements, probe.json and the summary table.

:func:`run` takes the parsed arguments of ``max_shape_probe.py`` (its ``build_parser``) and returns the exit status;
a bad input raises :class:`mfulib.core.errors.UserError`. Time and processes are injected: ``clock`` (seconds,
:func:`time.monotonic` by default) counts ``--budget-s`` and every ``wall_s``; ``gate_runner`` runs gates 3-4
(default: :class:`mfulib.search.probe_gates.GateWorker`, the persistent child); ``tracer`` starts the ranking and
gate-2 traces (default: :mod:`mfulib.run.trace_zygote`). The rules themselves are :mod:`mfulib.search.probe`'s.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

from mfulib.core import cli, wallclock
from mfulib.core.errors import SettingsRefused, UserError
from mfulib.core.paths import SCRIPTS_DIR
from mfulib.schemas import probe_json as pj
from mfulib.search import probe_files, probe_limits
from mfulib.search.probe_axes import choose_symbols, run_key_symbols
from mfulib.core.symbols import factors_label
from mfulib.search.ladder import extend_joint, ladder, run_ladders
from mfulib.search.probe import SATURATION_GAIN, Probe
from mfulib.search.probe_gates import OutOfBudget, gate1, gate4_floor


def _default_tracer(tracer):
    if tracer is None:
        from mfulib.run import trace_zygote as tracer
    return tracer


def rank_sources(od, args, infos, cases=None, t_start=None, clock=time.monotonic, tracer=None):
    """Case ids by traced FLOPs, most first, {case: FLOPs} and {case: why} of the cases the reference raises on
    at scale 1 (the tracer's status ``error``: a bad case line, whose candidates would all fail gate 2) - one
    --flops-tool run over all cases, or over ``cases`` only; output in a temp dir. Limited by ``--timeout-s`` and by what ``--budget-s`` has left
    (counted from ``t_start``, ``clock`` seconds; the trace zygote's warm-up included). Raises UserError when the
    trace outlives ``--timeout-s`` (a reference that hangs) and :class:`mfulib.search.probe_gates.OutOfBudget` when
    the budget cut it (nothing wrong with the operator)."""
    tracer = _default_tracer(tracer)
    with tempfile.TemporaryDirectory(prefix="mfu_probe_rank_") as tmp:
        out = os.path.join(tmp, "flops_check.json")
        sel = ["--cases", ",".join(map(str, cases))] if cases else []
        t0 = clock() if t_start is None else t_start

        def limits():  # (budget left or None, wait limit): the zygote's warm-up counts against the budget too
            left = None if args.budget_s is None else args.budget_s - (clock() - t0)
            return left, args.timeout_s if left is None else max(0.0, min(args.timeout_s, left))
        left, limit = limits()
        job = None
        try:
            if limit <= 0:
                raise subprocess.TimeoutExpired(args.flops_tool, 0)
            job = tracer.start_tool([args.flops_tool, "--op-dir", od.path, "--tracer-only", "--seed", str(args.seed),
                                     "--quiet", "-o", out] + sel, os.path.join(tmp, "flops_tool.log"))
            if left is not None:
                left, limit = limits()
            rc = job.wait(timeout=limit)
            job = None
            if rc and not os.path.exists(out):  # no per-case rows: the ranking falls back to input bytes; say why
                with open(os.path.join(tmp, "flops_tool.log"), errors="replace") as f:
                    tail = " | ".join(ln.strip() for ln in f.read().splitlines()[-3:] if ln.strip())
                print(f"warning: {args.flops_tool} --tracer-only exit status {rc} while ranking the source cases "
                      f"(cases without a traced FLOPs count rank by input bytes): {tail[-300:]}")
        except subprocess.TimeoutExpired:
            if job is not None:  # the group, and the process itself: a child forked a moment ago has no group yet
                tracer.stop(job)
            if left is not None and left < args.timeout_s:
                raise OutOfBudget(f"--budget-s {args.budget_s:g} s reached while tracing the source cases at scale "
                                  f"1 (the ranking trace, {limit:.0f} s left for it): raise --budget-s") from None
            raise UserError(f"{args.flops_tool} --tracer-only did not trace the source cases at scale 1 within "
                            f"{limit:g} s (--timeout-s / --budget-s): a reference that hangs? fix model.py, or pick "
                            "sources with --cases") from None
        rows = []
        if os.path.exists(out):
            with open(out) as f:
                rows = json.load(f).get("per_case", [])
    # FLOPs of a case the tracer counted; None where it could not (an error is not "no matrix work")
    flops = {r["case"]: (float((r.get("tracer") or {})["total_flops"])
                         if (r.get("tracer") or {}).get("status") == "ok"
                         and (r.get("tracer") or {}).get("total_flops") is not None else None) for r in rows}
    refused = {r["case"]: (r.get("tracer") or {}).get("reason") or r.get("diagnosis") or "an error"
               for r in rows if (r.get("tracer") or {}).get("status") in ("error", "rejected")}
    key = (lambda i: flops.get(i) or 0.0) if any(flops.values()) else (lambda i: infos[i].input_bytes)
    return sorted(range(len(infos)), key=lambda i: -key(i)), flops, refused


def restore(od, old, path) -> int:
    """``--restore``: the original case files back, probe.json and grid_search.json removed and the make stamps of
    probe and search invalidated (the probe's verdicts were about the appended cases, now gone: a later probe
    starts afresh, and make redoes probe and search)."""
    if old is None:
        raise UserError(f"{path}: not found - nothing was appended, nothing to restore")
    names = probe_files.restore(od, old)
    from mfulib.pipeline import workdir_state
    gone = [p for p in (path, od.file("grid_search.json")) if os.path.exists(p)]
    for p in gone:
        os.unlink(p)
    stamps = [s for s in ("probe", "search") if workdir_state.invalidate(od.path, s)]
    print(f"restored the original {', '.join(names)} in {od.path}; removed "
          f"{', '.join(os.path.basename(p) for p in gone)}" + (f" and the make stamps of {', '.join(stamps)}"
                                                              if stamps else ""))
    return 0


def check_args(args) -> None:
    """UserError for limits out of range, a missing --flops-tool or a --peak-json naming no file."""
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


def pick_sources(od, args, infos, n_orig, limits, backend, t_start, clock, tracer) -> dict:
    """The source cases: ``--cases``, or the ``--top`` ones by traced FLOPs that this backend runs (ranked by one
    trace), the ``reserve`` ranked after them, ``skipped`` ({case: why}), ``traced`` ({case: FLOPs}), ``order``
    (the whole ranking), ``rank_cut`` (why the budget ended in the ranking trace, else None) and ``refused``
    ({case: why}: the reference raises on it at scale 1 - never a source, and left out of the symbol analysis)."""
    from mfulib.verify.verified_cases import default_max_input_mb, skip_reason
    rank_cut = None  # the budget ended during the ranking trace: probe.json records it, no candidate runs
    refused = {}
    # the originals are judged by the memory limits only: verify's input cap skips them below, and says so
    limits = {k: v for k, v in limits.items() if k != "verify_max_input_mb"}
    try:
        if args.cases:
            sources = cli.parse_case_list(args.cases)
            bad = [i for i in sources if i >= n_orig]
            if bad:
                raise UserError(f"--cases {args.cases}: no original case {bad} (ids 0..{n_orig - 1})")
            fits = [i for i in sources if gate1(infos[i], limits)["ok"]]  # never build what gate 1 refuses
            if not args.dry_run and fits:
                _order, traced, refused = rank_sources(od, args, infos, fits, t_start, clock, tracer)
            else:
                traced = {}
        elif args.dry_run:
            sources, traced = sorted(range(n_orig), key=lambda i: -infos[i].input_bytes), {}
        else:
            fits = [i for i in range(n_orig) if gate1(infos[i], limits)["ok"]]
            sources, traced, refused = rank_sources(od, args, infos, fits if len(fits) < n_orig else None, t_start,
                                                    clock, tracer)
            sources = [i for i in sources if i in fits] + [i for i in sources if i not in fits]
    except OutOfBudget as exc:
        rank_cut, sources, traced = str(exc), [], {}
        print(f"stopped: {exc}")
    order = sources
    # chosen automatically, the sources are among the cases verify runs on this backend (the CPU interpreter: small
    # ones); cases named with --cases are the user's choice (only what the backend cannot run at all is skipped)
    cap = None if args.cases else default_max_input_mb(backend)
    skipped = {i: skip_reason(infos[i], backend, cap) for i in order if skip_reason(infos[i], backend, cap)}
    for i in order:  # a case the reference raises on: every candidate of it would fail gate 2
        if i in refused and i not in skipped:
            skipped[i] = (f"the reference raises on it at scale 1 ({os.path.basename(od.cases_path)} line {i + 1}): "
                          f"{refused[i][:200]} - fix that case line (or model.py)")
    cap_skipped = dict(skipped)
    sources = [i for i in order if i not in skipped]
    reserve = [] if args.cases else sources[args.top:]  # ranked next: a source at the time limit is replaced
    if not args.cases:  # the top ones among the cases this backend can run; report the skipped ones ranked above
        sources = sources[: args.top]
        last = order.index(sources[-1]) if sources else len(order)
        skipped = {i: r for i, r in skipped.items() if order.index(i) < last or i in refused}
    return {"sources": sources, "reserve": reserve, "skipped": skipped, "cap_skipped": cap_skipped, "refused": refused,
            "traced": traced, "order": order, "rank_cut": rank_cut}


def dry_run(od, groups, sources, skipped, limits, max_scale) -> int:
    """``--dry-run``: the candidates of every source's ladders - each scaled symbol alone, then the joint ones
    (every pair: at run time only the pair whose single ladders gained most runs; every set of three or more: at
    run time only the greedy one, the pair plus each symbol whose single ladder gained, while the joint ladders
    keep gaining) - at the ladder's powers of two, with their gate-1 bytes and refusals; nothing runs."""
    from tabulate import tabulate
    pr = Probe(od, {"candidates": [], "appended": {}}, groups, {}, limits, {})
    rows, n_ok = [], 0
    for i in sources:
        names = pr.scaled_symbols(i)
        ladders = [([n], "single") for n in names] + [
            (list(c), "joint (if these two gain most)" if size == 2 else "joint (greedy: if the pair and each "
             "added symbol gain)") for size in range(2, len(names) + 1) for c in itertools.combinations(names, size)]
        for lad, what in ladders:
            for s in ladder(max_scale):
                cand, _case, info, refusals = pr.plan(i, {n: s for n in lad})
                g1 = gate1(info, limits)
                n_ok += bool(g1["ok"])
                rows.append([i, "+".join(lad), what, factors_label(cand["factors"]), cand["scale"], info.input_bytes,
                             "ok" if g1["ok"] else "FAIL: " + g1["detail"][:60], "; ".join(refusals)[:40]])
    print(tabulate(rows, headers=["case", "ladder", "kind", "factors", "scale", "input_bytes", "gate 1", "refusal"],
                   tablefmt="plain"))
    print(f"{len(rows)} candidate(s) listed, {n_ok} pass gate 1 (bisection adds up to --refine-steps more per ladder; "
          "a ladder ends at its first failure or saturation)")
    for i, r in skipped.items():
        print(f"case {i} skipped: {r}")
    return 0


def _new_doc(od, old, backend, device, why, limits, groups, chosen, picked, run_key, inputs) -> dict:
    """probe.json of this run: what it searches, and the candidates, appended cases and backup of the run it
    resumes (``old``)."""
    from mfulib.core.jsonio import provenance
    doc = provenance(pj.TOOL, pj.SCHEMA, device={"backend": backend, "device": device, "why": why})
    doc.update(op_dir=od.path, limits=limits, groups=[{"key": g.key, "layout": g.layout, "cases": g.cases,
                                                       "notes": g.notes} for g in groups],
               symbols=[s.to_dict() for g in groups for s in g.symbols],
               scale_dims=[{"symbol": n, "why": w} for n, w in chosen], sources=picked["sources"],
               skipped_sources={str(k): v for k, v in picked["skipped"].items()},
               traced_flops={str(k): v for k, v in picked["traced"].items()},
               candidates=(old or {}).get("candidates", []), appended=(old or {}).get("appended", {}),
               backup=(old or {}).get("backup"), resumed=[], complete=False, interrupted=pj.RUNNING,
               inputs=inputs, run_key=run_key)
    return doc


def _check_run_key(old, run_key, path):
    """``old`` to resume from under this run's settings: verdicts of another backend / seed / limits must not sit
    beside this run's (the search would reuse them) - SettingsRefused when cases were appended under them, a fresh
    start when nothing was. Another peak or wall-clock method (``wall_clock``, :data:`mfulib.core.wallclock.METHOD`;
    absent in files older than it) is no error: the run starts over without reusing the verdicts, and the earlier
    candidates it does not reach lose theirs (:func:`mfulib.search.probe.supersede`)."""
    strict = lambda k: {n: v for n, v in json.loads(json.dumps(k or {})).items()  # noqa: E731
                        if n not in ("peak", "wall_clock")}
    if old and strict(old.get("run_key")) != strict(run_key):
        if old.get("appended"):
            diff = sorted(k for k in strict(run_key) if strict(old.get("run_key")).get(k) != strict(run_key)[k])
            raise SettingsRefused(f"{path}: made with other settings ({', '.join(diff)} differ) and "
                                  f"{len(old['appended'])} case(s) appended under them - run --restore first, then "
                                  "probe again with the new settings")
        old = dict(old, candidates=[], baselines={})  # nothing appended: start afresh
    return old


def _check_max_scale(old, args, path) -> None:
    """SettingsRefused when an earlier run under the same run_key appended cases with a factor above this run's
    --max-scale (a resume would keep them and their verdicts: the search would time shapes this run excludes); a
    larger --max-scale resumes as ever. (After a change of peak or wall-clock method the earlier verdicts are
    superseded instead: :func:`mfulib.search.probe.supersede`.)"""
    over = sorted((int(cid) for cid, a in ((old or {}).get("appended") or {}).items()
                   if max(((a or {}).get("factors") or {}).values() or [1]) > args.max_scale), key=int)
    if over:
        raise SettingsRefused(f"{path}: {len(over)} case(s) appended by an earlier run scale beyond --max-scale "
                              f"{args.max_scale} (case ids {over[:6]}{'...' if len(over) > 6 else ''}; that run's "
                              f"--max-scale {((old.get('limits') or {}).get('max_scale'))}) - a resume would keep "
                              f"them: run python3 {os.path.join(SCRIPTS_DIR, 'max_shape_probe.py')} --dir "
                              f"{os.path.abspath(args.dir)} --restore first, then probe again")


def _ladder_args(pr, source, no_matrix, args, save, bar) -> tuple:
    """(evaluate, figure, max_scale, refine_steps) of :func:`mfulib.search.ladder.run_ladders` for ``source``:
    :meth:`Probe.evaluate` (one progress-bar step each) and :meth:`Probe.figure_of`."""
    return (lambda f, key: (bar.update(1), pr.evaluate(source, f, no_matrix, save, key))[1],
            lambda f: pr.figure_of(source, f), args.max_scale, args.refine_steps)


def run_sources(pr, doc, picked, infos, bw, args, save, bar) -> None:
    """The source loop: each source's ladders (:func:`mfulib.search.ladder.run_ladders` over
    :meth:`Probe.evaluate`: each scaled symbol alone, then the joint pair; recorded in probe.json ``ladders``), a
    source already over --max-ms replaced by the next reserve case (each once); then, source by source, the greedy
    joint ladders of three or more symbols (:func:`mfulib.search.ladder.extend_joint`: while the last joint ladder
    gains over the earlier ones by more than :data:`mfulib.search.probe.SATURATION_GAIN` and another symbol's single
    ladder gained over scale 1 by more than it - the scale-1 figure timed for the saturation stop; without it,
    under --no-saturation-stop, a single ladder that passed counts as gained). They run after every source's pair,
    so the budget cuts them first. OutOfBudget ends it (``pr.out_of_budget``); KeyboardInterrupt reaches the
    caller."""
    sources, reserve, traced = picked["sources"], picked["reserve"], picked["traced"]
    order, cap_skipped = picked["order"], picked["cap_skipped"]
    k, ran = 0, []  # ran: (source, no_matrix) of the sources whose single ladders and pair ran
    try:
        while k < len(sources):
            i = sources[k]
            no_matrix = traced.get(i) == 0.0 and not any(traced.values())  # traced, and nothing has matrix work
            pr.set_source(i, no_matrix, traced.get(i))
            # traced ahead while this source runs: not the sources that their scale-1 floor already rules out
            pr.upcoming = [u for u in sources[k + 1:]
                           if gate4_floor(traced.get(u), infos[u].input_bytes, bw, args.max_ms) is None]
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
            run_ladders(pr.scaled_symbols(i), *_ladder_args(pr, i, no_matrix, args, save, bar),
                        log=lambda m: pr.log(f"case {i}: {m}"), records=doc.setdefault("ladders", []),
                        extra={"source_case": i}, on_end=lambda names: pr.end_source(i, names),
                        last=pr.batch_symbols(i))
            pr.end_source(i)
            ran.append((i, no_matrix))
            k += 1
        pr.upcoming = []  # the joint ladders of three or more symbols, source by source: the first a budget cuts
        for i, no_matrix in ran:
            extend_joint([r for r in doc["ladders"] if r.get("source_case") == i],
                         *_ladder_args(pr, i, no_matrix, args, save, bar)[:3], SATURATION_GAIN,
                         base=lambda: pr.base_fig.get(i), refine_steps=args.refine_steps,
                         log=lambda m: pr.log(f"case {i}: {m}"), records=doc["ladders"], extra={"source_case": i},
                         on_end=lambda names: pr.end_source(i, names), last=pr.batch_symbols(i))
            pr.end_source(i)
    except OutOfBudget as exc:  # from a gate, or the scale-1 timing of a source near the limit
        pr.out_of_budget = True
        pr.log(f"stopped: {exc}; a re-run resumes from {pr.od.file(pj.FILE_NAME)}")


def print_summary(od, doc, traced, max_ms, path) -> None:
    """The candidates table, the appended count, and why nothing was scaled when every source was skipped."""
    from tabulate import tabulate
    unit = "GB/s" if traced and not any(traced.values()) else "TFLOP/s"
    table = [[c["source_case"], factors_label(c.get("factors")), c.get("scale"), c.get("input_bytes"),
              c.get("verdict") or ("superseded" if c.get("superseded") else None),
              c.get("failed_gate") or "",
              c["new_case_id"] if c.get("new_case_id") is not None else "",
              "" if c.get("wall_figure") is None else f"{c['wall_figure']:.4g}",
              "" if c.get("wall_s") is None else f"{c['wall_s']:.1f}",
              ("saturated" if c.get("saturated") else
               (next((g["detail"] for g in c.get("gates") or [] if g["gate"] == c.get("failed_gate")), "")
                or ""))[:60]]
             for c in doc["candidates"]]
    print(tabulate(table, headers=["case", "factors", "scale", "input_bytes", "verdict", "gate", "new id",
                                   f"wall {unit}", "wall_s", "why"], tablefmt="plain"))
    for lad in doc.get("ladders") or []:
        best = lad.get("best") or {}
        print(f"ladder case {lad['source_case']} {'+'.join(lad['symbols']) or '(joint)'}: {lad['stopped']}" +
              (f"; best {factors_label(best['factors'])} at {best['wall_figure']:.4g} {unit}" if best else ""))
    n = doc.get("counts") or {}
    if n:
        print(f"{n['tried']} candidate(s) tried ({n['resumed']} resumed), {n['passed_gate1']} passed gate 1, "
              f"{n['passed']} passed every gate")
    print(f"{len(doc['appended'])} case(s) appended to {', '.join(od.case_file_names())}; {path}"
          + (f"; {doc['interrupted']}" if doc["interrupted"] else ""))
    if not doc["sources"] and doc["complete"]:  # every source skipped (or none chosen): say so, not an empty table
        sk = doc["skipped_sources"]
        print(f"no source case left to scale: case(s) {', '.join(sk) or 'none'} skipped (probe.json "
              f"skipped_sources" + (f"; case {next(iter(sk))}: {next(iter(sk.values()))}" if sk else "") +
              f"); the search measures the original cases at scale 1 - raise --max-ms (now {max_ms:g}) to "
              "scale them")


#: max_shape_probe.py's destinations that do not change the probe's result (besides provenance.NOT_SETTINGS)
NOT_SETTINGS = ("restore", "dry_run", "trace_jobs")


def run(args, t_start=None, clock=time.monotonic, gate_runner=None, tracer=None, parse=None) -> int:
    """The whole probe of ``args`` (``max_shape_probe.py``'s parsed arguments; ``t_start``: ``clock`` seconds of
    the script's start, where ``--budget-s`` counts from; ``parse``: the script's ``parse_args``, with which a run
    by hand is compared with make's command line: :func:`mfulib.pipeline.workdir_state.record_run`). Returns 0;
    UserError on bad input; KeyboardInterrupt after probe.json was saved as interrupted."""
    from tqdm import tqdm

    from mfulib import backends as dev
    from mfulib.core.opdir import OpDir
    from mfulib.schemas import verify_json
    t_start = clock() if t_start is None else t_start
    od = OpDir(args.dir)
    path = od.file(pj.FILE_NAME)
    old = pj.read_probe_json(path) if os.path.exists(path) else None
    if args.restore:
        return restore(od, old, path)
    check_args(args)
    if old:
        probe_files.check_resumable(od, old)
    n_orig = old["backup"]["n_cases"] if old and old.get("backup") else len(od.read_cases())
    infos = od.describe_all()[:n_orig]
    backend, why = dev.resolve_backend(args.backend)
    device = dev.device_string(backend, args.device)
    host, host_src = probe_limits.host_free_bytes()
    from mfulib.verify.verified_cases import default_max_input_mb
    limits = {"max_bytes": args.max_bytes, "max_ms": args.max_ms, "max_scale": args.max_scale,
              "host_bytes": host, "host_source": host_src, "verify_max_input_mb": default_max_input_mb(backend),
              "device_free_bytes": None if args.dry_run else probe_limits.device_free_bytes(backend, args.device)}
    picked = pick_sources(od, args, infos, n_orig, limits, backend, t_start, clock, tracer)
    # the symbols from the cases the reference runs: one bad line (b's k not a's) would change every case's reading
    kept = [inf for inf in infos if inf.case_id not in picked["refused"]] or infos
    if len(kept) < len(infos):
        print(f"symbol analysis without case(s) {sorted(picked['refused'])}: the reference raises on them at scale 1 "
              "(listed under skipped sources)")
    groups, _scale_dims, chosen, weights = choose_symbols(od, kept, args.scale_dims)
    if args.dry_run:
        return dry_run(od, groups, picked["sources"], picked["skipped"], limits, args.max_scale)
    bw = probe_limits.bandwidth_limit(od.path, backend, args.device, args.peak_json)
    limits.update(bandwidth_gbps=bw["bandwidth_gbps"], bandwidth_source=bw["source"], l2_bytes=bw["l2_bytes"],
                  peak_tflops_max=bw["peak_tflops_max"])
    run_key = {"backend": backend, "seed": args.seed, "max_bytes": args.max_bytes, "max_ms": args.max_ms,
               "scale_symbols": sorted(n for n, _w in chosen), "peak": bw,
               "saturation_stop": not args.no_saturation_stop, "wall_clock": wallclock.METHOD}
    if old:  # the scaled symbols compared as a set: an earlier run's --scale-dims spelling resolved first
        old = dict(old, run_key=run_key_symbols(groups, old.get("run_key")))
    if args.accept_unverified_reference:  # its verdicts differ; absent otherwise, so earlier probe.json files resume
        run_key["accept_unverified_reference"] = True
    old = _check_run_key(old, run_key, path)  # both refuse (SettingsRefused) before anything is written
    if old and old.get("run_key") == json.loads(json.dumps(run_key)):  # its verdicts would be reused as they are
        _check_max_scale(old, args, path)
    if old and old.get("backup"):  # an interrupted run: the case files are re-derived from what it recorded
        probe_files.rewrite_case_files(od, old)
    doc = _new_doc(od, old, backend, device, why, limits, groups, chosen, picked, run_key,
                   verify_json.input_digests(od.path))
    doc["weights"] = weights
    save = lambda: pj.write_probe_json(path, doc)  # noqa: E731
    save()
    opts = {"flops_tool": os.path.abspath(args.flops_tool), "seed": args.seed, "timeout_s": args.timeout_s,
            "max_ms": args.max_ms, "device": device, "backend": backend, "budget_s": args.budget_s,
            "reuse_verdicts": bool(old) and old.get("run_key") == json.loads(json.dumps(run_key)),
            "saturation": not args.no_saturation_stop, "t0": t_start,
            "accept_unverified_reference": args.accept_unverified_reference,
            "trace_jobs": args.trace_jobs if args.trace_jobs is not None else min(4, (os.cpu_count() or 1) // 4)}
    if opts["reuse_verdicts"]:
        doc["baselines"] = (old or {}).get("baselines") or {}
    # one ladder each, then at most the joint ones of 2, 3, ... n_sym symbols
    n_sym = max((sum(s.scaled for s in g.symbols) for g in groups), default=1)
    bar = tqdm(total=len(picked["sources"]) * len(ladder(args.max_scale)) * (2 * n_sym - 1),
               desc=f"probe {od.op_name}", unit="cand",
               file=sys.stderr, disable=not sys.stderr.isatty())
    pr = Probe(od, doc, groups, opts, limits, bw, log=lambda m: (bar.write(m) if not bar.disable else print(m)),
               clock=clock, gate_runner=gate_runner, tracer=tracer)
    t_run = clock()
    try:
        run_sources(pr, doc, picked, infos, bw, args, save, bar)
    except KeyboardInterrupt as exc:
        doc["interrupted"] = f"{cli.stop_label(exc)}: a re-run resumes"
        doc["wall_s"] = round(clock() - t_run, 3)
        save()
        raise
    finally:
        bar.close()
        pr.close()
        earlier = (old or {}).get("wall_s") or 0.0 if opts["reuse_verdicts"] else 0.0
        doc["wall_s"] = round(earlier + clock() - t_run, 3)  # this run and the runs it resumed
    rank_cut = picked["rank_cut"]
    doc["interrupted"] = rank_cut or (f"--budget-s {args.budget_s:g} s reached" if pr.out_of_budget else None)
    doc["complete"] = not (pr.out_of_budget or rank_cut)
    cands = doc["candidates"]
    doc["counts"] = {"tried": len(cands), "resumed": len(set(doc.get("resumed") or [])),
                     "passed_gate1": sum(1 for c in cands if (c.get("gates") or [{}])[0].get("ok")),
                     "passed": sum(1 for c in cands if c.get("verdict") == "pass")}
    from mfulib.pipeline.workdir_state import record_run
    from mfulib.schemas import provenance as made
    doc[made.KEY] = made.made_from(od.path, [od.model_py, od.model_new_py], made.settings_of(args, NOT_SETTINGS),
                                   step="probe")
    save()
    print_summary(od, doc, picked["traced"], args.max_ms, path)
    record_run(od.path, "probe", doc[made.KEY], print, parse=parse, script="max_shape_probe.py", drop=NOT_SETTINGS)
    return 0
