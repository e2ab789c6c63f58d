"""What an exception raised while running a case means: ``rejected``, ``oom`` or ``error`` - the one classifier.

Used by verify_op.py (:func:`mfulib.verify.correctness.verify_case`) and the collector's child (:mod:`mfulib.backends.runner`),
so a case that runs out of memory is ``oom`` in both ``verify.json`` and ``performance.json``, on every backend.

Out of memory is recognised by the exception type or by the allocator's message (the exception, its chained
causes and, for the interpreter's ``InterpreterError``, the wrapped text are all read):

* Python ``MemoryError``; torch ``torch.OutOfMemoryError`` (= ``torch.cuda.OutOfMemoryError``, any class named
  ``OutOfMemoryError``);
* CUDA caching allocator: ``CUDA out of memory. Tried to allocate ...`` (torch/c10/cuda/CUDACachingAllocator.cpp);
* host allocator: ``DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes. Error code 12
  (Cannot allocate memory)`` - a plain RuntimeError (seen with torch 2.13.0+cpu: ``torch.empty(1 << 50,
  dtype=torch.uint8)``; c10/core/impl/alloc_cpu.cpp), ``DefaultCPUAllocator: not enough memory`` (its Windows text);
* Ascend (torch_npu caching allocator): ``NPU out of memory. Tried to allocate ...`` (RuntimeError or
  torch.OutOfMemoryError, e.g. vllm-project/vllm-ascend#19, sgl-project/sglang#29838);
* Ascend CANN error codes in the message: ``EL0004`` Memory_Allocation_Failure "Failed to allocate memory requested
  by %s module" (CANN troubleshooting, Driver Errors: hiascend.com ... maintenref/troubleshooting/
  atlaserrorcode_15_0267.html), ``EI0011`` Resource_Error_Insufficient_Device_Memory "Failed to allocate [%s] bytes of
  NPU memory" (HCCL Errors, atlaserrorcode_15_0324.html), and the runtime return codes
  ``ACL_ERROR_RT_MEMORY_ALLOCATION = 207001`` ("memory allocation error, only used by out of memory") and
  ``ACL_ERROR_RT_DEVICE_OOM = 207018`` ("device oom") of ``include/acl/error_codes/rt_error_codes.h`` (CANN 8.5.0),
  as torch_npu prints them ("error code is 207018", "alloc device memory failed, runtime result = 207001",
  "aclrtMalloc failed, ret = 207001"). An EL0004 below another error (vllm-ascend#1993: "error code is 507013"
  then "EL0004 ... Failed to allocate memory") is still out of memory: the allocation failure is the cause.

Not out of memory: a process killed by the host's OOM killer leaves no exception (the parent records ``crashed``
with SIGKILL, mfulib/backends/runner.py); ``ACL_ERROR_RT_MEMORY_FREE = 207002`` is a free error, not an
allocation failure.
"""
from __future__ import annotations

import re

from mfulib.core.errors import rejection_reason

OOM_PATTERNS = (
    re.compile(r"out of memory", re.I),  # CUDA/NPU caching allocators, HIP, generic
    re.compile(r"DefaultCPUAllocator: (can't allocate memory|not enough memory)", re.I),
    re.compile(r"\bEL0004\b|\bEI0011\b"),
    re.compile(r"ACL_ERROR_RT_MEMORY_ALLOCATION|ACL_ERROR_RT_DEVICE_OOM"),
    re.compile(r"(error code|result|ret)\D{0,6}\b(207001|207018)\b", re.I),
)


def _texts(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_out_of_memory(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it was raised from) is an allocation failure (module docstring)."""
    for e in _texts(exc):
        if isinstance(e, MemoryError) or "OutOfMemory" in type(e).__name__:
            return True
        text = str(e)
        if any(p.search(text) for p in OOM_PATTERNS):
            return True
    return False


OOM_ADVICE = " - pick smaller cases, or free the device's memory"


def classify(exc: BaseException, oom_advice: str = OOM_ADVICE):
    """``(status, message)`` of an exception raised while running a case: ``("rejected", "case rejected: <reason>")``,
    ``("oom", "out of memory: <type>: <first line><oom_advice>")`` or ``("error", "<type>: <text>")``. ``oom_advice``:
    what the user should do about an out-of-memory (a caller that knows more passes its own)."""
    reason = rejection_reason(exc)
    if reason is not None:
        return "rejected", f"case rejected: {reason}"
    name = type(exc).__name__
    text = str(exc)
    if is_out_of_memory(exc):
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        return "oom", f"out of memory: {name}: {first}{oom_advice}"
    return "error", f"{name}: {text}"
