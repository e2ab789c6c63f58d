#!/usr/bin/env python3
"""Measure the achievable peaks of this device (step 5 of triton-mfu-analyzer) -> peak.json.

Per math mode (bf16, fp16, fp32 with TF32/HF32 off, tf32 = fp32 with TF32 (CUDA) / HF32 (NPU) allowed, int8 via
torch._int_mm (NPU: torch_npu.npu_quant_matmul) in TOPS, fp8 e4m3 via torch._scaled_mm on CUDA capability >= 8.9;
"not available" with the reason elsewhere) a GEMM sweep - a dozen seed shapes refined by a hill climb on m, n, k - timed per iteration
with device events after a cache flush; the best shape's median is the achievable peak (mamf-finder's idea, in
seconds). Memory bandwidth comes from a large device-to-device copy. peak.json also records the nominal dense
peaks (with their source), the device identity, the regime (timed bursts at <= 50% duty cycle by default, or
--regime sustained), the SM clocks and throttle reasons sampled during the run, every shape timed and how long it
took. On a terminal one progress bar counts the shapes timed; in a log (make's output) nothing is printed per
shape. The result table at the end labels each mode's reported, re-timed figure "confirmed" beside its sweep figure.

MFU against the nominal fp16 peak makes an fp32 case look ~4x worse than it is (910B2C: fp16/bf16 ~314-320, fp32
~85 TFLOP/s); mfu_decompose.py reads this file to judge each case against its own dtype's ceiling.

Results are cached per device model (<cache-dir>/peak-<backend>-<device>.json) and reused while the device,
software versions, method, regime and requested modes match, the calibration was trustworthy (confirm spread
(p90-p10)/median and sweep-vs-confirmed drift within limits; a noisy run is never cached) and the cache is younger
than --max-age-days.

On the NPU, CANN prints many "tiling struct ... is conflict" warnings while GEMM tilings are looked up; they do not
affect the measurement and are filtered from the output (counted in peak.json "noise_filtered"); --show-noise
keeps them. On a CPU the numbers are torch CPU GEMM numbers, labelled so, never accelerator numbers.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mfulib.peaks import calib  # noqa: E402
from mfulib.peaks.progress import console_progress  # noqa: E402
from mfulib.core import cli  # noqa: E402


def build_parser():
    p = cli.parser(__doc__, prog="peak_calib.py")
    p.add_argument("-o", "--output", default="peak.json", help="where to write the result")
    p.add_argument("--backend", default="auto", help="auto|npu|cuda|cpu")
    p.add_argument("--device", type=int, default=0, help="device index")
    p.add_argument("--dtypes", default="bf16,fp16,fp32,tf32,int8,fp8",
                   help="math modes to measure: bf16, fp16, fp32 (TF32/HF32 off), tf32 (TF32/HF32 allowed), int8 "
                        "(TOPS), fp8 (e4m3; CUDA capability >= 8.9)")
    p.add_argument("--regime", choices=("burst", "sustained"), default="burst",
                   help="burst: idle as long as busy after every timed burst (duty cycle <= 50%%, the regime "
                        "operators are profiled in); sustained: back to back (power-capped steady state)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="time budget for the measurements in seconds (each mode still times at least one shape); "
                        "none = 18 on an accelerator, 4 on CPU")
    p.add_argument("--no-bandwidth", action="store_true", help="skip the device-copy bandwidth measurement")
    p.add_argument("--cache", choices=("use", "refresh", "off"), default="use",
                   help="use: reuse a valid cached calibration of this device, else measure and store; "
                        "refresh: measure and store; off: measure, leave the cache alone")
    p.add_argument("--cache-dir", default=None,
                   help="cache directory; none = $MFU_PEAK_CACHE_DIR, else $XDG_CACHE_HOME/triton-mfu-analyzer, "
                        "else ~/.cache/triton-mfu-analyzer")
    p.add_argument("--max-age-days", type=float, default=14.0, help="reuse a cached calibration up to this age")
    p.add_argument("--show-noise", action="store_true",
                   help="do not filter known-harmless native warnings (CANN 'tiling struct ... is conflict')")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar (there is none without a terminal)")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    modes = calib.parse_modes(args.dtypes)
    progress = console_progress(sys.stderr, quiet=args.quiet)
    try:
        out = calib.run_calibration(args.output, backend=args.backend, index=args.device, modes=modes,
                                    budget_s=args.budget_s, bandwidth=not args.no_bandwidth, cache=args.cache,
                                    cache_dir=args.cache_dir, max_age_days=args.max_age_days, progress=progress,
                                    filter_noise=None if not args.show_noise else False,
                                    log=lambda s: print(s, file=sys.stderr), regime=args.regime)
    finally:
        if progress:
            progress.close()
    from mfulib.report import tables as report
    print(report.peak_table(out))
    print(f"wrote {os.path.abspath(args.output)}")
    return 130 if out.get("interrupted") else 0


if __name__ == "__main__":
    cli.run_main(main)
