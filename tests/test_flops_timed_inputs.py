"""The FLOPs of a case come from the inputs that are timed (one seeded draw), and the
data-dependent values that entered the count are recorded.

The reference draws a big q first and then random per-sequence lengths (as public references do, unseeded: the
tool seeds torch before get_input_groups()). A meta build skips the big draw, so the lengths it sees are other
lengths than the timed child's - the defect guarded against was a 2.1x MFU error with check_flops passing at ratio 1.0.
"""
import math

import pytest
import torch

from mfulib.flops import tracer as fc
from mfulib.flops import check as fchk
from mfulib.flops import contract as fcon
from mfulib.collect import driver as collect
from test_flops_check import write_dir

REF = '''
import json, os, torch, torch.nn as nn
def get_input_groups():
    out = []
    for line in open(os.path.splitext(__file__)[0] + ".json"):
        if line.strip():
            e = json.loads(line)["inputs"][0]
            q = torch.randn(e["shape"])                      # 4 x 4096 x 64 = 1M floats: built on meta by the old path
            lens = torch.randint(1, e["shape"][1] + 1, (e["shape"][0],))   # drawn after q: depends on q's draw
            out.append([q, lens])
    return out
def get_init_inputs():
    return []
class Model(nn.Module):
    def forward(self, q, lens):
        out = torch.zeros_like(q)
        for b, n in enumerate(lens.tolist()):
            x = q[b, :n]
            out[b, :n] = (x @ x.T).softmax(-1) @ x
        return out
'''
CASE = {"inputs": [{"name": "q", "type": "tensor", "required": True, "dtype": "float32", "shape": [4, 4096, 64]}]}
FLOPS = '''
def flops(case, args):
    q, lens = args
    d = q.shape[-1]
    return float(sum(2 * n * n * (d + d) for n in lens.tolist()))
'''


def timed_lengths(seed=0):
    """The timed child's draw, reproduced by hand: seed, then lens = randint(1, 4097, (4,)) - q (1M floats) is drawn
    off the host stream (mfulib/core/input_draw.py: on the device, or from a private CPU generator), so
    on every backend the lengths are the host stream's first draw."""
    torch.manual_seed(seed)
    return torch.randint(1, 4097, (4,)).tolist()


def test_flops_py_and_the_tracer_see_the_timed_lengths_and_they_are_recorded(tmp_path):
    """Hand value: FLOPs = sum_b 2 * n_b^2 * (64 + 64) over the timed lengths n_b (QK^T and PV of each sequence);
    flops.py, the tracer and the collector all see exactly those lengths, and record them."""
    od = write_dir(tmp_path, REF.replace("\n", "\n", 1), [CASE], FLOPS)
    lens = timed_lengths()
    want = sum(2 * n * n * 128 for n in lens)
    with fc._build_mode_class()() as mode:  # the meta build: q on meta, kept off the host stream as in the timed draw
        torch.manual_seed(0)
        q = torch.randn(4, 4096, 64)
        assert q.device.type == "meta" and torch.randint(1, 4097, (4,)).tolist() == lens and mode.lost == []
    torch.manual_seed(0)  # a plain draw (q from the host stream first): other lengths - the failure this guards
    torch.randn(4, 4096, 64)
    assert torch.randint(1, 4097, (4,)).tolist() != lens
    ff = fcon.load_flops(od.flops_py)
    row = fchk.check_case(ff, od, 0)
    assert row["flops"] == want and row["tracer"]["total_flops"] == want and row["status"] == "pass"
    assert row["inputs_drawn"] == "timed" and row["data_values"] == {"1": lens}
    assert row["tracer"]["inputs_drawn"] == "timed" and row["tracer"]["data_values"]["1"] == lens
    ent = collect.case_flops(ff, od, od.describe(0), 0)
    assert ent["flops"] == want and ent["inputs_drawn"] == "timed" and ent["data_values"] == {"1": lens}


def test_a_mask_density_is_recorded(tmp_path):
    """A bool mask input [8, 8] with 20 of 64 entries True is recorded as density 20 / 64 = 0.3125."""
    m = torch.zeros(8, 8, dtype=torch.bool)
    m.view(-1)[:20] = True
    assert fc.data_values([torch.ones(3), m, [3, 5], 7]) == {"1": {"density": 0.3125, "shape": [8, 8]},
                                                              "2": [3, 5]}


@pytest.mark.parametrize("draw", ["randn", "randn_fp16", "randn_bf16", "rand", "randint", "normal_", "uniform_",
                                  "bernoulli_"])
def test_a_chunked_replay_consumes_the_generator_exactly_as_one_draw(monkeypatch, draw):
    """The replay behind "timed-ints": a draw of n elements replayed as chunks of at most 64 (tails kept >= 16)
    leaves the CPU generator where the single draw leaves it - the next randint(0, 1000, (5,)) is the same - for
    sizes around the 16-element blocks the CPU kernels use (17, 64, 65, 79, 1001) and a 2-D shape."""
    from mfulib.flops import meta_build
    ops = {"randn": lambda s: torch.randn(s), "randn_fp16": lambda s: torch.randn(s, dtype=torch.float16),
           "randn_bf16": lambda s: torch.randn(s, dtype=torch.bfloat16), "rand": lambda s: torch.rand(s),
           "randint": lambda s: torch.randint(0, 7, s), "normal_": lambda s: torch.empty(s).normal_(1.0, 2.0),
           "uniform_": lambda s: torch.empty(s, dtype=torch.float16).uniform_(-1, 1),
           "bernoulli_": lambda s: torch.empty(s).bernoulli_(0.3)}
    f = ops[draw]
    for shape in ([17], [64], [65], [79], [1001], [13, 77]):
        n = math.prod(shape)
        torch.manual_seed(0)
        f(shape)
        want = torch.randint(0, 1000, (5,))
        torch.manual_seed(0)
        sizes = meta_build._chunk_sizes(n, 64)
        assert sum(sizes) == n and all(16 <= k <= 64 for k in sizes[:-1] + ([sizes[-1]] if n >= 16 else []))
        for k in sizes:
            f([k])
        assert torch.equal(torch.randint(0, 1000, (5,)), want), (draw, shape)


def test_a_case_above_the_real_draw_cap_still_gets_the_timed_lengths(tmp_path, monkeypatch):
    """With the real-draw cap below the case (1 byte), q [4, 4096, 64] is built on meta: the lengths drawn after it
    are still the timed ones (q's draw is replayed), so flops.py, the tracer and the collector count
    sum_b 2 * n_b^2 * 128 over the timed lengths, recorded as inputs_drawn "timed-ints" with the lengths."""
    monkeypatch.setattr(fc, "REAL_DRAW_MAX_BYTES", 1)
    od = write_dir(tmp_path, REF, [CASE], FLOPS)
    lens = timed_lengths()
    want = sum(2 * n * n * 128 for n in lens)
    ff = fcon.load_flops(od.flops_py)
    row = fchk.check_case(ff, od, 0)
    assert row["inputs_drawn"] == "timed-ints" and row["data_values"] == {"1": lens}
    assert row["flops"] == want and row["tracer"]["total_flops"] == want and row["status"] == "pass"
    # the tracer: lens.tolist() cannot run on meta, so it traces on the CPU (a real, timed draw) and agrees
    assert row["tracer"]["data_values"]["1"] == lens and row["tracer"]["device"] == "cpu"
    # the build itself (what flops(case, args) and a meta trace get): q on meta, the timed lengths
    built, how = fc._build_as_timed(od, 0, 0)
    assert how == "timed-ints" and built.args[0].device.type == "meta" and built.args[1].tolist() == lens
    built.close()
    ent = collect.case_flops(ff, od, od.describe(0), 0)
    assert ent["flops"] == want and ent["inputs_drawn"] == "timed-ints"


def test_the_meta_build_says_meta_when_the_timed_values_cannot_be_kept():
    """Honest record: a re-seed between the big draw and the lengths drops the queued replay (the lengths are
    those of seed 5, as timed); an integer tensor of 2^24 elements built on meta has no values, and a random op
    on a meta view cannot be replayed - both leave a reason in ``lost`` (recorded as "meta")."""
    torch.manual_seed(5)
    want = torch.randint(1, 100, (3,)).tolist()
    with fc._build_mode_class()() as mode:
        torch.manual_seed(0)
        torch.randn(2048, 1024)
        torch.manual_seed(5)
        assert torch.randint(1, 100, (3,)).tolist() == want and mode.lost == [] and mode.pending == []
    with fc._build_mode_class()() as mode:
        big = torch.randint(0, 10, (1 << 24,))
        assert big.device.type == "meta" and any("integer/bool" in r for r in mode.lost)
    with fc._build_mode_class()() as mode:
        x = torch.empty(2048, 1024)
        x[:, :10].normal_()
        assert any("cannot replay" in r for r in mode.lost)


def test_a_meta_trace_above_the_cap_records_timed_ints_and_says_so(tmp_path, monkeypatch):
    """A reference that runs on meta (q @ q^T per batch, lengths unused in the count): above the cap the tracer
    builds on meta, records inputs_drawn "timed-ints" with the timed lengths, and notes how it drew them.
    Hand value: 2 * 4 * 4096 * 4096 * 64 = 8589934592."""
    monkeypatch.setattr(fc, "REAL_DRAW_MAX_BYTES", 1)
    ref = REF.replace("        out = torch.zeros_like(q)\n", "        return q @ q.transpose(-1, -2)\n", 1)
    od = write_dir(tmp_path, ref, [CASE], FLOPS)
    r = fc.trace_case(od, 0)
    assert r.device == "meta" and r.total_flops == 2 * 4 * 4096 * 4096 * 64
    assert r.inputs_drawn == "timed-ints" and r.data_values == {"1": timed_lengths()}
    assert any("integer/bool inputs as timed" in n for n in r.notes)


MASK_REF = '''
import json, os, torch, torch.nn as nn
def get_input_groups():
    out = []
    for line in open(os.path.splitext(__file__)[0] + ".json"):
        if line.strip():
            e = json.loads(line)["inputs"][0]
            q = torch.randn(e["shape"])
            keep = torch.rand(e["shape"][0], e["shape"][1], e["shape"][1]) < 0.25   # a mask from a big float draw
            out.append([q, keep])
    return out
def get_init_inputs():
    return []
class Model(nn.Module):
    def forward(self, q, keep):
        s = (q @ q.transpose(-1, -2)).masked_fill(~keep, float("-inf"))
        return s.softmax(-1) @ q
'''
MASK_CASE = {"inputs": [{"name": "q", "type": "tensor", "required": True, "dtype": "float32", "shape": [2, 2048, 1024]},
                        {"name": "keep", "type": "tensor", "required": True, "dtype": "bool", "shape": [2, 2048, 2048]}]}


def test_a_big_case_is_built_on_meta_first_and_drawn_for_real_only_when_a_value_was_lost(tmp_path, monkeypatch):
    """q [2, 2048, 1024] float32 (16 MiB) + a [2, 2048, 2048] bool mask: at or above META_FIRST_MIN_BYTES, below the
    real-draw cap. The mask comes from a big float draw (rand < 0.25): built on meta it would have no values, so the
    tracer draws the case for real after all ("timed") and counts the kept (q, k) pairs exactly. Oracle: the case
    built for real as the timed child builds it (OpDir.build_case on the CPU), counted by hand - QK^T and PV over
    the kept pairs, 2 x 1024 each: 4096 x keep.sum(); the same count with the meta-first build switched off. Without
    the mask, q alone is built on meta ("timed-ints": nothing drawn on the host) and counted dense:
    2 x (2 x 2 x 2048 x 2048 x 1024)."""
    one = "def flops(case):\n    return 1.0\n"
    od = write_dir(tmp_path, MASK_REF, [MASK_CASE], one)
    assert fc.META_FIRST_MIN_BYTES <= od.describe(0).input_bytes <= fc.REAL_DRAW_MAX_BYTES
    built = od.build_case(0, impl="ref", seed=0, device="cpu")
    want = 4096 * int(built.args[1].sum())
    built.close()
    assert 0 < want < 4096 * 2 * 2048 * 2048
    r = fc.trace_case(od, 0)
    assert r.status == "ok" and r.inputs_drawn == "timed" and r.total_flops == want
    monkeypatch.setattr(fc, "META_FIRST_MIN_BYTES", 1 << 40)  # off: the plain real draw
    assert fc.trace_case(od, 0).total_flops == want
    monkeypatch.undo()

    plain = "\n".join(line for line in MASK_REF.split("\n") if "keep = " not in line)
    plain = plain.replace("[q, keep]", "[q]").replace("def forward(self, q, keep):", "def forward(self, q):") \
        .replace('.masked_fill(~keep, float("-inf"))', "")
    (tmp_path / "plain").mkdir()
    od2 = write_dir(tmp_path / "plain", plain, [{"inputs": MASK_CASE["inputs"][:1]}], one)
    assert od2.describe(0).input_bytes >= fc.META_FIRST_MIN_BYTES
    built, how = fc._build_as_timed(od2, 0, 0, meta_first_min_bytes=fc.META_FIRST_MIN_BYTES)
    assert how == "timed-ints" and built.args[0].device.type == "meta"
    built.close()
    r2 = fc.trace_case(od2, 0)
    assert r2.inputs_drawn == "timed-ints" and r2.total_flops == 2 * (2 * 2 * 2048 * 2048 * 1024)
