#!/usr/bin/env python3
"""Why the MHA block's GEMM is not tensor-bound on the H200, and what its launch grid has to do with it.

The bundled zoo/5_MHABlock ModelNew (examples/ops/gen/zoo/5_MHABlock_triton_optimized.py) launches its
``matmul_kernel`` Ascend-style: a persistent grid of ``cube_core_num`` programs (on CUDA, through mfulib.run.compat,
the SM count: 132 on the H200), each walking output tiles. Under Nsight Compute the kernel ran at ~51% tensor pipe
with 12.5% achieved occupancy (one 8-warp CTA per SM), so the tool's ncu rule (both SM and memory throughput < 60%)
called it latency-bound. This script tests that reading: the same kernel, the same tiles (128 x 128 x 64, 8 warps,
3 stages), on the QKV and output projections of the largest bundled case ([2, 8192, 4096] bf16: M = 16384, K =
4096, N = 12288 and 4096), launched with

* ``grid = SMs``       (the example as written: one CTA per SM),
* ``grid = 2 x SMs``   (two CTAs per SM: one's epilogue and loads overlap the other's MMAs),
* ``grid = tiles``     (one program per tile: the non-persistent launch Triton's tutorials use),

and kernel variants: B as [K, N] row-major, ``num_stages=4``, an unmasked K loop, int32 offsets (the example
widens row offsets to int64; more live registers can leave room for only one 8-warp CTA per SM), 128 x 256 and
256 x 128 tiles (each 8-warp CTA then issues warpgroup MMAs twice as wide per shared-memory load), 4 warps, the
tutorial-style GEMM of bench/pmu_bound_h200.py (tensor-bound there) and cuBLAS (``torch.matmul``, timing only),
also on the smaller case's projections ([1, 16384, 2048]: M = 16384, K = 2048, N = 6144).

Per variant: median kernel time of 20 CUDA-event-timed launches after warm-up (L2 not flushed: the projections
read the same weights every call in the operator too), TFLOP/s = 2 M N K / time, and - when ncu is present and
permitted - the canonical counters (:func:`mfulib.profiles.pmu.from_ncu_record` over :func:`mfulib.profiles.pmu.ncu_metrics`) and
the bound (:func:`mfulib.report.bound.classify`, thresholds fixed from Nsight Compute's SOLBottleneck rule). Writes
``<out>/result.json``; nothing is typed by hand.

  python3 bench/gemm_grid_h200.py --out $OUT/gemm_grid        # on the GPU machine (~1 min)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
EXAMPLE = os.path.join(ROOT, "examples", "ops", "gen", "zoo", "5_MHABlock_triton_optimized.py")

CHILD = r'''
import importlib.util, json, statistics, sys
sys.path.insert(0, sys.argv[1])
from mfulib.run import compat
compat.install("cuda")
import torch, triton, triton.language as tl
spec = importlib.util.spec_from_file_location("mha_example", sys.argv[2])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
kern = mod.matmul_kernel


@triton.jit
def matmul_variant(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   WIDE_OFFSETS: tl.constexpr):
    # the example's kernel with K % BLOCK_K == 0 known (the K loop loads without the K mask); WIDE_OFFSETS as the
    # example (row offsets in int64), else int32 offsets (fewer live registers; valid while every offset < 2**31)
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    for tile in range(pid, tiles_m * tiles_n, num_progs):
        group = tile // (GROUP_M * tiles_n)
        first_m = group * GROUP_M
        group_rows = min(tiles_m - first_m, GROUP_M)
        tile_m = first_m + (tile % group_rows)
        tile_n = (tile % (GROUP_M * tiles_n)) // group_rows
        rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        if WIDE_OFFSETS:
            a_ptrs = a_ptr + rm[:, None].to(tl.int64) * stride_am + rk[None, :] * stride_ak
            b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :].to(tl.int64) * stride_bn
            c_ptrs = c_ptr + rm[:, None].to(tl.int64) * stride_cm + rn[None, :] * stride_cn
        else:
            a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
            b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
            c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = tl.load(a_ptrs, mask=rm[:, None] < M, other=0.0)
            b = tl.load(b_ptrs, mask=rn[None, :] < N, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def matmul_simple(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # the tutorial-style GEMM of bench/pmu_bound_h200.py (tensor-bound there): one program per tile, int32
    # offsets, no masks (M, N, K multiples of the tiles), row-major launch order (GROUP_M unused)
    pm = tl.program_id(0) // tl.cdiv(N, BLOCK_N)
    pn = tl.program_id(0) % tl.cdiv(N, BLOCK_N)
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(a_ptr + rm[:, None] * stride_am + (k0 + rk)[None, :] * stride_ak)
        y = tl.load(b_ptr + (k0 + rk)[:, None] * stride_bk + rn[None, :] * stride_bn)
        acc += tl.dot(x, y)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty))


sms = torch.cuda.get_device_properties(0).multi_processor_count
mode = sys.argv[3]  # "time" or "ncu"
rows = []
TILES = -1  # grid sentinel: one program per output tile
for m, n, k in ((16384, 12288, 4096), (16384, 4096, 4096), (16384, 6144, 2048)):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / 64
    wt = w.t().contiguous()  # [K, N], N contiguous
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ w.float().t()
    bw, bkn = (w, w.stride(1), w.stride(0)), (wt, wt.stride(0), wt.stride(1))
    # (name, kernel, grid, B [K, N] as (tensor, stride_bk, stride_bn), (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages),
    #  extra constexprs)
    wide, narrow = {"WIDE_OFFSETS": True}, {"WIDE_OFFSETS": False}
    t128, t128s4, t256, t256s4 = (128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3), (128, 256, 64, 8, 4)
    variants = (("example grid=SMs", kern, sms, bw, t128, {}),
                ("example grid=2xSMs", kern, 2 * sms, bw, t128, {}),
                ("example grid=tiles", kern, TILES, bw, t128, {}),
                ("example B [K,N] row-major", kern, sms, bkn, t128, {}),
                ("example num_stages=4", kern, sms, bw, t128s4, {}),
                ("even-K (no K mask)", matmul_variant, sms, bw, t128, wide),
                ("even-K B [K,N] grid=tiles", matmul_variant, TILES, bkn, t128, wide),
                ("int32 even-K grid=SMs", matmul_variant, sms, bw, t128, narrow),
                ("int32 even-K grid=tiles", matmul_variant, TILES, bw, t128, narrow),
                ("int32 even-K B [K,N] grid=tiles", matmul_variant, TILES, bkn, t128, narrow),
                ("example 128x256 grid=SMs", kern, sms, bw, t256, {}),
                ("example 128x256 num_stages=4", kern, sms, bw, t256s4, {}),
                ("example 128x256 grid=tiles", kern, TILES, bw, t256, {}),
                ("example 256x128 grid=SMs", kern, sms, bw, (256, 128, 64, 8, 3), {}),
                ("example 128x128 4 warps s4", kern, sms, bw, (128, 128, 64, 4, 4), {}),
                ("int32 even-K 128x256 grid=SMs", matmul_variant, sms, bw, t256, narrow),
                ("simple B [K,N] grid=tiles", matmul_simple, TILES, bkn, t128, {}),
                ("simple 128x256 B [K,N] grid=tiles", matmul_simple, TILES, bkn, t256, {}),
                ("cuBLAS (F.linear)", None, None, bw, None, {}))
    for name, kfn, grid, (bt, sbk, sbn), cfg, extra in variants:
        if kfn is None:
            def launch():
                torch.matmul(a, w.t(), out=out)
            cfg_d, g = {}, None
        else:
            bm, bn, bk, warps, stages = cfg
            tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
            g = tiles if grid == TILES else min(grid, tiles)
            cfg_d = {"block_m": bm, "block_n": bn, "block_k": bk, "num_warps": warps, "num_stages": stages}

            def launch():
                kfn[(g,)](a, bt, out, m, n, k, a.stride(0), a.stride(1), sbk, sbn, out.stride(0), out.stride(1),
                          BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages, **extra)
        try:
            launch()
            torch.cuda.synchronize()
        except Exception as exc:  # a config this Triton/GPU rejects (e.g. out of shared memory): recorded, not fatal
            rows.append({"variant": name, "kernel": kfn.fn.__name__ if kfn else "cublas", "m": m, "n": n, "k": k,
                         "error": f"{type(exc).__name__}: {str(exc)[:300]}", **cfg_d})
            continue
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        reps = 20 if mode == "time" else 1
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); launch(); e.record(); e.synchronize()
            times.append(s.elapsed_time(e) * 1e6)
        med = statistics.median(times)
        rows.append({"variant": name, "kernel": kfn.fn.__name__ if kfn else "cublas", "m": m, "n": n, "k": k,
                     "grid": g, "sms": sms, **cfg_d, "median_ns": med, "tflops": 2 * m * n * k / med / 1e3,
                     "max_rel_err": err})
print("RESULT " + json.dumps(rows))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from mfulib.report import bound
    from mfulib.profiles import ncu
    from mfulib.profiles import pmu
    import torch
    result = {"example": os.path.relpath(EXAMPLE, ROOT), "device": torch.cuda.get_device_name(),
              "torch": torch.__version__, "pmu_unavailable": None}
    with tempfile.TemporaryDirectory() as tmp:
        child = os.path.join(tmp, "child.py")
        with open(child, "w") as f:
            f.write(CHILD)
        base = [sys.executable, child, os.path.join(ROOT, "scripts"), EXAMPLE]
        proc = subprocess.run(base + ["time"], capture_output=True, text=True, timeout=240)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            result["error"] = (proc.stdout + proc.stderr)[-3000:]
        else:
            result["timing"] = json.loads(line[len("RESULT "):])
        if not os.path.exists(args.ncu):
            result["pmu_unavailable"] = "ncu not found"
        else:
            cc = torch.cuda.get_device_capability()
            metrics = pmu.ncu_metrics(cc[0])
            cmd = [args.ncu, "--csv", "--page", "details", "--print-units", "base", "--clock-control", "none",
                   "--kernel-name", "regex:^matmul_",  "--metrics", ",".join(metrics)] + base + ["ncu"]
            p2 = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            text = p2.stdout + p2.stderr
            with open(os.path.join(args.out, "ncu_details.csv"), "w") as f:
                f.write(text)
            if "ERR_NVGPUCTRPERM" in text:
                result["pmu_unavailable"] = "ncu: ERR_NVGPUCTRPERM"
            recs = list(ncu.parse_ncu_csv(p2.stdout))
            # launch order: warm-up + 1 timed launch for each variant of each n -> keep every 2nd
            kept = recs[1::2]
            result["ncu_command"] = cmd
            result["ncu_launches"] = len(recs)
            result["ncu"] = []
            triton_rows = [t for t in result.get("timing") or [] if t["kernel"] != "cublas" and "error" not in t]
            for rec, t in zip(kept, triton_rows):
                c = pmu.from_ncu_record(rec)
                result["ncu"].append({"variant": t["variant"], "m": t["m"], "n": t["n"], "k": t["k"], "counters": c,
                                      "bound": bound.classify(c, "ncu")})
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    for t in result.get("timing") or []:
        head = f"{t['m']}x{t['n']}x{t['k']} {t['variant']:34s}"
        if "error" in t:
            print(f"{head} error: {t['error']}")
            continue
        print(f"{head} grid {t['grid'] or 0:6d}: {t['median_ns'] / 1e3:8.1f} us {t['tflops']:7.1f} TFLOP/s "
              f"err {t['max_rel_err']:.2e}")
    for r in result.get("ncu") or []:
        c = r["counters"]
        print(f"{r['m']}x{r['n']}x{r['k']} {r['variant']:34s} {r['bound']['label']:14s} SM "
              f"{c.get('sm_throughput_pct')} mem {c.get('memory_throughput_pct')} tensor {c.get('tensor_pipe_pct')} "
              f"occ {c.get('achieved_occupancy_pct')}")
    if result.get("error"):
        print(result["error"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
