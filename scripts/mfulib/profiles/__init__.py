"""What device profilers write, read by name: the kernel launch table and its per-iteration time, msprof CSV
exports (one parser), Nsight Compute CSV pages, and the canonical PMU counter names. Used by the backends that
record profiles and by the collector and ``--from-prof`` that read them; imports nothing above core."""
