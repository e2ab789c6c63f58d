"""The collector's options (:class:`Options`, one field per flag of ``msprof_perf_summary.py``) and their checks:
:func:`check_options` refuses bad values before anything runs, :func:`device_select` picks the device index,
:func:`apply_iteration_defaults` fills warmup / repeats by backend."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from mfulib.core.definitions import finite_or_none, is_positive
from mfulib.core.errors import UserError

CPU_DEFAULT_WARMUP, CPU_DEFAULT_REPEATS = 1, 2
DEFAULT_WARMUP, DEFAULT_REPEATS = 5, 5


@dataclass
class Options:
    """Collector options (the CLI's flags; see msprof_perf_summary.py --help)."""
    op_dir: str = "."
    output_dir: str = "."
    impl: str = "asc"
    warmup: int | None = None
    repeats: int | None = None
    seed: int = 0
    retry: int = 2
    device_id: int | None = None
    backend: str = "auto"
    cases: list | None = None
    top_k: int = 3
    max_cases: int | None = None
    mfu: bool = False
    mfu_peak: float | None = None
    keep_prof: str | None = None
    case_timeout_s: float = 600.0
    flush_cache_mib: float = 0.0
    aic_metrics: str = "PipeUtilization"
    msprof: str | None = None
    quick: bool = True
    progress: bool = True
    unverified_ok: bool = False
    pmu: str = "auto"
    ncu: str | None = None
    ncu_cache_control: str = "auto"
    pmu_iterations: int = 2
    search_json: str | None = None  # grid_search.json whose chosen_cases are ``cases`` (recorded in selection)
    search_origins: dict = field(default_factory=dict)  # case id -> search_origin (a search's or probe's case)
    flags: list = field(default_factory=list)


def device_select(opts: Options, backend_name: str):
    """(device_id, source) as upstream: cli (--device), env (the backend's device-id variable, ASCEND_DEVICE_ID on
    npu), else auto (0)."""
    from mfulib.backends import backend_class
    if opts.device_id is not None:
        return int(opts.device_id), "cli"
    var = backend_class(backend_name).device_id_var
    env = os.environ.get(var) if var else None
    if env not in (None, ""):
        try:
            return int(env), "env"
        except ValueError:
            raise UserError(f"{var}={env!r} is not a device index - unset it or pass --device N") from None
    return 0, "auto"


def check_options(opts: Options) -> None:
    """Refuse bad option values before anything runs (UserError naming the flag and the fix)."""
    if opts.impl not in ("asc", "ref", "both"):
        raise UserError(f"--impl {opts.impl!r}: choose asc, ref or both")
    if opts.top_k < 1 or (opts.max_cases is not None and opts.max_cases < 1):
        raise UserError(f"--mfu-top-k {opts.top_k} / --max-cases {opts.max_cases}: need at least 1 case")
    if opts.cases is not None and not opts.cases:
        raise UserError("--cases selects no case - give case ids, e.g. --cases 3,7,9 or 0-4 (or leave it out)")
    if not isinstance(opts.retry, int) or isinstance(opts.retry, bool) or opts.retry < 0:
        raise UserError(f"--retry {opts.retry}: must be an integer >= 0 (0 = no retry; default 2)")
    if finite_or_none(opts.case_timeout_s) is None or opts.case_timeout_s <= 0:
        raise UserError(f"--case-timeout-s {opts.case_timeout_s}: must be a finite number of seconds > 0 "
                        "(default 600)")
    if finite_or_none(opts.flush_cache_mib) is None or opts.flush_cache_mib < 0:
        raise UserError(f"--flush-cache-mib {opts.flush_cache_mib}: must be a finite number >= 0 (0 = off)")
    if opts.pmu not in ("auto", "ncu", "none") or opts.ncu_cache_control not in ("auto", "all", "none"):
        raise UserError(f"--pmu {opts.pmu} / --ncu-cache-control {opts.ncu_cache_control}: choose --pmu auto, ncu "
                        "or none and --ncu-cache-control auto, all or none")
    if not isinstance(opts.pmu_iterations, int) or opts.pmu_iterations < 1:
        raise UserError(f"--pmu-iterations {opts.pmu_iterations}: must be an integer >= 1 (default 2)")
    if opts.mfu_peak is not None and not is_positive(opts.mfu_peak):
        raise UserError(f"--mfu-peak {opts.mfu_peak}: must be a finite TFLOP/s figure > 0 (or leave it out to use "
                        "the device's nominal peak)")


def apply_iteration_defaults(opts: Options, backend_name: str) -> None:
    """Fill ``opts.warmup`` / ``opts.repeats`` left None (a Triton-interpreter backend such as cpu: 1 / 2, else
    5 / 5); UserError for warmup < 0 or repeats < 1."""
    from mfulib.backends import backend_class
    slow = backend_class(backend_name).interpreter
    if opts.warmup is None:
        opts.warmup = CPU_DEFAULT_WARMUP if slow else DEFAULT_WARMUP
    if opts.repeats is None:
        opts.repeats = CPU_DEFAULT_REPEATS if slow else DEFAULT_REPEATS
    if opts.warmup < 0 or opts.repeats < 1:
        raise UserError(f"--warmup {opts.warmup} / --repeats {opts.repeats}: warmup must be >= 0 and repeats >= 1")
