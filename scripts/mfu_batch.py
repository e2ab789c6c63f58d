#!/usr/bin/env python3
"""Run the whole triton-mfu-analyzer pipeline over every operator of a benchmark level (what `make batch` runs).

One source per batch: --bench/--gen (layout B), --root (layout A: a directory of op_<Op>_<time> dirs; the newest
per operator runs, the older are listed), --ref-root/--impl-root (layout C), or --examples <set> (bundled operators,
e.g. zoo, verify, layoutc, all). Per operator `make OP=<op> ... all` runs in its own process group with its own
work dir (<out>/ops/<op>), log (<out>/logs/<op>.log) and job record (<out>/jobs/<op>.json); one worker per device
(--devices, else ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES, else nvidia-smi -L / /dev/davinci<N>, else one
CPU worker), each child seeing only its device (as index 0); longest first by estimated cost (an earlier run's wall
time, else total input bytes); an operator's failure or timeout is recorded and the batch goes on; operators
finished ok earlier are skipped unless --force; Ctrl-C kills the running operators, writes the summary and exits
130 (run again to resume). Writes <out>/batch_summary.json, batch_summary.csv, batch_summary.md and index.html.
--runner ray runs the same jobs as Ray tasks (RAY_ADDRESS or a local instance; see README "Batch").
Exit status: 0 all succeeded, 1 some failed / timed out, 2 bad arguments, 130 interrupted.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mfulib.core import cli  # noqa: E402
from mfulib.core.errors import UserError  # noqa: E402

MAX_GRACE_S = 600.0  # --stop-grace-s at most: a stopped step writes its report in seconds


def build_parser():
    p = cli.parser(__doc__, prog="mfu_batch.py")
    src = p.add_argument_group("source (exactly one)")
    src.add_argument("--bench", help="layout B: benchmark level dir(s), ':'-separated (with --gen)")
    src.add_argument("--gen", help="layout B: generated-code dir")
    src.add_argument("--root", help="layout A: directory holding op_<Op>_<time> operator dirs")
    src.add_argument("--ref-root", help="layout C: reference tree (with --impl-root)")
    src.add_argument("--impl-root", help="layout C: implementation tree")
    src.add_argument("--examples", help="bundled operators: set names, comma-separated (zoo, verify, layoutc, "
                                        "npukernelbench/level4, ...) or all")
    p.add_argument("--out", default="work/batch", help="batch output dir (work dirs, logs, job records, summary)")
    p.add_argument("--ops", help="comma-separated subset of operator names (or their last path component)")
    p.add_argument("--force", action="store_true", help="run operators that finished ok earlier again (make FORCE=1)")
    p.add_argument("--search", action="store_true", help="pass SEARCH=1 to every operator's make")
    p.add_argument("--keep-prof", type=int, choices=(0, 1), default=1,
                   help="0: remove an operator's kept profiles (<work>/prof) after it succeeded")
    p.add_argument("--op-timeout-s", type=float, help="stop an operator's pipeline after this many seconds")
    p.add_argument("--stop-grace-s", type=float, default=None,
                   help="seconds a timed-out or interrupted operator's make gets after its SIGTERM to let the "
                        "running step record what it finished (a search its best point so far) before the whole "
                        "process tree is killed (default 20, at most 600; at most 8 when the batch itself is "
                        "stopped; 0: kill at once)")
    p.add_argument("--devices", help="device ids, one worker each, e.g. 0,1 (default: from the environment)")
    p.add_argument("--backend", default="auto", metavar="{auto,npu,cuda,cpu}",
                   help="BACKEND of each make (a backend registered through MFU_BACKEND_PLUGINS is accepted too)")
    p.add_argument("--runner", default="local", choices=("local", "ray"), help="local worker pool or Ray tasks")
    p.add_argument("--make", default="make", help="the make program that runs each operator's pipeline")
    p.add_argument("--costs-from", help="a batch_summary.json whose measured wall times order this batch")
    p.add_argument("--make-arg", action="append", default=[], metavar="VAR=VALUE",
                   help="extra variable for every operator's make (repeatable), e.g. COLLECT_ARGS=--cases=0")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def source_of(a) -> dict:
    given = [k for k, v in (("B", a.bench or a.gen), ("A", a.root), ("C", a.ref_root or a.impl_root),
                            ("examples", a.examples)) if v]
    if len(given) != 1:
        raise UserError("give exactly one source: --bench+--gen (BENCH= GEN=), --root (ROOT=), --ref-root+--impl-root "
                        "(REF_ROOT= IMPL_ROOT=) or --examples (EXAMPLES=zoo)" + (f"; got {given}" if given else ""))
    kind = given[0]
    if kind == "B" and not (a.bench and a.gen):
        raise UserError("layout B needs both --bench and --gen (BENCH=<level dir> GEN=<generated dir>)")
    if kind == "C" and not (a.ref_root and a.impl_root):
        raise UserError("layout C needs both --ref-root and --impl-root (REF_ROOT= IMPL_ROOT=)")
    ab = os.path.abspath
    return {"B": lambda: {"kind": "B", "bench": ":".join(ab(d) for d in a.bench.split(":")), "gen": ab(a.gen)},
            "A": lambda: {"kind": "A", "root": ab(a.root)},
            "C": lambda: {"kind": "C", "ref_root": ab(a.ref_root), "impl_root": ab(a.impl_root)},
            "examples": lambda: {"kind": "examples", "sets": a.examples}}[kind]()


def main(argv=None):
    a = build_parser().parse_args(argv)
    if a.op_timeout_s is not None and not a.op_timeout_s > 0:
        raise UserError(f"--op-timeout-s {a.op_timeout_s}: must be > 0 seconds (OP_TIMEOUT_S=1800)")
    if a.stop_grace_s is not None and not 0 <= a.stop_grace_s <= MAX_GRACE_S:
        raise UserError(f"--stop-grace-s {a.stop_grace_s:g}: must be 0 to {MAX_GRACE_S:g} seconds (0: kill at once; "
                        "a stopped step needs seconds to write its report, not hours)")
    from mfulib.batch.driver import run_batch
    rc, _ = run_batch(source_of(a), a.out, ops=a.ops, force=a.force, search=a.search, keep_prof=bool(a.keep_prof),
                      timeout_s=a.op_timeout_s, devices=a.devices, backend=a.backend, runner=a.runner, make=a.make,
                      costs_from=a.costs_from, make_args=a.make_arg, progress=not a.no_progress,
                      grace_s=a.stop_grace_s)
    return rc


if __name__ == "__main__":
    cli.run_main(main)
