#!/usr/bin/env python3
"""Correctness of every bundled ModelNew against its reference, on all supported cases of the chosen backend.

Prepares each bundled operator (examples/ops; the real-case ones read ../shared/data) into a scratch work root,
runs scripts/verify_op.py on it in its own process (a crash in one operator never stops the others) and prints
one line per operator: cases passed / failed / rejected / skipped. Writes <out>/validate_bundled.json and the
per-operator verify.json files. Used for the H200 run quoted in the closing notes; on CPU it runs the
interpreter-sized cases only.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def main():
    from mfulib.sources import examples
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="validate_out", help="output folder (work dirs + summary)")
    p.add_argument("--backend", default="auto")
    p.add_argument("--only", default=None, help="comma-separated example names")
    p.add_argument("--timeout-s", type=float, default=900, help="per-operator limit")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    names = [n for n, src in examples.list_examples() if "(layout B)" in src]
    if args.only:
        names = [n for n in names if n in args.only.split(",") or n.split("/")[-1] in args.only.split(",")]
    summary = []
    for name in names:
        work = os.path.join(args.out, "work", name.replace("/", "__"))
        t0 = time.time()
        prep = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "prepare_op_dir.py"), "--example", name,
                               "--dst", work, "--force"], capture_output=True, text=True)
        if prep.returncode != 0:
            summary.append({"op": name, "error": "prepare: " + prep.stderr.strip()[-400:]})
            print(f"{name:<40} prepare failed: {prep.stderr.strip()[-200:]}")
            continue
        try:
            r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "verify_op.py"), "--op-dir", work,
                                "--backend", args.backend], capture_output=True, text=True, timeout=args.timeout_s)
            rc, tail = r.returncode, (r.stdout + r.stderr)[-1500:]
        except subprocess.TimeoutExpired:
            rc, tail = "timeout", ""
        vpath = os.path.join(work, "verify.json")
        row = {"op": name, "rc": rc, "wall_s": round(time.time() - t0, 1)}
        if os.path.exists(vpath):
            v = json.load(open(vpath))
            row["summary"] = v["summary"]
            row["device"] = v["device"]["device"]
            row["cases"] = [{k: c.get(k) for k in ("case", "dtype", "status", "max_norm_err", "tol", "reason")}
                            for c in v["cases"]]
        else:
            row["error"] = tail
        summary.append(row)
        print(f"{name:<40} {json.dumps(row.get('summary', row.get('error', '')))[:300]}  ({row['wall_s']} s)",
              flush=True)
    with open(os.path.join(args.out, "validate_bundled.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
