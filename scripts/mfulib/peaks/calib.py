"""Measured peaks (step 5): per-dtype GEMM throughput and memory bandwidth of the device this process runs on.

This module is the calibration run: budget per math mode, the sweep per mode, bandwidth, nominal figures beside the
measured ones, and peak.json written through :mod:`mfulib.schemas.peak_json` (reader, validator and the per-device
cache live there). The idea is mamf-finder's (stas00/ml-engineering ``compute/accelerator/benchmarks/mamf-finder.py``):
the *achievable* matmul peak is the best throughput ``torch.mm`` reaches over a set of shapes, timed per iteration
with device events after a cache flush (:mod:`mfulib.peaks.gemm_timing`), the shapes found by a hill climb
(:mod:`mfulib.peaks.gemm_search`).

Method, per math mode (``float16``, ``bfloat16``, ``float32`` with TF32/HF32 off, ``tf32`` = fp32 inputs with
TF32 (CUDA) / HF32 (NPU) allowed, ``int8`` via ``torch._int_mm`` where it runs):

* per shape the statistic is the **median** iteration time; ``tflops = 2*m*n*k / median_ns / 1e3``;
* the peak is the best shape's median, after the three best shapes are re-timed with more iterations (so a lucky
  noisy median does not set the ceiling).

Bandwidth: a device-to-device copy of a large buffer (``dst.copy_(src)``), counting bytes read + bytes written,
median over iterations.

On CPU the same code times torch's CPU GEMM with ``time.perf_counter_ns`` on small shapes in a few seconds; the
result is labelled as CPU numbers and is never comparable with accelerator numbers (docs/ARCHITECTURE.md#backends).
"""
from __future__ import annotations

import math
import os
import time

from mfulib.core.definitions import MATH_MODES, OPS_MODES, canonical_mode
from mfulib.backends import backend_class, get_backend, resolve_backend
from mfulib.core.device import ClockSampler
from mfulib.core.errors import UserError
from mfulib.core.fmt import pct
from mfulib.peaks.gemm_search import Sweep, confirm_best, hill_climb, probe_layouts
from mfulib.core.definitions import MIB
from mfulib.peaks.gemm_timing import Bench, b_layouts, low_precision_support, math_mode, measure_bandwidth
from mfulib.core.jsonio import ensure_writable_dir, provenance, write_json_atomic
from mfulib.schemas import provenance as made
from mfulib.run.noise import native_noise_filter
from mfulib.schemas import peak_json
from mfulib.schemas.peak_json import METHOD_VERSION, SCHEMA, TOOL, cache_path, default_cache_dir, load_cached

DEFAULT_MODES = MATH_MODES

# Budget shares per task (unused time rolls over to the next task). fp32 is ~15x slower per FLOP on an H200, so
# it gets a larger share for the same number of shapes; int8 probes two B layouts first.
_TASK_WEIGHT = {"bfloat16": 0.19, "float16": 0.16, "float32": 0.21, "tf32": 0.12, "int8": 0.14,
                "float8_e4m3fn": 0.11, "bandwidth": 0.07}

# Seed shapes (m, n, k) for accelerators. Square powers of two (the usual benchmark), tall-k shapes (the best
# measured bf16 shapes: 2048x2048x13312 on an H100 in the ml-engineering MAMF table, docs/sources.md#mamf-finder;
# 4096x4096x12288 on an H200 in an earlier sweep of this project) and rectangular ones (1024x9216x14336, the H200
# fp8 best of that sweep).
ACCEL_SEEDS = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 8192), (4096, 4096, 12288),
               (4096, 4096, 16384), (2048, 2048, 13312), (8192, 8192, 4096), (2048, 8192, 8192),
               (8192, 2048, 8192), (6144, 6144, 6144), (3072, 3072, 12288), (1024, 9216, 14336),
               (5120, 5120, 10240), (4608, 4608, 9216))
# int8 / fp8: the best H200 shapes of bench/probe_lowp_gemm.py first
LOWP_SEEDS = ((8192, 8192, 8192), (12288, 12288, 12288), (8192, 8192, 16384), (16384, 8192, 8192),
              (4096, 4096, 4096)) + tuple(s for s in ACCEL_SEEDS if s not in ((8192, 8192, 8192), (4096, 4096, 4096)))
CPU_SEEDS = ((256, 256, 256), (512, 512, 512), (512, 512, 2048), (1024, 256, 1024), (1024, 1024, 1024))
# torch._int_mm on CPU is a reference kernel (~1e-3 TOPS on the CI machine: 1024^3 takes ~1.5 s), so one small shape
CPU_INT8_SEEDS = ((256, 256, 256),)
ACCEL_STEPS = (2048, 1024, 512, 256)
CPU_STEPS = (256, 128)

# A calibration is cached only while trustworthy: per mode the confirm run's iteration spread (p90 - p10) / median
# and the drift between the confirmed shape's sweep figure and its re-timed figure stay within these limits. CPU
# limits are wider (shared hosts); two CPU runs were seen to differ 2-4.5x, which these catch as drift or
# spread when it happens within a run.
TRUST_LIMITS = {"accelerator": {"spread": 0.10, "drift": 0.15}, "cpu": {"spread": 0.30, "drift": 0.30}}
REGIMES = ("burst", "sustained")
OPS_UNIT = {mode: "TOPS" for mode in OPS_MODES}


def default_budget_s(backend: str) -> float:
    """Default time budget for the measurements (:attr:`mfulib.backends.base.Backend.calib_budget_s`): 18 s on
    accelerators (under 30 s with start-up), 4 s on CPU."""
    return backend_class(backend).calib_budget_s


def parse_modes(text: str) -> list:
    """``"bf16,fp16,fp32,tf32,int8,fp8"`` -> canonical math modes (order kept, duplicates dropped)."""
    out = []
    for tok in filter(None, (t.strip().lower() for t in (text or "").split(","))):
        mode = canonical_mode(tok)
        if mode not in MATH_MODES:
            raise UserError(f"--dtypes: unknown {tok!r}; choose from bf16, fp16, fp32, tf32 (HF32 on NPU), int8, "
                            "fp8 (e4m3)")
        if mode not in out:
            out.append(mode)
    if not out:
        raise UserError("--dtypes: empty; e.g. --dtypes bf16,fp16,fp32")
    return out


def calibrate(backend: str, index: int = 0, modes=DEFAULT_MODES, budget_s: float | None = None,
              bandwidth: bool = True, progress=None, nominal=None, regime: str = "burst") -> dict:
    """Measure the peaks of device ``index`` of ``backend``; returns the body of peak.json (no provenance).

    ``progress(text)`` is called after every measured shape (labelled ``sweep``) and once per mode with the
    confirmed figure that is reported (labelled ``confirmed``, beside the sweep figure of that shape). ``nominal``
    is the nominal-peak dict recorded beside the measured ones (see :func:`nominal_block`). ``regime``: ``burst``
    (idle as long as busy after every timed burst: duty cycle <= 50%, the regime operators are profiled in) or
    ``sustained`` (back to back). Ctrl-C stops the sweep; what was measured is returned with ``"interrupted": true``.
    """
    if regime not in REGIMES:
        raise UserError(f"--regime {regime!r}: choose one of {', '.join(REGIMES)}")
    t0 = time.monotonic()
    budget_s = default_budget_s(backend) if budget_s is None else float(budget_s)
    dev = Bench(get_backend(backend), index)
    dev.regime = regime
    ident = dev.identity()
    accel = dev.backend.accelerator
    total_mem = ident.get("total_memory_bytes") or 0
    if not accel:
        max_operand_bytes, max_flop, lo, hi = 256 * MIB, 2 * 1024 ** 3 * 2, 128, 2048
        seeds, steps, target_ms = CPU_SEEDS, CPU_STEPS, 5.0
    else:
        # operands at most 1/4 of device memory (and 8 GiB); one iteration at most ~5 TFLOP (fp32 ~0.1 s on an H200)
        max_operand_bytes = int(min(8 * 1024 ** 3, total_mem / 4 or 8 * 1024 ** 3))
        max_flop, lo, hi = 5e12, 256, 32768
        seeds, steps, target_ms = ACCEL_SEEDS, ACCEL_STEPS, 15.0
    clocks_before = dev.clocks()
    result = {"backend": backend, "accelerator": accel, "device": ident,
              "label": (f"{ident['name']} ({backend}:{index})" if accel else
                        f"CPU {ident['name']} (torch CPU GEMM, {ident.get('threads')} threads) - not an accelerator"),
              "method": method_block(dev, target_ms), "measured": {}, "peak_tflops": {}, "peak_tops": {},
              "errors": {}, "budget_s": budget_s, "interrupted": False}
    tasks = list(modes) + (["bandwidth"] if bandwidth else [])
    weights = {t: _TASK_WEIGHT[t] for t in tasks}
    interrupted = False
    sampler = ClockSampler((lambda: dev.backend.read_clocks(index)) if dev.backend.clock_tool else None)
    try:
        with sampler:
            _warm_up(dev, 0.3 if accel else 0.05)
            for i, task in enumerate(tasks):
                left = budget_s - (time.monotonic() - t0)
                share = left * weights[task] / sum(weights[t] for t in tasks[i:])
                if task == "bandwidth":
                    _bandwidth_task(dev, result, total_mem, progress)
                    continue
                _mode_task(dev, task, result, share, progress,
                           (seeds, steps, target_ms, max_operand_bytes, max_flop, lo, hi))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        dev.release()
    result["interrupted"] = interrupted
    result["clocks_before"], result["clocks_after"] = clocks_before, dev.clocks()
    result["elapsed_s"] = time.monotonic() - t0
    result["clocks"] = sampler.summary()
    result["regime"] = regime_block(dev, result["elapsed_s"])
    result["trust"] = trust_block(result)
    if nominal:
        result["nominal"] = nominal
        _fractions(result)
    return result


def _bandwidth_task(dev: Bench, result: dict, total_mem: int, progress) -> None:
    t_task = time.monotonic()
    nbytes = 64 * MIB if not dev.backend.accelerator else int(min(2 * 1024 ** 3, (total_mem or 8 * 1024 ** 3) / 8))
    try:
        bw = measure_bandwidth(dev, nbytes)
        bw["elapsed_s"] = time.monotonic() - t_task
        result["bandwidth"] = bw
        result["bandwidth_gbps"] = bw["gbps"]
    except Exception as exc:
        result["errors"]["bandwidth"] = f"{type(exc).__name__}: {exc}"
    if progress:
        progress(f"bandwidth: {result.get('bandwidth_gbps', float('nan')):.0f} GB/s")


def _mode_task(dev: Bench, task: str, result: dict, share: float, progress, geometry) -> None:
    """Sweep + confirm one math mode; writes ``result["measured"][task]`` or ``result["errors"][task]``."""
    seeds, steps, target_ms, max_operand_bytes, max_flop, lo, hi = geometry
    accel = dev.backend.accelerator
    t_task, busy0 = time.monotonic(), dev.busy_ns
    deadline = t_task + max(share, 0.0)
    if task == "tf32" and dev.backend.reduced_fp32_matmul is None:
        result["errors"][task] = (f"not applicable: torch {dev.backend.name.upper()} GEMM has no TF32 mode; fp32 cases use the "
                                  "float32 peak")
        return
    ok, why = low_precision_support(dev, task)
    if not ok:
        result["errors"][task] = why
        return
    if task in ("int8", "float8_e4m3fn"):
        seeds, steps = (LOWP_SEEDS, steps) if accel else (CPU_INT8_SEEDS, ())
    unit = OPS_UNIT.get(task, "TFLOP/s")
    try:
        with math_mode(dev, task) as desc:
            # keep ~15% of the share for re-timing the best three shapes
            sweep = Sweep(dev, task, target_ms, max_operand_bytes, max_flop,
                          deadline=deadline - 0.15 * max(share, 0.0),
                          on_result=(lambda sw, r: progress(_progress_text(sw, r, unit))) if progress else None)
            probe = probe_layouts(sweep, seeds, b_layouts(task))
            hill_climb(sweep, seeds, steps, lo, hi)
            if not sweep.results:
                first = next(iter(probe["errors"].values()), None) or next(iter(sweep.errors.values()), None)
                result["errors"][task] = f"not measured: {first or 'no shape fitted the budget'}"
                return
            best = confirm_best(sweep, top=3, target_ms=2 * target_ms)
    except UserError as exc:
        result["errors"][task] = str(exc)
        return
    elapsed = time.monotonic() - t_task
    drift = (best["sweep_tflops"] - best["tflops"]) / best["tflops"]
    entry = {"peak_tflops": best["tflops"], "unit": unit,
             "best_shape": {"m": best["m"], "n": best["n"], "k": best["k"]}, "confirm": best,
             "sweep_tflops": best["sweep_tflops"], "spread": best.get("spread"), "sweep_drift": drift,
             "b_layout": sweep.b_layout, "layout_probe": probe,
             "math_mode": desc, "n_shapes": len(sweep.results), "elapsed_s": elapsed,
             "busy_s": (dev.busy_ns - busy0) / 1e9, "duty_cycle": ((dev.busy_ns - busy0) / 1e9 / elapsed
                                                                     if elapsed > 0 else None),
             "shapes": sorted(sweep.results.values(), key=lambda r: -r["tflops"]),
             "shape_errors": {"x".join(map(str, s)): e for s, e in sweep.errors.items()}}
    if task in OPS_MODES:
        entry["peak_tops"] = best["tflops"]
        result["peak_tops"][task] = best["tflops"]
    result["measured"][task] = entry
    result["peak_tflops"][task] = best["tflops"]
    if progress:
        sp = best.get("spread")
        progress(f"{task}: confirmed {_g(best['tflops'])} {unit} @ {best['m']}x{best['n']}x{best['k']} "
                 f"(B {sweep.b_layout}-major; this shape's sweep figure {_g(best['sweep_tflops'])}; "
                 f"spread {pct(sp, 1)}) - reported")


def _progress_text(sweep: Sweep, r: dict, unit: str = "TFLOP/s") -> str:
    b = sweep.best()[0]
    return (f"{sweep.mode}: sweep {len(sweep.results)} shapes, best {_g(b['tflops'])} {unit} @ "
            f"{b['m']}x{b['n']}x{b['k']} (last {r['m']}x{r['n']}x{r['k']} {_g(r['tflops'])}; B {sweep.b_layout}-major)")


def _g(x: float) -> str:
    """One decimal for accelerator-scale figures, three significant digits below 1 (CPU figures are not 0.0)."""
    return f"{x:.3g}" if 0 < abs(x) < 1 else f"{x:.1f}"


def regime_block(dev: Bench, elapsed_s: float) -> dict:
    """Which load regime the numbers are: ``burst`` (idle as long as busy after each timed burst, duty cycle
    <= 50%) or ``sustained`` (back to back; always on CPU), ``requested`` (what --regime asked), with the duty
    cycle measured over the whole run (device busy time of timed + warm-up iterations / wall time)."""
    busy_s = dev.busy_ns / 1e9
    burst = dev.regime == "burst" and dev.backend.idle_between_bursts
    return {"kind": "burst" if burst else "sustained", "requested": dev.regime,
            "duty_cycle_max": 0.5 if burst else 1.0,
            "duty_cycle_measured": busy_s / elapsed_s if elapsed_s > 0 else None, "busy_s": busy_s,
            "why": ("timed bursts separated by as much idle time (gemm_timing.cool_down): the regime operators are "
                    "profiled in; an H200 under sustained load hits its power cap and runs ~15% slower"
                    if burst else
                    f"{dev.backend.name.upper()}: no idle time inserted (no power-capped clocks to protect)"
                    if not dev.backend.idle_between_bursts else
                    "back-to-back load (--regime sustained): the power-capped steady state")}


def trust_block(result: dict) -> dict:
    """Whether this calibration may be cached: every measured mode's confirm spread and sweep drift (and the
    bandwidth spread) within :data:`TRUST_LIMITS`; ``untrusted`` lists what exceeded them."""
    lim = TRUST_LIMITS["accelerator" if result.get("accelerator") else "cpu"]
    bad, spreads, drifts = [], {}, {}
    for mode, m in result["measured"].items():
        spreads[mode], drifts[mode] = m.get("spread"), m.get("sweep_drift")
        if m.get("spread") is not None and m["spread"] > lim["spread"]:
            bad.append(f"{mode}: spread {m['spread']:.1%} > {lim['spread']:.0%}")
        if m.get("sweep_drift") is not None and abs(m["sweep_drift"]) > lim["drift"]:
            bad.append(f"{mode}: sweep vs confirmed {m['sweep_drift']:+.1%} (limit {lim['drift']:.0%})")
    bw = result.get("bandwidth") or {}
    if bw.get("spread") is not None:
        spreads["bandwidth"] = bw["spread"]
        if bw["spread"] > lim["spread"]:
            bad.append(f"bandwidth: spread {bw['spread']:.1%} > {lim['spread']:.0%}")
    return {"trusted": not bad and not result.get("interrupted"), "untrusted": bad, "max_spread": lim["spread"],
            "max_drift": lim["drift"], "spreads": spreads, "drifts": drifts,
            "spread_definition": "(p90 - p10) / median of the confirm run's iteration times",
            "drift_definition": "(sweep figure - confirmed figure) / confirmed figure of the reported shape"}


def _warm_up(dev: Bench, seconds: float):
    """Run GEMMs for ``seconds`` so clocks leave idle (an H200 idled at 345 MHz SM clock when measured)."""
    torch = dev.torch
    accel = dev.backend.accelerator
    dtype = torch.bfloat16 if accel else torch.float32
    n = 4096 if accel else 512
    a = torch.randn(n, n, dtype=dtype, device=dev.device)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(10):
            torch.mm(a, a)
        dev.backend.sync()


def method_block(dev: Bench, target_ms: float) -> dict:
    return {"method_version": METHOD_VERSION,
            "gemm": ("torch.mm(A[m,k], B[k,n], out=C) on torch.randn data; int8: torch._int_mm on randint (NPU: "
                     "torch_npu.npu_quant_matmul, scale 1, bf16 out); fp8 e4m3: torch._scaled_mm (scales 1, bf16 "
                     "out); B row- or column-major per mode, the faster of both for int8 (measured.<mode>.b_layout)"),
            "timing": dev.backend.event_timing,
            "cache_flush": f"zero a {dev.flush_bytes // MIB} MiB buffer before every timed iteration (untimed)",
            "flush_cache_mib": dev.flush_bytes / MIB,
            "per_shape_statistic": "median iteration time after warm-up; tflops = 2*m*n*k / median_ns / 1e3",
            "peak": ("max over shapes after re-timing the best 3 with more iterations (the confirmed figure is "
                     "reported; its shape's sweep figure and the confirm spread are kept beside it)"),
            "search": "seed shapes + coordinate hill climb on m, n, k within the time budget",
            "target_timed_ms_per_shape": target_ms,
            "idea": "mamf-finder (stas00/ml-engineering compute/accelerator/benchmarks/mamf-finder.py)"}


def nominal_block(ident: dict) -> dict:
    """Nominal (datasheet / formula) dense peaks for the device, from :mod:`mfulib.core.nominal_peaks`, recorded beside the
    measured ones: ``{"tflops": {mode: value}, "bandwidth_gbps": value|None, "source": text}``."""
    try:
        from mfulib.core import nominal_peaks as peaks
    except ImportError as exc:  # pragma: no cover - the module is part of the package
        return {"tflops": {}, "bandwidth_gbps": None, "source": f"mfulib.core.nominal_peaks unavailable ({exc})"}
    return peaks.nominal_for_identity(ident)


def _fractions(result: dict) -> None:
    nom = (result.get("nominal") or {}).get("tflops") or {}
    for mode, m in result["measured"].items():
        if nom.get(mode):
            m["fraction_of_nominal"] = m["peak_tflops"] / nom[mode]
    nbw = (result.get("nominal") or {}).get("bandwidth_gbps")
    if nbw and result.get("bandwidth"):
        result["bandwidth"]["fraction_of_nominal"] = result["bandwidth_gbps"] / nbw


def check_output_path(output: str) -> None:
    """UserError unless ``output`` can be written as a file (not a directory; folder creatable and writable).
    Called before measuring so a bad -o costs no measurement."""
    if os.path.isdir(output):
        raise UserError(f"-o {output}: is a directory - give a file name, e.g. -o {os.path.join(output, 'peak.json')}")
    ensure_writable_dir(os.path.dirname(os.path.abspath(output)), f"-o {output}")


def run_calibration(output: str, backend: str = "auto", index: int = 0, modes=DEFAULT_MODES,
                    budget_s: float | None = None, bandwidth: bool = True, cache: str = "use",
                    cache_dir: str | None = None, max_age_days: float = 14.0, progress=None,
                    filter_noise: bool | None = None, log=print, regime: str = "burst") -> dict:
    """Calibrate (or reuse the per-device cache) and write peak.json to ``output``; returns what was written.

    ``cache``: ``use`` (reuse a valid cached result, else measure and store), ``refresh`` (measure and store),
    ``off`` (measure, leave the cache alone). A calibration whose ``trust`` block says untrusted (large confirm
    spread or sweep drift, :func:`trust_block`) is written to ``output`` but not stored in the cache, and a cached
    one that is untrusted is never reused. ``filter_noise``: drop known-harmless native warnings from fds 1/2
    while measuring (None: on the NPU only, where CANN prints them). ``regime``: see :func:`calibrate`.

    Raises UserError before anything is measured for a budget that is not a finite number > 0, a max age that is
    NaN or negative, or an ``output`` that cannot be written (a directory, below a file, not writable).
    """
    if budget_s is not None and not (isinstance(budget_s, (int, float)) and math.isfinite(budget_s) and budget_s > 0):
        raise UserError(f"--budget-s {budget_s}: must be > 0 seconds and finite (e.g. --budget-s 20)")
    if not max_age_days >= 0:  # NaN fails too
        raise UserError(f"--max-age-days {max_age_days}: must be >= 0 (inf: any age)")
    check_output_path(output)
    be, why = resolve_backend(backend)
    ident = get_backend(be).device_identity(index)
    cache_dir = cache_dir or default_cache_dir()
    cpath = cache_path(cache_dir, ident)
    if regime not in REGIMES:
        raise UserError(f"--regime {regime!r}: choose one of {', '.join(REGIMES)}")
    with peak_json.cache_lock(cpath, enabled=cache != "off"):  # batch workers on same-model devices: one measures
        return _reuse_or_measure(output, be, why, ident, index, cpath, modes, budget_s, bandwidth, cache, max_age_days,
                                 progress, filter_noise, log, regime)


def _reuse_or_measure(output, be, why, ident, index, cpath, modes, budget_s, bandwidth, cache, max_age_days, progress,
                      filter_noise, log, regime):
    """run_calibration's body under the cache lock: reuse the valid cached result, else measure (and store)."""
    cached, reason = (None, "cache off") if cache != "use" else load_cached(cpath, ident, modes, bandwidth,
                                                                           max_age_days, regime)
    head = provenance(TOOL, SCHEMA, device=ident)
    head[made.KEY] = made.made_from(os.path.dirname(os.path.abspath(output)), [], {
        "backend": be, "device": index, "modes": list(modes), "regime": regime, "bandwidth": bool(bandwidth),
        "budget_s": budget_s}, step="peak")
    if cached is not None:
        log(f"peak_calib: reusing {cpath}: {reason} (--cache refresh re-measures)")
        body = {k: v for k, v in cached.items() if k not in head}
        out = {**head, **body, "cache": {"hit": True, "path": cpath, "reason": reason, "stored": True,
                                          "not_stored_why": None, "measured_at": cached.get("created_at"),
                                          "measured_by": cached.get("command_line")}}
        write_json_atomic(output, out)
        return out
    log(f"peak_calib: backend {be} ({why}); device {ident['name']}; measuring ({reason})")
    nominal = nominal_block(ident)
    noisy = backend_class(be).native_noise if filter_noise is None else filter_noise
    with native_noise_filter(enabled=noisy) as noise:
        body = calibrate(be, index, modes, budget_s, bandwidth, progress, nominal, regime)
    out = {**head, "backend_reason": why, **body, "software": peak_json.software(ident),
           "noise_filtered": noise.summary(),
           "cache": {"hit": False, "path": cpath if cache != "off" else None, "reason": reason,
                     "measured_at": None, "measured_by": None}}  # this run measured it: the header says when, how
    trust = out["trust"]
    out["cache"]["stored"] = cache != "off" and trust["trusted"]
    out["cache"]["not_stored_why"] = (None if out["cache"]["stored"] else "--cache off" if cache == "off" else
                                      "interrupted run" if out["interrupted"] else
                                      "untrusted: " + "; ".join(trust["untrusted"]))
    if cache != "off" and not trust["trusted"]:
        out["cache"]["path"] = None
        log(f"peak_calib: not caching this calibration ({out['cache']['not_stored_why']}); the next peak_calib.py "
            "run measures again" + ("" if backend_class(be).accelerator else " (make keeps a CPU calibration: its numbers "
                                     "only validate the pipeline)"))
    write_json_atomic(output, out)
    if out["cache"]["stored"]:
        try:
            peak_json.write_cache(cpath, out)
        except OSError as exc:  # a read-only home must not fail the run
            log(f"peak_calib: could not write the cache {cpath}: {exc}")
    return out
