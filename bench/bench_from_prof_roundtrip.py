#!/usr/bin/env python3
"""Round trip of the kept profile (issue 28 item 6): ``make OP=<op> collect`` on a bundled operator (the collect rule
keeps the raw profiles under ``<work>/prof``), then ``msprof_perf_summary.py --from-prof <work>/prof --op-dir
<work> --output-dir <out>/reparse --mfu``; prints, per measured case, the live and the re-parsed kernel time, their
ratio (1.0 expected: the same records, read again) and whether the sequence, per-iteration times, flags, FLOPs,
numerator verdict and ncu-replay mark agree. Writes ``<out>/roundtrip.json`` (the rows, the commands, their exit
status) beside the work directory and the re-parse.

  python3 bench/bench_from_prof_roundtrip.py --out $OUT/roundtrip --backend cuda      # the H200 (~2-4 min)
  python3 bench/bench_from_prof_roundtrip.py --out /tmp/rt --backend cpu              # CPU, the plumbing (~30 s)

Exit status 0 when every measured case agrees, 1 when one differs, 2 when a step failed.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTOR = os.path.join(ROOT, "scripts", "ops_profiling", "msprof_perf_summary.py")
#: per-case fields that must be equal after the round trip (kernel time compared as a ratio too)
SAME = ("kernel_time_ns", "iter_kernel_time_ns", "sequence", "launches_per_iter", "flags", "flops", "numerator",
        "output_bytes", "ncu_replay")


def compare(live: dict, again: dict) -> list:
    """One row per measured live case: {case, live_ns, reparse_ns, ratio, differs: [field]} (a case the re-parse
    lacks has every field in ``differs``)."""
    got = {c["case"]: c for c in again["per_case"] if not c.get("skipped")}
    rows = []
    for c in live["per_case"]:
        if c.get("skipped"):
            continue
        r = got.get(c["case"], {})
        a, b = c.get("kernel_time_ns"), r.get("kernel_time_ns")
        rows.append({"case": c["case"], "live_ns": a, "reparse_ns": b, "ratio": b / a if a and b else None,
                     "differs": [k for k in SAME if c.get(k) != r.get(k)]})
    return rows


def run(cmd, log):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    log.append({"command": " ".join(cmd), "returncode": r.returncode, "wall_s": time.perf_counter() - t0,
                "stderr_tail": r.stderr[-1500:]})
    return r


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (work directory, re-parse, roundtrip.json)")
    p.add_argument("--op", default="5_MHABlock", help="bundled operator (make examples lists them)")
    p.add_argument("--backend", default="cuda", help="cuda on the GPU machine, cpu for the plumbing")
    p.add_argument("--device-id", default="0")
    args = p.parse_args(argv)
    out = os.path.abspath(args.out)
    work, reparse = os.path.join(out, "work"), os.path.join(out, "reparse")
    os.makedirs(out, exist_ok=True)
    log = []
    r = run(["make", "-C", ROOT, f"OP={args.op}", f"WORK={work}", f"BACKEND={args.backend}",
             f"DEVICE_ID={args.device_id}", f"PY={sys.executable}", "collect"], log)
    if r.returncode == 0:
        r = run([sys.executable, COLLECTOR, "--from-prof", os.path.join(work, "prof"), "--op-dir", work,
                 "--output-dir", reparse, "--mfu", "--quiet"], log)
    doc = {"op": args.op, "backend": args.backend, "steps": log, "rows": None}
    status = 2
    if r.returncode == 0:
        with open(os.path.join(work, "performance.json")) as f:
            live = json.load(f)
        with open(os.path.join(reparse, "performance.json")) as f:
            again = json.load(f)
        doc["rows"] = compare(live, again)
        doc["device"] = live.get("device", {}).get("name")
        status = 1 if any(x["differs"] for x in doc["rows"]) else 0
        print(f"{args.op} on {doc['device']} ({args.backend}): live collection vs --from-prof of its kept profile")
        for x in doc["rows"]:
            ratio = f"{x['ratio']:.6f}" if x["ratio"] is not None else "-"
            print(f"  case {x['case']}: live {x['live_ns']} ns, re-parsed {x['reparse_ns']} ns, ratio {ratio}, "
                  + (f"differs: {', '.join(x['differs'])}" if x["differs"] else "all compared fields equal"))
    else:
        print(f"step failed (exit {r.returncode}): {log[-1]['command']}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    with open(os.path.join(out, "roundtrip.json"), "w") as f:
        json.dump(doc, f, indent=2)
    print(f"wrote {os.path.join(out, 'roundtrip.json')}")
    return status


if __name__ == "__main__":
    sys.exit(main())
