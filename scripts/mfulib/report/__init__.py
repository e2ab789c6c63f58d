"""Step 6, the decomposition and its readings: per-case and per-part MFU, bound labels, roofline, terminal tables,
plots and the HTML report."""
