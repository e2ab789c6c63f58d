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
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mfulib import cli, discover, examples, layoutc, prepare  # noqa: E402
from mfulib.errors import UserError  # noqa: E402


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
    p.add_argument("--dst", help="work directory (layout B with --all: the root holding one dir per operator)")
    p.add_argument("--force", action="store_true", help="replace an existing --dst (kept as <dst>.bak-<time>)")
    return p


def _sources(args):
    """The files a form resolves to (reference, cases, implementation, flops file)."""
    if args.ref or args.cases or args.impl:
        found = [{"ref": args.ref, "cases": args.cases, "impl": args.impl}]
    elif args.ref_root or args.impl_root:
        found, _ = layoutc.discover_layout_c(args.ref_root, args.impl_root, None if args.all else args.id,
                                             args.entry)
    elif args.src:
        found = [discover.discover_layout_a(args.src, args.iter, args.variant)]
    else:
        found, _ = discover.discover_layout_b([d for d in (args.bench or "").split(":") if d], args.gen,
                                              None if args.all else _int_ids(args.id), args.include_all_case,
                                              args.variant)
    return [p for f in found if not f.get("error")
            for p in (f.get("ref"), f.get("cases"), f.get("impl"), f.get("flops")) if p]


def _int_ids(ids):
    """Layout B ids are the numeric prefixes <N> of <N>_<Op>.py."""
    out = []
    for i in ids or []:
        try:
            out.append(int(i))
        except ValueError:
            raise UserError(f"--id {i}: layout B ids are numbers (the N of <N>_<Op>.py); a relative path is a "
                            "layout C id (--ref-root/--impl-root)") from None
    return out


def _explicit_c(args):
    """--ref + --impl without --cases: a reference with get_inputs()/get_inputs_dyn_list()."""
    if not layoutc.is_layout_c_reference(args.ref):
        raise UserError(f"--ref {args.ref}: no --cases given and the reference has no get_inputs() / "
                        "get_inputs_dyn_list() - pass --cases <case file> (its get_input_groups() reads it)")
    kind, entry, why = layoutc.implementation_kind(args.impl, args.entry)
    pair = {"layout": "explicit", "id": None, "name": os.path.splitext(os.path.basename(args.ref))[0],
            "ref": args.ref, "impl": args.impl, "flops": None, "impl_kind": kind, "entry": entry,
            "reasons": {"impl": why}}
    return prepare.prepare_layout_c(pair, args.dst, force=args.force, seed=args.seed, layout="explicit")


def _layout_c(args):
    if not (args.ref_root and args.impl_root):
        raise UserError("layout C needs both --ref-root and --impl-root")
    if bool(args.id) == bool(args.all):
        raise UserError("layout C needs --id <relative path> (repeatable) or --all")
    pairs, missing = layoutc.discover_layout_c(args.ref_root, args.impl_root, None if args.all else args.id,
                                               args.entry)
    if missing:
        print(f"skipped (no implementation at the same path under {args.impl_root}): {missing}", file=sys.stderr)
    if not pairs:
        raise UserError(f"no reference under {args.ref_root} has an implementation at the same relative path "
                        f"under {args.impl_root}")
    failed = []
    for pair in pairs:
        if pair.get("error"):
            failed.append(pair["id"])
            print(f"error: {pair['id']}: {pair['error']}", file=sys.stderr)
            continue
        dst = args.dst if (len(pairs) == 1 and not args.all) else os.path.join(args.dst, pair["id"])
        try:
            _print_done(prepare.prepare_layout_c(pair, dst, force=args.force, seed=args.seed,
                                                 extra_source_dirs=[args.ref_root, args.impl_root]))
        except UserError as exc:
            if not args.all:
                raise
            failed.append(pair["id"])
            print(f"error: {pair['id']}: {exc}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} of {len(pairs)} operators failed: {failed}", file=sys.stderr)
        return 2
    return 0


def _print_done(info):
    print(f"prepared {info['op']} ({info['layout']}, {info['n_cases']} cases) -> {info['work_dir']}")
    for k, why in info.get("choices", {}).items():
        print(f"  {k:<10} {why}")
    for f, ch in info.get("rewrites", {}).items():
        for old, new in ch:
            print(f"  rewrote {f}: {old!r} -> {new!r}")


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.list_examples:
        for name, src in examples.list_examples():
            print(f"{name:<40} {src}")
        return 0
    if not args.dst and not args.list_sources:
        raise UserError("--dst is required: the work directory to write (e.g. work/<Op>)")
    forms = [bool(args.ref or args.cases or args.impl), bool(args.src), bool(args.bench or args.gen),
             bool(args.ref_root or args.impl_root), bool(args.example)]
    if sum(forms) != 1:
        raise UserError("give exactly one form: --ref/--cases/--impl, --src, --bench/--gen, --ref-root/--impl-root, "
                        "or --example (see --help)")
    if args.example:
        spec = examples.resolve(args.example)
        if spec["layout"] == "A":
            args.src = spec["src"]
        elif spec["layout"] == "C":
            args.ref_root, args.impl_root, args.id = spec["ref_root"], spec["impl_root"], [spec["id"]]
        else:
            args.bench, args.gen, args.id = spec["bench"], spec["gen"], [str(spec["id"])]
    if args.list_sources:
        for path in _sources(args):
            print(os.path.abspath(path))
        return 0
    if args.ref_root or args.impl_root:
        return _layout_c(args)
    if args.ref and args.impl and not args.cases:
        _print_done(_explicit_c(args))
        return 0
    if args.ref or args.cases or args.impl:
        missing = [f for f, v in (("--ref", args.ref), ("--cases", args.cases), ("--impl", args.impl)) if not v]
        if missing:
            raise UserError(f"the explicit form needs --ref, --cases and --impl (missing {', '.join(missing)})")
        _print_done(prepare.prepare_explicit(args.ref, args.cases, args.impl, args.dst, force=args.force))
        return 0
    if args.src:
        found = discover.discover_layout_a(args.src, args.iter, args.variant)
        info = prepare.prepare_explicit(found["ref"], found["cases"], found["impl"], args.dst, force=args.force,
                                        flops=found["flops"], layout="A", reasons=found["reasons"],
                                        extra_source_dirs=[args.src])
        _print_done(info)
        return 0
    if not (args.bench and args.gen):
        raise UserError("layout B needs both --bench and --gen")
    if bool(args.id) == bool(args.all):
        raise UserError("layout B needs --id N (repeatable) or --all")
    bench_dirs = [d for d in args.bench.split(":") if d]
    pairs, missing = discover.discover_layout_b(bench_dirs, args.gen, None if args.all else _int_ids(args.id),
                                                args.include_all_case, args.variant)
    if missing:
        print(f"skipped (no implementation in {args.gen}): ids {missing}", file=sys.stderr)
    if not pairs:
        raise UserError(f"no benchmark id has an implementation in {args.gen}")
    failed = []
    for pair in pairs:
        if pair.get("error"):
            failed.append((pair["name"], pair["error"]))
            print(f"error: {pair['name']}: {pair['error']}", file=sys.stderr)
            continue
        dst = args.dst if (len(pairs) == 1 and not args.all) else os.path.join(args.dst, pair["name"])
        try:
            info = prepare.prepare_explicit(pair["ref"], pair["cases"], pair["impl"], dst, force=args.force,
                                            flops=pair["flops"], layout="B", reasons=pair["reasons"],
                                            extra_source_dirs=bench_dirs + [args.gen])
            _print_done(info)
        except UserError as exc:
            if not args.all:
                raise
            failed.append((pair["name"], str(exc)))
            print(f"error: {pair['name']}: {exc}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} of {len(pairs)} operators failed: {[n for n, _ in failed]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    cli.run_main(main)
