"""max_shape_probe.py write-back: both case copies get the passing candidates, artifacts and original lines stay
intact, --restore puts the originals back byte for byte, --dry-run writes nothing; an interrupted probe resumes."""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_ops  # noqa: E402
from test_probe_gates import PROBE, run_probe  # noqa: E402

from mfulib.schemas import probe_json as pj  # noqa: E402
import pytest

pytestmark = pytest.mark.e2e  # runs the probe / search / make in subprocesses


def test_write_back_appends_to_both_copies_and_restore_puts_the_originals_back(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    before = probe_ops.snapshot(work)
    r, _ = run_probe(work, "--dry-run", "--max-scale", "4")
    assert r.returncode == 0 and "input_bytes" in r.stdout
    assert probe_ops.snapshot(work) == before  # dry run: nothing written
    r, doc = run_probe(work, "--cases", "0", "--max-scale", "2", "--scale-dims", "batch,seq")
    assert r.returncode == 0, r.stderr
    after = probe_ops.snapshot(work)
    for name in ("verify_result_20260101.json", "perf_result.json", "model.py", "model_new.py"):
        assert after[name] == before[name]  # artifacts and operator files untouched
    orig = before["model.json"]
    for name in ("Op_perf_cases.jsonl", "model.json"):
        assert after[name].startswith(orig)  # original lines intact, in place
        extra = [json.loads(ln) for ln in after[name][len(orig):].decode().splitlines()]
        # batch x2 alone, m x2 alone, then the joint ladder: both x2
        assert [[e["shape"] for e in new["inputs"]] for new in extra] == [
            [[2, 16, 32], [2, 32, 8]], [[1, 32, 32], [1, 32, 8]], [[2, 32, 32], [2, 32, 8]]]
        assert set(extra[0]["inputs"][0]) == set(json.loads(orig.decode().splitlines()[0])["inputs"][0])
    assert after["Op_perf_cases.jsonl"] == after["model.json"]
    assert [(a["source_case"], a["factors"], a["scale"]) for a in doc["appended"].values()] == [
        (0, {"batch": 2}, 2), (0, {"seq": 2}, 2), (0, {"batch": 2, "seq": 2}, 4)]
    assert [c["new_case_id"] for c in doc["candidates"]] == [2, 3, 4] and doc["complete"] is True
    assert [(sorted(x["symbols"]), x["joint"]) for x in doc["ladders"]] == [  # joint: the better one first
        (["batch"], False), (["seq"], False), (["batch", "seq"], True)]
    ver = json.load(open(os.path.join(work, "verify.json")))
    assert [(c["case"], c["status"]) for c in ver["cases"]] == [(2, "pass"), (3, "pass"), (4, "pass")]
    assert ver["missing"] == [0, 1]
    assert not any(n.startswith("flops_check") for n in os.listdir(work))  # tool outputs stay in temp dirs
    impl = os.path.join(work, "model_new.py")
    with open(impl, "a") as f:
        f.write("# edited\n")
    r, _ = run_probe(work, "--cases", "0", "--max-scale", "2", "--scale-dims", "batch,seq")
    assert r.returncode == 2 and "changed since probe.json" in r.stderr  # no verdict reuse for other code
    with open(impl, "wb") as f:
        f.write(before["model_new.py"])
    r, doc = run_probe(work, "--restore")
    assert r.returncode == 0, r.stderr
    restored = probe_ops.snapshot(work)
    for name in ("Op_perf_cases.jsonl", "model.json"):
        assert restored[name] == before[name]
    assert json.load(open(os.path.join(work, "verify.json")))["cases"] == []
    assert doc is None and not os.path.exists(os.path.join(work, pj.BACKUP_DIR))  # probe.json gone with them
    assert "removed probe.json" in r.stdout
    # a probe after the restore starts afresh: the same candidate is appended again (nothing stale resumed)
    r, doc = run_probe(work, "--cases", "0", "--max-scale", "2", "--scale-dims", "seq")
    assert r.returncode == 0, r.stderr
    assert list(doc["appended"]) == ["2"] and doc["resumed"] == []


def test_an_interrupted_probe_keeps_the_originals_and_a_rerun_resumes(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    orig = probe_ops.snapshot(work)["model.json"]
    path = os.path.join(work, "probe.json")
    p = subprocess.Popen([sys.executable, PROBE, "--dir", work, "--backend", "cpu", "--cases", "0,1",
                          "--max-scale", "4", "--scale-dims", "seq"], env=dict(os.environ, PROBE_OP_MODE="sleep1"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    done = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not done:
            time.sleep(0.5)
            if os.path.exists(path):
                done = [c["candidate_id"] for c in json.load(open(path))["candidates"] if c.get("verdict")]
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the probe and its children, mid-run
        p.wait()
    assert done, "no candidate finished within 240 s"
    doc = pj.read_probe_json(path)  # valid after the kill
    assert doc["complete"] is False and doc["interrupted"] == "running"
    for name in ("Op_perf_cases.jsonl", "model.json"):
        assert open(os.path.join(work, name), "rb").read().startswith(orig)
    r, doc = run_probe(work, "--cases", "0,1", "--max-scale", "4", "--scale-dims", "seq")
    assert r.returncode == 0, r.stderr
    assert set(done) <= set(doc["resumed"])  # finished candidates were not run again
    assert doc["complete"] is True and doc["interrupted"] is None
    ids = [c["candidate_id"] for c in doc["candidates"]]
    assert len(ids) == len(set(ids))
    lines = open(os.path.join(work, "model.json")).read().splitlines()
    assert len(lines) == 2 + len(doc["appended"])
    assert [json.loads(doc["appended"][k]["line"]) for k in sorted(doc["appended"], key=int)] == \
        [json.loads(ln) for ln in lines[2:]]


def test_a_crlf_case_file_keeps_its_line_ends_through_probe_rerun_and_restore(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    for name in ("Op_perf_cases.jsonl", "model.json"):
        p = os.path.join(work, name)
        data = open(p, "rb").read().replace(b"\n", b"\r\n")
        open(p, "wb").write(b"\xef\xbb\xbf" + data)  # a BOM and CRLF, as Windows editors write them
    before = probe_ops.snapshot(work)
    r, doc = run_probe(work, "--cases", "0", "--max-scale", "2", "--scale-dims", "seq")
    assert r.returncode == 0, r.stderr
    text = open(os.path.join(work, "model.json"), "rb").read()
    assert text.startswith(before["model.json"]) and text.count(b"\r\n") == 3  # 2 original lines + 1 appended
    r, doc = run_probe(work, "--cases", "0", "--max-scale", "2", "--scale-dims", "seq")  # a re-run resumes
    assert r.returncode == 0, r.stderr
    r, _ = run_probe(work, "--restore")
    assert r.returncode == 0, r.stderr
    after = probe_ops.snapshot(work)
    assert all(after[n] == before[n] for n in ("Op_perf_cases.jsonl", "model.json"))  # byte for byte


def test_other_settings_over_appended_cases_are_refused_and_a_broken_probe_json_is_named(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    r, doc = run_probe(work, "--cases", "0", "--max-scale", "2", "--scale-dims", "seq")
    assert r.returncode == 0 and doc["appended"], r.stderr
    r, _ = run_probe(work, "--cases", "1", "--max-scale", "2", "--seed", "1", "--scale-dims", "seq")
    assert r.returncode == 4 and "made with other settings (seed differ)" in r.stderr and "--restore" in r.stderr
    path = os.path.join(work, "probe.json")
    good = open(path).read()
    for edit in (lambda d: d.update(schema="1"), lambda d: d.update(backup="x"),
                 lambda d: d["candidates"][0].update(factors={"batch": "2"}),
                 lambda d: d["appended"].update(abc={"line": "{}"}), lambda d: d.update(baselines="x")):
        d = json.loads(good)
        edit(d)
        open(path, "w").write(json.dumps(d))
        r = subprocess.run([sys.executable, PROBE, "--dir", work, "--backend", "cpu", "--cases", "0", "--max-scale",
                            "2", "--scale-dims", "seq"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and "probe.json" in r.stderr and "Traceback" not in r.stderr, r.stderr
    open(path, "w").write(good)
