"""Step 5, peaks: nominal dense peaks per device and dtype, and the measured per-dtype GEMM peaks and bandwidth."""
