"""bench/bench_trace_zygote.py: the gate-2 trace forked from the warm zygote against a plain subprocess - the
derived figures, a CPU run with one trace each way, and the non-zero exit when the two ways trace other FLOPs."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_ops  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, BENCH)
import bench_trace_zygote as btz  # noqa: E402

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote forks: Linux only")]


def _run(ok=True, flops=100.0, wall=1.0):
    return {"wall_s": wall, "ok": ok, "flops": flops}


def test_the_summary_has_medians_speedup_probe_totals_and_break_even():
    plain = [_run(wall=w) for w in (6.0, 5.0, 9.0)]
    zyg = [_run(wall=w) for w in (1.0, 0.5, 2.0)]
    s = btz.summarize(plain, zyg, warmup_s=4.0, n=3, prime=[_run(wall=7.0)])
    assert (s["plain_median_s"], s["zygote_median_s"], s["speedup"]) == (6.0, 1.0, 6.0)
    assert (s["probe_plain_s"], s["probe_zygote_s"], s["break_even_traces"]) == (18.0, 7.0, 0.8)
    assert s["all_ok"] and s["flops_equal"] and s["flops"] == [100.0]
    # other FLOPs on one side (the priming run counts too), or a failed gate: not equal
    assert not btz.summarize(plain, zyg[:2] + [_run(flops=200.0)], 4.0, 3)["flops_equal"]
    assert not btz.summarize(plain, zyg, 4.0, 3, prime=[_run(flops=None)])["flops_equal"]
    s = btz.summarize(plain, zyg[:2] + [_run(ok=False, flops=None)], 4.0, 3)
    assert not s["all_ok"] and not s["flops_equal"]
    # a zygote run no faster than plain: no break-even
    assert btz.summarize([_run(wall=1.0)], [_run(wall=1.0)], 4.0, 1)["break_even_traces"] is None


def test_the_bench_runs_one_trace_each_way_on_cpu_and_the_flops_agree(tmp_path):
    out = tmp_path / "o" / "trace_zygote.json"
    r = subprocess.run([sys.executable, os.path.join(BENCH, "bench_trace_zygote.py"), "--backend", "cpu",
                        "--op", "zoo/1_BatchMatmul", "--n", "1", "--prime", "0", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["bench"] == "trace_zygote" and doc["op"] == "zoo/1_BatchMatmul" and doc["n"] == 1
    assert doc["device"]["backend"] == "cpu" and doc["versions"]["torch"] and doc["host"]
    (plain,), (zyg,) = doc["plain"], doc["zygote"]
    assert plain["forked"] is False and zyg["forked"] is True and plain["ok"] and zyg["ok"]
    s = doc["summary"]
    assert s["flops_equal"] and s["flops"] == [plain["flops"]] == [zyg["flops"]] and plain["flops"] > 0
    assert s["plain_median_s"] == plain["wall_s"] > 0 and s["zygote_median_s"] == zyg["wall_s"] > 0
    assert s["zygote_warmup_s"] > 0 and s["speedup"] == round(plain["wall_s"] / zyg["wall_s"], 2)
    assert "speed-up per trace" in r.stdout and "identical" in r.stdout


def test_the_bench_fails_when_the_forked_trace_counts_other_flops(tmp_path):
    # test double: a reference that does a second bmm only when the zygote is on (the environment the forked
    # child receives says MFU_TRACE_ZYGOTE=1; the plain runs have 0) - the two ways trace different FLOPs
    work = probe_ops.make_workdir(tmp_path, artifacts=False)
    model = os.path.join(work, "model.py")
    text = open(model).read()
    text = text.replace("        return torch.bmm(a, b)\n",
                        "        if os.environ.get('MFU_TRACE_ZYGOTE') == '1':\n"
                        "            torch.bmm(a, b)\n"
                        "        return torch.bmm(a, b)\n", 1)
    assert "MFU_TRACE_ZYGOTE" in text
    open(model, "w").write(text)
    out = tmp_path / "t.json"
    r = subprocess.run([sys.executable, os.path.join(BENCH, "bench_trace_zygote.py"), "--backend", "cpu",
                        "--work", work, "--n", "1", "--prime", "0", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "FLOPs differ" in r.stderr and "DIFFER" in r.stdout
    doc = json.loads(out.read_text())
    assert not doc["summary"]["flops_equal"]
    assert doc["zygote"][0]["flops"] == 2 * doc["plain"][0]["flops"] > 0
