#!/usr/bin/env python3
"""Check the ncu metric list and the bound rules of mfulib.profiles.pmu / mfulib.report.bound on a real GPU (the H200).

  python3 bench/pmu_bound_h200.py --out $OUT/pmu_bound        # on the GPU machine (~1-2 min)

Runs a small child program under ``ncu --csv --page details --print-units base --clock-control none --metrics
<mfulib.profiles.pmu.ncu_metrics(cc)>`` (the list the collector passes) that launches, once each after a warm-up:

* ``triton_gemm_fp16``   a Triton ``tl.dot`` GEMM, 4096 x 4096 x 4096 fp16 (Hopper: warpgroup MMA) - expected tensor-bound;
* ``torch.matmul`` fp16  the cuBLAS GEMM of the same shape - expected tensor-bound;
* ``copy``               a 1 GiB device copy (``y.copy_(x)``) - expected memory-bound (DRAM);
* ``small_layer_norm``   ``torch.nn.functional.layer_norm`` on a 4 x 256 fp16 tensor - expected latency-bound (small grid).

Probes first: ``ncu --version`` and a one-kernel run; a permission error (``ERR_NVGPUCTRPERM``) or a missing ncu is
written to ``result.json`` as ``pmu_unavailable`` and the script exits 0 (nothing else to measure). Writes
``ncu_details.csv`` (stdout as captured) and ``result.json``: per launch the kernel name, the canonical counters
(:func:`mfulib.profiles.pmu.from_ncu_record`), the bound (:func:`mfulib.report.bound.classify`) and the expected label above, plus
ncu's lines about metrics it rejected. Nothing here is typed by hand: every number is what ncu wrote.
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

CHILD = r'''
import torch, triton, triton.language as tl

@triton.jit
def triton_gemm_fp16(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))

n = 4096
a = torch.randn(n, n, device="cuda", dtype=torch.float16)
b = torch.randn(n, n, device="cuda", dtype=torch.float16)
c = torch.empty(n, n, device="cuda", dtype=torch.float16)
x = torch.empty(1 << 28, device="cuda", dtype=torch.float32)
y = torch.empty_like(x)
s = torch.randn(4, 256, device="cuda", dtype=torch.float16)
grid = (n // 128, n // 128)
for _ in range(2):  # warm-up (compiles); ncu profiles every launch, the script keeps the last of each kind
    triton_gemm_fp16[grid](a, b, c, n, n, n, BM=128, BN=128, BK=64, num_warps=8, num_stages=3)
    torch.matmul(a, b)
    y.copy_(x)
    torch.nn.functional.layer_norm(s, (256,))
torch.cuda.synchronize()
'''
EXPECT = (("triton_gemm_fp16", "tensor-bound"), ("gemm", "tensor-bound"), ("copy", "memory-bound"),
          ("elementwise", "memory-bound"), ("layer_norm", "latency-bound"))


def expected(name):
    low = name.lower()
    return next((lab for key, lab in EXPECT if key in low), None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ncu", default=shutil.which("ncu") or "/usr/local/cuda/bin/ncu")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from mfulib.report import bound
    from mfulib.profiles import ncu
    from mfulib.profiles import pmu
    result = {"ncu": args.ncu, "pmu_unavailable": None}
    if not os.path.exists(args.ncu):
        result["pmu_unavailable"] = "ncu not found"
    else:
        result["ncu_version"] = subprocess.run([args.ncu, "--version"], capture_output=True, text=True).stdout
        import torch
        cc = torch.cuda.get_device_capability()
        metrics = pmu.ncu_metrics(cc[0])
        result.update(device=torch.cuda.get_device_name(), capability=list(cc), metrics=metrics)
        with tempfile.TemporaryDirectory() as tmp:
            child = os.path.join(tmp, "child.py")
            with open(child, "w") as f:
                f.write(CHILD)
            for attempt in range(2):  # a second run without the metrics this ncu rejected (said in the result)
                cmd = [args.ncu, "--csv", "--page", "details", "--print-units", "base", "--clock-control", "none",
                       "--metrics", ",".join(metrics), sys.executable, child]
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=270)
                text = proc.stdout + proc.stderr
                # ncu: "==ERROR== Failed to find metric regex:^<name>\.(...)$" for a metric it does not know
                bad = [ln.strip() for ln in text.splitlines() if "Failed to find metric" in ln]
                result.setdefault("rejected_metrics", []).extend(bad)
                bases = [m.group(1) for m in (re.search(r"regex:\^([A-Za-z0-9_]+)", ln) for ln in bad) if m]
                if not bad or attempt:
                    break
                metrics = [m for m in metrics if not any(m.startswith(b) for b in bases)]
        with open(os.path.join(args.out, "ncu_details.csv"), "w") as f:
            f.write(text)
        result.update(command=cmd, returncode=proc.returncode, metrics_used=metrics)
        if "ERR_NVGPUCTRPERM" in text:
            result["pmu_unavailable"] = "ncu: ERR_NVGPUCTRPERM"
        last = {}
        for rec in ncu.parse_ncu_csv(proc.stdout):
            last[rec["kernel_name"]] = rec  # the last launch of each kernel (after the warm-up)
        result["kernels"] = []
        for name, rec in last.items():
            c = pmu.from_ncu_record(rec)
            result["kernels"].append({"kernel": name, "counters": c, "bound": bound.classify(c, "ncu"),
                                      "expected": expected(name), "grid": rec.get("grid"), "block": rec.get("block")})
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    for k in result.get("kernels", []):
        print(f"{k['kernel'][:60]:60s} {k['bound']['label']:14s} (expected {k['expected']}) {k['bound']['note']}")
    print(json.dumps({k: result.get(k) for k in ("device", "pmu_unavailable", "rejected_metrics", "returncode")}))


if __name__ == "__main__":
    main()
