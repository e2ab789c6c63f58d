"""Where a case's inputs are drawn (mfulib/core/input_draw.py): large floats off the global host
stream, integers on it - so the integer values a FLOP count sees are the same on every backend and in check_flops.

No accelerator here: the "device" is meta (the same code path as cuda/npu: factories redirected to the target),
and the CPU path is checked against the plain draw it replaces."""
import json
import textwrap

import pytest
import torch

from mfulib.flops import tracer as flopcount
from mfulib.flops import meta_build
from mfulib.core import opdir
from mfulib.core import input_draw as draw
from mfulib.core.input_draw import DEVICE_DRAW_MIN_NUMEL
from mfulib.core.opdir import OpDir

BIG = DEVICE_DRAW_MIN_NUMEL  # elements: exactly at the threshold

REF = '''
import json, os
import torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, x, u, lens, small):
        return x
def get_input_groups():
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "model.json")) as f:
        line = json.loads(f.readline())
    n = line["inputs"][0]["shape"][1]
    x = torch.randn(2, n, dtype=torch.float16)            # large float (factory)
    u = torch.empty(2, n).uniform_(-1.0, 1.0)             # large float (filled in place)
    lens = torch.randint(1, 100, (8,))                    # integer: the FLOPs-relevant data
    small = torch.rand(16)                                # small float: host stream as before
    return [[x, u, lens, small]]
'''


def _op(tmp_path, n):
    d = tmp_path / f"w{n}"
    d.mkdir()
    (d / "model.py").write_text(textwrap.dedent(REF))
    line = json.dumps({"inputs": [{"name": "x", "type": "tensor", "dtype": "float16", "shape": [2, n]},
                                  {"name": "u", "type": "tensor", "dtype": "float32", "shape": [2, n]}]}) + "\n"
    (d / "model.json").write_text(line)
    (d / "T_perf_cases.jsonl").write_text(line)
    return OpDir(d)


def _plain_draw(od, seed):
    """The earlier draw: seed, then get_input_groups() with no mode at all."""
    built = od.build_case(0, seed=seed)
    try:
        mod = opdir.import_file(od.model_py, "plain")
        opdir.seed_everything(seed)
        return list(mod.get_input_groups())[0], built
    finally:
        built.close()


def test_small_cases_draw_bit_for_bit_as_before(tmp_path):
    od = _op(tmp_path, 64)  # 128 elements per float tensor: every draw stays on the global stream
    plain, built = _plain_draw(od, 3)
    assert built.inputs_drawn == "host"
    for a, b in zip(plain, built.args):
        assert torch.equal(a, b)


def test_large_floats_use_a_private_stream_on_the_cpu_and_integers_stay_on_the_global_one(tmp_path):
    n = BIG // 2  # x and u have exactly BIG elements
    od = _op(tmp_path, n)
    plain, built = _plain_draw(od, 5)
    x, u, lens, small = built.args
    # the private stream starts at the seed, as the global one did: large draws that come first are unchanged
    assert torch.equal(x, plain[0]) and torch.equal(u, plain[1])
    assert not torch.equal(lens, plain[2])  # by design: the integers no longer follow the large draws
    # the integers and small floats come from the global stream as if no large float had been drawn
    torch.manual_seed(5)
    assert torch.equal(lens, torch.randint(1, 100, (8,)))
    assert torch.equal(small, torch.rand(16))
    # reproducible: the same seed gives the same values, another seed others
    again = od.build_case(0, seed=5)
    other = od.build_case(0, seed=6)
    try:
        assert all(torch.equal(a, b) for a, b in zip(built.args, again.args))
        assert not torch.equal(other.args[0], x)
    finally:
        again.close()
        other.close()


def test_on_a_device_large_floats_are_created_there_and_integers_match_the_cpu_draw(tmp_path):
    od = _op(tmp_path, BIG // 2)
    cpu = od.build_case(0, seed=2)
    dev = od.build_case(0, seed=2, device="meta")  # meta stands in for cuda/npu (same redirect path)
    try:
        assert dev.inputs_drawn == "device:meta"
        assert dev.args[0].device.type == "meta" and dev.args[1].device.type == "meta"
        assert dev.args[0].dtype == torch.float16 and tuple(dev.args[1].shape) == (2, BIG // 2)
        # what crossed to the device afterwards (to_device) has the host stream's values: the same as on the CPU
        groups, how = draw.input_draw(opdir.import_file(od.model_py, "m"), 2, "meta")
        lens_dev = groups[0][2]
        assert lens_dev.device.type == "cpu" and torch.equal(lens_dev, cpu.args[2])
        assert torch.equal(groups[0][3], cpu.args[3])
    finally:
        cpu.close()
        dev.close()


def test_the_flops_steps_meta_build_sees_the_timed_integers(tmp_path):
    """check_flops builds large cases with big floats on meta (flopcount's meta build mode): its integer values
    are the timed ones because no large float draw consumes the host stream anywhere."""
    assert meta_build.META_BUILD_MIN_NUMEL == DEVICE_DRAW_MIN_NUMEL  # one threshold for both splits
    od = _op(tmp_path, BIG // 2)
    timed, _ = draw.input_draw(opdir.import_file(od.model_py, "m"), 9, "meta")  # as on cuda, before to_device
    with flopcount._build_mode_class()():
        traced = od.build_case(0, seed=9, device="cpu")
    traced.close()
    assert traced.args[0].device.type == "meta" and traced.args[2].device.type == "cpu"
    assert torch.equal(traced.args[2], timed[0][2]) and torch.equal(traced.args[3], timed[0][3])
    cpu = od.build_case(0, seed=9)  # and the CPU backend's (and check_flops' real draw's) integers too
    cpu.close()
    assert torch.equal(cpu.args[2], timed[0][2])


def test_a_reference_that_needs_host_tensors_is_drawn_on_the_host_with_the_reason(tmp_path):
    d = tmp_path / "mix"
    d.mkdir()
    (d / "model.py").write_text(textwrap.dedent(f'''
        import torch, torch.nn as nn
        class Model(nn.Module):
            def forward(self, x):
                return x
        def get_input_groups():
            x = torch.randn({BIG})
            return [[x.numpy().copy()]]        # host-only code: fails on a device tensor
        '''))
    (d / "model.json").write_text(json.dumps({"inputs": [{"name": "x", "type": "tensor", "dtype": "float32",
                                                          "shape": [BIG]}]}) + "\n")
    mod = opdir.import_file(str(d / "model.py"), "mix")
    groups, how = draw.input_draw(mod, 0, "meta")
    assert how.startswith("host (device draw failed: ") and groups[0][0].shape == (BIG,)


def test_a_rejection_under_the_device_draw_is_not_retried(tmp_path):
    d = tmp_path / "rej"
    d.mkdir()
    (d / "model.py").write_text(textwrap.dedent('''
        CALLS = []
        def get_input_groups():
            CALLS.append(1)
            raise ValueError("case rejected: too big")
        '''))
    mod = opdir.import_file(str(d / "model.py"), "rej")
    with pytest.raises(ValueError, match="case rejected"):
        draw.input_draw(mod, 0, "meta")
    assert mod.CALLS == [1]


def test_host_draw_env_turns_the_device_draw_off(monkeypatch):
    monkeypatch.setenv(draw.HOST_DRAW_ENV, "1")
    assert draw.draw_device_for("meta") == "cpu"
    monkeypatch.delenv(draw.HOST_DRAW_ENV)
    assert draw.draw_device_for("meta") == "meta" and draw.draw_device_for("cpu") == "cpu"
