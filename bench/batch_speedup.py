#!/usr/bin/env python3
"""Compare a one-worker and an N-worker `make batch` of the same operators (the two-GPU speed-up).

    python3 bench/batch_speedup.py <one-worker batch_summary.json> <N-worker batch_summary.json> [-o out.md]

Prints (and with -o writes) a markdown block: per run its wall time (s, the batch's own clock from first job start
to summary) and operators per minute; the measured speed-up (one-worker wall / N-worker wall); the ideal N-worker
makespan computed from the one-worker run's measured per-operator wall times with the longest-first list schedule
(mfulib.batch.plan.lpt_makespan, Graham's LPT) and the fraction of that ideal speed-up reached; and per operator both
runs' device, wall time and headline figure (MFU@ach, else MBU) with their relative difference. Only operators ok in
both runs are compared. A suggested device session (each command well under the 10-minute device call limit):

    make batch EXAMPLES=zoo,verify BACKEND=cuda DEVICES=0 BATCH_OUT=$OUT/one
    make batch EXAMPLES=zoo,verify BACKEND=cuda DEVICES=0,1 BATCH_OUT=$OUT/two COSTS_FROM=$OUT/one/batch_summary.json
    python3 bench/batch_speedup.py $OUT/one/batch_summary.json $OUT/two/batch_summary.json -o $OUT/speedup.md
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))

from mfulib.batch.plan import lpt_makespan  # noqa: E402
from mfulib.schemas.batch_json import read_summary  # noqa: E402


def headline(row):
    return row.get("mfu_ach") if row.get("mfu_ach") is not None else row.get("mbu")


def compare(one: dict, many: dict) -> list:
    """Markdown lines comparing the two summaries (module docstring)."""
    r1 = {r["name"]: r for r in one["rows"] if r["status"] == "ok" and r.get("wall_s")}
    rn = {r["name"]: r for r in many["rows"] if r["status"] == "ok" and r.get("wall_s")}
    both = sorted(set(r1) & set(rn))
    n = many["workers"]
    ideal = lpt_makespan([r1[k]["wall_s"] for k in both], n)
    serial = sum(r1[k]["wall_s"] for k in both)
    w1, wn = one["wall_s"], many["wall_s"]
    lines = [f"* one worker: wall {w1:.1f} s, {len(r1) / w1 * 60:.2f} operators/min",
             f"* {n} workers (devices {many['devices']}): wall {wn:.1f} s, {len(rn) / wn * 60:.2f} operators/min",
             f"* measured speed-up {w1 / wn:.2f}x; ideal {n}-worker makespan from the one-worker per-operator times "
             f"(longest first) {ideal:.1f} s of {serial:.1f} s serial = ideal speed-up {serial / ideal:.2f}x; "
             f"reached {(w1 / wn) / (serial / ideal):.0%} of it", "",
             "| operator | device (1) | wall s (1) | device (N) | wall s (N) | headline (1) | headline (N) "
             "| rel. diff |",
             "|---|---|---|---|---|---|---|---|"]
    for k in both:
        a, b = headline(r1[k]), headline(rn[k])
        diff = f"{(b - a) / a:+.1%}" if a and b is not None else "—"
        lines.append(f"| {k} | {r1[k]['device']} | {r1[k]['wall_s']:.1f} | {rn[k]['device']} | {rn[k]['wall_s']:.1f} "
                     f"| {a if a is None else f'{a:.2%}'} | {b if b is None else f'{b:.2%}'} | {diff} |")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("one", help="batch_summary.json of the one-worker run")
    p.add_argument("many", help="batch_summary.json of the N-worker run")
    p.add_argument("-o", "--output", help="also write the markdown here")
    a = p.parse_args()
    text = "\n".join(compare(read_summary(a.one), read_summary(a.many))) + "\n"
    print(text, end="")
    if a.output:
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
