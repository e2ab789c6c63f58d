"""The collector's own kernels, launched in the child around the timed iterations (never operator time).

* ``mfu_harness_marker_kernel``: one program, one element; launched at the start of every iteration and once after
  the last where the profiler records no ranges (msprof CSVs), so rows between two markers are one iteration;
* ``mfu_harness_flush_kernel``: writes the cache-flush buffer (:class:`mfulib.backends.flush.CacheFlush`, of
  ``--flush-cache-mib`` MiB) before an iteration (outside its range) so that the iteration starts with a cold
  last-level cache.

Both names start with :data:`mfulib.profiles.kernels.HARNESS_PREFIX`, so every backend drops them by name as well as by
range. Import this module only after ``TRITON_INTERPRET`` is settled (kernels are decorated at import).
"""
import triton
import triton.language as tl

from mfulib.backends.flush import CacheFlush
from mfulib.core.definitions import MIB

FLUSH_BLOCK = 65536  # big tiles: the interpreter pays ~2.5 ms per program


@triton.jit
def mfu_harness_marker_kernel(ptr):
    tl.store(ptr, tl.load(ptr) + 1)


@triton.jit
def mfu_harness_flush_kernel(ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(ptr + offs, offs.to(tl.float32), mask=offs < n)


def flush_kernel_write(buf) -> None:
    """Write every element of the fp32 buffer ``buf`` with ``mfu_harness_flush_kernel``."""
    n = buf.numel()
    mfu_harness_flush_kernel[(triton.cdiv(n, FLUSH_BLOCK),)](buf, n, BLOCK=FLUSH_BLOCK)


class Harness:
    """Marker and flush launches of ``backend`` on ``device`` (flush buffer of ``flush_mib`` MiB; 0 = no flush)."""

    def __init__(self, backend, device, flush_mib: float = 0.0):
        import torch
        self.counter = torch.zeros(1, dtype=torch.int32, device=device)
        self.cache = CacheFlush(backend, device, int(flush_mib * MIB))

    @property
    def flushes(self) -> bool:
        return self.cache.buf is not None

    def marker(self):
        mfu_harness_marker_kernel[(1,)](self.counter)

    def flush(self):
        self.cache.flush()
