"""The one cache-flush mechanism of the project: a buffer on the device, written whole between timed iterations.

:class:`CacheFlush` holds the buffer; :meth:`mfulib.backends.base.Backend.write_flush` writes it - with the
collector's named flush kernel (``mfu_harness_flush_kernel``, :mod:`mfulib.backends.harness`), which every
profiler attributes to the harness and never to an operator; on the CPU (:class:`mfulib.backends.cpu.CpuBackend`)
with a torch fill recorded under that kernel's name. Writing more bytes than the last-level cache holds evicts
it, so the next timed iteration starts cold (the flush of KernelBench and of mamf-finder,
stas00/ml-engineering ``compute/accelerator/benchmarks/mamf-finder.py``).

The users set the policy: the collector flushes ``--flush-cache-mib`` MiB before each iteration when asked
(:class:`mfulib.backends.harness.Harness`); the peak calibration always flushes ``max(256 MiB, 4 x L2)``
(:func:`mfulib.peaks.gemm_timing.flush_bytes`).
"""


class CacheFlush:
    """A flush buffer of ``nbytes`` (fp32 elements; 0 = no flush) on ``device``, written by ``backend``."""

    def __init__(self, backend, device, nbytes: int):
        import torch
        self.backend = backend
        self.nbytes = (int(nbytes) // 4) * 4
        self.buf = torch.empty(self.nbytes // 4, dtype=torch.float32, device=device) if self.nbytes > 0 else None

    def flush(self) -> None:
        """Evict the last-level cache by writing the whole buffer (no-op without one)."""
        if self.buf is not None:
            self.backend.write_flush(self.buf)

    def release(self) -> None:
        self.buf = None
