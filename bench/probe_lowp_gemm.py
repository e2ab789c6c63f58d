"""Probe (H200): which operand layouts reach the int8 and fp8 GEMM fast paths, timed with CUDA events + L2 flush.

Prints one row per (dtype, layout, m, n, k): median time in us and TOPS/TFLOP/s (2*m*n*k / t). Used to choose the
layouts peak_calib times. Run: python3 bench/probe_lowp_gemm.py [--out DIR]
"""
import argparse, json, os, statistics, sys
import torch

def timed(fn, iters=20, flush=None):
    ts = []
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    for _ in range(iters):
        if flush is not None:
            flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return statistics.median(ts)

def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    dev = "cuda"
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)
    rows = []
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 8192), (8192, 8192, 16384), (1024, 9216, 14336),
              (6144, 6144, 6144), (12288, 12288, 12288)]
    for (m, n, k) in shapes:
        a8 = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=dev)
        for lay in ("row", "col"):
            b8 = torch.randint(-128, 128, (k, n), dtype=torch.int8, device=dev) if lay == "row" else \
                torch.randint(-128, 128, (n, k), dtype=torch.int8, device=dev).t()
            try:
                us = timed(lambda: torch._int_mm(a8, b8), flush=flush)
                rows.append(dict(dtype="int8", layout_b=lay, m=m, n=n, k=k, us=us, tops=2*m*n*k/us/1e6))
            except Exception as exc:
                rows.append(dict(dtype="int8", layout_b=lay, m=m, n=n, k=k, error=str(exc)[:200]))
            print(rows[-1], flush=True)
        if hasattr(torch, "float8_e4m3fn"):
            af = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
            bf = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
            one = torch.tensor(1.0, device=dev)
            for odt in (torch.bfloat16, torch.float16):
                try:
                    us = timed(lambda: torch._scaled_mm(af, bf, scale_a=one, scale_b=one, out_dtype=odt), flush=flush)
                    rows.append(dict(dtype="fp8_e4m3", out=str(odt), layout_b="col", m=m, n=n, k=k, us=us,
                                     tflops=2*m*n*k/us/1e6))
                except Exception as exc:
                    rows.append(dict(dtype="fp8_e4m3", out=str(odt), m=m, n=n, k=k, error=str(exc)[:200]))
                print(rows[-1], flush=True)
        ab = torch.randn(m, k, device=dev, dtype=torch.bfloat16); bb = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        us = timed(lambda: torch.mm(ab, bb), flush=flush)
        rows.append(dict(dtype="bf16", m=m, n=n, k=k, us=us, tflops=2*m*n*k/us/1e6)); print(rows[-1], flush=True)
        del a8
        torch.cuda.empty_cache()
    info = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda,
                cap=torch.cuda.get_device_capability())
    os.makedirs(a.out, exist_ok=True)
    json.dump(dict(info=info, rows=rows), open(os.path.join(a.out, "lowp_gemm.json"), "w"), indent=1)

if __name__ == "__main__":
    main()
