#!/usr/bin/env python3
"""Find the largest legal scaled shapes of a work directory's cases (step 2 of triton-mfu-analyzer).

Symbol analysis first (mfulib/core/symbols.py): (tensor, axis) positions equal in every case form one symbol, each
tensor's last axis excluded, per layout group (BSH/SBH/BSND/BNSD...); symbols are classified batch / seq_q / seq_k /
seq / heads / head_dim / hidden / gemm_k / gemm_n with the evidence; sequence + batch scale by default, and a batched
matmul's k and n (two data operands: m, k and n set its arithmetic intensity); weights never scale (--scale-dims,
compared by the symbols it selects). Per source case, one ladder of factors s = 2, 4, 8, ... <= --max-scale per chosen
symbol alone, then the joint ladder of the two whose single ladders gained most (both at one factor), then - after
every source's pair, greedily, while it gains - the joint ladder of three or more (each symbol whose single ladder
gained joins, all at one factor; mfulib/search/ladder.py extend_joint); batch symbols rank after every other in both
choices (they replicate work, never raise the arithmetic intensity); a candidate's factors are shown per symbol
(batch x4,seq x2). Each candidate goes through five gates in cost order
(mfulib/search/probe.py): 1 input bytes (from the case description, before anything is allocated) <= --max-bytes,
verify's input cap of the backend (1 MB on cpu), host and free device memory; 2 the reference accepts the shape
(--flops-tool --tracer-only as a subprocess: FLOPs > 0, same seed as the timed run); 3 ModelNew matches Model within
verify's tolerance (an OOM is recorded, not fatal); 4 one call <= --max-ms (the median wall time per call of
runs of back-to-back calls, ~10 ms each, so short kernels are not charged the launch + synchronize latency); 5
effective bandwidth (input bytes / time) <= 1.3 x the memory bandwidth of peak.json. Bisection between the last
passing and the first failing factor of each ladder. Gates 3 and 4 run in one persistent child (a crash, hang or
OOM of a candidate replaces it); gate 4 fails without running when the roofline floor (traced FLOPs / 1.3 x the
highest peak of peak.json) already exceeds --max-ms,
and a source over --max-ms at scale 1 - by that floor, or timed first when the floor is at least 1/8 of it - is
replaced by the next case (skipped_sources; each next case once). Each source case is first timed at scale 1; each
ladder ends early once a doubling raises its wall TFLOP/s by less than 5% (--no-saturation-stop: never). --budget-s
bounds the whole run, inside a candidate too; a candidate cut by it gets no verdict and a re-run resumes with it.
probe.json records the seconds of every candidate and gate (wall_s), so a slow probe shows where its time went.

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
    p.add_argument("--max-ms", type=float, default=4000.0, help="gate 4: longest call in ms (median wall time per "
                   "call)")
    p.add_argument("--backend", default="auto", help="auto|npu|cuda|cpu")
    p.add_argument("--device", type=int, default=0, help="device index (default 0)")
    p.add_argument("--scale-dims", help="comma-separated symbol kinds or names to scale (default: sequence and "
                   "batch kinds, and a batched matmul's k and n: batch,seq_q,seq_k,seq,gemm_k,gemm_n; weights never "
                   "scale)")
    p.add_argument("--max-scale", type=int, default=64, help="largest scale factor per symbol (each ladder)")
    p.add_argument("--cases", help="source case ids, e.g. 0,3-5 (default: the --top cases by traced FLOPs among "
                   "those verify runs on this backend - on cpu fp32/fp16 cases of at most 1 MB)")
    p.add_argument("--top", type=int, default=8, help="source cases when --cases is not given: the N with the most "
                   "traced FLOPs (input bytes for operators without matrix work, and in --dry-run) that the backend "
                   "can run")
    p.add_argument("--refine-steps", type=int, default=3, help="bisection steps after each ladder")
    p.add_argument("--trace-jobs", type=int, default=None,
                   help="gate-2 traces running ahead on the host at once while the device runs a candidate - the "
                        "ladder's next factor, the x2 start of the source's other ladders, the next sources' first "
                        "candidate; up to 4k finished ones wait for their turn (default: min(4, CPUs // 4); 0: none); "
                        "with k > 0 each trace gets CPUs // (k + 1) torch threads")
    p.add_argument("--no-saturation-stop", action="store_true",
                   help="climb every ladder to its first failing factor; by default a source's ladder ends once a "
                        "doubling raises its wall TFLOP/s (GB/s without matrix work) by less than 5%% over the best "
                        "so far, scale 1 included (a larger case would cost more and not raise the limit)")
    p.add_argument("--accept-unverified-reference", action="store_true",
                   help="let a candidate whose whole reference runs out of memory, and that no slice of batch items, "
                        "heads or query rows verifies, pass gate 3 (marked 'unverified (reference does not fit)' in "
                        "probe.json and verify.json, where the collector and the search skip it unless told "
                        "--unverified-ok); by default such a candidate fails gate 3 and is never the limit")
    p.add_argument("--seed", type=int, default=0, help="seed of every draw (tracer, verify, timing; default 0)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="per-subprocess limit of one candidate")
    p.add_argument("--budget-s", type=float, help="bound the whole run to this many seconds, counted from the start "
                   "(the ranking trace included) and enforced inside a candidate too: a candidate cut by it gets no "
                   "verdict, probe.json says complete: false, and a re-run resumes (default: no bound)")
    p.add_argument("--peak-json", help="peak.json with bandwidth_gbps (default: <dir>/peak.json)")
    p.add_argument("--dry-run", action="store_true", help="list the ladders' candidates (each symbol alone, then "
                   "the joint pairs, then the joint sets of three or more the greedy selection may reach) and their "
                   "gate-1 bytes; run nothing")
    p.add_argument("--restore", action="store_true", help="put the original case files back and exit")
    return p


def main(argv=None):
    t_start = time.monotonic()  # --budget-s counts from here
    parser = build_parser()
    args = parser.parse_args(argv)
    cli.sigterm_as_interrupt()  # kill / timeout(1): saved as interrupted, like Ctrl-C
    from mfulib.search import probe_run
    return probe_run.run(args, t_start=t_start, parse=parser.parse_args)


if __name__ == "__main__":
    cli.run_main(main)
