"""The search on CPU, through the Makefile: `make search` ranks a tiny batched-matmul pool by wall clock, measures
the leaders with the collector, and `make collect` afterwards measures exactly the chosen cases, each marked with
its origin; `make SEARCH=1 all` orders probe -> flops and search -> collect.

The probe step is played by a fixture: probe.json in the format of mfulib/schemas/probe_json.py plus the cases it would
have appended to both case copies, and its stamp (so these tests do not depend on max_shape_probe.py)."""
import json
import os
import shutil
import subprocess

import pytest

from mfulib.core.definitions import actual_tflops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = [pytest.mark.e2e,  # runs the search and make in subprocesses
              pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")]


def make(*args):
    return subprocess.run(["make", "-C", ROOT, *args], capture_output=True, text=True, timeout=600)


def bmm_line(b, m, k, n):
    return json.dumps({"inputs": [{"name": "A", "type": "tensor", "required": True, "dtype": "float32",
                                   "shape": [b, m, k]},
                                  {"name": "B", "type": "tensor", "required": True, "dtype": "float32",
                                   "shape": [b, k, n]}]})


ORIGINALS = [(1, 16, 16, 16), (1, 8, 8, 8), (2, 32, 16, 32), (1, 16, 32, 16)]
# what the probe would append: case 4 = case 2 with batch x2, case 5 = case 3 with m x2, case 6 = case 1 (not top 3)
APPENDED = {4: (2, {"batch": 2}, (4, 32, 16, 32)), 5: (3, {"m": 2}, (1, 32, 32, 16)), 6: (1, {"m": 2}, (1, 16, 8, 8))}


def play_the_probe(work):
    lines = [bmm_line(*s) for s in ORIGINALS] + [bmm_line(*APPENDED[c][2]) for c in sorted(APPENDED)]
    for name in ("1_BatchMatmul_perf_cases.jsonl", "model.json"):
        (work / name).write_text("\n".join(lines) + "\n")
    probe = {"schema": 1, "tool": "max_shape_probe", "op_dir": str(work), "symbols": [], "scale_dims": ["batch", "m"],
             "candidates": [{"candidate_id": k, "source_case": src, "factors": f, "input_bytes": 0, "gates": [],
                             "verdict": "pass", "failed_gate": None, "new_case_id": c}
                            for k, (c, (src, f, _s)) in enumerate(sorted(APPENDED.items()))],
             "appended": {str(c): {"source_case": src, "factors": f} for c, (src, f, _s) in APPENDED.items()},
             "complete": True, "backup": {}}
    (work / "probe.json").write_text(json.dumps(probe))


def test_make_search_then_make_collect_measures_the_chosen_points(tmp_path):
    work = tmp_path / "bmm"
    common = ["OP=zoo/1_BatchMatmul", f"WORK={work}", "BACKEND=cpu"]
    r = make(*common, "prepare")
    assert r.returncode == 0, r.stderr[-2000:]
    play_the_probe(work)
    r = make(*common, "verify")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (work / ".state" / "probe.ok").touch()  # the probe step, played by the fixture above
    r = make(*common, "search", "SEARCH_ARGS=--top-n 3 --stage2-k 2 --stage2-tie 0 --retime-top 2 --retime-runs 2 --quiet")
    # --stage2-tie 0: the top 2 alone; the default 5% band adds cases the 2-core host's noise ranks near the leader
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads((work / "grid_search.json").read_text())
    assert doc["tool"] == "mfu_grid_search" and doc["complete"] and doc["metric"] == "mfu"
    # pool: the top 3 originals by FLOPs (flops.py) at scale 1 + the variants of those; case 6 scales case 1
    pool = {p["case"]: p for p in doc["pool"]}
    assert set(pool) == {2, 3, 0, 4, 5} and [p["case"] for p in doc["pool"] if p["original"]] == [2, 3, 0]
    assert pool[4]["factors"] == {"batch": 2} and pool[4]["scale"] == 2.0 and pool[4]["flops_traced"] > 0
    assert {e["case"] for e in doc["excluded"]} == {6}
    # stage 1: every pool case timed without the profiler, ranked by traced FLOPs over the median wall time
    s1 = doc["stage1"]
    assert [r["rank"] for r in s1] == [1, 2, 3, 4, 5] and all(r["status"] == "ok" for r in s1)
    keys = [r["rank_value"] for r in s1]
    assert keys == sorted(keys, reverse=True)
    for r in s1:
        assert len(r["wall_iter_ns"]) == 2 and r["wall_median_ns"] > 0  # cpu default: 2 timed iterations
        assert r["wall_tflops"] == pytest.approx(actual_tflops(pool[r["case"]]["flops_traced"], r["wall_median_ns"]))
    # stage 2: the top 2 of stage 1 (no tie band) by the collector's kernel time; no counters on cpu: the tracer's numerator
    s2 = doc["stage2"]
    assert sorted(r["case"] for r in s2) == sorted(r["case"] for r in s1[:2])
    # re-timing: both leaders again in 2 fresh collector runs, interleaved (run r rotates stage 2's order by r), no
    # PMU pass; stage 2's own figure is run 0; the rows and the limit follow the medians
    rt = doc["retime"]
    assert rt["top_k"] == 2 and rt["runs"] == 2 and all(d["error"] is None for d in rt["runs_done"])
    first = rt["runs_done"][0]["order"]
    assert rt["runs_done"][1]["order"] == first[::-1] and sorted(first) == sorted(r["case"] for r in s2)
    for d in rt["runs_done"]:
        again = json.loads(open(d["performance_json"]).read())
        assert [c["case"] for c in again["per_case"]] == d["order"]
        assert "--pmu none" in again["command_line"]
    fig = rt["figure"]
    for r in s2:
        t = r["retimed"]
        assert t["runs"] == 3 and t["values"][0] == pytest.approx(r[fig]) and len(t["kernel_time_ns"]) == 3
        assert t["kernel_time_ns"][0] == r["kernel_time_ns"] and all(k > 0 for k in t["kernel_time_ns"])
        assert t["median"] == pytest.approx(sorted(t["values"])[1]) and t["min"] <= t["median"] <= t["max"]
        assert t["spread"] == pytest.approx((t["max"] - t["min"]) / t["median"])
    assert [r["case"] for r in s2] == rt["ranked"] and s2[0]["retimed"]["median"] >= s2[1]["retimed"]["median"]
    assert doc["best"]["retimed"]["median"] == s2[0]["retimed"]["median"]
    assert doc["best"]["kernel_time_ns"] == pytest.approx(sorted(s2[0]["retimed"]["kernel_time_ns"])[1])
    assert doc["cost_s"]["retime"] > 0 and doc["probe_cut"] is None
    assert all(r["status"] == "ok" and r["kernel_time_ns"] > 0 and r["num_src"] == "tracer" for r in s2)
    # why no executed count: the collector's own verdict on cpu ("cpu backend: no hardware counters") or the rule's
    assert all("no hardware" in r["num_src_why"] for r in s2), [r["num_src_why"] for r in s2]
    assert doc["best"]["case"] == s2[0]["case"] and doc["best"]["numerator"] == s2[0]["numerator_traced"]
    assert doc["chosen_cases"] == [r["case"] for r in s2]
    assert doc["cost_s"]["stage1"] > 0 and doc["cost_s"]["stage2"] > 0
    # make collect now measures the chosen points, each marked with where it came from
    r = make(*common, "collect")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    perf = json.loads((work / "performance.json").read_text())
    measured = [c["case"] for c in perf["per_case"] if not c.get("skipped")]
    assert measured == doc["chosen_cases"]
    assert perf["selection"]["search_json"] == "grid_search.json"
    for c in perf["per_case"]:
        origin = pool[c["case"]]
        assert c["search_origin"]["source_case"] == origin["source_case"]
        assert c["search_origin"]["factors"] == origin["factors"]


def test_make_search_1_runs_probe_before_flops_and_search_before_collect(tmp_path):
    assert make("OP=zoo/1_BatchMatmul", f"WORK={tmp_path / 'w'}", "BACKEND=cpu", "prepare").returncode == 0
    r = make("OP=zoo/1_BatchMatmul", f"WORK={tmp_path / 'w'}", "BACKEND=cpu", "SEARCH=1", "PROBE_ARGS=--max-scale 8",
             "-n", "collect")  # `-n all` stops at decompose, whose inputs no rule makes
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [ln for ln in r.stdout.splitlines() if "scripts/" in ln and "||" not in ln]
    # probe and search name check_flops (--flops-tool): their names come first
    steps = ("verify_op", "max_shape_probe", "mfu_grid_search", "check_flops", "msprof_perf_summary")
    order = [next(s for s in steps if s in ln) for ln in lines if any(s in ln for s in steps)]
    assert order.index("max_shape_probe") < order.index("check_flops") < order.index("msprof_perf_summary")
    assert order.index("verify_op") < order.index("max_shape_probe") < order.index("mfu_grid_search") \
        < order.index("msprof_perf_summary")
    probe = next(ln for ln in lines if "max_shape_probe" in ln)
    assert "--flops-tool" in probe and "--max-bytes 10e9 --max-ms 4000" in probe and "--max-scale 8" in probe
    assert "--backend cpu --device 0 --seed 0" in probe  # the search reuses its tracer counts of that draw
    collect = next(ln for ln in lines if "msprof_perf_summary" in ln)
    assert ".state/search.ok" in collect and "--search-json grid_search.json" in collect  # only after a search
    plain = make("OP=zoo/1_BatchMatmul", f"WORK={tmp_path / 'w'}", "BACKEND=cpu", "-n", "collect")
    assert "max_shape_probe" not in plain.stdout and "mfu_grid_search" not in plain.stdout  # no search unless asked
    helptext = make("help").stdout
    assert "probe " in helptext and "search " in helptext and "SEARCH=1" in helptext
