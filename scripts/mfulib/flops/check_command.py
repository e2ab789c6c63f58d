"""The check_flops.py command (step 3): select the cases, hold flops.py against the independent tracer case by
case (or trace the reference alone with ``--tracer-only``), write flops_check.json and print the table.

:func:`run` takes the CLI's parsed arguments; the checks themselves are :mod:`mfulib.flops.check`'s.
"""
import os
import sys

from mfulib.core import cli
from mfulib.core.fmt import plural


def tracer_rows(od, ids, seed, trace_kwargs, progress):
    from mfulib.flops import tracer as flopcount
    rows = []
    for i in ids:
        info = od.describe(i)
        tr = flopcount.trace_case(od, i, seed=seed, **trace_kwargs)
        if tr.status == "rejected":
            status = "rejected"
        elif tr.status != "ok" or tr.unseen_ops or tr.needs_values:
            status = "unverified"
        else:
            status = "pass"
        rows.append({"case": i, "shape": info.shape_str, "dtype": info.dtype_str, "input_bytes": info.input_bytes,
                     "seed": seed, "flops": None, "ratio": None, "tracer": tr.to_dict(), "status": status,
                     "diagnosis": tr.reason or (f"cannot see: {sorted(tr.unseen_ops)}" if tr.unseen_ops else "")
                     + ("needs values: a mask's values were unknown (counted dense)" if tr.needs_values else "")})
        progress()
    return rows


def print_table(rows, file_level, summary, out_path):
    from tabulate import tabulate

    from mfulib.flops import check as fchk
    table = []
    for r in rows:
        tr = r["tracer"]
        who = fchk.rejected_by(r)
        table.append([r["case"], r["shape"], r["dtype"].split(";")[0],
                      _g(r.get("flops")) if r.get("flops_status") != "rejected" else "rejected",
                      _g(tr.get("total_flops")) if tr.get("status") == "ok" else tr.get("status"),
                      f"{r['ratio']:.4f}" if r.get("ratio") is not None else "-",
                      r["status"] + (f" ({who})" if who and r["status"] == "rejected" else ""),
                      r.get("diagnosis") or ""])
    cols = ["case", "shape", "dtype", "flops.py", "tracer", "ratio", "status", "diagnosis"]
    # long shapes and diagnoses wrap inside their column (never cut off)
    print(tabulate(table, headers=cols, tablefmt="plain", disable_numparse=True,
                   maxcolwidths=[None, 34, None, None, None, None, None, 70]))
    for c in file_level:
        print(f"{c['status']:>5}  {c['name']}: {c['detail']}")
    for r in rows:
        for c in r.get("checks", []):
            if c["status"] == "fail" and c["name"] != "tracer":
                print(f" fail  case {r['case']} {c['name']}: {c['detail']}")
    for why in summary.get("unverified_reasons") or []:
        if why.startswith("case "):  # the file-level ones are printed above
            print(f" unverified  {why}")
    print(f"{summary_line(summary)}; ratio {_g(summary.get('ratio_min'))}..{_g(summary.get('ratio_max'))} "
          f"-> {out_path}")


def summary_line(summary):
    """'PASSED|FAILED|UNVERIFIED: n cases {...}; k rejected; j no work'."""
    line = f"{summary['verdict'].upper()}: {plural(summary['n_cases'], 'case')} {summary['by_status']}"
    if summary.get("n_rejected"):
        rej = summary["rejected_cases"]
        line += f"; {summary['n_rejected']} rejected (cases {rej[:12]}{' ...' if summary['n_rejected'] > len(rej[:12]) else ''})"
    if summary.get("n_no_work"):
        line += f"; {summary['n_no_work']} with no work (empty inputs: nothing to time)"
    return line


def _g(x):
    return "-" if x is None else f"{x:.4g}"


def check_args(args):
    """Refuse option values that would silently check nothing or the wrong thing (UserError, exit 2); returns the
    --cases ids (None: all). An empty --cases or --largest < 1 is refused by select_cases."""
    import math

    from mfulib.core.errors import UserError
    limits = [("--peak-tflops", args.peak_tflops, False), ("--max-implied-ms", args.max_implied_ms, False),
              ("--tolerance", args.tolerance, True), ("--max-cpu-bytes", args.max_cpu_bytes, True),
              ("--max-cpu-flops", args.max_cpu_flops, True)]  # (flag, value, 0 allowed)
    for flag, v, allow_zero in limits:
        if v is not None and (not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero)):
            raise UserError(f"{flag} {v}: must be a finite number {'>= 0' if allow_zero else '> 0'}")
    if args.backend not in ("auto", "none"):
        from mfulib.backends import backend_class
        backend_class(args.backend)  # UserError naming the choices for an unknown name
    return cli.parse_case_list(args.cases) if args.cases is not None else None


def exit_status(summary: dict, accept_unverified: bool = False) -> int:
    """check_flops.py's exit status: 0 passed, 1 failed, 3 unverified (0 with ``accept_unverified``)."""
    from mfulib.flops.check import EXIT_FAILED, EXIT_UNVERIFIED
    if summary["verdict"] == "failed":
        return EXIT_FAILED
    if summary["verdict"] == "unverified" and not accept_unverified:
        return EXIT_UNVERIFIED
    return 0


def run(args) -> int:
    """Carry out a parsed check_flops.py command line (argparse Namespace of its flags): check (or, with
    ``--tracer-only``, trace) the selected cases, write flops_check.json, print the table; returns the exit status
    (:func:`exit_status`). Raises UserError for bad input."""
    case_ids = check_args(args)
    from tqdm import tqdm

    from mfulib.run import compat
    from mfulib.flops import check as fchk
    from mfulib.flops import contract as fcon
    from mfulib.core.jsonio import provenance
    from mfulib.schemas import flops_check_json
    from mfulib.core.opdir import OpDir
    od = OpDir(args.op_dir)
    compat.install("cpu")  # references that call .npu() / torch.npu run here; a no-op where an NPU is present
    out_path = args.output or os.path.join(od.path, flops_check_json.FILE_NAME)
    ff = None
    if not args.tracer_only:
        ff = fcon.load_flops(args.flops or od.flops_py)
    ids = fchk.select_cases(od, ff, case_ids, args.largest)
    trace_kwargs = {"max_cpu_input_bytes": int(args.max_cpu_bytes), "max_cpu_flops": args.max_cpu_flops}
    bar = tqdm(total=len(ids), desc="check_flops", unit="case", disable=args.quiet or not sys.stderr.isatty())
    doc = provenance(flops_check_json.TOOL, flops_check_json.SCHEMA)
    doc.update(op_dir=od.path, cases_file=od.cases_path, tolerance=args.tolerance, seed=args.seed,
               tracer_caps=trace_kwargs)
    if args.tracer_only:
        rows = tracer_rows(od, ids, args.seed, trace_kwargs, lambda: bar.update())
        file_level = []
        doc.update(mode="tracer-only", flops_py=None, peak=None)
    else:
        from mfulib.core.cases import describe_case
        from mfulib.flops import user_formulas
        peak = fchk.resolve_peak(od.path, args.peak_tflops, args.backend)
        user = user_formulas.collect(ff.module, ff.path)
        registry, standins = user_formulas.registry_with(user)
        infos = [describe_case(c, i) for i, c in enumerate(od.read_cases())]
        rows = []
        for i in ids:
            rows.append(fchk.check_case(ff, od, i, seed=args.seed, tolerance=args.tolerance, peak=peak,
                                        max_implied_ms=args.max_implied_ms, infos=infos,
                                        trace_kwargs=dict(trace_kwargs, registry=registry, standins=standins)))
            bar.update()
        file_level = fchk.file_checks(ff, rows)
        from mfulib.core.jsonio import sha256
        doc.update(mode="check", flops_py={"path": ff.path, "sha256": sha256(ff.path),
                                           "takes_args": ff.takes_args, "kernel_parts": ff.kernel_parts,
                                           "user_formulas": [{"op": m["name"], "source": m["source"], "file": p}
                                                             for m, _fn, p in user]},
                   peak=peak)
    bar.close()
    summary = fchk.summarize(rows, file_level)
    doc.update(summary=summary, file_checks=file_level, per_case=rows, accept_unverified=bool(args.accept_unverified))
    from mfulib.schemas import provenance as made
    doc[made.KEY] = made.made_from(os.path.dirname(os.path.abspath(out_path)), [
        od.model_py, args.flops or od.flops_py], made.settings_of(args, drop=("flops",)), step="flops")
    flops_check_json.write_flops_check_json(out_path, doc, n_cases=len(od.read_cases()))
    if args.quiet:
        print(summary_line(summary))
    else:
        print_table(rows, file_level, summary, out_path)
    if summary["verdict"] == "unverified":
        print("the numerator is UNVERIFIED: " + ("accepted (--accept-unverified); it is marked so in "
              "performance.json and the decomposition" if args.accept_unverified else "resolve the reasons above, "
              "or accept it (check_flops.py --accept-unverified; make ACCEPT_UNVERIFIED=1)"), file=sys.stderr)
    return exit_status(summary, args.accept_unverified)
