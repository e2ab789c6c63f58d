#!/usr/bin/env python3
"""Compare two work directories of the same operator, made by two versions of the tool (a refactoring's referee).

What must agree (timings are not compared: they are measurements, not results of the code under test):
the JSON key structure of every result file (key paths, list items merged), the case ids of each step, every case's
verify status, flops.py's FLOPs and the tracer's count, the check verdicts, the collected cases' FLOPs, statuses,
kernel names and launches per iteration, and the decomposition's cases and parts.

    python3 bench/compare_workdirs.py WORK_BEFORE WORK_AFTER      # exit 0: same; 1: differences listed

Fields that are per-run by nature (times, dates, host, command line, paths, versions) are left out of the value
comparison but kept in the key comparison; the keys of peak.json's ``cache`` block (a cache hit or miss) and the
collector's repeat-spread notes (timing noise of a loaded host) are left out of both.
"""
import argparse
import json
import os
import sys

#: flags that report the run's timing noise, not a result of the code (a loaded host raises them at random)
TIMING_FLAGS = ("collector: repeat_spread",)
#: key paths that say whether a cached peak was reused (the machine's state, not the code's output)
RUN_STATE_KEYS = (".cache.",)
FILES = ("prepare.json", "verify.json", "flops_check.json", "performance.json", "peak.json", "mfu_decompose.json",
         "probe.json", "grid_search.json")


def key_paths(obj, prefix=""):
    """Every key path of a JSON value; list items are merged under ``[]``; dicts keyed by data (case ids, kernel
    names, dtypes) still count as keys, so a changed case set shows here too."""
    out = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{prefix}.{k}"
            out.add(p)
            out |= key_paths(v, p)
    elif isinstance(obj, list):
        for v in obj:
            out |= key_paths(v, prefix + "[]")
    return out


def load(work, name):
    path = os.path.join(work, name)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def facts(work):
    """{fact name: value} of the results that must not change under a refactoring."""
    out = {}
    ver = load(work, "verify.json") or {}
    for row in ver.get("cases", []) or []:
        out[f"verify case {row.get('case')} status"] = row.get("status")
    chk = load(work, "flops_check.json") or {}
    out["flops_check verdict"] = (chk.get("summary") or {}).get("verdict")
    for row in chk.get("per_case", []) or []:
        c = row.get("case")
        for k in ("flops", "flops_parts", "vector_flops", "ratio", "status", "flops_status"):
            out[f"flops_check case {c} {k}"] = row.get(k)
        out[f"flops_check case {c} tracer flops"] = (row.get("tracer") or {}).get("total_flops")
    perf = load(work, "performance.json") or {}
    out["performance cases"] = [e.get("case") for e in perf.get("per_case", [])]
    for e in perf.get("per_case", []):
        c = e.get("case")
        for k in ("flops", "flops_tracer", "flops_parts", "vector_flops", "numerator", "compute_dtype", "tf32",
                  "skipped", "asc_error", "launches_per_iter", "sequence", "input_bytes", "output_bytes"):
            out[f"performance case {c} {k}"] = e.get(k)
        out[f"performance case {c} kernels"] = sorted((k.get("name"), k.get("launches_per_iter"))
                                                      for k in e.get("kernels", []) or [])
        out[f"performance case {c} measured"] = e.get("asc_us") is not None
    dec = load(work, "mfu_decompose.json") or {}
    for n, rep in enumerate(dec.get("reports") or []):  # by position: a report's label is its directory's name
        rows = rep.get("rows") or []
        out[f"decompose report {n} cases"] = [r.get("case") for r in rows]
        for r in rows:
            key = f"decompose report {n} case {r.get('case')}"
            out[f"{key} status"] = r.get("status")
            out[f"{key} flops"] = r.get("flops")
            out[f"{key} parts"] = sorted((p.get("part"), tuple(sorted(p.get("kernels") or [])))
                                         for p in r.get("parts") or [])
            out[f"{key} flag levels"] = sorted(f.get("level") for f in r.get("flags") or []
                                               if not str(f.get("message", "")).startswith(TIMING_FLAGS))
    out["decompose complete"] = dec.get("complete")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    args = ap.parse_args(argv)
    diffs = []
    for name in FILES:
        a, b = load(args.before, name), load(args.after, name)
        if (a is None) != (b is None):
            diffs.append(f"{name}: present in {'before' if a is not None else 'after'} only")
            continue
        if a is None:
            continue
        ka, kb = ({p for p in key_paths(x) if not any(k in p for k in RUN_STATE_KEYS)} for x in (a, b))
        for p in sorted(ka - kb):
            diffs.append(f"{name}: key {p} only before")
        for p in sorted(kb - ka):
            diffs.append(f"{name}: key {p} only after")
    fa, fb = facts(args.before), facts(args.after)
    for k in sorted(set(fa) | set(fb)):
        if fa.get(k) != fb.get(k):
            diffs.append(f"{k}: before {fa.get(k)!r} after {fb.get(k)!r}")
    n_files = sum(load(args.before, n) is not None for n in FILES)
    print(f"{n_files} result files, {len(fa)} facts compared")
    for d in diffs:
        print("DIFF", d)
    print("same" if not diffs else f"{len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
