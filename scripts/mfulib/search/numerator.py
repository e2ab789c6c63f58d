"""The shape search's numerator and figure of merit: min(traced, executed) FLOPs, and the MFU / MBU of one point.

The numerator rule (``docs/ARCHITECTURE.md``, "numerator rule"): the search runs before flops.py exists and takes
the numerator from the reference's tracer; where the hardware counts the matrix work it executed, the numerator is
**min(traced, executed)** - a dense reference over-counts sparse semantics, tile padding / masked work over-counts on
the hardware side, so the smaller is closer to the model FLOPs - and both values are recorded with ``num_src``.
Executed FLOPs have one definition, :func:`mfulib.flops.executed.executed_flops` (matrix instructions only; CUDA
tensor instructions on mma.sync devices, refused for warpgroup MMA; never on NPU, whose counter has no public
definition); without them (cpu, npu, counters not collected or refused) ``num_src`` is ``tracer`` and
``num_src_why`` says why.

Operators without matrix work have MBU as their figure: bytes moved = input bytes + output bytes (each input read
once, each output written once: the compulsory traffic), over the kernel time and the measured (else nominal)
memory bandwidth; :func:`mfulib.core.definitions.mbu`.
"""
from __future__ import annotations

from mfulib.core.definitions import actual_tflops, is_positive, mbu as mbu_of, mfu as mfu_of


def numerator(traced, executed, executed_src, why_no_executed) -> dict:
    """{numerator, num_src, num_src_why, numerator_traced, numerator_executed} by the rule min(traced, executed)
    (module docstring); the tracer's value alone where there is no executed count, and the executed count alone
    where the tracer gave none. ``numerator`` None when neither exists."""
    out = {"numerator_traced": traced, "numerator_executed": executed}
    t_ok, e_ok = traced is not None and traced >= 0, executed is not None and executed >= 0
    if t_ok and e_ok:
        take_traced = traced <= executed
        out.update(numerator=min(traced, executed), num_src="tracer" if take_traced else executed_src,
                   num_src_why=f"min(traced {traced:.6g}, executed {executed:.6g}): the "
                               f"{'tracer' if take_traced else 'hardware'} count is the smaller")
        if executed == 0 and traced > 0:
            out["num_src_why"] += " (the hardware counted no matrix work at all: check the counter and the kernel)"
    elif t_ok:
        out.update(numerator=traced, num_src="tracer", num_src_why=f"no executed count: {why_no_executed}")
    elif e_ok:
        out.update(numerator=executed, num_src=executed_src, num_src_why="the tracer gave no count for this case")
    else:
        out.update(numerator=None, num_src=None, num_src_why=f"no count: tracer none; {why_no_executed}")
    return out


def point_figures(numerator_flops, bytes_moved, kernel_time_ns, peak_nom, peak_ach, bandwidth_gbps) -> dict:
    """{actual_tflops, mfu_nom, mfu_ach, achieved_gbps, mbu} of one measured point (None where an input is missing);
    definitions from :mod:`mfulib.core.definitions` (actual_tflops = FLOPs / ns / 1e3; GB/s = bytes per ns)."""
    ok_t = is_positive(kernel_time_ns)
    tflops = actual_tflops(numerator_flops, kernel_time_ns) if ok_t and numerator_flops else None
    gbps = bytes_moved / kernel_time_ns if ok_t and bytes_moved else None
    return {"actual_tflops": tflops, "mfu_nom": mfu_of(tflops, peak_nom), "mfu_ach": mfu_of(tflops, peak_ach),
            "achieved_gbps": gbps, "mbu": mbu_of(bytes_moved, kernel_time_ns, bandwidth_gbps) if ok_t else None}


def common_figure(rows: list, metric: str) -> tuple:
    """(field, kind) every row with a value can be ranked by: for ``mfu`` ``mfu_ach`` when every row has it, else
    ``mfu_nom``, else ``actual_tflops`` (kind ach | nom | None); for ``mbu`` ``mbu``, else ``achieved_gbps``."""
    ok = [r for r in rows if r.get("status") == "ok"]
    choices = ((("mfu_ach", "ach"), ("mfu_nom", "nom"), ("actual_tflops", None)) if metric == "mfu"
               else (("mbu", "measured"), ("achieved_gbps", None)))
    for fld, kind in choices:
        if ok and all(r.get(fld) is not None for r in ok):
            return fld, kind
    return choices[-1]
