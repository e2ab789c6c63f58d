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

Work-directory state (the Makefile's questions; see mfulib/core/workdir_state.py):
  <form> --dst WORK --check    one line: "ok <why>" (nothing to redo), "redo <what changed>", "new <why>", or
                               "error <message>" (the sources cannot be resolved); exit 0
  <form> --dst WORK --status   per step: done / stale (why) / failed (its report) / not run
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mfulib.core import cli  # noqa: E402
from mfulib.sources import discover
from mfulib.sources import examples
from mfulib.sources import layoutc
from mfulib.sources import prepare
from mfulib.core.errors import UserError  # noqa: E402


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
    p.add_argument("--dst", help="work directory (layout B with --all: the root holding one dir per operator)")
    p.add_argument("--force", action="store_true", help="replace an existing --dst (kept as <dst>.bak-<time>)")
    return p


def _found(args):
    """The operators a form resolves to: dicts with ref, cases, impl, flops (or error)."""
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
    return found


def _sources(args):
    """The files a form resolves to (reference, cases, implementation, flops file)."""
    return [p for f in _found(args) if not f.get("error")
            for p in (f.get("ref"), f.get("cases"), f.get("impl"), f.get("flops")) if p]


def _request(args) -> dict:
    """The source form and the choices of this command line, as prepare.json records them (only the keys that
    matter for the form, paths absolute), taken before --example is resolved."""
    ab = os.path.abspath
    if args.example:
        req = {"form": "example", "example": args.example, "iter": args.iter, "variant": args.variant}
    elif args.ref or args.cases or args.impl:
        req = {"form": "explicit", "ref": ab(args.ref) if args.ref else None, "cases": ab(args.cases) if args.cases
               else None, "impl": ab(args.impl) if args.impl else None, "entry": args.entry, "seed": args.seed}
    elif args.ref_root or args.impl_root:
        req = {"form": "C", "ref_root": ab(args.ref_root or ""), "impl_root": ab(args.impl_root or ""),
               "id": layoutc.norm_rel(args.id[0]) if args.id and len(args.id) == 1 else args.id,
               "entry": args.entry, "seed": args.seed}
    elif args.src:
        req = {"form": "A", "src": ab(args.src), "iter": args.iter, "variant": args.variant}
    else:
        req = {"form": "B", "bench": [ab(d) for d in (args.bench or "").split(":") if d],
               "gen": ab(args.gen) if args.gen else None, "id": args.id[0] if args.id and len(args.id) == 1
               else args.id, "variant": args.variant, "include_all_case": args.include_all_case}
    return req


def _check_choices(args, layout):
    """ITER applies to layout A only, VARIANT to layouts A and B: refuse them elsewhere (UserError)."""
    if args.iter is not None and layout != "A":
        raise UserError(f"--iter {args.iter} (ITER): only layout A has output/iter_<n>/verify directories - leave "
                        "it out for this source")
    if args.variant != "optimized" and layout not in ("A", "B"):
        raise UserError(f"--variant {args.variant} (VARIANT): only layouts A and B pick between *_triton_optimized.py "
                        "and *_triton_baseline.py - leave it out for this source")


def _work_state(args, request):
    """--check / --status: (verdict, reason) of step 1 for --dst (workdir_state.prepare_verdict)."""
    from mfulib.core import workdir_state
    try:
        _check_choices(args, "C" if args.ref_root or args.impl_root else "A" if args.src else
                       "explicit" if (args.ref or args.cases or args.impl) else "B")
        found = _found(args)
        if len(found) != 1:
            raise UserError(f"the form resolves to {len(found)} operators: --check/--status need exactly one")
        if found[0].get("error"):
            raise UserError(found[0]["error"])
        f = found[0]
        return workdir_state.prepare_verdict(os.path.abspath(args.dst), request,
                                             {k: f.get(k) for k in ("ref", "cases", "impl", "flops")})
    except UserError as exc:
        return "error", str(exc)


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


def _explicit_c(args, request):
    """--ref + --impl without --cases: a reference with get_inputs()/get_inputs_dyn_list()."""
    if not layoutc.is_layout_c_reference(args.ref):
        raise UserError(f"--ref {args.ref}: no --cases given and the reference has no get_inputs() / "
                        "get_inputs_dyn_list() - pass --cases <case file> (its get_input_groups() reads it)")
    kind, entry, why = layoutc.implementation_kind(args.impl, args.entry)
    pair = {"layout": "explicit", "id": None, "name": os.path.splitext(os.path.basename(args.ref))[0],
            "ref": args.ref, "impl": args.impl, "flops": None, "impl_kind": kind, "entry": entry,
            "reasons": {"impl": why}}
    return prepare.prepare_layout_c(pair, args.dst, force=args.force, seed=args.seed, layout="explicit",
                                    request=request)


def _layout_c(args, request):
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
                                                 extra_source_dirs=[args.ref_root, args.impl_root],
                                                 request=dict(request, id=pair["id"])))
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
    request = _request(args)
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
    if args.check or args.status:
        verdict, why = _work_state(args, request)
        if args.status:
            from mfulib.core import workdir_state
            changed = {k: v.split(",") for k, _, v in (t.partition(":") for t in args.settings_changed.split()) if v}
            print(workdir_state.status_table(os.path.abspath(args.dst), (verdict, why), changed))
        else:
            print(f"{verdict} {why}")
        return 0
    _check_choices(args, "C" if args.ref_root or args.impl_root else "A" if args.src else
                   "explicit" if (args.ref or args.cases or args.impl) else "B")
    if args.ref_root or args.impl_root:
        return _layout_c(args, request)
    if args.ref and args.impl and not args.cases:
        _print_done(_explicit_c(args, request))
        return 0
    if args.ref or args.cases or args.impl:
        missing = [f for f, v in (("--ref", args.ref), ("--cases", args.cases), ("--impl", args.impl)) if not v]
        if missing:
            raise UserError(f"the explicit form needs --ref, --cases and --impl (missing {', '.join(missing)})")
        _print_done(prepare.prepare_explicit(args.ref, args.cases, args.impl, args.dst, force=args.force,
                                             request=request))
        return 0
    if args.src:
        found = discover.discover_layout_a(args.src, args.iter, args.variant)
        info = prepare.prepare_explicit(found["ref"], found["cases"], found["impl"], args.dst, force=args.force,
                                        flops=found["flops"], layout="A", reasons=found["reasons"],
                                        extra_source_dirs=[args.src], request=request)
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
                                            extra_source_dirs=bench_dirs + [args.gen],
                                            request=dict(request, id=str(pair["id"])) if args.all else request)
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
