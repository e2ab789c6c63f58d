"""Issue 11 item 1: the FLOPs of a case come from the inputs that are timed (one seeded draw), and the
data-dependent values that entered the count are recorded.

The reference draws a big q first and then random per-sequence lengths (as public references do, unseeded: the
tool seeds torch before get_input_groups()). A meta build skips the big draw, so the lengths it sees are other
lengths than the timed child's - the issue saw a 2.1x MFU error with check_flops passing at ratio 1.0.
"""
import torch

from mfulib import flopcount as fc
from mfulib import flops_check as fchk
from mfulib import flops_contract as fcon
from mfulib.backends import collect
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
    off the host stream (mfulib/input_draw.py, issue 13: on the device, or from a private CPU generator), so
    on every backend the lengths are the host stream's first draw."""
    torch.manual_seed(seed)
    return torch.randint(1, 4097, (4,)).tolist()


def test_flops_py_and_the_tracer_see_the_timed_lengths_and_they_are_recorded(tmp_path):
    """Hand value: FLOPs = sum_b 2 * n_b^2 * (64 + 64) over the timed lengths n_b (QK^T and PV of each sequence);
    flops.py, the tracer and the collector all see exactly those lengths, and record them."""
    od = write_dir(tmp_path, REF.replace("\n", "\n", 1), [CASE], FLOPS)
    lens = timed_lengths()
    want = sum(2 * n * n * 128 for n in lens)
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
