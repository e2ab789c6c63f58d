"""Profiles not recorded by this run: re-parse a kept or a foreign profile into ``performance.json`` without running
anything (``msprof_perf_summary.py --from-prof``).

Accepted inputs (one ``--from-prof`` path may hold several profiles; each is one (case, implementation)):

* this tool's kept profiles (``--keep-prof``): ``<dir>/prof/case<N>_<impl>/`` with ``spec.json`` (case, impl,
  warmup, repeats, backend), ``report.json`` (device) and ``trace.json`` (cuda/cpu) or ``msprof/PROF_*`` (npu);
  of a keep dir only the latest run's (``prof/runs.json``, :mod:`mfulib.collect.keep_index`; ``--all-runs``: all);
* msprof ``PROF_*`` directories and torch_npu ``*_ascend_pt`` directories (:mod:`mfulib.profiles.msprof` reads them), or
  one ``op_summary_*.csv`` / ``task_time_*.csv`` / ``kernel_details.csv`` file;
* torch.profiler chrome traces (``.json`` / ``.json.gz``, ``export_chrome_trace``), with or without this tool's
  ``mfu::iter::<i>`` ranges (:func:`mfulib.backends.cuda.trace_launches` reads them);
* ``ncu --csv`` output, ``--page raw`` or ``--page details`` (:func:`mfulib.profiles.ncu.parse_ncu_csv`).

What a foreign profile lacks is found in the data, and every finding is written to the case's ``flags``:

* **Iterations**, from the profile's own structure first: :mod:`mfulib.collect.from_prof.ranges` (this tool's
  ranges, ProfilerStep#N, record_function ranges, ``--range NAME``), else the repeating launch sequence, and **the
  head of the window** (a cut first iteration, an autotuned first call): :mod:`mfulib.collect.from_prof.iterations`;
* **The device** of a multi-device trace (``--device``) and stream overlap: :mod:`mfulib.collect.from_prof.devices`;
* **Harness work inside the window**, by evidence only (a known harness signature at the head or tail of every
  iteration over a buffer >= the L2): :mod:`mfulib.collect.from_prof.flush`;
* **Nothing recorded.** An export with a header and no kernel row (and no launch on the host) is ``no_kernels``
  ("no device kernel"); launches recorded on the host without a kernel record (CUPTI runtime launch calls
  without a kernel event; msprof api_statistic ``KernelLaunch`` calls with an empty kernel table) are
  ``incomplete``: "profiler buffer not drained", re-record (retry) - never 0 ns.

``--warmup/--repeats`` say how many iterations the profile holds (kept profiles carry them in ``spec.json``);
without them every complete iteration found is measured (warmup 0). ncu records no timestamps: its launches are
ordered by ncu's ID and ``span_ns`` / ``launch_overhead_ns`` are None.

Modules: :mod:`~mfulib.collect.from_prof.discovery` (what a path holds), one loader module per format
(:mod:`~mfulib.collect.from_prof.npu_loaders`, :mod:`~mfulib.collect.from_prof.trace_loader`,
:mod:`~mfulib.collect.from_prof.ncu_loader`, :mod:`~mfulib.collect.from_prof.loaders` for kept profiles and the
dispatch), :mod:`~mfulib.collect.from_prof.ranges`, :mod:`~mfulib.collect.from_prof.devices`,
:mod:`~mfulib.collect.from_prof.flush`, :mod:`~mfulib.collect.from_prof.iterations`,
:mod:`~mfulib.collect.from_prof.analyse` (one profile -> one collector-style result) and
:mod:`~mfulib.collect.from_prof.command` (the whole ``--from-prof`` run).
"""
from mfulib.collect.from_prof.analyse import analyse
from mfulib.collect.from_prof.command import FromProfOptions, from_prof, parse_case_sequence
from mfulib.collect.from_prof.discovery import discover
from mfulib.collect.from_prof.loaders import load
from mfulib.collect.from_prof.profile import Profile

__all__ = ["FromProfOptions", "Profile", "analyse", "discover", "from_prof", "load", "parse_case_sequence"]
