#!/usr/bin/env python3
"""Check the low-precision peaks of peak_calib on a CUDA GPU against wide sweeps in the same process.

One process, one call (< 5 min on an H200):

1. the default calibration exactly as ``peak_calib.py`` runs it (every dtype, bandwidth, burst regime), into a
   fresh cache directory under ``--out`` (so it shows whether the run was trustworthy enough to be cached), timed
   from process start and on its own;
2. a wide ``torch._int_mm`` sweep: ~20 shapes x both B layouts (row-major [k, n] and column-major ``randint(n,
   k).t()``), timed by the calibration's own per-shape routine (events per iteration, cache flush, burst duty
   cycle), the best three per layout re-timed as the calibration re-times its own;
3. the same for fp8 e4m3 ``torch._scaled_mm`` (B column-major, the only layout it takes) where available.

Prints and writes ``<out>/bench_peaks_h200.json`` (+ ``<out>/peak.json``): calibrated int8 TOPS vs the best sweep
figure (done when the ratio is >= 0.90), fp8 likewise (reported), the B layout each chose, regime, sampled SM
clocks and throttle reasons, confirm spreads, trust, and the calibration's wall time.

    python3 bench/bench_peaks_h200.py --out "$OUT"
"""
import argparse
import json
import os
import sys
import time

T_PROCESS = time.monotonic()
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))

from mfulib.peaks import calib  # noqa: E402
from mfulib import backends
from mfulib.core import device
from mfulib.peaks import gemm_search
from mfulib.peaks import gemm_timing
from mfulib.report import tables as report
from mfulib.core.jsonio import provenance, write_json_atomic  # noqa: E402

INT8_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 8192), (8192, 8192, 16384),
               (12288, 12288, 12288), (1024, 9216, 14336), (6144, 6144, 6144), (10240, 10240, 10240),
               (8192, 16384, 8192), (4096, 4096, 16384), (8192, 8192, 4096), (2048, 8192, 8192),
               (12288, 12288, 8192), (16384, 16384, 8192), (8192, 8192, 12288), (6144, 12288, 12288),
               (4096, 16384, 16384), (14336, 14336, 14336), (16384, 16384, 16384), (5120, 5120, 10240))
FP8_SHAPES = ((8192, 8192, 8192), (16384, 8192, 8192), (8192, 8192, 16384), (12288, 12288, 12288),
              (1024, 9216, 14336), (4096, 4096, 4096), (10240, 10240, 10240), (16384, 16384, 8192),
              (6144, 6144, 6144), (14336, 14336, 14336), (8192, 16384, 8192), (16384, 16384, 16384))
MIN_RATIO = 0.90


def sweep(dev, mode, shapes, layout, target_ms, max_bytes):
    """Every shape once with B in ``layout``, then the best three re-timed (gemm_search.confirm_best)."""
    t0 = time.monotonic()
    sw = gemm_search.Sweep(dev, mode, target_ms, max_bytes, 2e13, b_layout=layout)
    for s in shapes:
        sw.measure(s)
    best = gemm_search.confirm_best(sw, top=3, target_ms=2 * target_ms) if sw.results else None
    return {"layout": layout, "best": best, "n_shapes": len(sw.results), "elapsed_s": time.monotonic() - t0,
            "errors": {"x".join(map(str, s)): e for s, e in sw.errors.items()},
            "shapes": sorted(({"m": r["m"], "n": r["n"], "k": r["k"], "tflops": r["tflops"], "spread": r.get("spread")}
                              for r in sw.results.values()), key=lambda r: -r["tflops"])}


def compare(peak, mode, sweeps):
    """Calibrated figure of ``mode`` vs the best sweep figure over layouts."""
    m = peak["measured"].get(mode)
    bests = [(s["best"]["tflops"], s["layout"]) for s in sweeps if s["best"]]
    top = max(bests) if bests else None
    ratio = m["peak_tflops"] / top[0] if (m and top) else None
    return {"mode": mode, "calibrated": m and m["peak_tflops"], "unit": m and m["unit"],
            "calibrated_b_layout": m and m["b_layout"], "calibrated_shape": m and m["best_shape"],
            "calibrated_spread": m and m.get("spread"), "layout_probe": m and m.get("layout_probe"),
            "sweep_best": top and top[0], "sweep_best_layout": top and top[1],
            "sweep_best_by_layout": {s["layout"]: s["best"] and s["best"]["tflops"] for s in sweeps},
            "ratio": ratio, "error": peak["errors"].get(mode)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_out"), help="output directory (default: $OUT)")
    ap.add_argument("--backend", default="auto", help="auto|cuda (npu/cpu run too, as a smoke test)")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--target-ms", type=float, default=15.0, help="timed work per sweep shape")
    ap.add_argument("--small", action="store_true", help="tiny shapes (CPU smoke test; not the criterion)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    backend, why = backends.resolve_backend(args.backend)

    t_cal = time.monotonic()
    peak = calib.run_calibration(os.path.join(args.out, "peak.json"), backend=backend, index=args.device,
                                 cache="refresh", cache_dir=os.path.join(args.out, "cache"),
                                 progress=lambda s: print(s, file=sys.stderr, flush=True),
                                 log=lambda s: print(s, file=sys.stderr, flush=True))
    calib_s = time.monotonic() - t_cal
    process_s = time.monotonic() - T_PROCESS
    print(report.peak_table(peak), flush=True)

    dev = gemm_timing.Bench(backends.get_backend(backend), args.device)
    total = dev.identity().get("total_memory_bytes") or 8 * 1024 ** 3
    max_bytes = int(min(8 * 1024 ** 3, total / 4)) if dev.backend.accelerator else 64 << 20
    int8_shapes = ((256, 256, 256), (512, 256, 256)) if args.small else INT8_SHAPES
    fp8_shapes = ((256, 256, 256),) if args.small else FP8_SHAPES
    calib._warm_up(dev, 0.3 if dev.backend.accelerator else 0.05)
    sweeps = {"int8": [], "float8_e4m3fn": []}
    with device.ClockSampler((lambda: dev.backend.read_clocks(args.device)) if dev.backend.clock_tool else None) \
            as sampler:
        for mode, shapes in (("int8", int8_shapes), ("float8_e4m3fn", fp8_shapes)):
            ok, note = gemm_timing.low_precision_support(dev, mode)
            if not ok:
                print(f"{mode}: {note}", file=sys.stderr)
                continue
            for layout in gemm_timing.b_layouts(mode):
                print(f"sweep {mode} B {layout}-major: {len(shapes)} shapes", file=sys.stderr, flush=True)
                sweeps[mode].append(sweep(dev, mode, shapes, layout, args.target_ms, max_bytes))
    dev.release()

    rows = [compare(peak, mode, sweeps[mode]) for mode in ("int8", "float8_e4m3fn")]
    int8_ok = rows[0]["ratio"] is not None and rows[0]["ratio"] >= MIN_RATIO
    result = {**provenance("bench_peaks_h200", 1, device=peak.get("device")), "backend": backend,
              "backend_reason": why, "calibration_s": calib_s, "process_s_at_calibration_end": process_s,
              "calibration_elapsed_s": peak.get("elapsed_s"), "budget_s": peak.get("budget_s"),
              "min_ratio_int8": MIN_RATIO, "int8_within_10pct": int8_ok, "rows": rows,
              "regime": peak.get("regime"), "trust": peak.get("trust"), "cache": peak.get("cache"),
              "calibration_clocks": {k: v for k, v in (peak.get("clocks") or {}).items() if k != "samples"},
              "sweep_clocks": {k: v for k, v in sampler.summary().items() if k != "samples"},
              "peak_tflops": peak.get("peak_tflops"), "peak_tops": peak.get("peak_tops"),
              "errors": peak.get("errors"), "sweeps": sweeps}
    write_json_atomic(os.path.join(args.out, "bench_peaks_h200.json"), result)

    print(f"\ncalibration: {calib_s:.1f} s (its own elapsed {peak.get('elapsed_s', 0):.1f} s, budget "
          f"{peak.get('budget_s')} s); {process_s:.1f} s from process start")
    for r in rows:
        if r["calibrated"] is None:
            print(f"{r['mode']}: not calibrated - {r['error']}")
            continue
        g = calib._g
        print(f"{r['mode']}: calibrated {g(r['calibrated'])} {r['unit']} (B {r['calibrated_b_layout']}, shape "
              f"{'x'.join(str(r['calibrated_shape'][c]) for c in 'mnk')}, spread "
              f"{(r['calibrated_spread'] or 0):.1%}; probe {r['layout_probe'] and r['layout_probe'].get('tflops')}) "
              f"vs sweep best {g(r['sweep_best'] or 0)} (B {r['sweep_best_layout']}; by layout "
              f"{ {k: g(v) if v else v for k, v in r['sweep_best_by_layout'].items()} }): ratio "
              f"{(r['ratio'] or 0):.3f}")
    reg, clk, tr = peak.get("regime") or {}, result["calibration_clocks"], peak.get("trust") or {}
    print(f"regime: {reg.get('kind')} (duty cycle measured {reg.get('duty_cycle_measured') or 0:.0%}, max "
          f"{reg.get('duty_cycle_max')}); SM clock during calibration {clk.get('sm_clock_mhz')}; throttle reasons "
          f"seen {clk.get('throttle_reasons_seen')}; during the sweeps {result['sweep_clocks'].get('sm_clock_mhz')} "
          f"{result['sweep_clocks'].get('throttle_reasons_seen')}")
    print(f"trust: {tr.get('trusted')} {tr.get('untrusted')}; spreads "
          f"{ {k: round(v, 4) for k, v in (tr.get('spreads') or {}).items() if v is not None} }; cache stored: "
          f"{(peak.get('cache') or {}).get('stored')}")
    print(("PASS" if int8_ok else "FAIL") + f": calibrated int8 >= {MIN_RATIO:.0%} of the best torch._int_mm sweep "
          "figure; fp8 " + ("reported" if rows[1]["calibrated"] else f"not calibrated ({rows[1]['error']})"))
    print(json.dumps({"clocks_before": peak.get("clocks_before"), "clocks_after": peak.get("clocks_after")}))
    return 0 if int8_ok else 1


if __name__ == "__main__":
    sys.exit(main())
