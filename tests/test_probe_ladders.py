"""The probe's per-symbol ladders (mfulib/search/ladder.py, probe.py): each scaled symbol alone, then the joint ladder
of the two that gained most, each with its own saturation stop; the candidates in --dry-run; --scale-dims compared by
the symbols it selects. In-process on the fakes of tests/probe_fakes.py (no sleep, no subprocess)."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_ops  # noqa: E402
from probe_fakes import Op  # noqa: E402
from test_probe_gates import fake_probe  # noqa: E402

from mfulib.core.errors import UserError  # noqa: E402
from mfulib.search import ladder  # noqa: E402


def _attention_like(b, m, k, n):
    """FLOP/s of a kernel that gains from batch up to 4, a little from m = 32, and falls beyond (test double)."""
    return 1e6 * min(b, 4) * {16: 1.0, 32: 1.5}.get(m, 0.6)


def test_each_symbol_climbs_alone_then_the_two_best_climb_together(tmp_path, capsys):
    work = probe_ops.make_workdir(tmp_path, lines=[probe_ops.case_line(1, 16, 32, 8)])
    p = fake_probe(work, "--cases", "0", "--max-scale", "8", "--scale-dims", "batch,seq",
                   op=Op("rate", rate=_attention_like))
    doc = p.doc
    got = [(c["ladder"], c["factors"], c["scale"], c["verdict"], bool(c["saturated"])) for c in doc["candidates"]]
    # baseline 1 MFLOP/s; batch: 2, 4, then 4 again at x8 (a plateau: saturated); seq: 1.5 at x2, 0.6 at x4 (a fall);
    # joint (both at one factor): 3 at x2, 2.4 at x4 (a fall)
    assert got == [("batch", {"batch": 2}, 2, "pass", False), ("batch", {"batch": 4}, 4, "pass", False),
                   ("batch", {"batch": 8}, 8, "pass", True),
                   ("seq", {"seq": 2}, 2, "pass", False), ("seq", {"seq": 4}, 4, "pass", True),
                   ("batch+seq", {"batch": 2, "seq": 2}, 4, "pass", False),
                   ("batch+seq", {"batch": 4, "seq": 4}, 16, "pass", True)]
    lads = doc["ladders"]
    assert [(x["symbols"], x["joint"]) for x in lads] == [(["batch"], False), (["seq"], False),
                                                          (["batch", "seq"], True)]
    assert [x["stopped"] for x in lads] == ["saturated at x8: larger factors are not tried"] * 1 + [
        "saturated at x4: larger factors are not tried"] * 2
    assert lads[0]["best"] == {"factors": {"batch": 4}, "wall_figure": pytest.approx(4e-6)}
    assert lads[1]["best"]["factors"] == {"seq": 2} and lads[2]["best"]["factors"] == {"batch": 2, "seq": 2}
    assert "gained most" in lads[2]["why"] and "batch 4e-06 at x4" in lads[2]["why"]
    assert "along batch and seq" in doc["candidates"][-1]["saturated"]
    assert doc["counts"] == {"tried": 7, "resumed": 0, "passed_gate1": 7, "passed": 7}
    out = capsys.readouterr().out
    # the decision is printed as it is carried out, and the table shows each candidate's factors
    assert "case 0: joint ladder of batch and seq" in out and "case 0 batch x4,seq x4: pass" in out
    assert "7 candidate(s) tried (0 resumed), 7 passed gate 1, 7 passed every gate" in out
    appended = {a["candidate_id"]: (a["factors"], a["scale"]) for a in doc["appended"].values()}
    assert appended["c0:batchx2,seqx2"] == ({"batch": 2, "seq": 2}, 4)


def test_the_joint_ladder_takes_the_two_single_ladders_with_the_highest_figures():
    best = {"a": 5.0, "b": 9.0, "c": 7.0}
    seen = []

    def evaluate(factors, key):
        seen.append((key, dict(factors)))
        return max(factors.values()) <= 2  # x2 passes, x4 and x3 fail

    def figure(factors):
        return sum(best[n] for n in factors) if max(factors.values()) <= 2 else None
    recs = ladder.run_ladders(["a", "b", "c"], evaluate, figure, max_scale=4)
    assert [r["symbols"] for r in recs] == [["a"], ["b"], ["c"], ["b", "c"]]
    assert seen[-3:] == [("b+c", {"b": 2, "c": 2}), ("b+c", {"b": 4, "c": 4}), ("b+c", {"b": 3, "c": 3})]
    assert recs[-1]["best"] == {"factors": {"b": 2, "c": 2}, "wall_figure": 16.0}
    # only one single ladder passed: no joint ladder, and the record says why
    recs = ladder.run_ladders(["a", "b"], lambda f, k: "a" in f and f["a"] <= 2, figure, max_scale=4)
    assert recs[-1]["joint"] and recs[-1]["tried"] == [] and "1 of 2 single ladders passed" in recs[-1]["stopped"]


def test_an_interrupted_ladder_is_recorded_as_cut():
    recs = []

    def evaluate(factors, key):
        if factors.get("b") == 4:
            raise KeyboardInterrupt("signal 15")
        return True
    with pytest.raises(KeyboardInterrupt):
        ladder.run_ladders(["a", "b"], evaluate, lambda f: 1.0, max_scale=8, records=recs)
    assert [r["symbols"] for r in recs] == [["a"], ["b"]] and recs[1]["stopped"] == "cut: signal 15"
    assert recs[1]["tried"] == [[2, True]]


def test_dry_run_shows_the_batch_only_seq_only_and_joint_candidates_of_one_source(tmp_path, capsys):
    work = probe_ops.make_workdir(tmp_path)
    p = fake_probe(work, "--dry-run", "--cases", "0", "--max-scale", "2")
    assert p.rc == 0 and p.tracer.procs == [] and p.runner.requests == []
    rows = {tuple(ln.split()[:3]): ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("     0")}
    for lad, factors in (("batch", "batch x2"), ("seq", "seq x2"), ("gemm_k", "gemm_k x2"), ("gemm_n", "gemm_n x2")):
        assert any(k[1] == lad and k[2] == "single" and factors in ln for k, ln in rows.items()), lad
    joint = [ln for k, ln in rows.items() if k[1] == "batch+seq"]
    assert len(joint) == 1 and "batch x2,seq x2" in joint[0] and "joint" in joint[0]
    # A [1, 16, 32] @ B [1, 32, 8] fp32 = 3072 B: batch x2 doubles both (6144), seq x2 only A (5120)
    assert " 6144 " in rows[("0", "batch", "single")] and " 5120 " in rows[("0", "seq", "single")]


def test_the_documented_default_spelled_out_is_the_same_run_and_another_choice_is_refused(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    first = fake_probe(work, "--cases", "0", "--max-scale", "2")
    assert first.doc["appended"] and first.doc["run_key"]["scale_symbols"] == ["batch", "gemm_k", "gemm_n", "seq"]
    again = fake_probe(work, "--cases", "0", "--max-scale", "2", "--scale-dims", "batch,seq_q,seq_k,seq,gemm_k,gemm_n")
    assert sorted(set(again.doc["resumed"])) == sorted(c["candidate_id"] for c in first.doc["candidates"])
    assert again.runner.requests == []  # every verdict reused: nothing ran again
    # a probe.json of the earlier format spelled the choice (null: the default); it is resolved, not compared as text
    path = os.path.join(work, "probe.json")
    doc = json.load(open(path))
    doc["run_key"]["scale_dims"] = None
    del doc["run_key"]["scale_symbols"]
    json.dump(doc, open(path, "w"))
    assert fake_probe(work, "--cases", "0", "--max-scale", "2").runner.requests == []
    with pytest.raises(UserError, match="scale_symbols differ"):
        fake_probe(work, "--cases", "0", "--max-scale", "2", "--scale-dims", "batch")


def _prepared(tmp_path, ref, impl, cases):
    from zoo_support import OPS, work_dir
    return work_dir(tmp_path, os.path.basename(ref)[:-3], ref, impl,
                    cases if os.path.isabs(cases) else os.path.join(OPS, cases)).path


@pytest.mark.parametrize("which", ["zoo", "npukernelbench"])
def test_a_batched_matmul_scales_m_k_and_n_and_an_ffn_leaves_its_weights(tmp_path, capsys, shared_dir, which):
    # the bundled operators, prepared as make prepare would: ladders per symbol in the dry run, nothing run
    real = os.path.join(shared_dir, "data", "npukernelbench")
    bmm = (("bench/zoo/1_BatchMatmul.py", "gen/zoo/1_BatchMatmul_triton_optimized.py", "bench/zoo/1_BatchMatmul.json")
           if which == "zoo" else ("bench/npukernelbench/level3/1_BatchMatmul.py",
                                   "gen/npukernelbench/level3/1_BatchMatmul_generated.py",
                                   os.path.join(real, "level3", "1_BatchMatmul.json")))
    ffn = (("bench/zoo/4_FFN.py", "gen/zoo/4_FFN_triton_ascend_impl.py", "bench/zoo/4_FFN.json")
           if which == "zoo" else ("bench/npukernelbench/level4/2_FFN.py",
                                   "gen/npukernelbench/level4/2_FFN_triton_optimized.py",
                                   os.path.join(real, "level4", "2_FFN.json")))
    work = _prepared(tmp_path / "bmm", *bmm)
    assert fake_probe(work, "--dry-run", "--cases", "0", "--max-scale", "2").rc == 0
    out = capsys.readouterr().out
    assert "scaling: batch, seq, gemm_k, gemm_n (default" in out
    ladders = {ln.split()[1] for ln in out.splitlines() if ln.startswith("     0")}
    assert {"batch", "seq", "gemm_k", "gemm_n"} <= ladders and "seq+gemm_n" in ladders
    work = _prepared(tmp_path / "ffn", *ffn)
    assert fake_probe(work, "--dry-run", "--cases", "0", "--max-scale", "2").rc == 0
    out = capsys.readouterr().out
    assert "scaling: seq (default" in out and "operands weight1, weight2 are named as weights" in out
    ladders = {ln.split()[1] for ln in out.splitlines() if ln.startswith("     0")}
    assert ladders == {"seq"}  # one ladder: no joint one, and no weight axis anywhere


def test_module_parameters_and_init_inputs_are_named_as_weights_that_never_scale(tmp_path):
    from mfulib.search.probe_axes import model_weights
    path = tmp_path / "model.py"
    path.write_text("import torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self, h):\n"
                    "        super().__init__()\n        self.proj = nn.Linear(h, h)\n"
                    "        self.g = nn.Parameter(torch.ones(h))\n\ndef get_init_inputs():\n    return [4096]\n")
    got = model_weights(str(path))
    assert got["module_parameters"] == ["Linear (line 6)", "Parameter (line 7)"]
    assert got["init_inputs"].startswith("get_init_inputs() (line 9) gives Model's constructor arguments")
    path.write_text("class Model:\n    pass\n\ndef get_init_inputs():\n    return []\n")
    assert model_weights(str(path)) == {"module_parameters": [], "init_inputs": "get_init_inputs() returns []"}


def test_a_probe_json_timed_by_another_method_keeps_none_of_its_timings_not_even_unreached_ones(tmp_path):
    """A probe.json from before back-to-back timing (no run_key.wall_clock): the re-run reuses no verdict, and the
    earlier candidates its ladders do not reach lose their verdicts and gate-4 times (superseded) - neither a later
    resume nor stage 1 may take a time of the old method under the new run_key."""
    from mfulib.core import wallclock
    from mfulib.search import pool
    work = probe_ops.make_workdir(tmp_path, lines=[probe_ops.case_line(1, 16, 32, 8)])
    args = ("--cases", "0", "--scale-dims", "batch,seq", "--no-saturation-stop")
    first = fake_probe(work, *args, "--max-scale", "4").doc
    path = os.path.join(work, "probe.json")
    old = json.load(open(path))
    del old["run_key"]["wall_clock"]
    for c in old["candidates"]:
        c["time_ms"] = 1234.5  # marks a time of the old method
    json.dump(old, open(path, "w"))
    passed = {c["candidate_id"] for c in first["candidates"] if c["verdict"] == "pass"}
    assert {"c0:batchx2", "c0:batchx4", "c0:seqx4"} <= passed
    doc = fake_probe(work, *args, "--max-scale", "2").doc  # reaches the x2 candidates only
    assert doc["run_key"]["wall_clock"] == wallclock.METHOD and doc["resumed"] == []
    by = {c["candidate_id"]: c for c in doc["candidates"]}
    assert by["c0:batchx2"]["verdict"] == "pass" and by["c0:batchx2"]["time_ms"] != 1234.5  # re-run
    for cid in ("c0:batchx4", "c0:seqx4"):  # not reached: superseded, its case still appended under its id
        c = by[cid]
        assert c["verdict"] is None and c["time_ms"] is None and c["superseded"].startswith("pass: ")
        assert c["new_case_id"] is not None and str(c["new_case_id"]) in doc["appended"]
    read = pool.read_probe(path)
    assert all(t["time_ms"] != 1234.5 for t in read["timings"].values())
    assert read["verdicts"][by["c0:batchx4"]["new_case_id"]] is None  # in the pool, timed afresh by stage 1
    again = fake_probe(work, *args, "--max-scale", "4").doc  # same run_key now: resumes, re-runs the superseded
    assert "c0:batchx4" not in again["resumed"] and "c0:batchx2" in again["resumed"]
    c4 = next(c for c in again["candidates"] if c["candidate_id"] == "c0:batchx4")
    assert c4["verdict"] == "pass" and "superseded" not in c4 and c4["new_case_id"] == by["c0:batchx4"]["new_case_id"]
