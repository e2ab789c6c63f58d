"""--from-prof defaults on the issue-28 cases recorded on the H200 by bench/record_profile_fixtures.py: an autotuned
kernel inside user ``record_function`` ranges (iteration 0 holds the autotuning and its flush kernels), an operator
whose own kernels are named fill / zero / cast / sum over 256 MiB buffers, and ncu pages of a small kernel.

The expected numbers are computed here from the raw events with a few lines of json / csv code, never by the code
under test: a kernel belongs to the user range its launch call lies in (CUPTI correlation id), an iteration's time is
the sum of its kernel durations, the case's time the median over the steady iterations. Each test is skipped while
its recording is absent (tests/fixtures/profiles/cuda/manifest.json lists what was recorded) or is the CPU plumbing
run of the recorder."""
import csv
import gzip
import json
import os
import statistics

import pytest

from mfulib.collect import from_prof as profiles

FIX = os.environ.get("MFU_PROFILE_FIXTURES") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                                                             "profiles", "cuda")
MANIFEST = os.path.join(FIX, "manifest.json")
TIME_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}


@pytest.fixture(scope="module")
def man():
    if not os.path.exists(MANIFEST):
        pytest.skip(f"no recordings in {FIX}: run bench/record_profile_fixtures.py on the GPU")
    with open(MANIFEST) as f:
        m = json.load(f)
    if m.get("cpu_plumbing_only"):
        pytest.skip("the recorder's CPU plumbing run: no device kernels to check")
    return m


def recorded(name, man):
    ent = man["files"].get(name) or {}
    if ent.get("returncode") != 0 or not os.path.exists(os.path.join(FIX, name)):
        pytest.skip(f"{name} was not recorded (returncode {ent.get('returncode')})")
    return os.path.join(FIX, name)


def reparse(tmp_path, path, **kw):
    out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
    return profiles.from_prof(profiles.FromProfOptions(paths=[path], output_dir=str(out), **kw))["per_case"][0]


def kernels_by_range(path, prefix="iteration_"):
    """{range index: [(kernel name, duration ns)]} in kernel start order, by the range each launch call lies in."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    ranges = sorted((int(e["name"][len(prefix):]), float(e["ts"]), float(e["ts"]) + float(e["dur"]))
                    for e in events if e.get("cat") == "user_annotation" and str(e.get("name")).startswith(prefix))
    launch_ts = {e["args"]["correlation"]: float(e["ts"]) for e in events
                 if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    out = {i: [] for i, _, _ in ranges}
    for k in sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: float(e["ts"])):
        t = launch_ts.get(k["args"]["correlation"])
        where = [i for i, a, b in ranges if t is not None and a <= t <= b]
        if where:
            out[where[0]].append((k["name"], float(k["dur"]) * 1e3))
    return out


def all_kernels(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    return [(e["name"], float(e["dur"]) * 1e3) for e in sorted((e for e in events if e.get("cat") == "kernel"),
                                                               key=lambda e: float(e["ts"]))]


def test_autotuning_in_the_first_user_range_is_left_out(tmp_path, man):
    path = recorded("autotune_user_ranges.json.gz", man)
    per = kernels_by_range(path)
    steady = [per[i] for i in sorted(per) if i > 0]
    assert len(steady) == man["repeats"] and all(len(k) == len(steady[0]) for k in steady)
    assert len(per[0]) > 10 * len(steady[0])  # the recording holds the case: iteration 0 is the autotuning
    expected = statistics.median(sum(d for _, d in k) for k in steady)
    c = reparse(tmp_path, path)
    assert c["asc_error"] is None, c["flags"]
    assert c["kernel_time_ns"] == pytest.approx(expected, rel=1e-6)
    assert c["sequence"] == [n for n, _ in steady[0]]
    assert any("autotun" in f for f in c["flags"]), c["flags"]


def test_an_operators_own_fill_zero_cast_and_sum_kernels_are_its_time(tmp_path, man):
    w, r = man["warmup"], man["repeats"]
    path = recorded("own_fill_sum_ranges.json.gz", man)
    per = kernels_by_range(path)
    iters = [per[i] for i in sorted(per)]
    assert len(iters) == w + r and {"fill_kernel", "zero_kernel", "cast_kernel", "reduce_sum_kernel"} <= \
        {n for n, _ in iters[-1]}
    expected = statistics.median(sum(d for _, d in k) for k in iters[w:])
    c = reparse(tmp_path, path, warmup=w, repeats=r)
    assert c["asc_error"] is None, c["flags"]
    assert c["kernel_time_ns"] == pytest.approx(expected, rel=1e-6)
    assert c["launches_per_iter"] == len(iters[-1]) and not c["harness_launches_dropped"]
    # the same loop without ranges: consecutive groups of one iteration's launches
    plain = recorded("own_fill_sum_plain.json.gz", man)
    ks, per_iter = all_kernels(plain), len(iters[-1])
    assert len(ks) == (w + r) * per_iter
    groups = [ks[i * per_iter:(i + 1) * per_iter] for i in range(w + r)]
    expected = statistics.median(sum(d for _, d in g) for g in groups[w:])
    c = reparse(tmp_path, plain, warmup=w, repeats=r)
    assert c["asc_error"] is None, c["flags"]
    assert c["kernel_time_ns"] == pytest.approx(expected, rel=1e-6) and not c["harness_launches_dropped"]


def ncu_durations_ns(path):
    """Per launch (ID order) ``(kernel name, duration ns)``: its gpu__time_duration.sum (raw page) or SpeedOfLight
    Duration (details page)."""
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID",'))
    rows = list(csv.DictReader([ln for ln in lines[start:] if ln.startswith('"')]))
    out = {}
    if "Metric Name" in rows[0]:
        for x in rows:
            if x["Section Name"] == "GPU Speed Of Light Throughput" and x["Metric Name"] == "Duration":
                out[int(x["ID"])] = (x["Kernel Name"],
                                     float(x["Metric Value"].replace(",", "")) * TIME_NS[x["Metric Unit"]])
    else:
        unit = rows[0]["gpu__time_duration.sum"]
        for x in rows[1:]:
            out[int(x["ID"])] = (x["Kernel Name"], float(x["gpu__time_duration.sum"].replace(",", "")) * TIME_NS[unit])
    return [out[k] for k in sorted(out)]


@pytest.mark.parametrize("name", ["ncu_small_raw.csv", "ncu_small_details.csv"])
def test_ncu_pages_of_a_small_kernel_give_its_replay_time(tmp_path, man, name):
    w, r = man["warmup"], man["repeats"]
    path = recorded(name, man)
    launches = ncu_durations_ns(path)
    # ncu profiles every launch of the process: the input's set-up (torch.zeros, a FillFunctor kernel) comes first
    d = [t for n, t in launches if n == "add_one_kernel"]
    assert len(d) == 1 + w + r  # the priming call, then the loop
    assert all("FillFunctor" in n for n, _ in launches if n != "add_one_kernel")
    c = reparse(tmp_path, path, warmup=w, repeats=r)
    assert c["asc_error"] is None, c["flags"]
    assert c["sequence"] == ["add_one_kernel"]
    assert c["kernel_time_ns"] == pytest.approx(statistics.median(d[-r:]), rel=1e-6)
    assert c["ncu_replay"]["serialized"] is True and c["span_ns"] is None
