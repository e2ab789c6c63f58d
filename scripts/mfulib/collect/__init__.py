"""Step 4, kernel times: the collector's driver (ops_profiling/msprof_perf_summary.py), kernel tables, PMU
counters and the profile loaders (msprof, ncu, chrome traces, --from-prof)."""
