"""Step 4, kernel times. The collector's core (:mod:`~mfulib.collect.driver` with options, selection, case_flops,
run_case, assemble; :mod:`~mfulib.collect.console` is its command line, ops_profiling/msprof_perf_summary.py) and
re-parsing profiles not recorded by this run (:mod:`~mfulib.collect.from_prof`). The profile formats themselves
(kernel tables, msprof and ncu CSVs, PMU counter names) are :mod:`mfulib.profiles`."""
