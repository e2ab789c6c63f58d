"""Step 4, kernel-time collection: select cases, run each (case, implementation) in a child process with bounded
retries, summarise its kernels, attach FLOPs and the nominal peak, write ``performance.json``.

Case selection (DESIGN.md "Case ids": 0-based lines of the work directory's case file); only cases verify passed
on this backend are timed (:mod:`mfulib.verify.verified_cases`: a case without a verify row is verified first and its row
merged into verify.json; a case verify skipped or rejected is never a per_case row: it is listed under selection.not_verified
with verify's reason and hands its
top-k slot to the next one; ``--unverified-ok`` times such cases anyway, marked per case):

* ``--cases 3,7,9``: exactly those (``--max-cases`` truncates);
* otherwise the top ``--mfu-top-k`` (3) cases by theoretical FLOPs from ``flops.py`` - ``--max-cases N`` takes the
  top N instead (N >= the number of cases: all of them); without ``flops.py``, by input bytes, saying so, and no
  MFU is reported;
* cpu backend: the **smallest** eligible cases first (CI stays fast), bf16 cases skipped with the reason, and
  warmup 1 / repeats 2 unless given.

Completeness: performance.json records ``complete`` and ``missing`` (the selected (case, impl) pairs not run, e.g.
after Ctrl-C), so make and decompose never take an interrupted collection for a finished one.

PMU counters (``--pmu auto|ncu|none``, default auto): on cuda each measured case's child runs once more under
Nsight Compute (:class:`mfulib.backends.cuda.NcuPmu`, probed once per run) and per_case ``pmu`` {kernel:
{canonical counter: mean}}, ``pmu_source`` ("ncu") and ``pmu_unavailable`` (None, or why not: ERR_NVGPUCTRPERM,
ncu not found, ...) are filled; kernel times stay CUPTI's. The run's ``pmu_collection`` records the verdict.

Retries (``--retry``, default 2 as upstream): only an *incomplete* profile is retried - lost rows, zero-timestamp
records, missing iteration markers, no export. A crash, timeout, out-of-memory, rejected case or a call that
launched no kernel is recorded for that case at once and the run goes on.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field

from mfulib.collect import kernels as _kernels
from mfulib.peaks import nominal as _peaks
from mfulib.core.definitions import MATH_MODES, finite_or_none, is_positive
from mfulib.core.errors import UserError
from mfulib.core.jsonio import ensure_writable_dir, provenance
from mfulib.schemas import performance_json as _perf
from mfulib.core.opdir import OpDir
from mfulib.verify.verified_cases import Gate
from mfulib.backends import select_backend
from mfulib.backends.base import lost_problems
from mfulib.backends.cpu import BF16_REASON
from mfulib.backends.cuda import pmu_plan
from mfulib.backends.runner import close_workers, run_child

CPU_DEFAULT_WARMUP, CPU_DEFAULT_REPEATS = 1, 2
DEFAULT_WARMUP, DEFAULT_REPEATS = 5, 5
NOMINAL_DTYPE = "float16"  # MFU@nom uses the fp16/bf16 dense peak for every dtype (DESIGN.md)


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


# ------------------------------------------------------------------------------------------------ FLOPs


def load_flops(opdir: OpDir):
    """The work dir's flops.py (:class:`mfulib.flops.contract.FlopsFile`), or None when there is none.
    A flops.py that does not load raises UserError (file + fix)."""
    if not os.path.exists(opdir.flops_py):
        return None
    from mfulib.flops.contract import load_flops as _load
    return _load(opdir.flops_py)


def tracer_flops(opdir: OpDir) -> dict:
    """{case id: tracer FLOPs} from check_flops.py's flops_check.json in the work dir ({} when absent)."""
    from mfulib.schemas.flops_check_json import FILE_NAME, tracer_flops as _read
    return _read(opdir.file(FILE_NAME))


def case_flops(ff, opdir: OpDir, info, seed: int) -> dict:
    """{flops, flops_source, flops_parts, compute_dtype, flops_tracer, note} of one case from flops.py (the
    forward args are built, seeded with ``seed``, when flops.py takes them). Never raises for the case."""
    from mfulib.flops.contract import evaluate_case
    ent = {"flops": None, "flops_source": None, "flops_parts": None, "compute_dtype": None, "note": None}
    if ff is None:
        return ent
    case = opdir.read_cases()[info.case_id]
    args = None
    try:
        if ff.takes_args:  # the timed child's draw (same seed, same stream): FLOPs of the inputs that are timed
            from mfulib.flops.tracer import build_reference_args, data_values
            args, ent["inputs_drawn"] = build_reference_args(opdir, info.case_id, seed, with_draw=True)
            ent["data_values"] = data_values(args)
        ev = evaluate_case(ff, case, args, info.case_id)
        ent["compute_dtype"] = ff.compute_dtype(case, info.case_id)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - recorded per case (sys.exit() in user code too)
        why = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
        ev = {"status": "error", "reason": why, "flops": None, "flops_parts": None}
    ent["flops_source"] = "flops.py" + (f" (flops(case, args), seed {seed})" if ff.takes_args else "")
    ent["vector_flops"] = ev.get("vector_flops") if ev["status"] == "ok" else None
    if ev["status"] == "ok" and ev["flops"] is not None and ev["flops"] >= 0:
        ent.update(flops=ev["flops"], flops_parts=ev["flops_parts"])  # 0 = no matrix work: no MFU, MBU headline
        if not ev["flops"]:
            ent["note"] = "no matrix work (flops 0): no MFU - MBU is this case's figure"
    else:
        ent["note"] = (f"flops.py gives no FLOPs for this case ({ev['status']}: {ev.get('reason') or ev['flops']}): "
                       "no MFU")
    return ent


def numerator_verdicts(opdir: OpDir) -> dict:
    """check_flops.py's verdict on flops.py (:func:`mfulib.schemas.flops_check_json.numerator_verdicts`)."""
    from mfulib.schemas.flops_check_json import FILE_NAME, numerator_verdicts as _read
    return _read(opdir.file(FILE_NAME))


def numerator_of(verdicts: dict, case_id: int, ff) -> dict:
    """{numerator, numerator_reason} of one case: checked | unverified | failed | ... from flops_check.json, or
    "unchecked" when check_flops.py has not run on it (None without a flops.py)."""
    if ff is None:
        return {"numerator": None, "numerator_reason": None}
    ent = verdicts.get("cases", {}).get(case_id)
    if ent is None:
        return {"numerator": "unchecked", "numerator_reason": "check_flops.py has not checked this case"}
    return {"numerator": ent["numerator"], "numerator_reason": ent.get("reason")}


# ------------------------------------------------------------------------------------------------ selection


def select_cases(infos, ff, opdir: OpDir, opts: Options, backend_name: str, gate=None):
    """(selected CaseInfos, skipped [(CaseInfo, reason, verify mark)], selection description).

    Ranking key: flops(case) from flops.py when it needs no forward args, else input bytes (said in ``rule``).
    With a :class:`mfulib.verify.verified_cases.Gate`, a case it does not admit is skipped (its reason) while slots are
    being filled and the next case takes its slot; a case without a verify row is selected (the caller verifies
    it and selects again).
    """
    by_id = {i.case_id: i for i in infos}
    skipped = []
    smallest = backend_name == "cpu"
    if opts.cases is not None:
        bad = [c for c in opts.cases if c not in by_id]
        if bad:
            raise UserError(f"--cases: no case {bad} (the case file has {len(infos)} cases, ids 0..{len(infos) - 1})")
        order = [by_id[c] for c in opts.cases]
        rule = (f"chosen by the search ({opts.search_json})" if opts.search_json else "--cases") + \
            f" {','.join(map(str, opts.cases))}"
        k = opts.max_cases or len(order)
    else:
        key, what = None, "input bytes (no flops.py: no MFU reported)"
        if ff is not None and not ff.takes_args:
            from mfulib.flops.contract import evaluate_case
            cases = opdir.read_cases()
            vals = {i.case_id: evaluate_case(ff, cases[i.case_id], case_id=i.case_id) for i in infos}
            if any(v["status"] == "ok" and v["flops"] for v in vals.values()):
                key, what = (lambda i: vals[i.case_id]["flops"] if vals[i.case_id]["status"] == "ok" else None), \
                    "theoretical FLOPs (flops.py)"
            elif any(v["status"] == "ok" for v in vals.values()):
                what = "bytes moved (input bytes: no matrix work, MBU is the headline)"
            else:
                what = "input bytes (flops.py gave no FLOPs for any case)"
        elif ff is not None:
            what = "input bytes (flops.py needs the forward args: FLOPs are computed for the selected cases only)"
        key = key or (lambda i: i.input_bytes)
        missing = float("inf") if smallest else -1.0
        order = sorted(infos, key=lambda i: (key(i) if key(i) is not None else missing, -i.case_id if not smallest
                                             else i.case_id), reverse=not smallest)
        k = opts.max_cases or opts.top_k
        rule = f"{'smallest' if smallest else 'top'}-{k} by {what}" + \
            (" (cpu backend: smallest first, to keep the interpreter fast)" if smallest else "")
    selected, reserve, marks = [], [], {}
    for info in order:
        if backend_name == "cpu" and info.compute_dtype == "bfloat16":
            skipped.append((info, BF16_REASON, None))
            continue
        empty = [t.name for t in info.tensors if any(int(d) == 0 for d in t.shape)]
        if empty:  # check_flops.py reports these as "no work" too (flops_check.NO_WORK)
            skipped.append((info, f"no work: nothing to time (empty input tensor(s) {', '.join(empty)})", None))
            continue
        if gate is not None and len(selected) < k:
            admitted, marks[info.case_id] = gate.admits(info.case_id)
            if not admitted:  # verify skipped/rejected/failed it: never timed, the next case takes the slot
                skipped.append((info, marks[info.case_id]["reason"], marks[info.case_id]))
                continue
        (selected if len(selected) < k else reserve).append(info)
    # without --cases, a case the operator rejects hands its slot to the next one of ``reserve``
    return selected, skipped, {"rule": rule, "order": [i.case_id for i in selected],
                               "skipped": [i.case_id for i, _, _ in skipped],
                               "not_verified": [i.case_id for i, _, m in skipped if m is not None],
                               "reserve": [] if opts.cases is not None else [i.case_id for i in reserve]}


# ------------------------------------------------------------------------------------------------ one run


def case_spec(backend, opdir: OpDir, case_id: int, impl: str, opts: Options) -> dict:
    """The child's spec of one (case, impl) (keys: :mod:`mfulib.backends.runner`)."""
    return {"op_dir": opdir.path, "case_id": case_id, "impl": impl, "seed": opts.seed, "warmup": opts.warmup,
            "repeats": opts.repeats, "backend": backend.name, "device": backend.device_string(opts.device_id),
            "markers": backend.markers, "profile": True, "flush_cache_mib": opts.flush_cache_mib}


def run_pmu(pmu, backend, opdir: OpDir, case_id: int, impl: str, opts: Options, res: dict) -> dict:
    """PMU counters of a measured (case, impl) (``pmu.collect_case`` in ``<attempt dir>/ncu``); {} when the
    measurement itself failed. Never raises for the case."""
    s = res.get("summary") or {}
    if res.get("status") != "ok" or not res.get("attempt_dir"):
        why = pmu.probe()["reason"] or f"no PMU pass: the case has no kernel time ({res.get('status')})"
        return {"pmu": None, "pmu_source": None, "pmu_unavailable": why, "flags": []}
    from mfulib.run.worker import child_env
    try:
        return pmu.collect_case(case_spec(backend, opdir, case_id, impl, opts), s.get("sequence") or [],
                                [k["name"] for k in s.get("kernels") or []], os.path.join(res["attempt_dir"], "ncu"),
                                child_env(backend.child_env(os.environ)))
    except Exception as exc:  # noqa: BLE001 - counters are optional: the kernel time stands without them
        return {"pmu": None, "pmu_source": None, "pmu_unavailable": f"PMU pass failed ({type(exc).__name__}: {exc})",
                "flags": []}


def run_case_impl(backend, opdir: OpDir, case_id: int, impl: str, opts: Options, work_root: str) -> dict:
    """Measure one (case, impl) with up to ``opts.retry`` retries of an incomplete profile; never raises for the
    case's own failures. Returns {status, error, summary, flags, attempts, attempt_dir, output_bytes, wall_s,
    device, compat, runtime, timing_method}."""
    n = opts.warmup + opts.repeats
    spec = case_spec(backend, opdir, case_id, impl, opts)
    problems_seen = []
    res = {}
    for attempt in range(opts.retry + 1):
        adir = os.path.join(work_root, f"case{case_id}_{impl}", f"attempt{attempt}")
        if os.path.exists(adir):
            shutil.rmtree(adir)
        t0 = time.perf_counter()
        child = run_child(backend, spec, adir, opts.case_timeout_s)
        res = {"status": child.status, "error": child.error, "attempts": attempt + 1, "attempt_dir": adir,
               "output_bytes": child.report.get("output_bytes"), "device": child.report.get("device"),
               "compat": child.report.get("compat"), "cpu_adaptations": child.report.get("cpu_adaptations"),
               "flags": [], "summary": None, "runtime": None,
               "timing_method": backend.timing_method,
               "wall_s": dict(child.report.get("wall_s") or {}, child_process=child.wall_s)}
        if child.status != "ok":
            return res
        try:
            rows, info = backend.launches(adir, child.report, n)
        except UserError as exc:  # e.g. no export yet: an incomplete profile, retried
            rows, info = [], {"problems": [str(exc)], "flags": [], "lost_by_iter": {}}
        except Exception as exc:  # noqa: BLE001 - a parser bug must not stop the other cases
            res.update(status="error", error=f"reading the profile in {adir} failed ({type(exc).__name__}: {exc}) - "
                                             "keep it with --keep-prof and report it")
            return res
        res["runtime"] = info.get("runtime")
        res["timing_method"] = info.get("timing_method") or backend.timing_method
        res["prof"] = info.get("prof")
        res["pmu_source"], res["pmu_unavailable"] = info.get("pmu_source"), info.get("pmu_unavailable")
        problems = list(info.get("problems", [])) + lost_problems(info, opts.warmup, n)
        summary = _kernels.summarize(rows, opts.warmup, opts.repeats, extra_problems=problems)
        res["summary"] = summary
        res["flags"] = list(info.get("flags", [])) + list(summary.get("flags", []))
        res["wall_s"]["parse"] = time.perf_counter() - t0 - child.wall_s
        if summary["status"] == "ok":
            if problems_seen:
                res["flags"].append(f"incomplete profile retried ({attempt} retr{'y' if attempt == 1 else 'ies'}): "
                                    f"{problems_seen[0]}")
            return res
        if summary["status"] == "no_kernels":
            res.update(status="no_kernels", error=f"{impl}: " + "; ".join(summary["problems"]))
            return res
        problems_seen += summary["problems"]
    res.update(status="incomplete", error=(f"profile incomplete after {opts.retry + 1} attempt(s), not reported "
                                           f"as a time: {'; '.join(problems_seen[-2:])} - re-run, or raise --retry"))
    return res


def keep_profile(res: dict, keep_root: str, case_id: int, impl: str, output_dir: str):
    """Move the last attempt's raw profile to ``<keep>/prof/case<id>_<impl>``; returns its path relative to
    ``output_dir`` (absolute when outside it)."""
    src = res.get("attempt_dir")
    if not src or not os.path.isdir(src):
        return None
    dst = os.path.join(keep_root, "prof", f"case{case_id}_{impl}")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.move(src, dst)
    rel = os.path.relpath(dst, output_dir)
    return dst if rel.startswith("..") else rel


# ------------------------------------------------------------------------------------------------ peak


def resolve_peak(backend_name: str, device: dict, runtime: dict | None, mfu_peak) -> dict:
    """The ``peak`` block: nominal TFLOP/s per dtype and the one MFU@nom uses, with its source."""
    if mfu_peak:
        return {"nominal_tflops": {"float16": mfu_peak, "bfloat16": mfu_peak}, "used_for_mfu_nom": NOMINAL_DTYPE,
                "value_tflops": float(mfu_peak), "source": "--mfu-peak (given on the command line)", "override": True}
    info = dict(device or {}, backend=backend_name)
    if runtime:
        info.update({k: runtime.get(k) for k in ("ai_core_num", "aic_frequency_mhz", "info_json_path")})
    nominal = {}
    for mode in MATH_MODES:
        v, _src = _peaks.nominal_peak_tflops(info, mode)
        if v is not None:
            nominal[mode] = v
    value, source = _peaks.nominal_peak_tflops(info, NOMINAL_DTYPE)
    return {"nominal_tflops": nominal, "used_for_mfu_nom": NOMINAL_DTYPE, "value_tflops": value, "source": source,
            "override": False}


# ------------------------------------------------------------------------------------------------ run


def _progress_line(k, total, case_id, impl, res):
    s = res.get("summary") or {}
    if res["status"] != "ok":
        return f"[{k}/{total}] case {case_id} {impl}: {res['status'].upper()} - {res.get('error')}"
    spread = s.get("repeat_spread")
    line = (f"[{k}/{total}] case {case_id} {impl}: {s['launches_per_iter']} kernel launch(es)/iter, kernel "
            f"{s['kernel_time_ns'] / 1e3:.2f} us, span {s['span_ns'] / 1e3:.2f} us"
            + (f", spread {spread:.1%}" if spread is not None else "")
            + (f", {res['attempts']} attempts" if res.get("attempts", 1) > 1 else ""))
    if spread is not None and spread > _kernels.SPREAD_LIMIT:
        line += f"  WARNING: repeat spread above {_kernels.SPREAD_LIMIT:.0%}"
    return line


def next_admitted(reserve: list, gate, skipped: list):
    """Pop the next case of ``reserve`` (CaseInfos in ranking order) that ``gate`` admits - verifying it first
    when it has no verify row - or None; the ones it refuses are appended to ``skipped`` (info, reason, mark)."""
    while reserve:
        nxt = reserve.pop(0)
        if gate is None:
            return nxt
        if gate.pending([nxt.case_id]):
            gate.verify([nxt.case_id])
        admitted, mark = gate.admits(nxt.case_id)
        if admitted:
            return nxt
        skipped.append((nxt, mark["reason"], mark))
    return None


def device_select(opts: Options, backend_name: str):
    """(device_id, source) as upstream: cli (--device), env (ASCEND_DEVICE_ID on npu), else auto (0)."""
    if opts.device_id is not None:
        return int(opts.device_id), "cli"
    env = os.environ.get("ASCEND_DEVICE_ID") if backend_name == "npu" else None
    if env not in (None, ""):
        try:
            return int(env), "env"
        except ValueError:
            raise UserError(f"ASCEND_DEVICE_ID={env!r} is not a device index - unset it or pass --device N") from None
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


def collect(opts: Options, log=None) -> dict:
    """Run the collection described by ``opts``; writes ``<output_dir>/performance.json`` and returns it.

    Raises UserError for bad options (see :func:`check_options`) before anything is measured; writes nothing when
    no case was measured (an interrupt before the first result), so an earlier performance.json stays."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    t_start = time.perf_counter()
    check_options(opts)
    output_dir = ensure_writable_dir(opts.output_dir, f"--output-dir {opts.output_dir}")
    keep_root = ensure_writable_dir(opts.keep_prof, f"--keep-prof {opts.keep_prof}") if opts.keep_prof else None
    opdir = OpDir(opts.op_dir)
    infos = opdir.describe_all()
    for need in ([opdir.model_py] + ([opdir.model_new_py] if opts.impl != "ref" else [])):
        if not os.path.exists(need):
            raise UserError(f"{need}: missing - run prepare_op_dir.py first (make prepare)")
    backend, reason, env_facts = select_backend(opts.backend, aic_metrics=opts.aic_metrics, msprof_path=opts.msprof)
    opts.device_id, dev_source = device_select(opts, backend.name)
    if opts.warmup is None:
        opts.warmup = CPU_DEFAULT_WARMUP if backend.name == "cpu" else DEFAULT_WARMUP
    if opts.repeats is None:
        opts.repeats = CPU_DEFAULT_REPEATS if backend.name == "cpu" else DEFAULT_REPEATS
    if opts.warmup < 0 or opts.repeats < 1:
        raise UserError(f"--warmup {opts.warmup} / --repeats {opts.repeats}: warmup must be >= 0 and repeats >= 1")
    log(f"backend: {backend.name} ({reason}); warmup {opts.warmup}, repeats {opts.repeats}")
    pmu = pmu_plan(backend.name, opts.pmu, opts.ncu, opts.ncu_cache_control, opts.flush_cache_mib,
                   opts.pmu_iterations, opts.case_timeout_s, log=log if opts.progress else None)
    if backend.name != "npu":  # probed first thing: a device run says at once whether counters can be read
        verdict = pmu.probe()
        log(f"PMU: {pmu.source} (--cache-control {pmu.cache_control})" if verdict["available"] else
            f"PMU: none - {verdict['reason']}")
    ff = load_flops(opdir)
    if ff is None:
        log(f"note: {opdir.flops_py} not found: cases ranked by input bytes and no MFU reported "
            "(write flops.py, step 3)")
    # ModelNew is timed only on cases verify passed (the reference alone needs no verdict)
    gate = None if opts.impl == "ref" else Gate(opdir, backend.name, backend.device_string(opts.device_id),
                                                seed=opts.seed, case_timeout_s=opts.case_timeout_s,
                                                forced=opts.unverified_ok, log=log)
    while True:  # each round verifies the selected cases that have no verify row yet, then selects again
        selected, skipped, selection = select_cases(infos, ff, opdir, opts, backend.name, gate)
        todo = gate.pending([i.case_id for i in selected]) if gate else []
        if not todo:
            break
        gate.verify(todo)
    if gate is not None:
        selection.update(verify_file=gate.path, verified_now=list(gate.verified_now),
                         unverified_ok=opts.unverified_ok)
        for info, why, mark in skipped:
            if mark is not None:
                log(f"case {info.case_id} not timed: {why}")
    if not selected:  # nothing would be measured: keep an earlier performance.json instead of an empty one
        why = "; ".join(f"case {i.case_id}: {r}" for i, r, _ in skipped[:4]) or "the case file has no case"
        raise UserError(f"{opdir.cases_path}: no case to measure on {backend.name} ({selection['rule']}: {why}) - "
                        "pick other --cases or another --backend")
    tracer = tracer_flops(opdir)
    verdicts = numerator_verdicts(opdir)
    flops = {}
    for info in selected:
        flops[info.case_id] = case_flops(ff, opdir, info, opts.seed)
        flops[info.case_id]["flops_tracer"] = tracer.get(info.case_id)
        flops[info.case_id].update(numerator_of(verdicts, info.case_id, ff))
    res = selection.get("reserve") or []
    log(f"cases: {selection['rule']}: {selection['order']}" +
        (f" (skipped {selection['skipped']})" if selection["skipped"] else "") +
        (f"; not selected (reserve, take a slot a case gives up; --cases picks them): {res[:12]}"
         f"{' ...' if len(res) > 12 else ''}" if res else ""))
    impls = ["ref", "asc"] if opts.impl == "both" else [opts.impl]
    if keep_root:  # attempts live beside their final place, so keeping one is a rename
        os.makedirs(os.path.join(keep_root, "prof"), exist_ok=True)
    work_root = tempfile.mkdtemp(prefix=".tmp-collect-", dir=os.path.join(keep_root, "prof") if keep_root else None)
    results, interrupted = {}, False
    total = len(selected) * len(impls)
    k = 0
    by_id = {i.case_id: i for i in infos}
    reserve = [by_id[c] for c in selection["reserve"]]
    try:
        queue = list(selected)
        while queue:
            info = queue.pop(0)
            for impl in impls:
                k += 1
                res = run_case_impl(backend, opdir, info.case_id, impl, opts, work_root)
                if impl == impls[-1]:  # the measured implementation (asc when requested): its counters
                    res["pmu_run"] = run_pmu(pmu, backend, opdir, info.case_id, impl, opts, res)
                res["prof_dir"] = keep_profile(res, keep_root, info.case_id, impl, output_dir) if keep_root else None
                results.setdefault(info.case_id, {})[impl] = res
                if opts.progress:
                    log(_progress_line(k, total, info.case_id, impl, res))
            nxt = None
            if reserve and any(r.get("status") == "rejected" for r in results[info.case_id].values()):
                nxt = next_admitted(reserve, gate, skipped)
            if nxt is not None:
                flops[nxt.case_id] = case_flops(ff, opdir, nxt, opts.seed)
                flops[nxt.case_id]["flops_tracer"] = tracer.get(nxt.case_id)
                flops[nxt.case_id].update(numerator_of(verdicts, nxt.case_id, ff))
                selected.append(nxt)
                queue.append(nxt)
                total += len(impls)
                log(f"case {info.case_id} rejected by the operator: its slot goes to case {nxt.case_id} "
                    "(next by the same ranking)")
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: writing what was measured so far")
    finally:
        close_workers()
        shutil.rmtree(work_root, ignore_errors=True)
    if interrupted and not results:
        log("interrupted before any case was measured: performance.json left as it was")
        raise KeyboardInterrupt
    ok = [r for per in results.values() for r in per.values() if r.get("device")]
    device = dict(ok[0]["device"]) if ok else {"backend": backend.name}
    runtime = next((r["runtime"] for per in results.values() for r in per.values() if r.get("runtime")), None)
    if backend.name == "npu":
        smi = (env_facts or {}).get("npu_smi") or []
        if smi and not device.get("soc_name"):
            pick = next((d for d in smi if d["npu_id"] == opts.device_id), smi[0])
            device.setdefault("name", pick["soc_name"])
            device["soc_name"] = pick["soc_name"]
            device["identity_source"] = "npu-smi info"
        if runtime:
            device["runtime"] = runtime
    peak = resolve_peak(backend.name, device, runtime, opts.mfu_peak)
    nominal = peak["value_tflops"] if opts.mfu else None
    # a case the verify gate refused is never timed and never a per_case row (no MFU row, no plot point): it is
    # listed, with verify's reason, under selection.not_verified only
    selection["not_verified"] = [{"case": i.case_id, "reason": why, "verify": mark}
                                 for i, why, mark in skipped if mark is not None]
    selection["search_json"] = opts.search_json
    per_case = [_perf.skipped_entry(i, why, verify=mark) for i, why, mark in skipped if mark is None]
    missing = [{"case": i.case_id, "impl": impl, "reason": "not run: the collection was interrupted"}
               for i in selected for impl in impls if impl not in results.get(i.case_id, {})]
    for info in selected:
        if info.case_id not in results:
            continue
        tf32 = (backend.name == "cuda" and (flops[info.case_id].get("compute_dtype") or info.compute_dtype)
                == "float32" and os.environ.get("TRITON_F32_DEFAULT", "tf32") != "ieee")
        entry = _perf.case_entry(info, results[info.case_id], flops.get(info.case_id) or {}, nominal, tf32,
                                 nominal_by_mode=peak["nominal_tflops"] if opts.mfu else None)
        if backend.name != "npu":  # npu counters come from msprof's own columns
            got = results[info.case_id][impls[-1]].get("pmu_run") or {}
            entry.update(pmu=got.get("pmu") if got.get("pmu") is not None else entry.get("pmu") or None,
                         pmu_source=got.get("pmu_source"),
                         pmu_unavailable=got.get("pmu_unavailable", pmu.probe()["reason"]))
            entry["flags"] += got.get("flags") or []
        if gate is not None:
            entry["verify"] = gate.admits(info.case_id)[1]
            if entry["verify"]["forced"]:
                entry["flags"].append(entry["verify"]["reason"])
        per_case.append(entry)
    for e in per_case:  # the case the (case, scale) search chose, with its origin; None otherwise
        e["search_origin"] = opts.search_origins.get(e["case"])
    run = {
        "task": opdir.op_name, "task_dir": opdir.path, "warmup": opts.warmup, "repeats": opts.repeats,
        "seed": opts.seed, "device_id": opts.device_id, "device_select_source": dev_source,
        "timing_method": next((r["timing_method"] for per in results.values() for r in per.values()
                               if r.get("status") == "ok"), backend.timing_method),
        "profiling_mode": "quick", "backend": backend.name, "backend_reason": reason, "environment": env_facts,
        "device": device, "compat": next((r["compat"] for per in results.values() for r in per.values()
                                          if r.get("compat")), None),
        "impl": opts.impl, "mfu": opts.mfu, "peak": peak, "flops_file": opdir.flops_py if ff else None,
        "kernel_parts": ff.kernel_parts if ff else None, "selection": selection, "retry": opts.retry,
        "flush_cache_mib": opts.flush_cache_mib, "pmu_collection": pmu.run_record(), "aic_metrics": opts.aic_metrics if backend.name == "npu" else None,
        "flags": (["interrupted: not every selected case was measured"] if interrupted else []) + list(opts.flags),
        "wall_s": time.perf_counter() - t_start,
    }
    if opts.mfu and peak["value_tflops"] is None:
        run["flags"].append(f"MFU@nom not reported: {peak['source']}")
    if opts.mfu and ff is None:
        run["flags"].append("MFU not reported: no flops.py in the work directory")
    header = provenance(_perf.TOOL, _perf.SCHEMA, device=device)
    report = _perf.build_report(header, run, per_case, impls, missing=missing)
    _perf.write_performance_json(output_dir, report)
    if missing or not report["n_cases_valid"]:  # make must redo this step (its stamp, if any, no longer holds)
        from mfulib.core.workdir_state import invalidate
        invalidate(opdir.path, "collect")
    if interrupted:
        raise KeyboardInterrupt
    return report
