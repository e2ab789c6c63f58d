"""GPU check of the device draw (mfulib/core/input_draw.py): on CUDA large float inputs are created on the
device from its seeded generator - reproducible, fast - while integer inputs keep the host stream's values.

Run on the GPU machine from the repository root: python3 -m pytest -q tests/gpu/test_input_draw_cuda.py
"""
import os
import sys
import time

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
from test_input_draw import BIG, _op  # noqa: E402

from mfulib.core import input_draw as draw  # noqa: E402
from mfulib.core.opdir import OpDir  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_large_floats_are_drawn_on_the_gpu_reproducibly_and_integers_match_the_cpu(tmp_path):
    od = _op(tmp_path, BIG // 2)
    a, b, c = (od.build_case(0, seed=s, device="cuda") for s in (4, 4, 5))
    cpu = od.build_case(0, seed=4)
    try:
        assert a.inputs_drawn == "device:cuda"
        assert all(t.device.type == "cuda" for t in a.args)
        assert all(torch.equal(x, y) for x, y in zip(a.args, b.args))  # same seed, same device: same values
        assert not torch.equal(a.args[0], c.args[0])
        assert torch.equal(a.args[2].cpu(), cpu.args[2]) and torch.equal(a.args[3].cpu(), cpu.args[3])
    finally:
        for x in (a, b, c, cpu):
            x.close()


def test_the_largest_batch_matmul_case_is_drawn_in_well_under_a_second(tmp_path):
    """zoo/1_BatchMatmul line 7: two fp16 [16, 4096, 4096] inputs (2^28 elements each, 1 GiB together)."""
    import subprocess
    work = tmp_path / "bmm"
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "prepare_op_dir.py"), "--example",
                    "zoo/1_BatchMatmul", "--dst", str(work)], check=True, capture_output=True)
    od = OpDir(work)
    od.build_case(0, device="cuda").close()  # first CUDA use in this process (context, allocator)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    built = od.build_case(7, device="cuda")
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    try:
        assert built.inputs_drawn == "device:cuda" and tuple(built.args[0].shape) == (16, 4096, 4096)
        assert built.args[0].dtype == torch.float16 and abs(float(built.args[0].float().std()) - 1.0) < 0.01
        print(f"line 7 built in {dt:.3f} s on {torch.cuda.get_device_name()}")
        assert dt < 1.0, dt
    finally:
        built.close()
    os.environ[draw.HOST_DRAW_ENV] = "1"
    try:
        host = od.build_case(4, device="cuda")  # 8 x 1024 x 1024: above the threshold, yet on the host
        assert host.inputs_drawn == "host" and host.args[0].device.type == "cuda"
        host.close()
    finally:
        os.environ.pop(draw.HOST_DRAW_ENV)
