"""Step 5, peaks: the measured per-dtype GEMM peaks and copy bandwidth of the device (peak.json); the nominal
(datasheet) peaks they are set beside are device facts in :mod:`mfulib.core.nominal_peaks`."""
