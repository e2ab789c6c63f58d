"""The verify_op.py command: which cases are verified (the caps of the backend), each in its own child process
(:func:`mfulib.verify.correctness.verify_isolated`), verify.json written, the table printed."""
import os
import sys

from mfulib.core import cli


def run(args) -> int:
    """Carry out a parsed verify_op.py command line (argparse Namespace of its flags): every selected case of the
    work directory runs ModelNew against Model in its own child process; verify.json is written and the table
    printed. Returns 1 when a case failed, else 0; raises UserError for bad input."""
    from mfulib import backends
    backend, why = backends.resolve_backend(args.backend)
    backends.prepare_process(backend)
    from mfulib.run import compat
    from mfulib.verify import correctness as verify
    from mfulib.verify.verified_cases import default_max_input_mb, skip_reason, skipped_row
    from mfulib.core.errors import UserError
    from mfulib.core.jsonio import provenance
    from mfulib.schemas import verify_json
    from mfulib.core.opdir import OpDir

    from tabulate import tabulate
    from tqdm import tqdm

    od = OpDir(args.op_dir)
    device = backends.device_string(backend, args.device)
    report = compat.install(device)
    infos = od.describe_all()
    ids = cli.parse_case_list(args.cases) if args.cases else [c.case_id for c in infos]
    cap_mb = args.max_input_mb if args.max_input_mb is not None else default_max_input_mb(backend)
    if not ids:
        raise UserError(f"--cases {args.cases!r} selects no case (ids 0..{len(infos) - 1})")
    if cap_mb is not None and cap_mb <= 0:
        raise UserError(f"--max-input-mb {cap_mb:g}: must be > 0 (e.g. --max-input-mb 64)")
    if not args.case_timeout_s > 0:
        raise UserError(f"--case-timeout-s {args.case_timeout_s}: must be > 0 seconds")
    rows, runnable = [], []
    for i in ids:
        info = od.describe(i)
        skip = skip_reason(info, backend, cap_mb, args.skip_bf16)
        if skip:
            rows.append(skipped_row(info, skip))
        else:
            runnable.append(i)
    # each case runs in a child process: a crash or a hang is recorded for that case and the others go on
    with tqdm(total=len(runnable), desc=f"verify {od.op_name} on {device}", unit="case", file=sys.stderr) as bar:
        rows += verify.verify_isolated(od.path, runnable, device, seed=args.seed, case_timeout_s=args.case_timeout_s,
                                       progress=lambda _row: bar.update(1), backend=backend)
    out = provenance(verify_json.TOOL, verify_json.SCHEMA, device={"backend": backend, "device": device, "why": why, "compat": report})
    out.update({"op": od.op_name, "work_dir": od.path, "seed": args.seed, "tolerance": verify.TOLERANCE,
                "tolerance_tf32": verify.TOLERANCE_TF32, "inputs": verify_json.input_digests(od.path), "cases": rows})
    verify_json.finish(out, len(infos))
    rows, counts = out["cases"], out["summary"]
    if backends.backend_class(backend).interpreter:  # what the interpreter adapted, over all cases (rows: their own)
        from mfulib.run.interpreter import summary
        out["cpu_adaptations"] = summary(rows)
    out_path = args.output or od.file(verify_json.FILE_NAME)
    from mfulib.schemas import provenance as made
    out[made.KEY] = made.made_from(os.path.dirname(os.path.abspath(out_path)), [od.model_py, od.model_new_py],
                                   made.settings_of(args), step="verify")
    verify_json.write_verify_json(out_path, out)
    if os.path.dirname(os.path.abspath(out_path)) == od.path:  # a failed run by hand: make must redo the step
        from mfulib.pipeline.workdir_state import invalidate, record_run
        if not out["failed"]:
            record_run(od.path, "verify", out[made.KEY])
        elif not out[made.KEY]["by_make"]:
            invalidate(od.path, "verify")
    # one table renderer (tabulate): missing cells print empty, no NaN and no pandas fill warnings
    cols = [c for c in ("case", "dtype", "status", "max_norm_err", "tol", "shape", "reason") if any(c in r for r in rows)]
    table = [["" if r.get(c) is None else r[c] for c in cols] for r in rows]
    # long shapes and reasons wrap inside their column (never cut off)
    print(tabulate(table, headers=cols, tablefmt="plain", maxcolwidths=[70 if c in ("shape", "reason") else None
                                                                        for c in cols]))
    print(f"{od.op_name} on {device}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    if out.get("cpu_adaptations"):
        print("Triton interpreter adaptations (README 'Running Triton-Ascend code'): "
              + "; ".join(out["cpu_adaptations"]))
    if out["failed"]:
        print(f"FAILED: case(s) {out['failed']} - see {out_path}", file=sys.stderr)
        return 1
    return 0
