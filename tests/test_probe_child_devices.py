"""The probe's gate child is handed a torch device string (``cuda:0``, ``npu:0``, ``cpu``), not a backend name.

On the H200 every gate-3 candidate once failed with ``UserError: --backend 'cuda:0'`` because the child asked the
backend registry for the device string itself; CPU runs (device ``cpu`` = backend ``cpu``) could not show it. This
runs the child's request handler with each device string, verify and timing stubbed (no device needed).
"""
import pytest

from mfulib.search import probe_child


@pytest.mark.parametrize("device", ["cuda:0", "npu:1", "cpu"])
def test_the_gate_child_takes_a_device_string(monkeypatch, tmp_path, device):
    import mfulib.verify.correctness as correctness
    seen = {}

    def fake_verify(od, case_id, device=None, seed=None):
        seen["verify"] = device
        return {"status": "pass"}

    def fake_time(od, dev, seed, max_ms, repeats):
        seen["time"] = dev
        return {"status": "ok", "time_ms": 1.0}

    monkeypatch.setattr(correctness, "verify_case", fake_verify)
    monkeypatch.setattr(probe_child, "time_run", fake_time)
    reply = probe_child.handle({"op_dir": str(tmp_path), "seed": 0, "max_ms": 10.0}, device)
    assert reply["verify"]["status"] == "pass" and reply["time"]["status"] == "ok"
    assert seen == {"verify": device, "time": device}
    assert ("cpu_adaptations" in reply["verify"]) == (device == "cpu")  # only the interpreter adapts kernels
