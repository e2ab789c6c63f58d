"""Real Triton-Ascend-style code in the CPU path: one launch hook for verify_op.py and the
collector, float kernel arguments as fp32 scalars, @triton.autotune under the interpreter, tl.make_block_ptr
kernels verified or rejected with the reason; every adaptation recorded per case.

Fixtures: tests/fixtures/ascend_style (a reference in the benchmark conventions' style and two ModelNew files written
for these tests in the Triton-Ascend host-code style: torch_npu, npu devices, persistent grids from
get_device_limit()["cube_core_num"/"vector_core_num"]).
"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures", "ascend_style")
VERIFY = os.path.join(os.path.dirname(HERE), "scripts", "verify_op.py")

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="CPU path: needs the Triton interpreter (machines without CUDA)")


def workdir(tmp_path, impl):
    from mfulib.sources.prepare import prepare_explicit
    dst = str(tmp_path / "work")
    prepare_explicit(os.path.join(FIX, "scaled_mm_softmax.py"), os.path.join(FIX, "scaled_mm_softmax.json"),
                     os.path.join(FIX, impl), dst)
    return dst


def run_verify(work):
    r = subprocess.run([sys.executable, VERIFY, "--op-dir", work, "--backend", "cpu"], capture_output=True, text=True,
                       timeout=600)
    with open(os.path.join(work, "verify.json")) as f:
        return r, json.load(f)


def kinds(adaptations):
    return {a["kind"]: a for a in adaptations}


@pytest.mark.e2e
def test_ascend_style_model_new_passes_verify_on_cpu_and_the_run_says_what_it_adapted(tmp_path):
    work = workdir(tmp_path, "scaled_mm_softmax_ascend.py")
    r, v = run_verify(work)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [c["status"] for c in v["cases"]] == ["pass", "pass"]
    for case in v["cases"]:
        k = kinds(case["cpu_adaptations"])
        assert set(k) == {"autotune_first_config", "float_args_as_fp32"}
        tuned = k["autotune_first_config"]
        assert tuned["kernel"] == "matmul_persistent_kernel" and tuned["configs"] == 2
        assert tuned["config"].startswith("BM: 32, BN: 32, BK: 32")  # the first config, not the second (64)
        assert k["float_args_as_fp32"]["kernel"] == "scaled_softmax_kernel"
        assert k["float_args_as_fp32"]["float_args"] == 1  # SCALE
    summary = v["cpu_adaptations"]  # one line per kind over all cases: kind, then kernel and detail
    assert [a.split()[0] for a in summary] == ["autotune_first_config", "float_args_as_fp32"]
    assert "matmul_persistent_kernel" in summary[0] and "BM: 32" in summary[0]
    assert "scaled_softmax_kernel" in summary[1]
    # the persistent grid was sized from the compat layer's core counts: this machine's, with their source
    compat = v["device"]["compat"]
    assert compat["cube_core_num"] == (os.cpu_count() or 1) and "os.cpu_count()" in compat["core_count_source"]


@pytest.mark.e2e
def test_the_collector_runs_the_same_model_new_on_cpu_under_the_same_hook(tmp_path):
    from mfulib.collect.driver import Options, collect
    work = workdir(tmp_path, "scaled_mm_softmax_ascend.py")
    rep = collect(Options(op_dir=work, output_dir=work, impl="asc", warmup=0, repeats=1, backend="cpu", cases=[0],
                          progress=False))
    (c,) = rep["per_case"]
    assert c["asc_error"] is None and c["asc_us"] > 0
    assert c["sequence"] == ["matmul_persistent_kernel", "scaled_softmax_kernel"]
    k = kinds(c["impls"]["asc"]["cpu_adaptations"])
    assert set(k) == {"autotune_first_config", "float_args_as_fp32"}
    # prime call + 1 iteration: every launch went through the adaptation, counted per kernel
    assert k["float_args_as_fp32"]["launches"] == 2 and k["autotune_first_config"]["launches"] == 2


@pytest.mark.e2e
def test_a_block_ptr_kernel_verifies_where_the_interpreter_has_block_pointers_else_is_rejected_with_the_reason(
        tmp_path):
    import triton

    from mfulib.run.interpreter import BLOCK_PTR_TRITON, block_ptr_supported
    work = workdir(tmp_path, "scaled_mm_softmax_block_ptr.py")
    r, v = run_verify(work)
    assert r.returncode == 0, r.stdout + r.stderr
    for case in v["cases"]:
        if block_ptr_supported():  # triton 3.8.0 (.ci/run, make setup on a machine without triton)
            assert case["status"] == "pass"
            rec = kinds(case["cpu_adaptations"])["block_ptr"]
            assert rec["kernel"] == "matmul_block_ptr_kernel" and rec["supported"] is True
        else:  # triton 3.9: rejected with the reason and the fix, never an error
            assert case["status"] == "rejected"
            assert "matmul_block_ptr_kernel" in case["reason"] and "tl.make_block_ptr" in case["reason"]
            assert f"triton {triton.__version__}" in case["reason"] and f"triton=={BLOCK_PTR_TRITON}" in case["reason"]
            rec = kinds(case["cpu_adaptations"])["block_ptr"]
            assert rec["kernel"] == "matmul_block_ptr_kernel" and rec["supported"] is False


def test_block_ptr_support_is_detected_from_the_installed_triton():
    import triton

    from mfulib.run.interpreter import block_ptr_supported
    major_minor = tuple(int(p) for p in triton.__version__.split(".")[:2])
    # measured: triton 3.8.0's interpreter runs tl.make_block_ptr, 3.9.0 raises (README "Running Triton-Ascend code")
    if major_minor in ((3, 8), (3, 9)):
        assert block_ptr_supported() == (major_minor == (3, 8))


OOM_IMPL = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale=0.125):
        super().__init__()

    def forward(self, x, w):
        torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: the host allocator refuses it at once
        return x @ w
'''


@pytest.mark.e2e
def test_host_out_of_memory_is_oom_in_verify_and_in_the_collector(tmp_path):
    from mfulib.collect.driver import Options, collect
    (tmp_path / "src").mkdir()
    impl = tmp_path / "src" / "oom_impl.py"
    impl.write_text(OOM_IMPL)
    work = workdir(tmp_path, str(impl))
    r, v = run_verify(work)
    assert r.returncode == 1  # not verified
    for case in v["cases"]:
        assert case["status"] == "oom"
        assert "DefaultCPUAllocator" in case["reason"] and "implementation" in case["reason"]
    # unverified_ok: verify found the case oom; the collector's own oom classification is under test
    rep = collect(Options(op_dir=work, output_dir=work, impl="asc", warmup=0, repeats=1, backend="cpu", cases=[0],
                          retry=0, progress=False, unverified_ok=True))
    (c,) = rep["per_case"]
    assert c["impls"]["asc"]["status"] == "oom" and c["asc_error"].startswith("out of memory: RuntimeError")


DRIVER_QUERY = """
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, sys.argv[1])
from mfulib.run import compat
report = compat.install("cpu")
import torch, triton
props = triton.runtime.driver.active.utils.get_device_properties(torch.npu.current_device())
try:
    triton.runtime.driver.active.get_benchmarker()
    refused = None
except AttributeError as exc:
    refused = str(exc)
print(json.dumps({"props": props, "queries": report["device_limit_queries"], "refused": refused}))
"""


def test_triton_ascend_driver_property_query_gets_this_machines_core_counts_under_the_interpreter():
    # vllm-ascend / sgl-kernel-npu size grids from driver.active.utils.get_device_properties()["num_aicore"/...]
    scripts = os.path.join(os.path.dirname(HERE), "scripts")
    r = subprocess.run([sys.executable, "-c", DRIVER_QUERY, scripts], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    n = os.cpu_count() or 1
    assert out["props"]["num_aicore"] == n and out["props"]["num_vectorcore"] == 2 * n
    assert out["queries"] == 1  # recorded like get_device_limit()
    assert "has no driver" in out["refused"]  # anything else is refused with the reason
