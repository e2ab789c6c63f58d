"""mfu_decompose.json: step 6's per-case / per-kernel-part MFU table, its writer and reader/validator.

Provenance (:func:`mfulib.core.jsonio.provenance`) + the body :func:`mfulib.report.decompose.decompose` returns:
``peak_json, peak_label, peak_trusted (false: peak.json's calibration is not trusted),
peak_backend, peak_device, peak_tflops, bandwidth_gbps, reports`` [{label, path, backend,
measured_cases, not_measured [{case, by ("collector" | "verify"), status, reason}] (every case of the collection
that was never timed, with the reason its performance.json records: the collector's skip, or verify.json's verdict
and reason for a case the verify gate excluded - :func:`mfulib.schemas.performance_json.not_measured`; only the
asked ones with --cases), not_selected {rule, cases} (cases the selection rule left out that could be timed,
:func:`mfulib.schemas.performance_json.not_selected`; None when none or with --cases), device, kernel_parts,
kernel_parts_source, nominal_tflops, nominal_source, warmup, repeats,
timing_method, flush_cache_mib, complete, missing, notes, rows}], ``maxima, reading_aid, errors, warnings, notes``,
``regime`` {flush_cache_mib_collect, flush_cache_mib_peak, note} (:func:`mfulib.report.reading.regime`),
``complete`` (false when an interrupted collection was decomposed with --allow-incomplete) and ``missing`` (what it
lacked) and, with ``--plot``, ``plot``.

Rows and their parts carry (:func:`mfulib.report.decompose.attach_bounds_and_roofline`): ``bound`` {label (one of
:data:`mfulib.report.bound.LABELS`), source ("pmu:ncu" | "pmu:msprof" | "fallback:fp32-vs-fp16" | None), evidence
{counter: value}, note, shares {label: fraction of the time} (with counters: a row's or part's label is the class of
its kernels holding > 50% of the time, else "mixed", :func:`mfulib.report.bound.majority_bound`)}; ``roofline`` {ai_flop_per_byte, compulsory_bytes, dram_bytes, attainable_tflops,
achieved_tflops, headroom, mfu_if_fixed, dram_ai_flop_per_byte, roof (parts: "unknown" when their bytes are;
+ parts: bytes_source, target_tflops, target_source, payoff; on the CPU interpreter headroom, mfu_if_fixed and payoff
are None and ``withheld`` says why, :func:`mfulib.report.decompose.withhold_advice`)} (:mod:`mfulib.report.roofline`); parts also
``dram_bytes``. Rows also: ``kernel_bounds``
{kernel: bound}, ``payoff_order`` [part names], ``pmu_view`` {official_mfu, pmu_mfu, executed_flops,
semantic_flops, redundancy, active_core_fraction, executed_how}, ``pmu_source``, ``pmu_unavailable``,
``ncu_replay`` (performance.json's: the kernel time is an ncu replay time; None for trace-timed cases) and, when
several reports are shown side by side, ``speedup`` {baseline, value} (rows and parts of the non-baseline reports).
Rows also carry ``repeat_spread`` (performance.json's) and ``spread_flagged`` (true above the collector's limit,
:func:`mfulib.report.cells.spread_flagged`; the collector's flag is then a warning).
"""
from __future__ import annotations

from mfulib.core.errors import UserError
from mfulib.core.jsonio import write_json_atomic
from mfulib.schemas.common import read_work_json, wrong_type

SCHEMA = 1
TOOL = "mfu_decompose"
FILE_NAME = "mfu_decompose.json"
REQUIRED = ("reports", "maxima", "errors", "warnings")


def write_decompose_json(path: str, doc: dict) -> None:
    """Write ``doc`` (provenance + decompose body) atomically to ``path``."""
    write_json_atomic(path, doc)


def read_decompose_json(path: str) -> dict:
    """Read and check an mfu_decompose.json: a JSON object from mfu_decompose.py with a ``reports`` list whose
    entries have a ``rows`` list. Raises UserError naming the file, the field and the fix."""
    fix = "re-run mfu_decompose.py"
    doc = read_work_json(path, "run mfu_decompose.py --op-dir <work dir> first", fix)
    if not isinstance(doc, dict) or doc.get("tool") != TOOL:
        raise UserError(f"{path}: not an mfu_decompose.py result (no tool={TOOL}) - pass the file it wrote")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise UserError(f"{path}: lacks {missing} - {fix}")
    if not isinstance(doc["reports"], list):
        raise wrong_type(path, "reports", doc["reports"], "a list of report objects", fix)
    for i, rep in enumerate(doc["reports"]):
        if not isinstance(rep, dict) or not isinstance(rep.get("rows"), list):
            raise wrong_type(path, f"reports[{i}]", rep, "an object with a rows list", fix)
    return doc


def completeness(doc: dict) -> tuple:
    """(ok, problems) of an mfu_decompose.json: ok when it records no error and decomposed complete collections."""
    problems = list(doc.get("errors") or [])
    if doc.get("complete") is False:
        problems.append("incomplete collection decomposed: " + "; ".join(doc.get("missing") or []))
    return not problems, problems
