"""Out of memory is ``oom`` on every backend (docs/ARCHITECTURE.md#bad-input): one classifier (mfulib.core.failures) for
verify_op.py and the collector's child. Messages: the host allocator's is raised for real here; the CUDA and Ascend ones
are the documented texts cited in mfulib/core/failures.py (torch's CUDA caching allocator, torch_npu's allocator as
reported in vllm-ascend#19 / sglang#29838 / vllm-ascend#1993, CANN's error-code reference and rt_error_codes.h)."""
import pytest
import torch

from mfulib.core.failures import classify, is_out_of_memory


def host_oom():
    try:
        torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: refused at once, nothing is allocated
    except RuntimeError as exc:
        return exc
    pytest.skip("this host allocated 1 PiB")


def test_the_host_allocator_refusal_is_oom_not_a_generic_error():
    exc = host_oom()
    assert "DefaultCPUAllocator: can't allocate memory" in str(exc) and type(exc) is RuntimeError
    status, msg = classify(exc)
    assert status == "oom" and msg.startswith("out of memory: RuntimeError: ") and str(exc)[:30] in msg


def test_cuda_out_of_memory_by_type_and_by_text():
    text = ("CUDA out of memory. Tried to allocate 170.00 MiB. GPU 0 has a total capacity of 22.30 GiB of which "
            "14.69 MiB is free.")
    assert classify(torch.OutOfMemoryError(text))[0] == "oom"
    assert classify(torch.cuda.OutOfMemoryError("no text"))[0] == "oom"  # the type alone
    assert classify(RuntimeError(text))[0] == "oom"  # the text alone (older torch raised RuntimeError)
    assert classify(MemoryError())[0] == "oom"


@pytest.mark.parametrize("text", [
    # torch_npu caching allocator (vllm-project/vllm-ascend#19)
    "NPU out of memory. Tried to allocate 22.00 MiB (NPU 0; 60.97 GiB total capacity; 10.24 GiB already allocated; "
    "19.52 MiB free; 10.65 GiB reserved in total by PyTorch)",
    # the primary error is a DMA failure; the CANN log below it names the allocation failure (vllm-ascend#1993)
    "npuSynchronizeDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:508 NPU function error: "
    "AclrtSynchronizeDeviceWithTimeout, error code is 507013\n[ERROR] ERR00100 PTA call acl api failed\n"
    "EL0004: [PID: 553] 2025-09-17-04:55:13.065.712 Failed to allocate memory.\n"
    "        Possible Cause: Available memory is insufficient.",
    "alloc device memory failed, runtime result = 207001[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:161]",
    "aclrtMalloc failed, ret = 207001, size=10485760",
    "NPU function error: aclrtMallocAlign32, error code is 207018",  # ACL_ERROR_RT_DEVICE_OOM
    "EI0011: Failed to allocate [1073741824] bytes of NPU memory.",
    "ACL_ERROR_RT_MEMORY_ALLOCATION",
])
def test_ascend_allocation_failures_are_oom(text):
    assert classify(RuntimeError(text))[0] == "oom"


@pytest.mark.parametrize("text", [
    "NPU function error: AclrtSynchronizeDeviceWithTimeout, error code is 507013",  # DMA error alone
    "aclrtFree failed, error code is 207002",  # ACL_ERROR_RT_MEMORY_FREE: a free error, not an allocation failure
    "shape [207001, 8] does not match",  # the number without an error-code context
    "Cannot index tensor of size 4",
])
def test_other_failures_stay_errors(text):
    status, msg = classify(RuntimeError(text))
    assert status == "error" and msg == f"RuntimeError: {text}"


def test_oom_behind_a_wrapping_exception_and_rejection_first():
    from triton.runtime.errors import InterpreterError
    try:
        try:
            raise host_oom()
        except RuntimeError as inner:
            raise InterpreterError(repr(ValueError("kernel failed"))) from inner
    except InterpreterError as outer:
        assert is_out_of_memory(outer)
    status, msg = classify(ValueError("case rejected: K must be a multiple of 16"))
    assert (status, msg) == ("rejected", "case rejected: K must be a multiple of 16")
