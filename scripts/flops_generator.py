#!/usr/bin/env python3
"""Write a draft flops.py for an operator from its reference (optional part of step 3 of triton-mfu-analyzer).

The reference (model.py, class Model) is classified by its AST - attention with projections, GQA/MQA, sparse or
variable-length, paged/KV-cache, window/local, torch_npu fused attention, FFN/MLP (gated activations), matmul/bmm/
grouped matmul, conv, norm, softmax/elementwise - and a template for that class is filled with the input names of
the case file. The draft defines flops(case), flops_parts(case) and KERNEL_PARTS (patterns from the Triton kernels
model_new.py launches, when it sits beside model.py). Every guess is a line commented "# REVIEW: ..." (causal
alignment, masks, variable lengths, rope, dropout, layouts); the generator prints them. An operator it cannot
classify gets a draft whose flops() raises, so check_flops.py fails until a human writes it.

Always review the draft, then run:  python3 check_flops.py --op-dir <work dir>

Examples:
  python3 flops_generator.py --model work/5_MHABlock/model.py --cases work/5_MHABlock/5_MHABlock_perf_cases.jsonl \\
      -o work/5_MHABlock/flops.py
  python3 flops_generator.py --op-dir work/5_MHABlock      (the same, from the work directory's files)
"""
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mfulib.core import cli  # noqa: E402
from mfulib.core.errors import UserError  # noqa: E402


def build_parser():
    p = cli.parser(__doc__, prog="flops_generator.py")
    p.add_argument("--model", help="reference .py (class Model), e.g. <work dir>/model.py")
    p.add_argument("--cases", help="case file of the work dir (.jsonl/.json, one {\"inputs\"} per line)")
    p.add_argument("--impl", help="implementation .py for kernel names (default: model_new.py beside --model)")
    p.add_argument("-o", "--output", help="draft to write (e.g. <work dir>/flops.py)")
    p.add_argument("--op-dir", help="work directory: --model, --cases and -o default to its model.py, case file "
                   "and flops.py")
    p.add_argument("--force", action="store_true", help="overwrite an existing output (kept as <output>.bak)")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    od = None
    if args.op_dir:
        from mfulib.core.opdir import OpDir
        od = OpDir(args.op_dir)
        args.model = args.model or od.model_py
        args.cases = args.cases or od.cases_path
        args.output = args.output or od.flops_py
    missing = [f for f, v in (("--model", args.model), ("--cases", args.cases), ("-o", args.output)) if not v]
    if missing:
        raise UserError(f"missing {', '.join(missing)} - give them, or --op-dir <work dir>")
    from mfulib.flops.drafts import generate
    from mfulib.core.jsonio import write_text_atomic
    for what, path in (("--model", args.model), ("--cases", args.cases)):
        if not os.path.isfile(path):
            raise UserError(f"{what} {path}: file not found")
    impl = args.impl or os.path.join(os.path.dirname(os.path.abspath(args.model)), "model_new.py")
    try:
        draft = generate(args.model, args.cases, impl if os.path.exists(impl) else None, opdir=od)
    except SyntaxError as exc:
        raise UserError(f"{args.model}: not valid Python ({exc}) - fix the reference first") from None
    if os.path.exists(args.output):
        if not args.force:
            raise UserError(f"{args.output} exists - pass --force to replace it (the old file is kept as .bak)")
        os.replace(args.output, args.output + ".bak")
    write_text_atomic(args.output, draft["source"])
    print(f"class: {draft['class']} ({'; '.join(draft['reasons'])})")
    print(f"kernels in the implementation: {', '.join(draft['kernels']) or 'none found'}")
    if draft["skeleton"]:
        print("the draft could not be written: a skeleton whose flops() raises (its REVIEW lines say why)")
    if isinstance(draft["recorded"], dict):
        print("selected keys per case (seeded draw): " +
              ", ".join(f"case {c}: {n}" for c, n in sorted(draft["recorded"].items())))
    elif draft["recorded"]:
        print(f"selected keys not recorded: {draft['recorded']}")
    if draft["review_lines"]:
        print(f"review these lines of {args.output}:")
        for n, text in draft["review_lines"]:
            print(f"  {n:4d}: {text}")
    else:
        print("no line needs review (the check still decides)")
    work = os.path.abspath(args.op_dir or os.path.dirname(os.path.abspath(args.model)))
    out = os.path.abspath(args.output)
    # the hint checks the draft just written: check_flops.py reads <op-dir>/flops.py unless told --flops
    print(f"wrote {args.output}; next: {cli.script_command('check_flops.py')} --op-dir {shlex.quote(work)}"
          + ("" if out == os.path.join(work, "flops.py") else f" --flops {shlex.quote(out)}"))
    return 0


if __name__ == "__main__":
    cli.run_main(main)
