#!/usr/bin/env python3
"""Record the CUDA profile fixtures of ``--from-prof`` on a real GPU (the H200): torch.profiler chrome traces and
``ncu --csv`` pages of a small bundled operator, written under ``$OUT/profiles/cuda/`` (copy that folder to
``tests/fixtures/profiles/cuda/``; tests/test_from_prof_recorded.py reads it and plants the faults itself).

  python3 bench/record_profile_fixtures.py --out $OUT/profiles/cuda        # on the GPU machine (~1-2 min)

What it writes (traces gzip-compressed; few kernels, few iterations):

* ``tool_ranges.json.gz``   prime call, then WARMUP + REPEATS iterations each in ``record_function("mfu::iter::<i>")``
                            and ended by ``torch.cuda.synchronize()`` (this tool's own range names);
* ``plain.json.gz``         the same loop without any range: a plain user trace;
* ``flush_zero.json.gz``    a do_bench-style L2 flush inside the window: ``cache.zero_()`` on a 256 MiB int32 buffer
                            before the forward in every iteration (``record_shapes=False``, as users record);
* ``flush_zero_shapes.json.gz``  the same with ``record_shapes=True`` (the fill's buffer size is in the trace);
* ``autotune_plain.json.gz`` an inline ``@triton.autotune`` kernel (3 configs of BLOCK / num_warps) with no priming
                            call: the autotuner's benchmark launches sit before the first iteration, no ranges;
* ``autotune_ranges.json.gz`` the same with this tool's ranges: iteration 0 holds the autotuning;
* ``ncu_raw.csv``           ``ncu --csv --page raw --print-units base --clock-control none --metrics <M>`` of the
                            plain loop (stdout as captured: ==PROF== lines and program output interleaved);
* ``ncu_details.csv``       ``ncu --csv --page details --print-units base --clock-control none --metrics <M>
                            --section SpeedOfLight`` of the flush loop (metric rows and the section's rule rows);
  <M> = gpu__time_duration.sum, sm__throughput.avg.pct_of_peak_sustained_elapsed,
        dram__throughput.avg.pct_of_peak_sustained_elapsed, dram__bytes_write.sum,
        device__attribute_l2_cache_size (dropped, and said in the manifest, if this ncu rejects it);
* ``device.json``           torch's device properties (name, L2_cache_size, SM count), torch / triton / ncu versions;
* ``manifest.json``         per file: variant, operator, case id, warmup, repeats, iterations, the kernel sequence
                            of one iteration as torch.profiler named it, flush bytes, the command, its exit status.

The operator is ``zoo/1_BatchMatmul`` (prepared with prepare_op_dir.py), one case (``--case``, default: the case
with the largest input bytes up to 64 MiB). Nothing here is typed by hand: every file is what the profiler wrote.
"""
import argparse
import contextlib
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
OP = "zoo/1_BatchMatmul"
FLUSH_BYTES = 256 << 20  # triton.testing.do_bench's cache size
METRICS = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_write.sum",
           "device__attribute_l2_cache_size"]


def prepare(work):
    if not os.path.exists(os.path.join(work, "model_new.py")):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "prepare_op_dir.py"), "--example", OP,
                        "--dst", work, "--force"], check=True, capture_output=True, text=True)


def pick_case(work, case):
    from mfulib.core.opdir import OpDir
    if case is not None:
        return case
    infos = [i for i in OpDir(work).describe_all() if i.input_bytes <= 64 << 20]
    return max(infos, key=lambda i: (i.input_bytes, -i.case_id)).case_id


# ------------------------------------------------------------------------------------------------ child side


def _tuned():
    import triton
    import triton.language as tl

    def small_bench(fn, quantiles=None, **_):
        import torch
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(3):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        times.sort()
        return [times[1], times[0], times[2]] if quantiles else times[1]

    configs = [triton.Config({"BLOCK": 256}, num_warps=1), triton.Config({"BLOCK": 1024}, num_warps=4),
               triton.Config({"BLOCK": 4096}, num_warps=8)]
    try:
        deco = triton.autotune(configs=configs, key=["n"], do_bench=small_bench)
    except TypeError:  # an older Triton without do_bench=: its own benchmark (larger trace)
        deco = triton.autotune(configs=configs, key=["n"])

    @deco
    @triton.jit
    def tuned_scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)

    return tuned_scale_kernel


def child(args):
    """Run one variant's loop (under torch.profiler, or plain under ncu) and write its trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from mfulib.run import compat
    from mfulib.core.opdir import OpDir, in_directory
    dev = args.device
    if dev.startswith("cuda"):
        torch.cuda.set_device(torch.device(dev))
    compat.install(dev)
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    n_iter = args.warmup + args.repeats
    variant = args.variant
    if variant.startswith("autotune"):
        import triton
        kern = _tuned()
        x = torch.randn(1 << 20, device=dev)
        y = torch.empty_like(x)

        def forward():
            kern[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
        prime = False
        staging = contextlib.nullcontext()
    else:
        built = OpDir(args.work).build_case(args.case, impl="asc", seed=0, device=dev)

        def forward():
            built.model(*built.args)
        prime = True
        staging = in_directory(built.staging)
    cache = torch.empty(FLUSH_BYTES // 4, dtype=torch.int, device=dev) if "flush" in variant else None
    ranges = variant in ("tool_ranges", "autotune_ranges")
    with torch.no_grad(), staging:
        if prime:
            forward()
            sync()
        ctx = contextlib.nullcontext() if args.under_ncu else profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.startswith("cuda") else []),
            record_shapes=variant.endswith("_shapes"))
        with ctx as prof:
            for i in range(n_iter):
                rng = record_function(f"mfu::iter::{i}") if ranges else contextlib.nullcontext()
                with rng:
                    if cache is not None:
                        cache.zero_()
                    forward()
                    sync()
        if prof is not None:
            raw = args.trace + ".tmp.json"
            prof.export_chrome_trace(raw)
            with open(raw, "rb") as f, gzip.open(args.trace, "wb") as g:
                shutil.copyfileobj(f, g)
            os.remove(raw)
    if not variant.startswith("autotune"):
        built.close()
    return 0


# ------------------------------------------------------------------------------------------------ parent side


def sequence_of(trace_path, warmup, repeats):
    """The kernel names of one measured iteration, read back with this tool's own parser (ranges variant)."""
    from mfulib.collect.from_prof import analyse
    from mfulib.collect.from_prof.trace_loader import load_chrome
    res = analyse(load_chrome(trace_path), warmup, repeats)
    return (res.get("summary") or {}).get("sequence"), res.get("status")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="output folder (e.g. $OUT/profiles/cuda); required")
    p.add_argument("--work", default=None, help="work dir for the operator (default: a temp dir)")
    p.add_argument("--case", type=int, default=None, help="case id of zoo/1_BatchMatmul")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--ncu", default=shutil.which("ncu") or "ncu")
    p.add_argument("--timeout-s", type=float, default=180)
    # child mode
    p.add_argument("--variant", default=None, help=argparse.SUPPRESS)
    p.add_argument("--trace", default=None, help=argparse.SUPPRESS)
    p.add_argument("--under-ncu", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--device", default="cuda:0", help=argparse.SUPPRESS)  # cpu: a dry run of the child's code
    args = p.parse_args(argv)
    if args.variant:
        return child(args)
    if not args.out:
        p.error("--out is required")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="rec_work_"))
    prepare(work)
    case = pick_case(work, args.case)
    import torch
    props = torch.cuda.get_device_properties(0)
    import triton
    ncu_ver = subprocess.run([args.ncu, "--version"], capture_output=True, text=True).stdout.strip() \
        if shutil.which(args.ncu) else None
    device = {"name": props.name, "L2_cache_size": getattr(props, "L2_cache_size", None),
              "multi_processor_count": props.multi_processor_count, "total_memory": props.total_memory,
              "torch": torch.__version__, "triton": triton.__version__, "ncu": ncu_ver}
    with open(os.path.join(out, "device.json"), "w") as f:
        json.dump(device, f, indent=2)
    base = [sys.executable, os.path.abspath(__file__), "--work", work, "--case", str(case), "--warmup",
            str(args.warmup), "--repeats", str(args.repeats)]
    manifest = {"operator": OP, "case": case, "warmup": args.warmup, "repeats": args.repeats,
                "iterations": args.warmup + args.repeats, "flush_bytes": FLUSH_BYTES, "device": device, "files": {}}
    for variant in ("tool_ranges", "plain", "flush_zero", "flush_zero_shapes", "autotune_plain", "autotune_ranges"):
        trace = os.path.join(out, f"{variant}.json.gz")
        cmd = base + ["--variant", variant, "--trace", trace]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s)
        ent = {"variant": variant, "command": " ".join(cmd[1:]), "returncode": r.returncode,
               "ranges": variant in ("tool_ranges", "autotune_ranges"), "flush": "flush" in variant,
               "record_shapes": variant.endswith("_shapes"), "autotune": variant.startswith("autotune"),
               "primed": not variant.startswith("autotune"), "stderr_tail": r.stderr[-800:]}
        if r.returncode == 0 and variant in ("tool_ranges", "autotune_ranges"):
            ent["sequence"], ent["status"] = sequence_of(trace, args.warmup, args.repeats)
        manifest["files"][os.path.basename(trace)] = ent
        print(f"{variant}: rc {r.returncode}", flush=True)
    if ncu_ver:
        for page, variant, extra in (("raw", "plain", []), ("details", "flush_zero", ["--section", "SpeedOfLight"])):
            dst = os.path.join(out, f"ncu_{page}.csv")
            metrics = list(METRICS)
            for attempt in range(2):
                cmd = [args.ncu, "--csv", "--page", page, "--print-units", "base", "--clock-control", "none",
                       "--metrics", ",".join(metrics)] + extra + base + ["--variant", variant, "--under-ncu"]
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s)
                text = r.stdout + r.stderr
                if r.returncode == 0 and '"ID",' in text:
                    break
                metrics = [m for m in metrics if not m.startswith("device__attribute")]
            with open(dst, "w") as f:
                f.write(r.stdout)
            manifest["files"][os.path.basename(dst)] = {
                "variant": variant, "page": page, "metrics": metrics, "command": " ".join(cmd),
                "returncode": r.returncode, "flush": "flush" in variant, "ranges": False, "primed": True,
                "stderr_tail": r.stderr[-800:]}
            print(f"ncu {page}: rc {r.returncode}", flush=True)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
