#!/usr/bin/env python3
"""Check ModelNew against Model on each case of a work directory, before anything is timed.

Per case: pass / fail (normalised max error above the dtype's tolerance) / rejected (the reference or the
implementation refuses the case: `ValueError("case rejected: ...")`) / oom (out of memory) / error. Tolerances by
dtype are in mfulib/verify/correctness.py (fp16 1e-2, bf16 2e-2, fp32 1e-4, or 1e-2 on CUDA where tl.dot uses TF32).
Each case runs in a child process: a crash or a hang (--case-timeout-s) is recorded for that case and the
others go on. On cpu each case row lists the Triton-interpreter adaptations it needed (cpu_adaptations: float
arguments as fp32, autotune's first config, block pointers). Writes <op-dir>/verify.json (with the sha256 of the
model.py / model_new.py it checked, `failed` = the failing case ids, `complete`/`missing` = case-file ids without a
row). Exit status 1 when a case fails, errors, runs out of memory, crashes or times out (verify.json is written
first, naming them).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mfulib.core import cli  # noqa: E402


def build_parser():
    p = cli.parser(__doc__, prog="verify_op.py")
    p.add_argument("--op-dir", default=".", help="work directory made by prepare_op_dir.py")
    p.add_argument("--cases", help="case ids, e.g. 0,3,5-7 (default: all; on cpu the interpreter-sized ones)")
    p.add_argument("--backend", default="auto", help="auto|npu|cuda|cpu")
    p.add_argument("--device", type=int, default=0, help="device index")
    p.add_argument("--seed", type=int, default=0, help="seed for torch/numpy/random before get_input_groups()")
    p.add_argument("--max-input-mb", type=float, default=None,
                   help="skip cases whose inputs exceed this many MB (default: 1 on cpu, where the interpreter runs, unlimited elsewhere)")
    p.add_argument("--skip-bf16", action="store_true", help="skip bfloat16 cases (always on cpu: the interpreter "
                                                           "cannot run bf16)")
    p.add_argument("--case-timeout-s", type=float, default=600.0,
                   help="a case without a result after this many seconds is killed and recorded as timeout")
    p.add_argument("-o", "--output", default=None, help="result JSON (default: <op-dir>/verify.json)")
    return p


def main(argv=None):
    from mfulib.verify import command
    return command.run(build_parser().parse_args(argv))


if __name__ == "__main__":
    cli.run_main(main)
