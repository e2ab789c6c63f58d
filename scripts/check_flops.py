#!/usr/bin/env python3
"""Check a work directory's flops.py against its reference (step 3 of triton-mfu-analyzer).

Per case: flops > 0 and finite; sum(flops_parts) == flops; FLOPs / nominal peak (the kernel time at 100% MFU)
below --max-implied-ms (the peak: --peak-tflops, else peak.json's nominal block, else the device's nominal table); actual_seq_lengths consistent with
the shapes; and an independent tracer: the reference Model.forward under torch's FlopCounterMode, extended with
formulas for causal/masked attention, CPU SDPA and torch_npu fused ops (npu_fusion_attention, ...), run on meta
tensors (CPU when meta fails and the case fits the caps), so no accelerator is needed.

Diagnosis of the ratio flops.py / tracer: ~1 ok; flops.py = the tracer's dense count -> causal/sparse reduction
missed; ~2 causal missed; < 0.5 projections missed; actual_seq_lengths -> padded lengths counted. flops(case) is
matrix work only: an operator without matrix work returns 0 (no MFU: read it through MBU), and its optional
vector_flops(case) is checked against the tracer's per-op element costs (mfulib/flops/vector_costs.py).
Also for the file: KERNEL_PARTS keys must be flops_parts keys; REVIEW markers left by the generator make the
numerator unverified (review the named lines, then delete the markers).

Verdict: PASSED; FAILED; or UNVERIFIED when a check could not run or could not fail (the tracer could not run
the reference, counted 0 for ops it cannot see, needed mask values, or a draft still has REVIEW markers). Rejected
cases (by flops.py or the reference) and cases with empty inputs ("no work: nothing to time") are counted apart.
Writes <op-dir>/flops_check.json (or -o). Exit status 0 passed (warnings allowed), 1 failed, 2 bad input,
3 unverified (0 with --accept-unverified; the JSON keeps the verdict "unverified").

Examples:
  python3 check_flops.py --op-dir work/5_MHABlock
  python3 check_flops.py --op-dir work/5_MHABlock --largest 3
  python3 check_flops.py --op-dir work/5_MHABlock --tracer-only --cases 4,7   (FLOPs of the reference, no flops.py)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mfulib.core import cli  # noqa: E402

TOOL = "check_flops.py"


def build_parser():
    p = cli.parser(__doc__, prog=TOOL)
    p.add_argument("--op-dir", required=True, help="work directory (model.py, case file, flops.py)")
    p.add_argument("--flops", help="flops.py to check (default: <op-dir>/flops.py)")
    p.add_argument("--cases", help="case ids to check, e.g. 3,7,9 or 0-4 (default: all)")
    p.add_argument("--largest", type=int, help="check only the N cases with the most FLOPs")
    p.add_argument("--seed", type=int, default=0, help="seed for get_input_groups() (recorded)")
    p.add_argument("--tolerance", type=float, default=0.01, help="relative tolerance of flops.py / tracer")
    p.add_argument("--peak-tflops", type=float, help="nominal peak in TFLOP/s for the implied-time check "
                   "(default: the nominal block of peak.json in the work dir, else the device's nominal table)")
    p.add_argument("--backend", default="auto", metavar="{auto,npu,cuda,cpu,none}",
                   help="device whose nominal peak is used when the work dir has none ('none': skip; a backend "
                        "registered through MFU_BACKEND_PLUGINS is accepted too)")
    p.add_argument("--max-implied-ms", type=float, default=4000.0,
                   help="fail when FLOPs / peak exceeds this many ms")
    p.add_argument("--max-cpu-bytes", type=float, default=float(1 << 30),
                   help="largest case (input bytes) the tracer may run on the CPU when meta tensors fail")
    p.add_argument("--max-cpu-flops", type=float, default=5e10,
                   help="largest case (FLOPs) the tracer may run on the CPU when meta tensors fail")
    p.add_argument("--accept-unverified", action="store_true",
                   help="exit 0 on an unverified numerator (it stays 'unverified' in the JSON and downstream)")
    p.add_argument("--tracer-only", action="store_true",
                   help="no flops.py needed: report the tracer's FLOPs per case (for the search step)")
    p.add_argument("-o", "--output", help="result JSON (default: <op-dir>/flops_check.json)")
    p.add_argument("--quiet", action="store_true", help="no table, only the summary line")
    return p


def main(argv=None):
    from mfulib.flops import check_command
    return check_command.run(build_parser().parse_args(argv))


if __name__ == "__main__":
    cli.run_main(main)
