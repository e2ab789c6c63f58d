"""The definitions every layer shares: MFU/MBU formulas, errors, JSON I/O and provenance, case files, the work
directory, the device's identity and nominal peaks, symbol analysis of case files, input drawing, the percent
format and where the project's files are. It imports no other subpackage."""
