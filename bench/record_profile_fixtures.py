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
* ``autotune_user_ranges.json.gz``  issue 28's autotuning case: an inline ``@triton.autotune`` kernel (2 configs,
                            Triton's own benchmark: ``triton.testing.do_bench`` with its 256 MiB ``zero_`` cache flush
                            between runs) and a plain Triton kernel, no priming call, 1 + REPEATS iterations each in a
                            user ``record_function("iteration_<i>")`` (not this tool's names): iteration 0 holds the
                            autotuning launches and flush kernels, the others the operator's 2 launches;
* ``own_fill_sum_ranges.json.gz`` an operator whose own kernels are named like harness work: Triton ``fill_kernel``,
                            ``zero_kernel``, ``cast_kernel``, ``reduce_sum_kernel`` and torch ``fill_`` / ``zero_`` /
                            ``.to(float16)`` / ``.sum()``, all over 256 MiB buffers (>= any L2), primed, WARMUP +
                            REPEATS iterations in user ``record_function("iteration_<i>")`` ranges;
* ``own_fill_sum_plain.json.gz``  the same loop without ranges;
* ``ncu_small_raw.csv``     ``ncu --csv --page raw --metrics <M>`` of a small kernel (``add_one_kernel``, 1 Mi floats,
                            primed, WARMUP + REPEATS launches);
* ``ncu_small_details.csv`` ``ncu --csv --page details`` of the same loop with ncu's default sections and units (no
                            --metrics, no --print-units: the SpeedOfLight ``Duration`` in ncu's own time unit);
* ``device.json``           torch's device properties (name, L2_cache_size, SM count), torch / triton / ncu versions;
* ``manifest.json``         per file: variant, operator, case id, warmup, repeats, iterations, the kernel sequence
                            of one iteration as torch.profiler named it, flush bytes, the command, its exit status.

The operator is ``zoo/1_BatchMatmul`` (prepared with prepare_op_dir.py), one case (``--case``, default: the case
with the largest input bytes up to 64 MiB). Nothing here is typed by hand: every file is what the profiler wrote,
except that the new traces are trimmed to the events ``--from-prof`` reads (:func:`trim_trace`: the categories of
:data:`KEEP_CATS` and the top-level keys; the manifest lists the dropped events per category), so that each stays
under 2 MB gzipped.

``--device cpu`` records what a CPU can, to prove the plumbing: the Triton interpreter, tiny
buffers, torch.profiler's CPU activity, no ncu; nothing of it is a fixture.

  python3 bench/record_profile_fixtures.py --out /tmp/rec_cpu --device cpu                # CPU plumbing (~1 min)
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
BIG_BYTES = 256 << 20  # the own-fill/sum operator's buffers: >= every L2 of the device-facts table
TINY_BYTES = 256 << 10  # --tiny: the same code on small buffers
#: the trace events --from-prof reads (trace_loader.py, backends.cuda.trace_launches): kernels, memsets/copies, the
#: launch calls and their flow links, the host ops (shapes, External id) and the record_function ranges
KEEP_CATS = ("kernel", "gpu_memset", "gpu_memcpy", "cuda_runtime", "cuda_driver", "ac2g", "cpu_op", "user_annotation",
             "gpu_user_annotation")
NEW_VARIANTS = ("autotune_user_ranges", "own_fill_sum_ranges", "own_fill_sum_plain")
METRICS = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_write.sum",
           "device__attribute_l2_cache_size"]


def prepare(work):
    if not os.path.exists(os.path.join(work, "model_new.py")):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "prepare_op_dir.py"), "--example", OP,
                        "--dst", work, "--force"], check=True, capture_output=True, text=True)


def pick_case(work, case, smallest=False):
    from mfulib.core.opdir import OpDir
    if case is not None:
        return case
    infos = [i for i in OpDir(work).describe_all() if i.input_bytes <= 64 << 20]
    if smallest:  # --device cpu: the interpreter runs the smallest case
        return min(infos, key=lambda i: (i.input_bytes, i.case_id)).case_id
    return max(infos, key=lambda i: (i.input_bytes, -i.case_id)).case_id


# ------------------------------------------------------------------------------------------------ child side


def _host_bench(fn, quantiles=None, **_):
    """A 3-run benchmark for the autotuner (ms): CUDA events on a GPU, the host clock on the CPU (--device cpu)."""
    import time

    import torch
    cuda = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
    fn()
    if cuda:
        torch.cuda.synchronize()
    times = []
    for _ in range(3):
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return [times[1], times[0], times[2]] if quantiles else times[1]


def _tuned():
    import triton
    import triton.language as tl
    small_bench = _host_bench

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


def _new_kernels(interpreting):
    """The Triton kernels of the new variants: an autotuned one (Triton's own benchmark on a GPU: do_bench with its
    cache flush; the host clock when interpreting), ``add_one_kernel``, and the own fill / zero / cast / sum ones."""
    import triton
    import triton.language as tl
    configs = [triton.Config({"BLOCK": 1024}, num_warps=4), triton.Config({"BLOCK": 4096}, num_warps=8)]
    extra = {"do_bench": _host_bench} if interpreting else {}

    @triton.autotune(configs=configs, key=["n"], **extra)
    @triton.jit
    def tuned_copy_scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 3.0, mask=m)

    @triton.jit
    def add_one_kernel(y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=m) + 1.0, mask=m)

    @triton.jit
    def fill_kernel(y_ptr, n, value, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.zeros([BLOCK], tl.float32) + value, mask=offs < n)

    @triton.jit
    def zero_kernel(y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n)

    @triton.jit
    def cast_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m).to(tl.float16), mask=m)

    @triton.jit
    def reduce_sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))

    return {"tuned": tuned_copy_scale_kernel, "add_one": add_one_kernel, "fill": fill_kernel, "zero": zero_kernel,
            "cast": cast_kernel, "sum": reduce_sum_kernel}


def _new_forward(variant, dev, nbytes):
    """(forward, primed) of a new variant: the call one iteration makes, and whether it is called once before the
    profiled loop."""
    import torch
    import triton
    k = _new_kernels(os.environ.get("TRITON_INTERPRET") == "1")
    block = 4096
    if variant == "autotune_user_ranges":
        x = torch.randn(nbytes // 4, device=dev)
        y = torch.empty_like(x)
        n = x.numel()

        def forward():
            k["tuned"][lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
            k["add_one"][(triton.cdiv(n, block),)](y, n, BLOCK=block)
        return forward, False
    if variant == "small_kernel":
        y = torch.zeros(1 << 20 if dev != "cpu" else 1 << 12, device=dev)
        n = y.numel()
        return (lambda: k["add_one"][(triton.cdiv(n, block),)](y, n, BLOCK=block)), True
    a = torch.empty(nbytes // 4, device=dev)  # own_fill_sum_*: every buffer nbytes (fp32) or nbytes / 2 (fp16)
    h = torch.empty(a.numel(), dtype=torch.float16, device=dev)
    b = torch.empty_like(a)
    acc = torch.zeros(1, device=dev)
    n = a.numel()
    grid = (triton.cdiv(n, block),)

    def forward():
        k["fill"][grid](a, n, 1.0, BLOCK=block)
        k["cast"][grid](a, h, n, BLOCK=block)
        k["sum"][grid](a, acc, n, BLOCK=block)
        k["zero"][grid](a, n, BLOCK=block)
        b.fill_(2.0)
        b.zero_()
        b.to(torch.float16)
        b.sum()
    return forward, True


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
    if dev == "cpu":  # the interpreter's launches as triton:: ranges, as this tool's CPU backend records them
        from mfulib.run.interpreter import install_launch_hook
        install_launch_hook()
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    n_iter = args.warmup + args.repeats
    variant = args.variant
    if variant in NEW_VARIANTS or variant == "small_kernel":
        forward, prime = _new_forward(variant, dev, TINY_BYTES if dev == "cpu" else BIG_BYTES)
        staging = contextlib.nullcontext()
    elif variant.startswith("autotune"):
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
    user_ranges = variant in ("autotune_user_ranges", "own_fill_sum_ranges")
    with torch.no_grad(), staging:
        if prime:
            forward()
            sync()
        ctx = contextlib.nullcontext() if args.under_ncu else profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.startswith("cuda") else []),
            record_shapes=variant.endswith("_shapes") or variant.startswith("own_fill_sum"))
        if variant == "autotune_user_ranges":
            n_iter = 1 + args.repeats  # iteration 0: the autotuning; then the steady ones
        with ctx as prof:
            for i in range(n_iter):
                rng = record_function(f"mfu::iter::{i}") if ranges else \
                    record_function(f"iteration_{i}") if user_ranges else contextlib.nullcontext()
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
    if not variant.startswith("autotune") and variant not in NEW_VARIANTS and variant != "small_kernel":
        built.close()
    return 0


# ------------------------------------------------------------------------------------------------ parent side


def sequence_of(trace_path, warmup, repeats):
    """The kernel names of one measured iteration, read back with this tool's own parser (ranges variant)."""
    from mfulib.collect.from_prof import analyse
    from mfulib.collect.from_prof.trace_loader import load_chrome
    res = analyse(load_chrome(trace_path), warmup, repeats)
    return (res.get("summary") or {}).get("sequence"), res.get("status")


def trim_trace(path, keep=KEEP_CATS):
    """Rewrite the gzipped chrome trace ``path`` with only the events whose ``cat`` is in ``keep``, the metadata
    events (``"ph": "M"``) and every top-level key (deviceProperties, ...); returns {kept, dropped {cat: n},
    gz_bytes}. The events kept are the ones --from-prof reads; the others (python functions, allocator and profiler
    bookkeeping) are counted in the manifest."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    wanted = lambda e: e.get("cat") in keep or e.get("ph") == "M"  # noqa: E731 - metadata: process/thread names
    kept = [e for e in events if wanted(e)]
    dropped = {}
    for e in events:
        if not wanted(e):
            dropped[str(e.get("cat"))] = dropped.get(str(e.get("cat")), 0) + 1
    if isinstance(doc, dict):
        doc["traceEvents"] = kept
    else:
        doc = kept
    with gzip.open(path, "wt", encoding="utf-8") as g:
        json.dump(doc, g)
    return {"kept": len(kept), "dropped": dropped, "gz_bytes": os.path.getsize(path)}


def device_facts(args):
    """device.json: torch's device properties and the tool versions (the CPU's name with --device cpu)."""
    import platform

    import torch
    import triton
    ncu_ver = subprocess.run([args.ncu, "--version"], capture_output=True, text=True).stdout.strip() \
        if shutil.which(args.ncu) and not args.cpu else None
    if args.cpu:
        return {"name": platform.processor() or platform.machine(), "L2_cache_size": None, "cpu": True,
                "torch": torch.__version__, "triton": triton.__version__, "ncu": None}
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "L2_cache_size": getattr(props, "L2_cache_size", None),
            "multi_processor_count": props.multi_processor_count, "total_memory": props.total_memory,
            "torch": torch.__version__, "triton": triton.__version__, "ncu": ncu_ver}


def run_ncu(args, out, base, name, page, variant, metrics, extra, manifest, env):
    """One ncu run of ``variant`` into ``<out>/<name>`` (stdout as captured); a metric this ncu rejects
    (device__attribute_*) is dropped once and the run repeated."""
    dst = os.path.join(out, name)
    metrics = list(metrics)
    for _ in range(2):
        cmd = [args.ncu, "--csv", "--page", page] + (["--print-units", "base", "--clock-control", "none"]
                                                     if metrics else []) + \
            (["--metrics", ",".join(metrics)] if metrics else []) + extra + base + ["--variant", variant,
                                                                                   "--under-ncu"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, env=env)
        if (r.returncode == 0 and '"ID",' in r.stdout + r.stderr) or not metrics:
            break
        metrics = [m for m in metrics if not m.startswith("device__attribute")]
    with open(dst, "w") as f:
        f.write(r.stdout)
    manifest["files"][name] = {"variant": variant, "page": page, "metrics": metrics, "command": " ".join(cmd),
                               "returncode": r.returncode, "flush": "flush" in variant, "ranges": False,
                               "primed": True, "stderr_tail": r.stderr[-800:]}
    print(f"{name}: rc {r.returncode}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="output folder (e.g. $OUT/profiles/cuda); required")
    p.add_argument("--work", default=None, help="work dir for the operator (default: a temp dir)")
    p.add_argument("--case", type=int, default=None, help="case id of zoo/1_BatchMatmul")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--ncu", default=shutil.which("ncu") or "ncu")
    p.add_argument("--timeout-s", type=float, default=180)
    p.add_argument("--only", default=None, help="comma-separated variants/ncu files to record (default: all)")
    p.add_argument("--device", default="cuda:0", help="cuda:0, or cpu: the plumbing (tiny buffers, no ncu)")
    # child mode
    p.add_argument("--variant", default=None, help=argparse.SUPPRESS)
    p.add_argument("--trace", default=None, help=argparse.SUPPRESS)
    p.add_argument("--under-ncu", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.variant:
        return child(args)
    if not args.out:
        p.error("--out is required")
    args.cpu = args.device == "cpu"
    env = dict(os.environ, **({"TRITON_INTERPRET": "1"} if args.cpu else {}))
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="rec_work_"))
    prepare(work)
    case = pick_case(work, args.case, smallest=args.cpu)
    device = device_facts(args)
    with open(os.path.join(out, "device.json"), "w") as f:
        json.dump(device, f, indent=2)
    base = [sys.executable, os.path.abspath(__file__), "--work", work, "--case", str(case), "--warmup",
            str(args.warmup), "--repeats", str(args.repeats), "--device", args.device]
    manifest = {"operator": OP, "case": case, "warmup": args.warmup, "repeats": args.repeats,
                "iterations": args.warmup + args.repeats, "flush_bytes": FLUSH_BYTES, "device": device,
                "own_buffer_bytes": TINY_BYTES if args.cpu else BIG_BYTES, "trim_keeps": list(KEEP_CATS),
                "cpu_plumbing_only": args.cpu, "files": {}}
    only = set(args.only.split(",")) if args.only else None
    for variant in ("tool_ranges", "plain", "flush_zero", "flush_zero_shapes", "autotune_plain",
                    "autotune_ranges") + NEW_VARIANTS:
        if only and variant not in only:
            continue
        trace = os.path.join(out, f"{variant}.json.gz")
        cmd = base + ["--variant", variant, "--trace", trace]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, env=env)
        ent = {"variant": variant, "command": " ".join(cmd[1:]), "returncode": r.returncode,
               "ranges": variant in ("tool_ranges", "autotune_ranges"), "flush": "flush" in variant,
               "record_shapes": variant.endswith("_shapes") or variant.startswith("own_fill_sum"),
               "autotune": variant.startswith("autotune"),
               "primed": not variant.startswith("autotune"), "stderr_tail": r.stderr[-800:]}
        if variant in NEW_VARIANTS:
            ent["user_ranges"] = "iteration_<i>" if variant.endswith("ranges") else None
            ent["iterations"] = 1 + args.repeats if variant == "autotune_user_ranges" else \
                args.warmup + args.repeats
            if r.returncode == 0:
                ent["trim"] = trim_trace(trace)
                if ent["trim"]["gz_bytes"] > 2 << 20:
                    print(f"warning: {trace} is {ent['trim']['gz_bytes']} bytes gzipped (> 2 MiB) after trimming")
        if r.returncode == 0 and variant in ("tool_ranges", "autotune_ranges"):
            ent["sequence"], ent["status"] = sequence_of(trace, args.warmup, args.repeats)
        manifest["files"][os.path.basename(trace)] = ent
        print(f"{variant}: rc {r.returncode}", flush=True)
    if device["ncu"]:
        for name, page, variant, metrics, extra in (
                ("ncu_raw.csv", "raw", "plain", METRICS, []),
                ("ncu_details.csv", "details", "flush_zero", METRICS, ["--section", "SpeedOfLight"]),
                ("ncu_small_raw.csv", "raw", "small_kernel", METRICS, []),
                ("ncu_small_details.csv", "details", "small_kernel", [], [])):
            if not only or name in only:
                run_ncu(args, out, base, name, page, variant, metrics, extra, manifest, env)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
