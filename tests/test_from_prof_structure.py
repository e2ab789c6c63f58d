"""--from-prof iterations from a profile's own structure, on variants of the H200 recordings in
tests/fixtures/profiles/cuda built here in-process: nested ranges (the coarsest family that covers the kernels is the
iteration, a family alternating between kernel sequences is not), more or fewer ranged iterations than --warmup +
--repeats (the measured ones are the last --repeats, as with the repeating-sequence path), --range by exact name or by
family, and the minor faults (kept flushes not listed as left out, CPU-only traces, truncated .json.gz).

Every expected time is computed here from the raw events (a kernel belongs to the user range its launch call lies
in, an iteration's time is the sum of its kernel durations, the case's time the median over the measured ones),
never by the code under test."""
import copy
import gzip
import json
import os
import statistics

import pytest

from mfulib.collect import from_prof as profiles
from mfulib.core.errors import UserError

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "profiles", "cuda")


def load(name):
    path = os.path.join(FIX, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} not recorded")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def launches(events):
    """Host launch calls of the kernels, in time order."""
    k = {e["args"]["correlation"] for e in events if e.get("cat") == "kernel"}
    return sorted((e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                   and (e.get("args") or {}).get("correlation") in k), key=lambda e: float(e["ts"]))


def add_ranges(doc, groups, name, per=8, eps=0.5):
    """A user range ``name(iteration, j)`` around launches ``a:b`` of each ``per``-launch group."""
    ev = doc["traceEvents"]
    calls = launches(ev)
    for gi in range(0, len(calls), per):
        g = calls[gi:gi + per]
        for j, (a, b) in enumerate(groups):
            sub = g[a:b]
            t0, t1 = float(sub[0]["ts"]) - eps, float(sub[-1]["ts"]) + float(sub[-1]["dur"]) + eps
            ev.append({"ph": "X", "cat": "user_annotation", "name": name(gi // per, j), "pid": sub[0]["pid"],
                       "tid": sub[0]["tid"], "ts": t0, "dur": t1 - t0, "args": {}})
    return doc


def per_range_us(doc, accept):
    """Kernel time (us) of each user range whose name ``accept`` takes, in time order."""
    ev = doc["traceEvents"]
    at = {e["args"]["correlation"]: float(e["ts"]) for e in ev
          if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in ev
                   if e.get("cat") == "user_annotation" and accept(e["name"]))
    kernels = [(at.get(k["args"]["correlation"], -1), float(k["dur"])) for k in ev if k.get("cat") == "kernel"]
    return [sum(d for t, d in kernels if a <= t <= b) for a, b in spans]


def write(tmp_path, doc, name):
    path = tmp_path / name
    with open(path, "w") as f:
        json.dump(doc, f)
    return str(path)


def run(tmp_path, path, **kw):
    out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
    return profiles.from_prof(profiles.FromProfOptions(paths=[path], output_dir=str(out), **kw))["per_case"][0]


def test_nested_ranges_the_coarsest_covering_family_is_the_iteration(tmp_path):
    doc = load("own_fill_sum_plain.json.gz")
    add_ranges(doc, [(0, 8)], lambda i, j: "outer", eps=2.0)
    add_ranges(doc, [(0, 4), (4, 8)], lambda i, j: "inner")
    outer = per_range_us(doc, lambda n: n == "outer")
    assert len(outer) == 6
    expected_ns = statistics.median(outer[2:6]) * 1e3
    c = run(tmp_path, write(tmp_path, doc, "nested.json"), warmup=2, repeats=4, l2_flush="keep")
    assert c["asc_error"] is None, c["flags"]
    assert c["kernel_time_ns"] == pytest.approx(expected_ns, rel=1e-6)
    assert not any("sequence_mismatch" in f for f in c["flags"]), c["flags"]
    assert any("'inner'" in f and "alternate" in f for f in c["flags"]), c["flags"]
    # the finer family is still there on request: each instance half an iteration, flagged
    half = run(tmp_path, write(tmp_path, doc, "nested2.json"), warmup=4, repeats=8, l2_flush="keep", range_name="inner")
    assert half["kernel_time_ns"] < 0.6 * expected_ns


def test_more_ranged_iterations_than_expected_measure_the_last_ones(tmp_path):
    doc = load("autotune_user_ranges.json.gz")
    per = per_range_us(doc, lambda n: n.startswith("iteration_"))
    assert len(per) >= 4 and per[0] > 10 * per[-1]  # iteration 0 holds the autotuning
    expected_ns = statistics.median(per[-2:]) * 1e3
    path = os.path.join(FIX, "autotune_user_ranges.json.gz")
    c = run(tmp_path, path, warmup=0, repeats=2)
    assert c["asc_error"] is None, c["flags"]
    assert c["kernel_time_ns"] == pytest.approx(expected_ns, rel=1e-6)
    assert not any("measured from 1 of 2" in f for f in c["flags"]), c["flags"]


def test_a_start_cut_ranges_trace_measures_like_the_cut_plain_trace(tmp_path):
    ranged, plain = load("own_fill_sum_ranges.json.gz"), load("own_fill_sum_plain.json.gz")
    for doc in (ranged, plain):
        cut = float(launches(doc["traceEvents"])[3]["ts"]) - 0.1
        doc["traceEvents"] = [e for e in doc["traceEvents"] if float(e.get("ts", cut + 1)) >= cut]
    per = per_range_us(ranged, lambda n: n.startswith("iteration_"))
    assert len(per) == 5  # iteration_0's range went with the cut: it counts as the first warm-up iteration
    c = run(tmp_path, write(tmp_path, ranged, "cut_ranges.json"), warmup=2, repeats=4, l2_flush="keep")
    assert c["asc_error"] is None, c["flags"]
    assert c["kernel_time_ns"] == pytest.approx(statistics.median(per[1:5]) * 1e3, rel=1e-6)
    # the cut plain trace: the same iterations measured (the last 4 of the 6 expected), by the repeating sequence
    k = sorted((e for e in plain["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: float(e["ts"]))
    whole = [k[i:i + 8] for i in range(len(k) % 8, len(k), 8)]
    p = run(tmp_path, write(tmp_path, plain, "cut_plain.json"), warmup=2, repeats=4, l2_flush="keep")
    assert p["kernel_time_ns"] == pytest.approx(
        statistics.median(sum(float(e["dur"]) for e in it) for it in whole[-4:]) * 1e3, rel=1e-6)


def test_range_by_exact_name_or_by_family(tmp_path):
    path = os.path.join(FIX, "own_fill_sum_ranges.json.gz")
    doc = load("own_fill_sum_ranges.json.gz")
    third = per_range_us(doc, lambda n: n == "iteration_3")
    assert len(third) == 1
    one = run(tmp_path, path, warmup=0, repeats=1, l2_flush="keep", range_name="iteration_3")
    assert one["asc_error"] is None, one["flags"]
    assert one["kernel_time_ns"] == pytest.approx(third[0] * 1e3, rel=1e-6)
    every = per_range_us(doc, lambda n: n.startswith("iteration_"))
    for spelling in ("iteration_", "iteration#"):  # the family, as the messages spell it or by its prefix
        c = run(tmp_path, path, warmup=2, repeats=4, l2_flush="keep", range_name=spelling)
        assert c["kernel_time_ns"] == pytest.approx(statistics.median(every[2:6]) * 1e3, rel=1e-6), spelling
    with pytest.raises(UserError, match="iteration#"):
        run(tmp_path, path, range_name="no_such_range")


def test_kept_flushes_are_not_listed_as_left_out(tmp_path):
    path = os.path.join(FIX, "flush_zero_shapes.json.gz")
    load("flush_zero_shapes.json.gz")
    kept = run(tmp_path, path, l2_flush="keep")
    dropped = run(tmp_path, path, l2_flush="exclude")
    assert any("kept in the operator's time" in f for f in kept["flags"]), kept["flags"]
    assert not any("l2_flush" in f and "left out" in f for f in kept["flags"]), kept["flags"]
    assert any("l2_flush" in f and "left out" in f for f in dropped["flags"]), dropped["flags"]


def test_cpu_only_trace_and_truncated_gzip_are_named(tmp_path):
    doc = load("plain.json.gz")
    cpu = copy.deepcopy(doc)
    cpu["deviceProperties"] = []
    cpu["traceEvents"] = [e for e in cpu["traceEvents"] if e.get("cat") not in
                          ("kernel", "cuda_runtime", "cuda_driver", "gpu_memset", "gpu_user_annotation")]
    with pytest.raises(UserError, match="without any CUDA activity"):
        run(tmp_path, write(tmp_path, cpu, "cpu_only.json"))
    raw = open(os.path.join(FIX, "plain.json.gz"), "rb").read()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[:len(raw) // 2])
    with pytest.raises(UserError, match="truncated gzip"):
        run(tmp_path, str(cut))
