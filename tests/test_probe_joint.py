"""The probe's greedy joint ladders (mfulib/search/ladder.py extend_joint): after the joint pair, the joint ladder of
three symbols (and more) while it gains, run after every source's pair so that a budget cuts it first; the dry run
lists the sets it may reach. In-process on the fakes of tests/probe_fakes.py (no sleep, no subprocess).

The test operator is the batched matmul A [b, m, k] @ B [b, k, n] of tests/probe_ops.py (symbols batch, seq = m,
gemm_k, gemm_n); the figures below are computed by hand from the fake rates."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_ops  # noqa: E402
from probe_fakes import Op  # noqa: E402
from test_probe_gates import fake_probe  # noqa: E402

from mfulib.search import ladder  # noqa: E402


def _intensity(b, m, k, n):
    """FLOP/s of a kernel that runs at 1e6 x its GEMM arithmetic intensity m k n / (m k + k n + m n) (test double):
    it grows a little with each of m, k and n alone, and by the factor itself when all three grow together."""
    return 1e6 * m * k * n / (m * k + k * n + m * n)


def _intensity_tflops(m, k, n):
    return m * k * n / (m * k + k * n + m * n) * 1e-6


def _ladders(doc, source=0):
    return [lad for lad in doc["ladders"] if lad["source_case"] == source]


def test_a_gemm_whose_figure_needs_m_k_and_n_gets_the_three_symbol_joint_ladder(tmp_path, capsys):
    # two cases (the follower A[..., k] of gemm_k is found across them); source 0: A [1, 16, 32] @ B [1, 32, 8]
    work = probe_ops.make_workdir(tmp_path)
    p = fake_probe(work, "--cases", "0", "--max-scale", "8", "--trace-jobs", "0", op=Op("rate", rate=_intensity))
    lads = _ladders(p.doc)
    # singles, by hand (baseline I(16, 32, 8) = 4.571): batch never moves it (saturated at x2); seq x8 6.095 (x8
    # saturated: +4.8%); gemm_k x4 5.12 (saturated); gemm_n x8 9.143 (every factor passed)
    best = {tuple(x["symbols"]): x["best"] for x in lads if x["tried"]}
    assert best[("gemm_k",)] == {"factors": {"gemm_k": 4}, "wall_figure": pytest.approx(_intensity_tflops(16, 128, 8))}
    assert best[("gemm_n",)]["wall_figure"] == pytest.approx(_intensity_tflops(16, 32, 64))
    # the pair of the two highest singles: gemm_n and seq, x8 -> I(128, 32, 64) = 18.29 > 1.05 x 9.143: it gained;
    # gemm_k's single gained (5.12 > 1.05 x 4.571), batch's did not (4.571): the triple adds gemm_k, not batch
    assert [(x["symbols"], x["joint"]) for x in lads] == [
        (["batch"], False), (["seq"], False), (["gemm_k"], False), (["gemm_n"], False),
        (["gemm_n", "seq"], True), (["gemm_n", "seq", "gemm_k"], True), ([], True)]
    triple = lads[5]
    assert triple["why"].startswith("joint (greedy): gemm_n+seq 1.829e-05 at x8 gained over the best earlier ladder, "
                                    "gemm_n 9.143e-06 at x8, and gemm_k 5.12e-06 at x4 gained over scale 1")
    assert triple["tried"] == [[2, True], [4, True], [8, True]]
    assert triple["stopped"] == "every factor up to --max-scale 8 passed"
    # I(128, 256, 64) = 36.57: twice the pair's best, the figure of all three at x8
    assert triple["best"] == {"factors": {"gemm_n": 8, "seq": 8, "gemm_k": 8},
                              "wall_figure": pytest.approx(_intensity_tflops(128, 256, 64))}
    assert max(c["wall_figure"] for c in p.doc["candidates"]) == pytest.approx(_intensity_tflops(128, 256, 64))
    # the cap: batch never gained, so no fourth symbol joins, and the record says why
    assert lads[6]["tried"] == [] and lads[6]["stopped"].startswith(
        "not run: no other single ladder gained more than (1 + 0.05) x scale 1 (4.571e-06): batch 4.571e-06 at x2")
    cand = next(c for c in p.doc["candidates"] if c["candidate_id"] == "c0:gemm_kx8,gemm_nx8,seqx8")
    assert cand["verdict"] == "pass" and cand["ladder"] == "gemm_n+seq+gemm_k" and cand["scale"] == 512
    assert cand["new_case_id"] is not None  # appended like any passing candidate
    out = capsys.readouterr().out
    assert "case 0: joint ladder of gemm_n and seq and gemm_k (gemm_n+seq 1.829e-05 at x8 gained" in out
    assert "ladder case 0 gemm_n+seq+gemm_k: every factor up to --max-scale 8 passed" in out


def _batch_amortises(b, m, k, n):
    """:func:`_intensity` x 1.9 once b >= 2 (test double): a batch axis that amortises launch overhead on a small
    case - its single ladder beats seq's and gemm_k's, though it never raises the arithmetic intensity."""
    return _intensity(b, m, k, n) * (1.9 if b >= 2 else 1.0)


def test_batch_joins_after_the_gemm_axes_though_its_single_ladder_beats_them(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    p = fake_probe(work, "--cases", "0", "--max-scale", "8", "--trace-jobs", "0", op=Op("rate", rate=_batch_amortises))
    lads = _ladders(p.doc)
    best = {tuple(x["symbols"]): x["best"] for x in lads if x["tried"]}
    # singles by hand: batch 1.9 x 4.571 = 8.686 at x2 (x4 the same: saturated), gemm_n 9.143 at x8, seq 6.095 at
    # x8, gemm_k 5.12 at x4: by figure the pair would be gemm_n+batch; batch ranks last, so it is gemm_n+seq
    assert best[("batch",)]["wall_figure"] == pytest.approx(1.9 * _intensity_tflops(16, 32, 8))
    assert best[("batch",)]["wall_figure"] > best[("seq",)]["wall_figure"] > best[("gemm_k",)]["wall_figure"]
    assert [x["symbols"] for x in lads[:7]] == [["batch"], ["seq"], ["gemm_k"], ["gemm_n"], ["gemm_n", "seq"],
                                                ["gemm_n", "seq", "gemm_k"], ["gemm_n", "seq", "gemm_k", "batch"]]
    # gemm_k joins before batch (both gained over scale 1): m, k and n x8 reach I(128, 256, 64) = 36.57
    assert lads[5]["best"] == {"factors": {"gemm_n": 8, "seq": 8, "gemm_k": 8},
                               "wall_figure": pytest.approx(_intensity_tflops(128, 256, 64))}
    assert lads[4]["why"].startswith("joint: the two single ladders that gained most - gemm_n 9.143e-06 at x8, "
                                     "seq 6.095e-06 at x8")


def test_a_batch_symbol_is_in_the_pair_when_fewer_than_two_others_passed():
    def evaluate(factors, key):
        return "c" not in factors  # c never passes

    def figure(factors):
        return 1.0 + sum({"a": 0.5, "b": 0.9, "c": 0.0}[n] for n in factors)
    recs = ladder.run_ladders(["a", "b", "c"], evaluate, figure, max_scale=2, last=("b",))
    assert [r["symbols"] for r in recs if r["joint"]] == [["b", "a"]]
    # with two others passing, the batch symbol b is left out of the pair though its figure is the highest
    recs = ladder.run_ladders(["a", "b", "c"], lambda f, k: True, figure, max_scale=2, last=("b",))
    assert [r["symbols"] for r in recs if r["joint"]] == [["a", "c"]]


def _n_or_k_or_m(b, m, k, n):
    """FLOP/s that follow whichever of n (up to 32), k (up to 64) or m = 32 helps most, never two at once (test
    double): the joint pair reaches what its best single reached, no more."""
    return 1e6 * max(min(n, 32) / 8, min(k, 64) / 32, 1.5 if m == 32 else 1.0)


def test_a_pair_that_does_not_gain_over_the_best_single_stops_the_selection(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    p = fake_probe(work, "--cases", "0", "--max-scale", "8", "--trace-jobs", "0", op=Op("rate", rate=_n_or_k_or_m))
    lads = _ladders(p.doc)
    # singles: gemm_n 4 at x4 (x8: a plateau), gemm_k 2 at x2, seq 1.5 at x2, batch 1; the pair gemm_n+gemm_k: 4 at
    # x4 (x8 a plateau) - not more than 1.05 x gemm_n's 4: no triple, though seq's single gained (1.5 > 1.05 x 1)
    assert [x["symbols"] for x in lads] == [["batch"], ["seq"], ["gemm_k"], ["gemm_n"], ["gemm_n", "gemm_k"],
                                            ["gemm_n", "gemm_k", "seq"]]
    assert lads[4]["best"] == {"factors": {"gemm_n": 4, "gemm_k": 4}, "wall_figure": pytest.approx(4e-6)}
    stop = lads[5]
    assert stop["joint"] and stop["tried"] == [] and stop["best"] is None
    assert stop["stopped"] == stop["why"] == ("not run: the joint ladder gemm_n+gemm_k reached 4e-06 at x4, not more "
                                              "than (1 + 0.05) x the best earlier ladder, gemm_n 4e-06 at x4")
    assert all(len(c["factors"]) <= 2 for c in p.doc["candidates"])


def test_the_selection_grows_to_every_gaining_symbol_and_no_further():
    base, seen = 1.0, []

    def evaluate(factors, key):
        seen.append(key)
        return max(factors.values()) <= 2  # x2 passes, x4 and x3 fail

    def figure(factors):  # each symbol at x2 adds its own gain; d gains nothing alone
        return base + sum({"a": 0.5, "b": 0.4, "c": 0.3, "d": 0.0}[n] for n in factors)
    recs = ladder.run_ladders(["a", "b", "c", "d"], evaluate, figure, max_scale=4)
    ext = ladder.extend_joint(recs, evaluate, figure, 4, 0.05, base=lambda: base)
    # a+b 1.9 > 1.05 x 1.5 (a alone): c joins (1.3 > 1.05); a+b+c 2.2 > 1.05 x 1.9, but d never gained (1.0)
    assert [r["symbols"] for r in ext] == [["a", "b", "c"], []]
    assert ext[0]["best"] == {"factors": {"a": 2, "b": 2, "c": 2}, "wall_figure": pytest.approx(2.2)}
    assert seen[-3:] == ["a+b+c"] * 3 and "no other single ladder gained" in ext[1]["stopped"]
    # scale 1 unknown (no saturation baseline): a single ladder that passed counts as gained, so d joins too -
    # every symbol is then in the ladder, and nothing larger is possible (no record)
    ext = ladder.extend_joint(recs, evaluate, figure, 4, 0.05, base=lambda: None)
    assert [r["symbols"] for r in ext] == [["a", "b", "c"], ["a", "b", "c", "d"]]
    # two symbols only: the pair holds every symbol, so there is nothing to extend
    assert ladder.extend_joint(ladder.run_ladders(["a", "b"], evaluate, figure, max_scale=4), evaluate, figure, 4,
                               0.05, base=lambda: base) == []


def test_the_greedy_joint_ladders_run_after_every_sources_pair_so_the_budget_cuts_them_first(tmp_path):
    args = ("--cases", "0,1", "--max-scale", "8", "--trace-jobs", "0")
    full = fake_probe(probe_ops.make_workdir(tmp_path / "full"), *args, op=Op("rate", rate=_intensity))
    order = [(x["source_case"], len(x["symbols"])) for x in full.doc["ladders"] if x["tried"]]
    assert order == [(0, 1)] * 4 + [(0, 2)] + [(1, 1)] * 4 + [(1, 2)] + [(0, 3), (1, 3)]
    # the budget ends 0.5 s into source 0's triple: every single and pair ladder of both sources is complete
    triples = [c for c in full.doc["candidates"] if len(c["factors"]) == 3]
    before = full.clock() - 1000.0 - sum(c["wall_s"] for c in triples)
    cut = fake_probe(probe_ops.make_workdir(tmp_path / "cut"), *args, "--budget-s", f"{before + 0.5:g}",
                     op=Op("rate", rate=_intensity))
    assert cut.doc["complete"] is False and len(cut.doc["cut_candidate"]["factors"]) == 3
    assert cut.doc["cut_candidate"]["source_case"] == 0
    done = [x for x in cut.doc["ladders"] if len(x["symbols"]) <= 2 and x["tried"]]
    assert len(done) == 10 and not any(x["stopped"].startswith("cut") for x in done)
    assert [x["stopped"][:4] for x in cut.doc["ladders"] if len(x["symbols"]) == 3] == ["cut:"]


def test_dry_run_lists_the_triples_and_the_set_of_all_four(tmp_path, capsys):
    work = probe_ops.make_workdir(tmp_path)
    p = fake_probe(work, "--dry-run", "--cases", "0", "--max-scale", "2")
    assert p.rc == 0 and p.runner.requests == []
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln.startswith("     0")]
    lads = [r[1] for r in rows]
    # 4 singles, 6 pairs, 4 triples, 1 set of four: one candidate each at x2
    assert len(lads) == 15 and lads[-5:] == ["batch+seq+gemm_k", "batch+seq+gemm_n", "batch+gemm_k+gemm_n",
                                             "seq+gemm_k+gemm_n", "batch+seq+gemm_k+gemm_n"]
    triple = next(r for r in rows if r[1] == "seq+gemm_k+gemm_n")
    assert triple[2:4] == ["joint", "(greedy:"]
    # A [1, 32, 64] @ B [1, 64, 16] fp32 at seq x2, gemm_k x2, gemm_n x2: (32 x 64 + 64 x 16) x 4 = 12288 B
    assert "12288" in triple
