#!/usr/bin/env python3
"""Adapt an operator's files into a work directory (step 1 of triton-mfu-analyzer).

Files are recognised by content, not name: reference = .py with `class Model` + get_input_groups() (or, with no
case file, get_inputs() / get_inputs_dyn_list()), implementation = .py with `class ModelNew` (layout C also: Triton
kernels + a launcher function taking Model.forward's tensors), cases = .json/.jsonl whose lines are objects with an
"inputs" list. Artifacts (verify_result*.json, perf_result*.json, the tool's outputs) are excluded by name, then by
content.

Forms:
  explicit   --ref R.py --cases C.json --impl I.py --dst WORK
             --ref R.py --impl I.py --dst WORK          (R has get_inputs()/get_inputs_dyn_list(): cases written)
  layout A   --src <verify dir | op root with output/iter_<n>/verify> [--iter N] [--variant baseline] --dst WORK
  layout B   --bench <level dir>[:<dir>...] --gen <generated dir> (--id N | --all) --dst <root>
  layout C   --ref-root <bench> --impl-root <impl root> (--id <rel path> | --all) --dst <root>
             (<bench>/<rel>.py paired with <impl root>/<rel>.py, e.g. --id static_shape/matmul/matmul_relu)
  bundled    --example NAME --dst WORK        (an operator shipped in examples/ops; see --list-examples)

Writes WORK/model.py, model_new.py, <Op>_perf_cases.jsonl, model.json, prepare.json (+ flops.py when the source
ships one). Layout C writes the case file from one seeded get_inputs() call, model.py = reference + a
get_input_groups() wrapper, and wraps a launcher function as class ModelNew; prepare.json records both wrappers.
Sources are never modified; an existing WORK is replaced only with --force (old one kept as backup).
prepare.json records the request (form and choices: --src/--iter/--variant, --bench/--gen/--id, --ref-root/
--impl-root/--id/--entry/--seed, --example) and the resolved sources with their sha256.

Work-directory state (the Makefile's questions; see mfulib/pipeline/workdir_state.py):
  <form> --dst WORK --check    one line: "ok <why>" (nothing to redo), "redo <what changed>", "new <why>", or
                               "error <message>" (the sources cannot be resolved); exit 0
  <form> --dst WORK --status   per step: done / stale (why) / failed (its report) / not run
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mfulib.core import cli  # noqa: E402
from mfulib.sources import forms  # noqa: E402


def build_parser():
    p = cli.parser(__doc__, prog="prepare_op_dir.py")
    g = p.add_argument_group("explicit form")
    g.add_argument("--ref", help="reference .py (class Model + get_input_groups)")
    g.add_argument("--cases", help="case file (.json/.jsonl, one {\"inputs\": [...]} per line); leave it out when "
                                   "--ref has get_inputs()/get_inputs_dyn_list()")
    g.add_argument("--impl", help="implementation .py (class ModelNew, or with no --cases also a Triton launcher "
                                  "function)")
    a = p.add_argument_group("layout A (one verify directory)")
    a.add_argument("--src", help="verify directory, or op root holding output/iter_<n>/verify")
    a.add_argument("--iter", type=int, default=None, help="use output/iter_<ITER>/verify (default: the highest)")
    a.add_argument("--variant", choices=("optimized", "baseline"), default="optimized",
                   help="which implementation when a *_triton_baseline.py sits beside the optimized one")
    b = p.add_argument_group("layout B (benchmark dir + generated-code dir)")
    b.add_argument("--bench", help="benchmark level dir(s) holding <N>_<Op>.py and <N>_<Op>.json; several dirs "
                                   "separated by ':' (e.g. references here, case data in ../shared)")
    b.add_argument("--gen", help="generated-code dir holding <N>_<Op>_<suffix>.py")
    b.add_argument("--id", action="append", help="layout B: benchmark id N; layout C: relative path "
                                                 "<category dir>/<name>[.py] under --ref-root (repeatable)")
    b.add_argument("--all", action="store_true", help="every id / relative path that has an implementation "
                                                      "(others are listed)")
    b.add_argument("--include-all-case", action="store_true", help="accept <N>_<Op>_all_case.json case files")
    c = p.add_argument_group("layout C (parallel reference and implementation trees, no case files)")
    c.add_argument("--ref-root", help="reference tree root: <ref root>/<rel>.py with class Model + get_inputs()")
    c.add_argument("--impl-root", help="implementation tree root: <impl root>/<rel>.py (ModelNew or a function)")
    c.add_argument("--entry", help="launcher function of a function implementation (default: the unique "
                                   "*_triton_torch, or the unique public non-kernel function taking arguments)")
    c.add_argument("--seed", type=int, default=0, help="seed before get_inputs() when writing the case file")
    e = p.add_argument_group("bundled operators")
    e.add_argument("--example", help="name of a bundled operator (e.g. 5_MHABlock, zoo/1_BatchMatmul, MHABlock)")
    e.add_argument("--list-examples", action="store_true", help="list bundled operators and exit")
    p.add_argument("--list-sources", action="store_true",
                   help="print the source files this form resolves to, one per line, and exit (the Makefile uses "
                        "them as prerequisites so that an edited source re-runs the pipeline)")
    p.add_argument("--check", action="store_true",
                   help="say whether --dst must be (re)built from this form: ok / redo / new / error + why; exit 0")
    p.add_argument("--status", action="store_true",
                   help="print, per pipeline step of --dst, done / stale (why) / failed / not run (make status)")
    p.add_argument("--settings-changed", default="", metavar="STEP:VAR,...",
                   help="with --status: steps whose given make variables differ from their last run (the Makefile "
                        "passes them, e.g. 'collect:FLUSH_CACHE_MIB,PMU verify:VERIFY_ARGS')")
    p.add_argument("--waits", default="", metavar="STEP:STEP ...",
                   help="with --status: the search's conditional edges make takes now, each a step and the step it "
                        "waits for (the Makefile passes them: 'flops:probe collect:search search:flops' with SEARCH=1 or "
                        "once make ran the probe / the search in --dst)")
    p.add_argument("--dst", help="work directory (layout B with --all: the root holding one dir per operator)")
    p.add_argument("--force", action="store_true", help="replace an existing --dst (kept as <dst>.bak-<time>)")
    return p


def main(argv=None):
    return forms.run(build_parser().parse_args(argv))


if __name__ == "__main__":
    cli.run_main(main)
