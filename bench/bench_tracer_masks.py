#!/usr/bin/env python3
"""The FLOP tracer on a reference that masks its scores per chunk of query rows: mid-size masks described by
their construction (the default) against the value path (every mask below 2^24 entries computed, inverted and
counted on the host, as the tracer did before ``DESCRIBE_MIN_NUMEL`` came down to 2^16).

The reference is the bundled ``examples/ops/bench/zoo/5_MHABlock.py`` itself, causal (projections, then per chunk
of ``rows = 2^28 // (b * heads * s)`` query rows: scores, an ``arange`` comparison mask, ``masked_fill_``, softmax,
P V), traced on meta tensors with ``mfulib.flops.tracer.trace_callable`` - what gate 2 of the probe
runs on each candidate. Default shape [4, 65536, 2048], 16 heads (the probe candidate ``c8:batchx4,seqx4`` whose
gate 2 took 42.8 s on the H200 host): 1024 chunks of [64, 65536] masks.

Hand count (2 FLOPs per multiply-accumulate): projections 4 * 2 * b * s * hidden^2, attention
2 * b * heads * (s * (s + 1) / 2) * (d + d) over the causal pairs. Both modes must give exactly that, else exit 1.
Each mode runs ``--n`` times, alternating (value, description, value, ...) after one untimed warm-up trace.

Reported: median wall s per mode, ``speedup`` = value / description, the number of chunks (masks). Writes JSON to
``--out`` (default ./bench_tracer_masks.json). Exit status 0, 1 (a count differs from the hand count).

  python3 bench/bench_tracer_masks.py --n 3
"""
import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

MHA_REFERENCE = os.path.join(ROOT, "examples", "ops", "bench", "zoo", "5_MHABlock.py")


def mha_reference():
    """The bundled 5_MHABlock reference module (its ``Model`` builds meta weights for meta inputs)."""
    from mfulib.core.opdir import import_file
    return import_file(MHA_REFERENCE, "mha_reference")


def hand_count(b, s, hidden, heads) -> int:
    d = hidden // heads
    return 4 * 2 * b * s * hidden * hidden + 2 * b * heads * (s * (s + 1) // 2) * (d + d)


def trace_once(model, shape, heads, describe_min_numel):
    import torch
    from mfulib.flops import dispatch
    from mfulib.flops import tracer
    saved = dispatch.DESCRIBE_MIN_NUMEL
    dispatch.DESCRIBE_MIN_NUMEL = describe_min_numel
    try:
        x = torch.empty(*shape, dtype=torch.float16, device="meta")
        t0 = time.perf_counter()
        r = tracer.trace_callable(model, [x, heads, True], "meta")
        return time.perf_counter() - t0, r
    finally:
        dispatch.DESCRIBE_MIN_NUMEL = saved


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="4,65536,2048", help="x's shape b,s,hidden (default 4,65536,2048)")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--n", type=int, default=3, help="timed traces per mode (default 3)")
    p.add_argument("--out", default="bench_tracer_masks.json")
    a = p.parse_args(argv)
    from mfulib.flops import dispatch
    shape = tuple(int(v) for v in a.shape.split(","))
    want = hand_count(*shape, a.heads)
    modes = {"value": dispatch.SHADOW_MAX_NUMEL, "description": dispatch.DESCRIBE_MIN_NUMEL}
    ref = mha_reference()
    model = ref.Model()
    trace_once(model, shape, a.heads, modes["description"])  # warm-up: first-call imports and dispatcher caches
    walls = {m: [] for m in modes}
    counts = {}
    b, s, _ = shape
    rows = max(1, ref.SCORE_CHUNK_ELEMS // max(1, b * a.heads * s))  # the reference's own chunking
    chunks = -(-s // rows)
    for _ in range(a.n):
        for m, limit in modes.items():
            wall, r = trace_once(model, shape, a.heads, limit)
            walls[m].append(round(wall, 3))
            counts.setdefault(m, set()).add((r.total_flops, r.needs_values))
    med = {m: statistics.median(w) for m, w in walls.items()}
    ok = all(c == {(want, False)} for c in counts.values())
    res = {"shape": list(shape), "heads": a.heads, "hand_flops": want, "ok": ok,
           "flops": {m: sorted(c) for m, c in counts.items()}, "wall_s": walls, "median_s": med,
           "speedup": med["value"] / med["description"], "chunks": chunks, "mask_shape": [rows, s],
           "describe_min_numel": modes["description"], "shadow_max_numel": modes["value"]}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1, default=list)
    print(f"shape {list(shape)}, {a.heads} heads, hand count {want:.6g} FLOPs, {chunks} chunks of [{rows}, {s}] masks")
    print("| mode | median s | runs s | FLOPs = hand count |")
    print("|---|---|---|---|")
    for m in modes:
        print(f"| {m} | {med[m]:.2f} | {', '.join(f'{w:.2f}' for w in walls[m])} | "
              f"{'yes' if counts[m] == {(want, False)} else 'NO: ' + str(sorted(counts[m]))} |")
    print(f"speedup (value / description): {res['speedup']:.2f}x; wrote {a.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
