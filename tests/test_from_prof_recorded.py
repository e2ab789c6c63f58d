"""--from-prof on the CUDA profiles recorded on the H200 by bench/record_profile_fixtures.py (real runs, never typed by
hand), with the faults planted here by editing copies of them: launches cut from the head of the window, kernel
records lost at its tail, every kernel record gone. Skipped until the recordings are in
tests/fixtures/profiles/cuda/ (manifest.json says what each file holds)."""
import copy
import gzip
import json
import os

import pytest

from mfulib.profiles import ncu
from mfulib.collect import from_prof as profiles

FIX = os.environ.get("MFU_PROFILE_FIXTURES") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                                                             "profiles", "cuda")  # env: read a fresh $OUT copy
MANIFEST = os.path.join(FIX, "manifest.json")
pytestmark = pytest.mark.skipif(not os.path.exists(MANIFEST), reason="no H200 recordings yet: run "
                                "bench/record_profile_fixtures.py on the GPU and copy its output to " + FIX)


@pytest.fixture(scope="module")
def man():
    with open(MANIFEST) as f:
        return json.load(f)


def fixture(name, man):
    path = os.path.join(FIX, name)
    ent = man["files"].get(name) or {}
    if not os.path.exists(path) or ent.get("returncode") != 0:
        pytest.skip(f"{name} was not recorded (returncode {ent.get('returncode')})")
    return path


def reparse(tmp_path, path, man, **kw):
    kw.setdefault("warmup", man["warmup"])
    kw.setdefault("repeats", man["repeats"])
    opts = profiles.FromProfOptions(paths=[str(path)], output_dir=str(tmp_path / f"out{len(os.listdir(tmp_path))}"),
                                    **kw)
    return profiles.from_prof(opts)["per_case"][0]


def load_gz(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def write_gz(path, doc):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(doc, f)
    return path


def test_plain_user_trace_measures_the_same_kernels_as_the_tools_ranges(tmp_path, man):
    ranged = reparse(tmp_path, fixture("tool_ranges.json.gz", man), man)
    plain = reparse(tmp_path, fixture("plain.json.gz", man), man)
    assert ranged["asc_error"] is None and plain["asc_error"] is None, (ranged["asc_error"], plain["asc_error"])
    assert plain["sequence"] == ranged["sequence"] == man["files"]["tool_ranges.json.gz"]["sequence"]
    assert any("repeating launch sequence" in f for f in plain["flags"])
    assert plain["kernel_time_ns"] == pytest.approx(ranged["kernel_time_ns"], rel=0.25)  # two runs of one kernel


def test_recorded_zero_flush_is_excluded_and_keep_adds_it_back(tmp_path, man):
    ranged = reparse(tmp_path, fixture("tool_ranges.json.gz", man), man)
    for name, how in (("flush_zero.json.gz", "estimated: duration x nominal"),
                      ("flush_zero_shapes.json.gz", "Input Dims")):
        path = fixture(name, man)
        ex = reparse(tmp_path, path, man)
        kp = reparse(tmp_path, path, man, l2_flush="keep")
        assert ex["asc_error"] is None and ex["sequence"] == ranged["sequence"], ex["flags"]
        assert ex["harness_launches_dropped"] >= man["iterations"]
        assert any("L2-flush" in f and how in f for f in ex["flags"]), ex["flags"]
        assert kp["kernel_time_ns"] > ex["kernel_time_ns"] and len(kp["sequence"]) == len(ex["sequence"]) + 1


def test_recorded_autotuning_is_recognised_with_and_without_ranges(tmp_path, man):
    c = reparse(tmp_path, fixture("autotune_plain.json.gz", man), man)
    assert c["asc_error"] is None and c["sequence"] == ["tuned_scale_kernel"], c["flags"]
    assert any("autotuning recognised" in f or "extra launch(es) of" in f for f in c["flags"]), c["flags"]
    c = reparse(tmp_path, fixture("autotune_ranges.json.gz", man), man)
    assert c["asc_error"] is None and c["sequence"] == ["tuned_scale_kernel"], c["flags"]
    assert any("autotuning recognised - left out" in f for f in c["flags"]), c["flags"]


def test_planted_faults_in_a_recorded_trace(tmp_path, man):
    doc = load_gz(fixture("plain.json.gz", man))
    kernels = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: float(e["ts"]))
    corr = lambda e: (e.get("args") or {}).get("correlation")  # noqa: E731
    # head: the first kernel record and its launch call are not in the window
    head = copy.deepcopy(doc)
    cut = corr(kernels[0])
    head["traceEvents"] = [e for e in head["traceEvents"] if corr(e) != cut]
    c = reparse(tmp_path, write_gz(tmp_path / "head.json.gz", head), man, warmup=0, repeats=man["iterations"])
    k = len(c["sequence"] or [])
    assert c["asc_error"] is None and len(c["iter_kernel_time_ns"]) <= man["iterations"] - 1, c["flags"]
    assert any(f"found {man['iterations'] - 1} of {man['iterations']}" in f for f in c["flags"]) or k == 1
    # tail: the last kernel record is lost but its launch call was recorded
    tail = copy.deepcopy(doc)
    lost = corr(kernels[-1])
    tail["traceEvents"] = [e for e in tail["traceEvents"] if not (e.get("cat") == "kernel" and corr(e) == lost)]
    c = reparse(tmp_path, write_gz(tmp_path / "tail.json.gz", tail), man)
    assert c["kernel_time_ns"] is None and "buffer not drained" in c["asc_error"]
    # nothing: every kernel record gone (launch calls kept) / every device event gone
    none = copy.deepcopy(doc)
    none["traceEvents"] = [e for e in none["traceEvents"] if e.get("cat") != "kernel"]
    c = reparse(tmp_path, write_gz(tmp_path / "none.json.gz", none), man)
    assert c["kernel_time_ns"] is None and "buffer not drained" in c["asc_error"]
    empty = copy.deepcopy(doc)
    empty["traceEvents"] = [e for e in empty["traceEvents"] if e.get("cat") not in
                            ("kernel", "cuda_runtime", "cuda_driver", "gpu_memset", "gpu_memcpy")]
    c = reparse(tmp_path, write_gz(tmp_path / "empty.json.gz", empty), man)
    assert c["kernel_time_ns"] is None and "no device kernel" in c["asc_error"]


def test_recorded_ncu_details_page_metric_and_rule_rows(tmp_path, man):
    path = fixture("ncu_details.csv", man)
    recs = ncu.parse_ncu_csv(open(path, encoding="utf-8", errors="replace").read())
    assert recs and all(ncu.duration_ns(r) and ncu.duration_ns(r) > 0 for r in recs)  # value + time unit per launch
    assert all(isinstance(r["metrics"].get("sm__throughput.avg.pct_of_peak_sustained_elapsed"), float) for r in recs)
    assert any(r["rules"] for r in recs)  # the SpeedOfLight section's rule rows, kept beside the metrics
    c = reparse(tmp_path, path, man)
    assert c["asc_error"] is None and c["span_ns"] is None, c["flags"]
    if "device__attribute_l2_cache_size" in man["files"]["ncu_details.csv"]["metrics"]:
        assert any("L2-flush" in f and "ncu dram__bytes" in f for f in c["flags"]), c["flags"]


def test_recorded_ncu_raw_page_gives_the_kernel_times(tmp_path, man):
    c = reparse(tmp_path, fixture("ncu_raw.csv", man), man)
    ranged = reparse(tmp_path, fixture("tool_ranges.json.gz", man), man)
    assert c["asc_error"] is None, c["flags"]
    assert [profiles_short(s) for s in c["sequence"]] == [profiles_short(s) for s in ranged["sequence"]]
    assert c["kernel_time_ns"] > 0


def profiles_short(name):
    return ncu.short_kernel_name(name)
