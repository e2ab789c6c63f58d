"""The brute force of the search referee (bench/bench_search_vs_bruteforce.py): its points, its own timing, its gates.

Independent of the search's code path (``mfulib.search`` is never imported): the points are enumerated here, timed
here, and judged here. Shared with the tool are only the facts both must agree on: the case-file reader and the
symbol analysis (``mfulib.core.symbols``: which (tensor, axis) positions are one dimension, and ``scale_case``, which
scales a case line with its followers), the work dir's ``flops.py`` (the numerator), verify's comparison and
tolerances (``mfulib.verify.correctness``) and the peaks of the state directory's ``peak.json``.

Points (:func:`enumerate_points`): the top ``top`` original cases by flops.py FLOPs (input bytes for an operator
without matrix work; all cases if fewer) at scale 1, and for each one every non-empty subset of its scalable axes
(:func:`referee_axes`) x every combination of powers of two ``2 .. max_scale`` per axis of the subset.

Timing order: the source cases at scale 1, then most work first (:func:`point_work`: flops.py FLOPs, input bytes
for an operator without matrix work), so a brute force cut by its budget has timed the originals and the largest
points; the points it did not reach are counted.

Gates, the probe's limits: input + output bytes <= ``max_bytes`` (inputs checked before anything is allocated), one
forward call <= ``max_ms``, the reference accepts the case (flops.py and the forward do not reject it), and ModelNew
matches Model within verify's tolerance - checked for the best timed points only, best first, until one passes
(:func:`child_main`); where the reference runs out of memory and ModelNew does not, its output is only checked to
be finite (``verified: "finite (reference does not fit)"``). A point whose factors are all >= those of a point of
the same source case that failed the bytes, time or memory gate is not run (``dominated``): those gates only grow
with every factor.

Timing (:func:`time_forward`): ModelNew only; on an accelerator device events around each forward call after an
L2 flush (a 256 MiB buffer zeroed before every call, outside the events), the median of ``n`` calls; on the CPU
``time.perf_counter`` around each call (the Triton interpreter: a smoke test, not a measurement).
"""
from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
import time

SCALE_KINDS = ("batch", "seq", "seq_q", "seq_k")  # SKILL.md step 2: sequence and batch scale, heads/head_dim stay
# a matmul of two data operands: its k (B's axis -2) and n (B's last axis) set the arithmetic intensity with m
GEMM_KINDS = ("gemm_k", "gemm_n")
GATED = ("bytes", "time", "oom")  # failures that grow with every factor: larger points of the same case fail too
FLUSH_BYTES = 256 * 2 ** 20  # the L2 flush buffer (H200 L2: 50 MiB; triton.testing.do_bench flushes 256 MB)


def is_weight(name: str) -> bool:
    """True for an input named like a weight (weight1, w2, bias, gamma, ``*_weight``): weights never scale - the
    project's one naming rule (:data:`mfulib.core.symbol_rules.WEIGHT_NAME`), so the referee and the search agree on
    what a weight is and differ only in the points they try and how they time them."""
    from mfulib.core.symbol_rules import WEIGHT_NAME
    return bool(WEIGHT_NAME.search(name or ""))


def referee_axes(group) -> list:
    """Names of the symbols of a :class:`mfulib.core.symbols.SymbolGroup` the brute force scales: the batch and
    sequence kinds, a batched matmul's ``gemm_k`` / ``gemm_n`` (k and n of a matmul of two data operands), and a
    ``hidden`` symbol (the contraction axis k) where every tensor it touches is a data operand
    and it touches two (a batched matmul of two inputs); never a symbol on a weight, never one made only of
    attributes. A stated choice of the referee, made apart from the search's ``--scale-dims``."""
    out = []
    for s in group.symbols:
        if not s.positions or s.positions[0][1] is None:
            continue
        names = {n for n, _ax in list(s.positions) + list(s.followers)}
        if any(is_weight(n) for n in names):
            continue
        tensors = {n for n, ax in s.positions if ax is not None} | {n for n, ax in s.followers if ax is not None}
        if s.kind in SCALE_KINDS + GEMM_KINDS or (s.kind == "hidden" and len(tensors) >= 2):
            out.append(s.name)
    return out


def axis_subsets(names: list) -> list:
    """Every non-empty subset of ``names`` as a tuple, smallest first, each in ``names``' order."""
    return [c for r in range(1, len(names) + 1) for c in itertools.combinations(names, r)]


def powers_of_two(max_scale: int) -> list:
    """2, 4, ... <= ``max_scale`` (empty below 2)."""
    out, f = [], 2
    while f <= max_scale:
        out.append(f)
        f *= 2
    return out


def factor_sets(names: list, max_scale: int) -> list:
    """[{axis: factor}] for every subset of ``names`` x every power-of-two combination on it (no factor 1 inside a
    subset, so no point appears twice), in ascending order of the product per subset."""
    out = []
    for sub in axis_subsets(names):
        combos = itertools.product(powers_of_two(max_scale), repeat=len(sub))
        out += [dict(zip(sub, c)) for c in sorted(combos, key=lambda c: (_prod(c), c))]
    return out


def _prod(values):
    p = 1
    for v in values:
        p *= v
    return p


def dominated(factors: dict, failed: list):
    """The first of ``failed`` [{factors}] whose every factor is <= ``factors``' (missing = 1), or None."""
    for f in failed:
        if all(factors.get(k, 1) >= v for k, v in f.items()):
            return f
    return None


def input_bytes(case: dict) -> int:
    """Bytes of the tensor inputs of a case line (shape x element size)."""
    from mfulib.core.cases import describe_case
    return int(describe_case(case).input_bytes)


def enumerate_points(cases: list, ranks: list, max_scale: int, max_input_bytes: float) -> list:
    """The brute force's points: ``ranks`` [case id] (the source cases, best first); per source case its scale-1
    point, then every :func:`factor_sets` point of its :func:`referee_axes`, scaled by ``mfulib.core.symbols.
    scale_case``; a point whose inputs exceed ``max_input_bytes`` or that cannot be scaled (a refusal) is kept with
    its status set. Returns [{point, source_case, factors, case, status (None: to run), reason}]."""
    from mfulib.core.cases import describe_case
    from mfulib.core.symbols import analyse, scale_case, unique_names
    infos = [describe_case(c, i) for i, c in enumerate(cases)]
    groups = analyse(infos)
    unique_names(groups)
    group_of = {cid: g for g in groups for cid in g.cases}
    points = []
    for cid in ranks:
        g = group_of[cid]
        for factors in [{}] + factor_sets(referee_axes(g), max_scale):
            new, refusals = scale_case(cases[cid], infos[cid], g, factors) if factors else (cases[cid], [])
            row = {"point": len(points), "source_case": cid, "factors": factors, "case": new, "status": None,
                   "reason": None}
            nbytes = input_bytes(new)
            if refusals:
                row.update(status="refused", reason="; ".join(refusals))
            elif nbytes > max_input_bytes:
                row.update(status="bytes", reason=f"inputs {nbytes:.3g} B > {max_input_bytes:.3g} B")
            points.append(row)
    return points


def point_work(points: list, flops_py: str, metric: str) -> None:
    """Set each point's ``work``: flops.py's FLOPs of its case ("mfu") or its input bytes ("mbu"); 0 where flops.py
    rejects it. Only the timing order reads it (:func:`next_work`)."""
    from mfulib.flops.contract import evaluate_case, load_flops
    ff = load_flops(flops_py)
    for p in points:
        if p["status"]:
            continue
        if metric == "mbu":
            p["work"] = float(input_bytes(p["case"]))
            continue
        ev = evaluate_case(ff, p["case"], case_id=p["point"])
        p["work"] = float(ev["flops"] or 0.0) if ev["status"] == "ok" else 0.0


def source_ranks(cases: list, flops_py: str, top: int, keep=None) -> tuple:
    """(case ids best first, metric): the ``top`` original cases with the most flops.py FLOPs ("mfu"), or with the
    most input bytes when no case has matrix work ("mbu"); ``keep(case) -> bool`` filters first (the cpu smoke test
    keeps what the interpreter runs). Cases flops.py rejects are left out."""
    from mfulib.flops.contract import evaluate_case, load_flops
    ff = load_flops(flops_py)
    rows = []
    for cid, case in enumerate(cases):
        if keep is not None and not keep(case):
            continue
        ev = evaluate_case(ff, case, case_id=cid)
        if ev["status"] == "ok":
            rows.append((cid, ev["flops"] or 0.0, input_bytes(case)))
    metric = "mfu" if any(f > 0 for _c, f, _b in rows) else "mbu"
    key = (lambda r: (-r[1], -r[2], r[0])) if metric == "mfu" else (lambda r: (-r[2], r[0]))
    return [r[0] for r in sorted(rows, key=key)[:top]], metric


# ------------------------------------------------------------------------------------------------ the child
def time_forward(run, backend, sync, n_min: int = 3, n_max: int = 30, target_s: float = 0.3) -> tuple:
    """(median ns of one forward call, calls timed): ``run()`` is one call, already compiled. Accelerator: device
    events around each call, a 256 MiB buffer zeroed before it (outside the events: the L2 starts cold), ``n``
    = clamp(target_s / first timed call, n_min, n_max); cpu: ``time.perf_counter``, 2 calls."""
    import torch
    if backend == "cpu":
        ts = []
        for _ in range(2):
            t0 = time.perf_counter()
            run()
            ts.append((time.perf_counter() - t0) * 1e9)
        return statistics.median(ts), len(ts)
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=f"{backend}")
    ts, n = [], n_min
    while len(ts) < n:
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        ts.append(start.elapsed_time(end) * 1e6)
        if len(ts) == 1:
            n = max(n_min, min(n_max, int(target_s / max(ts[0] * 1e-9, 1e-6))))
    del flush
    sync()
    return statistics.median(ts), len(ts)


def _out_bytes(out) -> int:
    from mfulib.core.opdir import tensors_in
    return sum(t.numel() * t.element_size() for t in tensors_in(out))


def time_point(od, point: dict, spec: dict, backend, ff) -> dict:
    """Build, run (first call: compile), gate and time one point of the brute force's work dir ``od``."""
    import torch
    from mfulib.core.cases import describe_case
    from mfulib.core.failures import classify
    from mfulib.flops.contract import evaluate_case
    row = {"point": point["point"]}
    t0 = time.perf_counter()
    built = None
    try:
        built = od.build_case(point["point"], impl="asc", seed=spec["seed"], device=spec["device"])
        ev = evaluate_case(ff, point["case"], args=built.args, case_id=point["point"])
        if ev["status"] != "ok":
            return dict(row, status="rejected", reason=f"flops.py: {ev['reason']}", wall_s=time.perf_counter() - t0)
        with torch.no_grad():
            t1 = time.perf_counter()
            out = built.run()
            backend.sync()
            row["first_call_s"] = time.perf_counter() - t1  # compile (autotune) + one call
            nbytes = input_bytes(point["case"]) + _out_bytes(out)
            del out
            if nbytes > spec["max_bytes"]:
                return dict(row, status="bytes", reason=f"inputs + outputs {nbytes:.3g} B > {spec['max_bytes']:.3g}",
                            wall_s=time.perf_counter() - t0)
            t1 = time.perf_counter()
            built.run()
            backend.sync()
            once_ms = (time.perf_counter() - t1) * 1e3
            if once_ms > spec["max_ms"]:
                return dict(row, status="time", reason=f"one call {once_ms:.0f} ms > {spec['max_ms']:.0f} ms",
                            wall_s=time.perf_counter() - t0)
            # a call of >= 300 ms is timed once (its median over 3 would cost seconds and move nothing)
            ns, n = time_forward(built.run, spec["backend"], backend.sync, n_min=1 if once_ms >= 300 else 3)
        info = describe_case(point["case"], point["point"])
        row.update(status="ok", time_ns=ns, n_calls=n, flops=ev["flops"], bytes=nbytes,
                   compute_dtype=ff.compute_dtype(point["case"], point["point"]), shape=info.shape_str)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - one point failing is that point's verdict
        status, msg = classify(exc)
        row.update(status=status, reason=msg[:400])
    finally:
        if built is not None:
            built.close()
        backend.empty_cache()
    row["wall_s"] = time.perf_counter() - t0
    return row


def verify_point(od, pid: int, spec: dict, backend) -> dict:
    """Verify's comparison of ModelNew with Model on one point; where the reference alone runs out of memory,
    ModelNew's output checked for finiteness instead (verified ``finite (reference does not fit)``)."""
    import torch
    from mfulib.core.opdir import tensors_in
    from mfulib.verify.correctness import verify_case
    t0 = time.perf_counter()
    row = verify_case(od, pid, device=spec["device"], seed=spec["seed"], backend=backend.name)
    out = {"verify": pid, "status": row.get("status"), "reason": row.get("reason"), "verified": None}
    if row.get("status") == "pass":
        out["verified"] = "full"
    elif row.get("status") == "oom" and str(row.get("reason", "")).startswith("reference"):
        backend.empty_cache()
        b = od.build_case(pid, impl="asc", seed=spec["seed"], device=spec["device"])
        try:
            with torch.no_grad():
                finite = all(bool(torch.isfinite(t).all()) for t in tensors_in(b.run()))
        finally:
            b.close()
        out.update(status="pass" if finite else "fail", verified="finite (reference does not fit)" if finite else None)
    backend.empty_cache()
    out["wall_s"] = time.perf_counter() - t0
    return out


def figure(row: dict, peaks: dict, metric: str, backend_name: str):
    """(figure, TFLOP/s or GB/s): MFU@ach (TFLOP/s / peak.json's peak of the compute dtype; TF32 where fp32 dots
    run as TF32) or, for ``metric`` "mbu", bytes / time / peak.json's bandwidth. Without any peak in peak.json
    the figure is the raw TF/s; with peaks but none for this dtype it is None (never a rate ranked among
    utilisations): such a point is not ranked."""
    from mfulib.backends import fp32_dot_is_tf32
    from mfulib.core.definitions import actual_tflops, mbu, measured_peak_tflops
    if row.get("status") != "ok" or not row.get("time_ns"):
        return None, None
    if metric == "mbu":
        gbps = row["bytes"] / row["time_ns"]
        v = mbu(row["bytes"], row["time_ns"], peaks.get("bandwidth_gbps"))
        return (v if v is not None else gbps), gbps
    tf = actual_tflops(row["flops"], row["time_ns"])
    dt = row.get("compute_dtype") or "float32"
    if not peaks.get("peak_tflops"):
        return tf, tf
    peak, _key = measured_peak_tflops(peaks["peak_tflops"], dt, fp32_dot_is_tf32(backend_name, dt))
    return (tf / peak if peak else None), tf


def read_rows(path: str) -> tuple:
    """({point: timing row}, {point: verify row}, started-but-unfinished point or None) from the child's JSONL."""
    timed, verified, started = {}, {}, None
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue  # a line cut by a kill
                if "start" in d:
                    started = d["start"]
                elif "row" in d:
                    timed[d["row"]["point"]] = d["row"]
                    started = None
                elif "verify" in d:
                    verified[d["verify"]] = d
                    started = None
    return timed, verified, started


def next_work(points: list, timed: dict, verified: dict, ranked_ok: list, max_verify: int, timing: bool = True):
    """("time", point) for the next point to time (not timed, not pre-failed, not dominated), ("dominated", point,
    by) for one to record as dominated, ("verify", point id) for the next best timed point to verify, or None when
    the brute force is done: every point timed (or ``timing`` False: its budget is spent) and a point verified (or
    ``max_verify`` tried, or none ok)."""
    failed = {}
    for p in points:
        r = timed.get(p["point"]) or ({"status": p["status"]} if p["status"] else None)
        if r and r["status"] in GATED and p["factors"]:
            failed.setdefault(p["source_case"], []).append(p["factors"])
    # every source case at scale 1 first, then most FLOPs (bytes) first where the plan recorded them: a brute force
    # cut by its budget has timed the originals and the largest points; plans without the figure keep the
    # enumeration's order
    order = sorted(points, key=lambda p: (bool(p["factors"]) if "work" in p else 0, -(p.get("work") or 0),
                                          p["point"]))
    for p in order if timing else []:
        if p["point"] in timed or p["status"]:
            continue
        by = dominated(p["factors"], failed.get(p["source_case"], [])) if p["factors"] else None
        return ("dominated", p, by) if by is not None else ("time", p)
    tried = [pid for pid in ranked_ok if pid in verified]
    if any(verified[pid]["status"] == "pass" for pid in tried) or len(tried) >= max_verify:
        return None
    rest = [pid for pid in ranked_ok if pid not in verified]
    return ("verify", rest[0]) if rest else None


def child_main(spec_path: str) -> int:
    """The brute-force child: time points and verify the leaders, one JSONL line each (``{"start": id}`` first, so
    a crash is charged to its point), until done or ``spec["deadline"]`` (time.time(): the call's end); after
    ``spec["timing_deadline"]`` (the brute force's budget) no more points are timed, the timed ones are verified.
    Returns 0 when done, 3 when stopped by the deadline."""
    with open(spec_path) as f:
        spec = json.load(f)
    from mfulib.backends import get_backend
    from mfulib.core.opdir import OpDir
    from mfulib.flops.contract import load_flops
    from mfulib.run import compat, interpreter
    backend = get_backend(spec["backend"])
    backend.prepare_process()
    compat.install(spec["device"])
    if backend.interpreter:
        interpreter.install_launch_hook()
    with open(spec["points"]) as f:
        points = json.load(f)
    od = OpDir(spec["work"])
    ff = load_flops(os.path.join(spec["work"], "flops.py"))
    peaks = spec["peaks"]
    with open(spec["rows"], "a", encoding="utf-8") as out:
        while time.time() < spec["deadline"]:
            timed, verified, _started = read_rows(spec["rows"])
            ranked = rank_ok(points, timed, peaks, spec["metric"], backend.name)
            work = next_work(points, timed, verified, ranked, spec["max_verify"],
                             timing=time.time() < spec["timing_deadline"])
            if work is None:
                return 0
            if work[0] == "dominated":
                row = {"point": work[1]["point"], "status": "dominated",
                       "reason": f"a point of source case {work[1]['source_case']} with factors {work[2]} failed a "
                                 "gate that grows with every factor", "wall_s": 0.0}
                out.write(json.dumps({"row": row}) + "\n")
            elif work[0] == "time":
                out.write(json.dumps({"start": work[1]["point"]}) + "\n")
                out.flush()
                interpreter.reset()
                out.write(json.dumps({"row": time_point(od, work[1], spec, backend, ff)}, default=str) + "\n")
            else:
                out.write(json.dumps({"start": work[1]}) + "\n")
                out.flush()
                out.write(json.dumps(verify_point(od, work[1], spec, backend), default=str) + "\n")
            out.flush()
    return 3


def rank_ok(points: list, timed: dict, peaks: dict, metric: str, backend_name: str) -> list:
    """Point ids timed ok, best :func:`figure` first."""
    scored = [(figure(timed[p["point"]], peaks, metric, backend_name)[0], p["point"]) for p in points
              if p["point"] in timed]
    return [pid for v, pid in sorted((s for s in scored if s[0] is not None), key=lambda s: (-s[0], s[1]))]


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(description="The brute-force child of bench/bench_search_vs_bruteforce.py (which "
                                            "writes its spec): times and verifies points until done or the spec's "
                                            "deadline. Exit 0 done, 3 deadline.")
    p.add_argument("spec", help="brute_spec.json written by bench_search_vs_bruteforce.py")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
    return child_main(args.spec)


if __name__ == "__main__":
    sys.exit(main())
