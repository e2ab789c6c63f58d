"""The collector's own kernels, launched in the child around the timed iterations (never operator time).

* ``mfu_harness_marker_kernel``: one program, one element; launched at the start of every iteration and once after
  the last where the profiler records no ranges (msprof CSVs), so rows between two markers are one iteration;
* ``mfu_harness_flush_kernel``: writes a buffer of ``--flush-cache-mib`` MiB before an iteration (outside its
  range) so that the iteration starts with a cold last-level cache.

Both names start with :data:`mfulib.collect.kernels.HARNESS_PREFIX`, so every backend drops them by name as well as by
range. Import this module only after ``TRITON_INTERPRET`` is settled (kernels are decorated at import).
"""
import triton
import triton.language as tl

FLUSH_BLOCK = 65536  # big tiles: the interpreter pays ~2.5 ms per program


@triton.jit
def mfu_harness_marker_kernel(ptr):
    tl.store(ptr, tl.load(ptr) + 1)


@triton.jit
def mfu_harness_flush_kernel(ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(ptr + offs, offs.to(tl.float32), mask=offs < n)


class Harness:
    """Marker and flush launches on ``device`` (flush buffer of ``flush_mib`` MiB of fp32; 0 = no flush)."""

    def __init__(self, device, flush_mib: float = 0.0):
        import torch
        self.counter = torch.zeros(1, dtype=torch.int32, device=device)
        n = int(flush_mib * (1 << 20)) // 4
        self.flush_buf = torch.empty(n, dtype=torch.float32, device=device) if n > 0 else None

    def marker(self):
        mfu_harness_marker_kernel[(1,)](self.counter)

    def flush(self):
        if self.flush_buf is not None:
            n = self.flush_buf.numel()
            mfu_harness_flush_kernel[(triton.cdiv(n, FLUSH_BLOCK),)](self.flush_buf, n, BLOCK=FLUSH_BLOCK)
