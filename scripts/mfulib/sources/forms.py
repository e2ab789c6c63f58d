"""The source forms of step 1 (prepare_op_dir.py): which form a command line gives (explicit, layouts A/B/C,
bundled example), the request prepare.json records, the work directory's step-1 verdict (``--check`` /
``--status``), and preparing every operator the form resolves to.

Functions take the CLI's parsed arguments (an argparse Namespace with the flags of prepare_op_dir.py) and raise
:class:`~mfulib.core.errors.UserError` for bad input, naming the flag and the fix.
"""
import os
import sys

from mfulib.core.errors import UserError
from mfulib.sources import discover, examples, layoutc, prepare
from mfulib.core.fmt import plural


def resolve_form(args):
    """The operators a form resolves to: dicts with ref, cases, impl, flops (or error)."""
    if args.ref or args.cases or args.impl:
        found = [{"ref": args.ref, "cases": args.cases, "impl": args.impl,
                  "flops": discover.sibling_flops(args.ref)}]
    elif args.ref_root or args.impl_root:
        found, _ = layoutc.discover_layout_c(args.ref_root, args.impl_root, None if args.all else args.id,
                                             args.entry)
    elif args.src:
        found = [discover.discover_layout_a(args.src, args.iter, args.variant)]
    else:
        found, _ = discover.discover_layout_b([d for d in (args.bench or "").split(":") if d], args.gen,
                                              None if args.all else int_ids(args.id), args.include_all_case,
                                              args.variant)
    return found


def source_files(args):
    """The files a form resolves to (reference, cases, implementation, flops file)."""
    return [p for f in resolve_form(args) if not f.get("error")
            for p in (f.get("ref"), f.get("cases"), f.get("impl"), f.get("flops")) if p]


def request_of(args) -> dict:
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


def check_choices(args, layout):
    """ITER applies to layout A only, VARIANT to layouts A and B: refuse them elsewhere (UserError)."""
    if args.iter is not None and layout != "A":
        raise UserError(f"--iter {args.iter} (ITER): only layout A has output/iter_<n>/verify directories - leave "
                        "it out for this source")
    if args.variant != "optimized" and layout not in ("A", "B"):
        raise UserError(f"--variant {args.variant} (VARIANT): only layouts A and B pick between *_triton_optimized.py "
                        "and *_triton_baseline.py - leave it out for this source")


def work_state(args, request):
    """--check / --status: (verdict, reason) of step 1 for --dst (workdir_state.prepare_verdict)."""
    from mfulib.pipeline import workdir_state
    try:
        check_choices(args, "C" if args.ref_root or args.impl_root else "A" if args.src else
                       "explicit" if (args.ref or args.cases or args.impl) else "B")
        found = resolve_form(args)
        if len(found) != 1:
            raise UserError(f"the form resolves to {len(found)} operators: --check/--status need exactly one")
        if found[0].get("error"):
            raise UserError(found[0]["error"])
        f = found[0]
        return workdir_state.prepare_verdict(os.path.abspath(args.dst), request,
                                             {k: f.get(k) for k in ("ref", "cases", "impl", "flops")})
    except UserError as exc:
        return "error", str(exc)


def int_ids(ids):
    """Layout B ids are the numeric prefixes <N> of <N>_<Op>.py."""
    out = []
    for i in ids or []:
        try:
            out.append(int(i))
        except ValueError:
            raise UserError(f"--id {i}: layout B ids are numbers (the N of <N>_<Op>.py); a relative path is a "
                            "layout C id (--ref-root/--impl-root)") from None
    return out


def explicit_c(args, request):
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


def layout_c(args, request):
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
            print_done(prepare.prepare_layout_c(pair, dst, force=args.force, seed=args.seed,
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


def print_done(info):
    print(f"prepared {info['op']} ({info['layout']}, {plural(info['n_cases'], 'case')}) -> {info['work_dir']}")
    for k, why in info.get("choices", {}).items():
        print(f"  {k:<10} {why}")
    for f, ch in info.get("rewrites", {}).items():
        for old, new in ch:
            print(f"  rewrote {f}: {old!r} -> {new!r}")


def _status(args, prepare: tuple) -> int:
    """``--status``: the per-step table of ``args.dst`` with ``prepare`` (verdict, why) as step 1's state."""
    from mfulib.pipeline import workdir_state
    changed = {k: v.split(",") for k, _, v in (t.partition(":") for t in args.settings_changed.split()) if v}
    waits = {}
    for step, _, need in (t.partition(":") for t in args.waits.split()):
        if need:
            waits.setdefault(step, []).append(need)
    print(workdir_state.status_table(os.path.abspath(args.dst), prepare, changed, waits))
    return 0


def run(args) -> int:
    """Carry out a parsed prepare_op_dir.py command line (an argparse Namespace of its flags); returns the exit
    status. Raises UserError for bad input (the CLI prints it and exits 2)."""
    if args.list_examples:
        for name, src in examples.list_examples():
            print(f"{name:<40} {src}")
        return 0
    if not args.dst and not args.list_sources:
        raise UserError("--dst is required: the work directory to write (e.g. work/<Op>)")
    request = request_of(args)
    forms = [bool(args.ref or args.cases or args.impl), bool(args.src), bool(args.bench or args.gen),
             bool(args.ref_root or args.impl_root), bool(args.example)]
    if args.status and not any(forms) and os.path.isfile(os.path.join(args.dst, "prepare.json")):
        # a work dir prepared by hand (make WORK=... without OP): its steps are judged, its sources not compared
        return _status(args, ("ok", "prepare.json present; its sources were not compared with it (no source or "
                                    "OP given)"))
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
        for path in source_files(args):
            print(os.path.abspath(path))
        return 0
    if args.check or args.status:
        verdict, why = work_state(args, request)
        if args.status:
            return _status(args, (verdict, why))
        print(f"{verdict} {why}")
        return 0
    check_choices(args, "C" if args.ref_root or args.impl_root else "A" if args.src else
                   "explicit" if (args.ref or args.cases or args.impl) else "B")
    if args.ref_root or args.impl_root:
        return layout_c(args, request)
    if args.ref and args.impl and not args.cases:
        print_done(explicit_c(args, request))
        return 0
    if args.ref or args.cases or args.impl:
        missing = [f for f, v in (("--ref", args.ref), ("--cases", args.cases), ("--impl", args.impl)) if not v]
        if missing:
            raise UserError(f"the explicit form needs --ref, --cases and --impl (missing {', '.join(missing)})")
        print_done(prepare.prepare_explicit(args.ref, args.cases, args.impl, args.dst, force=args.force,
                                             flops=discover.sibling_flops(args.ref), request=request))
        return 0
    if args.src:
        found = discover.discover_layout_a(args.src, args.iter, args.variant)
        info = prepare.prepare_explicit(found["ref"], found["cases"], found["impl"], args.dst, force=args.force,
                                        flops=found["flops"], layout="A", reasons=found["reasons"],
                                        extra_source_dirs=[args.src], request=request)
        print_done(info)
        return 0
    if not (args.bench and args.gen):
        raise UserError("layout B needs both --bench and --gen")
    if bool(args.id) == bool(args.all):
        raise UserError("layout B needs --id N (repeatable) or --all")
    bench_dirs = [d for d in args.bench.split(":") if d]
    pairs, missing = discover.discover_layout_b(bench_dirs, args.gen, None if args.all else int_ids(args.id),
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
            print_done(info)
        except UserError as exc:
            if not args.all:
                raise
            failed.append((pair["name"], str(exc)))
            print(f"error: {pair['name']}: {exc}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} of {len(pairs)} operators failed: {[n for n, _ in failed]}", file=sys.stderr)
        return 2
    return 0
