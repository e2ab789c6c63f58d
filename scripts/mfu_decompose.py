#!/usr/bin/env python3
"""Decompose measured MFU per case and per kernel part (step 6 of triton-mfu-analyzer) -> mfu_decompose.json.

Reads <op-dir>/performance.json (cases, warmup/repeats and kernels all come from there: nothing is re-measured)
and peak.json (peak_calib.py). Per case: dtype, total kernel time (us), TFLOP/s, MFU@nom (against the nominal
fp16/bf16 dense peak, comparable within one dtype only), MFU@ach (against the measured peak of the case's own
dtype; tf32 for fp32 run with TF32/HF32), MBU (input+output bytes / kernel time / measured copy bandwidth). Per part
of KERNEL_PARTS (flops.py: part -> kernel-name patterns; unmatched kernels form "other"): time, FLOPs share vs
time share and the part's MFU. Each case and part also gets a bound label (tensor/cube, memory, vector or
latency-bound from the PMU counters the collector recorded: Nsight Compute's SOL rule, msprof-analyze's 80% rule;
without counters the fp32-vs-fp16 fallback, never "compute-bound" below 60% MFU@ach), its roofline (attainable
TFLOP/s at its arithmetic intensity, headroom) and what fixing each part buys the case (parts ranked by payoff).
The table is followed by the maximum, the cache regime the operator and the peak share, and a reading aid.

Several reports (baseline and optimized, or an earlier round) are shown side by side as separate rows, with a
speed-up column per case and per part against the report labelled "baseline" (else the first):
  mfu_decompose.py --op-dir . --peak-json peak.json --report baseline=../base/performance.json

An incomplete collection (performance.json "complete": false, e.g. the collector was interrupted) is refused;
--allow-incomplete decomposes what was measured and marks the result ("complete": false, "missing").

Exit status: 0; 1 when a case's MFU exceeds the measured peak by more than 3% (an error in flops.py or peak.json,
never a result: the JSON is still written with the errors listed); 2 on bad input (an incomplete collection too).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mfulib.core import cli  # noqa: E402
from mfulib.core.errors import UserError  # noqa: E402


def build_parser():
    p = cli.parser(__doc__, prog="mfu_decompose.py")
    p.add_argument("--op-dir", default=".", help="work directory holding performance.json (and flops.py)")
    p.add_argument("--peak-json", default="peak.json",
                   help="peak_calib.py result; a relative path is looked up in --op-dir when absent in the cwd")
    p.add_argument("--cases", default=None, help="only these case ids, e.g. 46 or 3,7,9 or 0-4; none = every measured case")
    p.add_argument("--report", action="append", default=[], metavar="[LABEL=]PATH",
                   help="another performance.json to show beside the work dir's own (repeatable); LABEL names its rows")
    p.add_argument("--no-current", action="store_true",
                   help="leave out <op-dir>/performance.json (decompose only the --report files)")
    p.add_argument("-o", "--output", default=None, help="result JSON; none = <op-dir>/mfu_decompose.json")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="decompose an interrupted collection's measured cases (marked incomplete) instead of refusing")
    p.add_argument("--plot", action="store_true",
                   help="also write a PNG beside the JSON: per case, time share vs FLOPs share per part")
    p.add_argument("--html", default=None, metavar="PATH",
                   help="also write one self-contained HTML report (roofline, part shares, tables, provenance)")
    p.add_argument("--from-json", action="store_true",
                   help="with --html: render the decomposition already in mfu_decompose.json (-o) instead of "
                        "computing it again; nothing else is written or printed (make report)")
    return p


def parse_report_arg(text: str):
    """``"label=path"`` -> (label, path); ``"path"`` -> (None, path). A path that contains '=' and exists wins."""
    if "=" in text and not os.path.exists(text):
        label, path = text.split("=", 1)
        if not label:
            raise UserError(f"--report {text!r}: empty label - use LABEL=PATH or just PATH")
        return label, path
    return None, text


def write_report_html(result: dict, path: str, source: str) -> None:
    """The HTML report of a decomposition ``result`` (mfu_decompose.json's content, read from or written to
    ``source``) at ``path``, with the performance.json and peak.json it names; it records what it was made from."""
    from mfulib.report.html import write_html
    from mfulib.schemas import provenance as made
    from mfulib.schemas.peak_json import read_peak_json
    from mfulib.schemas.performance_json import load_report
    perf = {rep["label"]: load_report(rep["path"]) for rep in result["reports"]}
    record = made.made_from(os.path.dirname(os.path.abspath(path)), [source, result["peak_json"]] + [
        rep["path"] for rep in result["reports"]], {}, step="report")
    peak = read_peak_json(result["peak_json"])
    print(f"wrote {write_html(result, path, perf_docs=perf, peak_doc=peak, made_from=record)}")


def main(argv=None):
    args = build_parser().parse_args(argv)
    # the table shows "—" (no MFU): a console that cannot encode it (PYTHONIOENCODING=ascii, a Latin-1 locale) gets
    # a replacement character instead of a UnicodeEncodeError that fails the step
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    from mfulib.report import decompose
    from mfulib.report import tables as report
    from mfulib.core.jsonio import provenance
    from mfulib.schemas import decompose_json
    from mfulib.schemas import provenance as made
    from mfulib.pipeline.workdir_state import check_current
    op_dir = os.path.abspath(args.op_dir)
    if args.from_json:
        if not args.html:
            raise UserError("--from-json renders the HTML report: give --html PATH too")
        src = args.output or os.path.join(op_dir, decompose_json.FILE_NAME)
        doc = decompose_json.read_decompose_json(src)
        stale = check_current(src, doc, refuse=False)
        if stale:  # the decomposition is older than what it was made from: said on screen and in the HTML
            doc["stale"] = list(doc.get("stale") or []) + [f"{src}: {why}" for why in stale]
            print(f"warning: STALE {src}: {'; '.join(stale)} - make decompose (or mfu_decompose.py without "
                  "--from-json) brings it up to date", file=sys.stderr)
        write_report_html(doc, args.html, src)
        return 0
    peak_path = args.peak_json
    if not os.path.isabs(peak_path) and not os.path.exists(peak_path) \
            and os.path.exists(os.path.join(op_dir, peak_path)):
        peak_path = os.path.join(op_dir, peak_path)  # else the path as given: the error then names that one
    cases = cli.parse_case_list(args.cases) if args.cases is not None else None
    reports = [parse_report_arg(r) for r in args.report]
    body = decompose.decompose(op_dir, peak_path, reports=reports, cases=cases, include_current=not args.no_current,
                               allow_incomplete=args.allow_incomplete)
    out_path = args.output or os.path.join(op_dir, decompose_json.FILE_NAME)
    result = {**provenance(decompose_json.TOOL, decompose_json.SCHEMA, device=body.get("peak_device")), **body}
    flops_py = os.path.join(op_dir, "flops.py")  # KERNEL_PARTS, when the reports name none
    result[made.KEY] = made.made_from(os.path.dirname(os.path.abspath(out_path)), [
        rep["path"] for rep in body["reports"]] + [peak_path, flops_py], made.settings_of(
        args, drop=("report", "output", "no_current")) | {"reports": [r["label"] for r in body["reports"]]},
        step="decompose")
    if args.plot:
        png = report.plot_decompose(result, os.path.splitext(out_path)[0] + ".png")
        result["plot"] = png
    decompose_json.write_decompose_json(out_path, result)
    if args.html:
        write_report_html(result, args.html, out_path)
    print(report.decompose_table(result))
    print(f"wrote {out_path}" + (f" and {result['plot']}" if result.get("plot") else ""))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    cli.run_main(main)
