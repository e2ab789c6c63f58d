"""Step 4, kernel times. The collector's core (:mod:`~mfulib.collect.driver` with options, selection, case_flops,
run_case, assemble; :mod:`~mfulib.collect.console` is its command line, ops_profiling/msprof_perf_summary.py), kernel
tables (kernels), PMU counters (pmu), the profile parsers (msprof_csv, the one msprof CSV parser; msprof, the
export layout; ncu) and re-parsing profiles not recorded by this run (:mod:`~mfulib.collect.from_prof`)."""
