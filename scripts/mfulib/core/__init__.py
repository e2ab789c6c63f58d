"""The definitions every step shares: MFU/MBU formulas, errors, JSON I/O and provenance, case files, the work
directory, the device, symbol analysis of case files, input drawing and the step state."""
