"""Measuring the selected cases: one (case, implementation) in a child process with bounded retries of an
incomplete profile (:func:`run_case_impl`), its PMU pass (:func:`run_pmu`), the kept profile
(:func:`keep_profile`), and the loop over all of them (:func:`measure_cases`: a rejected case hands its slot
to the next admitted one; Ctrl-C stops it with what was measured so far)."""
from __future__ import annotations

import os
import shutil
import tempfile
import time

from mfulib.backends.base import lost_problems
from mfulib.backends.runner import close_workers, run_child
from mfulib.profiles import kernels as _kernels
from mfulib.collect import keep_index
from mfulib.collect.options import Options
from mfulib.collect.selection import next_admitted
from mfulib.core.errors import UserError
from mfulib.core.opdir import OpDir


def case_spec(backend, opdir: OpDir, case_id: int, impl: str, opts: Options) -> dict:
    """The child's spec of one (case, impl) (keys: :mod:`mfulib.backends.runner`)."""
    return {"op_dir": opdir.path, "case_id": case_id, "impl": impl, "seed": opts.seed, "warmup": opts.warmup,
            "repeats": opts.repeats, "backend": backend.name, "device": backend.device_string(opts.device_id),
            "markers": backend.markers, "profile": True, "flush_cache_mib": opts.flush_cache_mib}


def run_pmu(pmu, backend, opdir: OpDir, case_id: int, impl: str, opts: Options, res: dict) -> dict:
    """PMU counters of a measured (case, impl) (``pmu.collect_case`` in ``<attempt dir>/ncu``); {} when the
    measurement itself failed. Never raises for the case."""
    s = res.get("summary") or {}
    if res.get("status") != "ok" or not res.get("attempt_dir"):
        why = pmu.probe()["reason"] or f"no PMU pass: the case has no kernel time ({res.get('status')})"
        return {"pmu": None, "pmu_source": None, "pmu_unavailable": why, "flags": []}
    from mfulib.run.worker import child_env
    try:
        return pmu.collect_case(case_spec(backend, opdir, case_id, impl, opts), s.get("sequence") or [],
                                [k["name"] for k in s.get("kernels") or []], os.path.join(res["attempt_dir"], "ncu"),
                                child_env(backend.child_env(os.environ)))
    except Exception as exc:  # noqa: BLE001 - counters are optional: the kernel time stands without them
        return {"pmu": None, "pmu_source": None, "pmu_unavailable": f"PMU pass failed ({type(exc).__name__}: {exc})",
                "flags": []}


def run_case_impl(backend, opdir: OpDir, case_id: int, impl: str, opts: Options, work_root: str) -> dict:
    """Measure one (case, impl) with up to ``opts.retry`` retries of an incomplete profile; never raises for the
    case's own failures. Returns {status, error, summary, flags, attempts, attempt_dir, output_bytes, wall_s,
    device, compat, runtime, timing_method} (+ ``launch_configs`` on cuda: each kernel's block threads and shared
    memory in the measured iterations, :func:`mfulib.profiles.triton_ptx.cupti_launch_configs`)."""
    n = opts.warmup + opts.repeats
    spec = case_spec(backend, opdir, case_id, impl, opts)
    problems_seen = []
    res = {}
    for attempt in range(opts.retry + 1):
        adir = os.path.join(work_root, f"case{case_id}_{impl}", f"attempt{attempt}")
        if os.path.exists(adir):
            shutil.rmtree(adir)
        t0 = time.perf_counter()
        child = run_child(backend, spec, adir, opts.case_timeout_s)
        res = {"status": child.status, "error": child.error, "attempts": attempt + 1, "attempt_dir": adir,
               "output_bytes": child.report.get("output_bytes"), "device": child.report.get("device"),
               "compat": child.report.get("compat"), "cpu_adaptations": child.report.get("cpu_adaptations"),
               "flags": [], "summary": None, "runtime": None,
               "timing_method": backend.timing_method,
               "wall_s": dict(child.report.get("wall_s") or {}, child_process=child.wall_s)}
        if child.status != "ok":
            return res
        try:
            rows, info = backend.launches(adir, child.report, n)
        except UserError as exc:  # e.g. no export yet: an incomplete profile, retried
            rows, info = [], {"problems": [str(exc)], "flags": [], "lost_by_iter": {}}
        except Exception as exc:  # noqa: BLE001 - a parser bug must not stop the other cases
            res.update(status="error", error=f"reading the profile in {adir} failed ({type(exc).__name__}: {exc}) - "
                                             "keep it with --keep-prof and report it")
            return res
        res["runtime"] = info.get("runtime")
        res["timing_method"] = info.get("timing_method") or backend.timing_method
        res["prof"] = info.get("prof")
        res["pmu_source"], res["pmu_unavailable"] = info.get("pmu_source"), info.get("pmu_unavailable")
        problems = list(info.get("problems", [])) + lost_problems(info, opts.warmup, n)
        summary = _kernels.summarize(rows, opts.warmup, opts.repeats, extra_problems=problems)
        res["summary"] = summary
        if backend.matrix_counter_documented and not backend.pmu_in_profile:  # cuda: which compiled variant ran
            from mfulib.profiles.triton_ptx import cupti_launch_configs
            res["launch_configs"] = cupti_launch_configs(rows, range(opts.warmup, n))
        res["flags"] = list(info.get("flags", [])) + list(summary.get("flags", []))
        res["wall_s"]["parse"] = time.perf_counter() - t0 - child.wall_s
        if summary["status"] == "ok":
            if problems_seen:
                res["flags"].append(f"incomplete profile retried ({attempt} retr{'y' if attempt == 1 else 'ies'}): "
                                    f"{problems_seen[0]}")
            return res
        if summary["status"] == "no_kernels":
            res.update(status="no_kernels", error=f"{impl}: " + "; ".join(summary["problems"]))
            return res
        problems_seen += summary["problems"]
    res.update(status="incomplete", error=(f"profile incomplete after {opts.retry + 1} attempt(s), not reported "
                                           f"as a time: {'; '.join(problems_seen[-2:])} - re-run, or raise --retry"))
    return res


def keep_profile(res: dict, keep_root: str, case_id: int, impl: str, output_dir: str):
    """Move the last attempt's raw profile to ``<keep>/prof/case<id>_<impl>``; returns its path relative to
    ``output_dir`` (absolute when outside it). A profile an earlier run kept there is moved aside, not deleted
    (:func:`mfulib.collect.keep_index.make_room`)."""
    src = res.get("attempt_dir")
    if not src or not os.path.isdir(src):
        return None
    dst = os.path.join(keep_root, "prof", f"case{case_id}_{impl}")
    keep_index.make_room(os.path.dirname(dst), os.path.basename(dst))
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.move(src, dst)
    rel = os.path.relpath(dst, output_dir)
    return dst if rel.startswith("..") else rel


def _progress_line(k, total, case_id, impl, res):
    s = res.get("summary") or {}
    if res["status"] != "ok":
        return f"[{k}/{total}] case {case_id} {impl}: {res['status'].upper()} - {res.get('error')}"
    spread = s.get("repeat_spread")
    line = (f"[{k}/{total}] case {case_id} {impl}: {s['launches_per_iter']} kernel launch(es)/iter, kernel "
            f"{s['kernel_time_ns'] / 1e3:.2f} us, span {s['span_ns'] / 1e3:.2f} us"
            + (f", spread {spread:.1%}" if spread is not None else "")
            + (f", {res['attempts']} attempts" if res.get("attempts", 1) > 1 else ""))
    if spread is not None and spread > _kernels.SPREAD_LIMIT:
        line += f"  WARNING: repeat spread above {_kernels.SPREAD_LIMIT:.0%}"
    return line


def measure_cases(backend, opdir: OpDir, opts: Options, pmu, gate, selected: list, reserve: list, skipped: list,
                  flops: dict, flops_of, impls: list, keep_root, output_dir: str, log):
    """Measure every (case, impl) of ``selected`` (appended to when a rejected case's slot goes to the next case of
    ``reserve``; ``flops_of(info)`` gives that case's ``flops`` entry). Returns ``(results {case id: {impl:
    result}}, interrupted)``; attempts live in a temporary directory (under ``<keep_root>/prof`` when kept), removed
    at the end. Profiles kept are recorded as one run in ``<keep_root>/prof/runs.json`` (:mod:`mfulib.collect.
    keep_index`), also after an interrupt."""
    if keep_root:  # attempts live beside their final place, so keeping one is a rename
        os.makedirs(os.path.join(keep_root, "prof"), exist_ok=True)
    work_root = tempfile.mkdtemp(prefix=".tmp-collect-", dir=os.path.join(keep_root, "prof") if keep_root else None)
    results, interrupted = {}, False
    total = len(selected) * len(impls)
    k = 0
    try:
        queue = list(selected)
        while queue:
            info = queue.pop(0)
            for impl in impls:
                k += 1
                res = run_case_impl(backend, opdir, info.case_id, impl, opts, work_root)
                if impl == impls[-1]:  # the measured implementation (asc when requested): its counters
                    res["pmu_run"] = run_pmu(pmu, backend, opdir, info.case_id, impl, opts, res)
                res["prof_dir"] = keep_profile(res, keep_root, info.case_id, impl, output_dir) if keep_root else None
                results.setdefault(info.case_id, {})[impl] = res
                if opts.progress:
                    log(_progress_line(k, total, info.case_id, impl, res))
            nxt = None
            if reserve and any(r.get("status") == "rejected" for r in results[info.case_id].values()):
                nxt = next_admitted(reserve, gate, skipped)
            if nxt is not None:
                flops[nxt.case_id] = flops_of(nxt)
                selected.append(nxt)
                queue.append(nxt)
                total += len(impls)
                log(f"case {info.case_id} rejected by the operator: its slot goes to case {nxt.case_id} "
                    "(next by the same ranking)")
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: writing what was measured so far")
    finally:
        close_workers()
        shutil.rmtree(work_root, ignore_errors=True)
        kept = [(cid, impl, f"case{cid}_{impl}") for cid, per in results.items() for impl, r in per.items()
                if r.get("prof_dir")]
        if keep_root and kept:
            keep_index.record_run(os.path.join(keep_root, "prof"), keep_index.new_run_id(), opdir.cases_path, kept)
    return results, interrupted
