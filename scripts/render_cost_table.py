#!/usr/bin/env python3
"""Render the element-wise cost table (mfulib/flops/vector_costs.py) into the FLOPs guide of the kb.

The table the tracer, the flops.py drafts and check_flops.py use has one home, the code; the Chinese guide
(kb/ops/triton/guides/tooling/mfu_flops_guide.md) carries a copy between the markers
<!-- element-costs: begin --> and <!-- element-costs: end -->, written by this script. tests/test_vector_costs.py
fails when the copy differs from the code.

Examples:
  python3 scripts/render_cost_table.py            (rewrite the guide's table from the code)
  python3 scripts/render_cost_table.py --check    (exit 1 when the guide's table is stale)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mfulib.core import cli  # noqa: E402
from mfulib.core.errors import UserError  # noqa: E402

GUIDE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     "kb", "ops", "triton", "guides", "tooling", "mfu_flops_guide.md")
BEGIN, END = "<!-- element-costs: begin -->", "<!-- element-costs: end -->"


def render(text: str) -> str:
    """``text`` with the part between the markers replaced by the code's table; UserError without the markers."""
    from mfulib.flops.vector_costs import markdown_table
    if BEGIN not in text or END not in text:
        raise UserError(f"{GUIDE}: no {BEGIN} ... {END} markers - add them where the table belongs")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + "\n" + markdown_table() + END + tail


def build_parser():
    p = cli.parser(__doc__, prog="render_cost_table.py")
    p.add_argument("--guide", default=GUIDE, help="the Markdown file holding the markers (default: the FLOPs guide)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when the file's table is stale")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    with open(args.guide, encoding="utf-8") as f:
        text = f.read()
    new = render(text)
    if args.check:
        print("up to date" if new == text else f"{args.guide}: the element-cost table is stale - run "
              "python3 scripts/render_cost_table.py")
        return 0 if new == text else 1
    if new != text:
        from mfulib.core.jsonio import write_text_atomic
        write_text_atomic(args.guide, new)
    print(f"wrote the element-cost table into {args.guide}")
    return 0


if __name__ == "__main__":
    cli.run_main(main)
