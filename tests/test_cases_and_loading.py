"""Case parsing/description, per-case building, seeding and the npu compatibility layer."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from mfulib.core import cases
from mfulib.core import definitions
from mfulib.core.errors import UserError, rejection_reason
from mfulib.core.opdir import OpDir


@pytest.mark.parametrize("spelling,canon", [("fp16", "float16"), ("float16", "float16"), ("bf16", "bfloat16"),
                                            ("fp32", "float32"), ("FP64", "float64"), ("torch.int32", "int32")])
def test_dtype_spellings_old_and_new_map_to_one_name(spelling, canon):
    assert definitions.canonical_dtype(spelling) == canon


def test_a_case_is_described_without_building_it():
    line = {"inputs": [
        {"name": "x", "type": "tensor", "required": True, "dtype": "fp16", "shape": [1, 128, 4096]},
        {"name": "normalized_shape", "type": "attr", "required": True, "dtype": "list", "value": [4096]},
        {"name": "weight", "type": "tensor", "required": False, "dtype": "float32", "shape": [4096]},
        {"name": "bias", "type": "tensor", "required": False, "dtype": "float32"},  # optional, absent
        {"name": "group_list", "type": "tensor_list", "dtype": "int32", "shapes": [[3], [5]]},
        {"name": "x1", "type": "tensor", "dtype": "bfloat16", "shape": [1], "data": [1.078125]},
        {"name": "idx", "type": "tensor", "dtype": "int32", "shape": [512, 3], "range": [-100, 99]},
    ]}
    info = cases.describe_case(line, 7)
    # bytes by hand: 128*4096*2 + 4096*4 + (3+5)*4 + 1*2 + 512*3*4
    assert info.input_bytes == 1048576 + 16384 + 32 + 2 + 6144
    assert info.compute_dtype == "float16"
    assert info.attrs == {"normalized_shape": [4096], "bias": None}
    assert info.tensor("group_list").shapes == [[3], [5]]
    assert info.tensor(0).name == "x" and cases.case_value(line, "normalized_shape") == [4096]
    assert cases.case_value(line, 1) == [4096]
    with pytest.raises(KeyError, match="no input named 'nope'"):
        cases.case_value(line, "nope")


def test_blank_lines_are_skipped_and_a_bom_is_tolerated(tmp_path):
    p = tmp_path / "c.json"
    p.write_text('\ufeff{"inputs": []}\n\n{"inputs": []}\n', encoding="utf-8")
    assert len(cases.read_case_file(p)) == 2


def test_an_empty_case_file_is_an_error(tmp_path):
    p = tmp_path / "c.json"
    p.write_text("\n")
    with pytest.raises(UserError, match="no case lines"):
        cases.read_case_file(p)


def test_rejections_are_recognised_by_their_prefix():
    assert rejection_reason(ValueError("case rejected: W2 rows must be half of W1 cols")) == \
        "W2 rows must be half of W1 cols"
    assert rejection_reason(ValueError("shape mismatch")) is None


def _workdir(tmp_path, ref_body, impl_body="", lines=2):
    d = tmp_path / "w"
    d.mkdir()
    (d / "model.py").write_text(textwrap.dedent(ref_body))
    (d / "model_new.py").write_text(textwrap.dedent(impl_body or "import torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\n"))
    body = "".join(json.dumps({"inputs": [{"name": "x", "type": "tensor", "dtype": "float32", "shape": [i + 1, 4]}]})
                   + "\n" for i in range(lines))
    (d / "model.json").write_text(body)
    (d / "T_perf_cases.jsonl").write_text(body)
    return OpDir(d)


REF_SEEDS = '''
import json, os, random
import numpy as np
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self, scale=1.0):
        super().__init__()
        self.scale = scale
    def forward(self, x, r, n):
        return x * self.scale
def get_input_groups():
    out = []
    for line in open(os.path.splitext(__file__)[0] + ".json"):
        shape = json.loads(line)["inputs"][0]["shape"]
        out.append([torch.randn(shape), random.random(), float(np.random.rand())])
    return out
def get_init_inputs():
    # per-case init lists (one per case line): case i gets scale i + 1
    return [[float(i + 1)] for i, _ in enumerate(open(os.path.splitext(__file__)[0] + ".json"))]
'''


def test_build_case_builds_only_that_case_seeds_every_rng_and_accepts_per_case_init_lists(tmp_path):
    od = _workdir(tmp_path, REF_SEEDS, lines=3)
    a, b = od.build_case(2, seed=5), od.build_case(2, seed=5)
    assert tuple(a.args[0].shape) == (3, 4)
    assert a.args[1] == b.args[1] and a.args[2] == b.args[2] and bool((a.args[0] == b.args[0]).all())
    c = od.build_case(2, seed=6)
    assert c.args[1] != a.args[1] and c.args[2] != a.args[2]
    assert a.model.scale == 3.0 and bool((a.run() == 3 * a.args[0]).all())
    for x in (a, b, c):
        x.close()
    with pytest.raises(UserError, match="no case 3"):
        od.build_case(3)


COMPAT_PROBE = '''
import json, sys
sys.path.insert(0, {scripts!r})
from mfulib.run import compat
rep = compat.install("cpu")
import torch, torch_npu
x = torch.ones(2, device="npu:0")
y = torch.zeros(3).npu()
lim = torch_npu.npu.npu_config.get_device_limit(0)
print(json.dumps({{"x": str(x.device), "y": str(y.device), "lim": lim, "avail": torch.npu.is_available(),
                   "queries": rep["device_limit_queries"], "dev": str(torch.device("npu:0"))}}))
'''


def test_the_compat_layer_runs_npu_host_code_on_cpu_and_reports_real_core_counts(repo_root):
    code = COMPAT_PROBE.format(scripts=os.path.join(repo_root, "scripts"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    n = os.cpu_count()
    assert out["x"] == "cpu" and out["y"] == "cpu" and out["avail"] is True and out["dev"] == "npu:0"
    assert out["lim"] == {"cube_core_num": n, "vector_core_num": 2 * n} and out["queries"] == 1
