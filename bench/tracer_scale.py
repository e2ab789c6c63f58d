#!/usr/bin/env python3
"""Time and peak host memory (RSS) of the FLOP tracer on big cases: a causal 8192-token FlashAttention-V2 layer
[1, 8192, 4096], 32 heads, with its mask built four ways (torch.triu(torch.ones(s, s)), arange comparison, an
additive -inf bias from tril, and SDPA is_causal), and the largest case of every bundled operator.

Correct FLOPs of the layer: projections 4 * 2 * 8192 * 4096 * 4096 = 1.0995e12 plus causal attention
2 * 32 * (8192 * 8193 / 2) * (128 + 128) = 5.4984e11 -> 1.6493e12 (dense would be 2.1990e12).
Each measurement runs in its own process: peak RSS = ru_maxrss of that child, baseline = its peak after importing
torch and mfulib (before the trace), tracer_rss_mib = the difference; cpu_s = user + system CPU time of the trace
(less sensitive to a loaded machine than wall_s). CPU only; no accelerator needed.
Usage: python3 bench/tracer_scale.py [--out results.json]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

FAV2 = '''
import json, math, os, torch, torch.nn as nn, torch.nn.functional as F
MASK = "{mask}"
class Model(nn.Module):
    def forward(self, x, head_num):
        b, s, hidden = x.shape
        d = hidden // head_num
        w = [torch.empty(hidden, hidden, dtype=x.dtype, device=x.device) for _ in range(4)]
        q, k, v = (F.linear(x, wi).view(b, s, head_num, d).transpose(1, 2) for wi in w[:3])
        if MASK == "sdpa_is_causal":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(d)
            if MASK == "triu_ones":
                mask = torch.triu(torch.ones(s, s, dtype=torch.bool, device=x.device), diagonal=1)
                scores = scores.masked_fill(mask, float("-inf"))
            elif MASK == "arange":
                i = torch.arange(s, device=x.device)
                scores = scores.masked_fill(i[None, :] > i[:, None], float("-inf"))
            elif MASK == "tril_bias":
                keep = torch.tril(torch.ones(s, s, device=x.device, dtype=x.dtype))
                bias = torch.zeros(s, s, device=x.device, dtype=x.dtype).masked_fill(keep == 0, float("-inf"))
                scores = scores + bias
            o = scores.softmax(-1) @ v
        return F.linear(o.transpose(1, 2).reshape(b, s, hidden), w[3])
def get_input_groups():
    out = []
    for line in open(os.path.splitext(__file__)[0] + ".json"):
        if line.strip():
            x, h = json.loads(line)["inputs"]
            out.append([torch.randn(x["shape"], dtype=torch.float16), h["value"]])
    return out
def get_init_inputs():
    return []
'''
CASE = {"inputs": [{"name": "x", "type": "tensor", "required": True, "dtype": "float16", "shape": [1, 8192, 4096]},
                   {"name": "head_num", "type": "attr", "required": True, "dtype": "int", "value": 32}]}
WANT = 4 * 2 * 8192 * 4096 * 4096 + 2 * 32 * (8192 * 8193 // 2) * 256


def child(kind, arg):
    from mfulib.flops import tracer as flopcount
    from mfulib.core.opdir import OpDir
    if kind == "fav2":
        from test_flops_tracer import write_workdir
        import pathlib
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="tracer-scale-"))
        od = write_workdir(tmp, FAV2.replace("{mask}", arg), [CASE], "FAV2")
        case_id = 0
    else:
        od = OpDir(arg.split("@")[0])
        case_id = int(arg.split("@")[1])
    import torch  # noqa: F401 - imported before the baseline so the baseline holds torch itself
    base_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    r = flopcount.trace_case(od, case_id)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    rss_mib = ru1.ru_maxrss / 1024
    cpu_s = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
    print(json.dumps({"status": r.status, "device": r.device, "total_flops": r.total_flops, "wall_s": wall,
                      "cpu_s": cpu_s,
                      "peak_rss_mib": rss_mib, "baseline_rss_mib": base_mib, "tracer_rss_mib": rss_mib - base_mib,
                      "inputs_drawn": r.inputs_drawn, "needs_values": r.needs_values, "reason": r.reason,
                      "notes": r.notes[:3]}))


def measure(kind, arg):
    p = subprocess.run([sys.executable, __file__, "--child", kind, arg], capture_output=True, text=True,
                       timeout=900)
    if p.returncode:
        return {"error": p.stderr[-800:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def bundled_largest():
    """(name, op dir, case id) of the largest case (input bytes) of each bundled zoo operator."""
    from mfulib.core.opdir import OpDir
    from mfulib.sources.prepare import prepare_explicit
    bench = os.path.join(ROOT, "examples", "ops", "bench", "zoo")
    tmp = tempfile.mkdtemp(prefix="tracer-scale-zoo-")
    out = []
    for f in sorted(os.listdir(bench)):
        if not f.endswith(".json"):
            continue
        op = f[:-5]
        src = os.path.join(tmp, "src")
        os.makedirs(src, exist_ok=True)
        with open(os.path.join(src, "impl.py"), "w") as fh:
            fh.write("class ModelNew:\n    pass\n")
        dst = os.path.join(tmp, op)
        prepare_explicit(os.path.join(bench, op + ".py"), os.path.join(bench, f), os.path.join(src, "impl.py"), dst)
        od = OpDir(dst)
        n = len(od.read_cases())
        best = max(range(n), key=lambda i: od.describe(i).input_bytes)
        out.append((op, dst, best, od.describe(best).shape_str))
    return out


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    args = ap.parse_args()
    results = {"want_fav2_flops": WANT, "fav2": {}, "bundled": {}}
    for mask in ("triu_ones", "arange", "tril_bias", "sdpa_is_causal"):
        r = measure("fav2", mask)
        r["ratio_to_correct"] = (r.get("total_flops") or 0) / WANT
        results["fav2"][mask] = r
        print(f"fav2 {mask:15s} {json.dumps(r)}", flush=True)
    for op, dst, i, shape in bundled_largest():
        r = measure("opdir", f"{dst}@{i}")
        r.update(case=i, shape=shape)
        results["bundled"][op] = r
        print(f"zoo  {op:24s} {json.dumps(r)}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
