#!/usr/bin/env python3
"""Bound labels held to known kernels: one Triton kernel per class, launched here, named uniquely, under ncu (H200).

  python3 bench/pmu_bound_h200.py --out $OUT/pmu_bound              # on the GPU machine (~1-2 min)
  python3 bench/pmu_bound_h200.py --out /tmp/pb --tiny              # anywhere: the kernels on the Triton interpreter
  python3 bench/pmu_bound_h200.py --out /tmp/pb --from-csv X.csv    # re-read a kept ncu CSV (no GPU)

Each kernel is sized so its class is not in doubt, and is matched by its exact function name (never a substring):

* ``bound_bench_gemm_kernel``   fp16 ``tl.dot`` GEMM 8192 x 8192 x 8192, 128 x 256 x 64 tiles, 8 warps (2048
  programs, ~15 waves on 132 SMs): expected **tensor-bound**;
* ``bound_bench_stream_kernel`` y = x * 2 + 1 over 2^28 fp32 (1 GiB read, 1 GiB written, 65536 programs): expected
  **memory-bound** (a Triton kernel: ncu profiles it, unlike the cudaMemcpy of ``copy_``);
* ``bound_bench_fma_kernel``    8 independent fp32 FMA chains per thread, 4096 steps each, on registers (one load,
  one store per element; 1056 programs = 8 per SM): expected **vector-bound** (compute side of ncu's rule with the
  tensor pipe idle: the project's rule, :func:`mfulib.report.bound.classify_ncu`);
* ``bound_bench_tiny_kernel``   one program of 32 elements: expected **latency-bound** (both throughputs far below
  60%, a fraction of one wave).

Each is launched twice (the first compiles); ncu profiles only these names (``--kernel-name-base function
--kernel-name regex:^(...)$``) with the collector's metric list (:func:`mfulib.profiles.pmu.ncu_metrics`), the last
launch of each is classified with the unchanged thresholds (:func:`mfulib.report.bound.classify`). Writes
``ncu.csv`` (ncu's output as captured), ``result.json`` (per kernel: counters, bound, expected, agree) and
``result.md`` (the table, counters quoted). Probes first: a missing ncu or ``ERR_NVGPUCTRPERM`` is written to
``result.json`` as ``pmu_unavailable`` (exit 0). Every number is what ncu wrote.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

EXPECTED = {"bound_bench_gemm_kernel": "tensor-bound", "bound_bench_stream_kernel": "memory-bound",
            "bound_bench_fma_kernel": "vector-bound", "bound_bench_tiny_kernel": "latency-bound"}
QUOTED = ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "tensor_pipe_pct", "waves_per_sm",
          "grid_size", "block_size", "duration_ns")

CHILD = r'''
import os, sys, torch, triton, triton.language as tl
TINY = os.environ.get("BOUND_BENCH_TINY") == "1"
dev = "cpu" if TINY else "cuda"

@triton.jit
def bound_bench_gemm_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(x, y, acc)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))

@triton.jit
def bound_bench_stream_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=m) * 2.0 + 1.0, mask=m)

@triton.jit
def bound_bench_fma_kernel(x, y, steps, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs)
    a0, a1, a2, a3 = v, v + 1.0, v + 2.0, v + 3.0
    a4, a5, a6, a7 = v + 4.0, v + 5.0, v + 6.0, v + 7.0
    for _ in range(steps):  # 8 independent chains: the FMA pipe, not one chain's latency, is the wall
        a0 = a0 * 0.999 + 0.001
        a1 = a1 * 0.999 + 0.001
        a2 = a2 * 0.999 + 0.001
        a3 = a3 * 0.999 + 0.001
        a4 = a4 * 0.999 + 0.001
        a5 = a5 * 0.999 + 0.001
        a6 = a6 * 0.999 + 0.001
        a7 = a7 * 0.999 + 0.001
    tl.store(y + offs, a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7)

@triton.jit
def bound_bench_tiny_kernel(x, y, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs) + 1.0)

n = 64 if TINY else 8192
bm, bn, bk = (16, 16, 16) if TINY else (128, 256, 64)
a = torch.randn(n, n, device=dev, dtype=torch.float16)
b = torch.randn(n, n, device=dev, dtype=torch.float16)
c = torch.empty(n, n, device=dev, dtype=torch.float16)
ne = (1 << 12) if TINY else (1 << 28)
xs = torch.randn(ne, device=dev, dtype=torch.float32)
ys = torch.empty_like(xs)
fma_block, fma_progs, steps = (128, 2, 8) if TINY else (1024, 1056, 4096)
xf = torch.randn(fma_block * fma_progs, device=dev, dtype=torch.float32)
yf = torch.empty_like(xf)
xt = torch.randn(32, device=dev, dtype=torch.float32)
yt = torch.empty_like(xt)
for _ in range(2):  # the first launch of each compiles; ncu keeps the last
    bound_bench_gemm_kernel[(n // bm, n // bn)](a, b, c, n, n, n, BM=bm, BN=bn, BK=bk, num_warps=8, num_stages=3)
    bound_bench_stream_kernel[(triton.cdiv(ne, 4096),)](xs, ys, ne, BLOCK=4096, num_warps=8)
    bound_bench_fma_kernel[(fma_progs,)](xf, yf, steps, BLOCK=fma_block, num_warps=4)
    bound_bench_tiny_kernel[(1,)](xt, yt, BLOCK=32, num_warps=1)
if not TINY:
    torch.cuda.synchronize()
# the kernels compute what they say (checked on a slice; the interpreter checks all of it in --tiny)
k = 256 if not TINY else n
torch.testing.assert_close(c[:k, :k].float(), (a[:k].float() @ b[:, :k].float()), rtol=2e-2, atol=2e-1 * (n ** 0.5))
torch.testing.assert_close(ys[:1 << 20], xs[:1 << 20] * 2 + 1)
torch.testing.assert_close(yt, xt + 1)
ref = xf[:4096].clone()
chains = [ref + i for i in range(8)]
for _ in range(steps):
    chains = [ch * 0.999 + 0.001 for ch in chains]
torch.testing.assert_close(yf[:4096], sum(chains), rtol=1e-4, atol=1e-4)
print("bound bench child: all four kernels ran and checked")
'''


def analyse(text: str) -> list:
    """Per expected kernel (exact function name): the last profiled launch's counters, bound and agreement."""
    from mfulib.profiles import ncu, pmu
    from mfulib.report import bound
    last = {}
    for rec in ncu.parse_ncu_csv(text):
        name = ncu.short_kernel_name(rec.get("kernel_name"))
        if name in EXPECTED:
            last[name] = rec
    rows = []
    for name, want in EXPECTED.items():
        rec = last.get(name)
        if rec is None:
            rows.append({"kernel": name, "expected": want, "observed": None, "agree": False,
                         "note": "ncu profiled no launch of this kernel"})
            continue
        c = pmu.from_ncu_record(rec)
        b = bound.classify(c, "ncu")
        rows.append({"kernel": name, "expected": want, "observed": b["label"], "agree": b["label"] == want,
                     "note": b["note"], "counters": c, "quoted": {k: c.get(k) for k in QUOTED}, "grid": rec.get("grid"),
                     "block": rec.get("block")})
    return rows


def markdown(res: dict) -> str:
    def g(v):
        return "—" if v is None else f"{v:.4g}"
    lines = ["# Bound labels on known kernels (ncu, thresholds of mfulib.report.bound)", "",
             f"device {res.get('device')}, ncu {str(res.get('ncu_version') or '').strip().splitlines()[-1:]}", "",
             "| kernel | expected | observed | agree | " + " | ".join(QUOTED) + " |",
             "|---|---|---|---|" + "---|" * len(QUOTED)]
    for r in res.get("kernels") or []:
        q = r.get("quoted") or {}
        lines.append(f"| {r['kernel']} | {r['expected']} | {r['observed']} | {'yes' if r['agree'] else 'NO'} | "
                     + " | ".join(g(q.get(k)) for k in QUOTED) + " |")
    ok = sum(1 for r in res.get("kernels") or [] if r["agree"])
    lines += ["", f"{ok}/{len(EXPECTED)} classes observed as expected."
              + (f" pmu_unavailable: {res['pmu_unavailable']}" if res.get("pmu_unavailable") else "")]
    return "\n".join(lines) + "\n"


def run_child(tmp: str, tiny: bool, ncu_cmd=None):
    child = os.path.join(tmp, "bound_bench_child.py")  # @triton.jit needs a real source file
    with open(child, "w") as f:
        f.write(CHILD)
    env = dict(os.environ, BOUND_BENCH_TINY="1" if tiny else "0")
    if tiny:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run((ncu_cmd or []) + [sys.executable, child], capture_output=True, text=True, env=env,
                          timeout=420)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
    ap.add_argument("--tiny", action="store_true", help="run the four kernels on the Triton interpreter (no ncu)")
    ap.add_argument("--from-csv", help="classify a kept ncu CSV of this bench instead of running it")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    res = {"ncu": args.ncu, "pmu_unavailable": None, "expected": EXPECTED}
    text = None
    if args.tiny:
        with tempfile.TemporaryDirectory() as tmp:
            p = run_child(tmp, True)
        res.update(tiny=True, returncode=p.returncode, child_tail=(p.stdout + p.stderr)[-1500:])
        res["pmu_unavailable"] = "--tiny: Triton interpreter on the CPU, no counters"
    elif args.from_csv:
        with open(args.from_csv, encoding="utf-8", errors="replace") as f:
            text = f.read()
        res["from_csv"] = args.from_csv
    elif not os.path.exists(args.ncu):
        res["pmu_unavailable"] = "ncu not found"
    else:
        from mfulib.profiles import pmu
        import torch
        cc = torch.cuda.get_device_capability()
        metrics = pmu.ncu_metrics(cc[0])
        res.update(device=torch.cuda.get_device_name(), capability=list(cc), metrics=metrics,
                   ncu_version=subprocess.run([args.ncu, "--version"], capture_output=True, text=True).stdout)
        regex = "regex:^(" + "|".join(EXPECTED) + ")$"
        cmd = [args.ncu, "--csv", "--page", "raw", "--print-units", "base", "--clock-control", "none",
               "--kernel-name-base", "function", "--kernel-name", regex, "--metrics", ",".join(metrics)]
        with tempfile.TemporaryDirectory() as tmp:
            p = run_child(tmp, False, cmd)
        text = p.stdout + p.stderr
        res.update(command=cmd, returncode=p.returncode,
                   rejected_metrics=[ln.strip() for ln in text.splitlines() if "Failed to find metric" in ln])
        if "ERR_NVGPUCTRPERM" in text:
            res["pmu_unavailable"] = "ncu: ERR_NVGPUCTRPERM"
        with open(os.path.join(args.out, "ncu.csv"), "w") as f:
            f.write(text)
    if text is not None:
        res["kernels"] = analyse(text)
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
    md = markdown(res)
    with open(os.path.join(args.out, "result.md"), "w") as f:
        f.write(md)
    print(md)
    print(json.dumps({k: res.get(k) for k in ("device", "pmu_unavailable", "returncode", "rejected_metrics")}))
    if res.get("child_tail"):
        print(res["child_tail"])


if __name__ == "__main__":
    main()
