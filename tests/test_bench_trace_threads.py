"""bench/bench_trace_threads.py: concurrent gate-2 traces with torch's default threads and with the probe's cap
both count the hand value of the chunked reference (a small shape; the bench's timing is its own business, not
asserted here)."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_trace_threads as btt  # noqa: E402

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote forks: Linux only")]


def test_two_traces_at_once_each_way_count_the_hand_value(tmp_path, monkeypatch):
    # [1, 4096, 1024], 8 heads: projections 4 * 2 * 4096 * 1024^2 = 34359738368, causal attention
    # 2 * 8 * (4096 * 4097 / 2) * 256 = 34368126976; 16 cpus // (1 ahead + 1) = 8 threads in the capped mode
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    out = tmp_path / "t.json"
    assert btt.main(["--shape", "1,4096,1024", "--heads", "8", "--jobs", "2", "--rounds", "1", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    s = res["summary"]
    assert s["hand_flops"] == 34359738368 + 34368126976 and s["flops"] == [s["hand_flops"]] and s["flops_ok"]
    assert s["threads"] == {"default": None, "capped": 8} and s["all_ok"]
    assert all(len(r["traces"]) == 2 for rs in res["rounds"].values() for r in rs)


def test_a_count_other_than_the_hand_value_exits_1(tmp_path, monkeypatch):
    monkeypatch.setattr(btt, "hand_count", lambda *a: 1)
    assert btt.main(["--shape", "1,1024,256", "--heads", "4", "--jobs", "2", "--rounds", "1",
                     "--out", str(tmp_path / "t.json")]) == 1


@pytest.mark.parametrize("bad", [["--shape", "1,x,256"], ["--heads", "0"], ["--heads", "-4"], ["--jobs", "1"],
                                 ["--shape", "1,1024"], ["--rounds", "0"]])
def test_bad_arguments_exit_2_with_a_message(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        btt.main(["--shape", "1,1024,256", "--heads", "4", *bad] if bad[0] != "--shape" else
                 [*bad, "--heads", "4"])
    assert exc.value.code == 2 and "error:" in capsys.readouterr().err
