"""Running the collector for the search: the command line of a stage-2, re-timing or counting run
(:func:`collector_command`) and the run itself with its progress bar and per-case seconds (:func:`run_collector`);
a stopped search waits for the collector's partial report (:func:`_stop_waits_for`). ``opts`` is the search's
:class:`mfulib.search.grid.SearchOptions` (not imported: grid imports this module)."""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time

from mfulib.core.errors import UserError
from mfulib.core.opdir import OpDir
from mfulib.core.paths import SCRIPTS_DIR

COLLECTOR = os.path.join(SCRIPTS_DIR, "ops_profiling", "msprof_perf_summary.py")
STOP_GRACE_S = 15.0  # a stopped search waits this long for its collector's partial report (the batch grants 20 s)

_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")
_CASE = re.compile(r"^\[\d+/\d+\] case (\d+) ")  # the collector's per-case progress line (backends/collect.py)


def collector_command(op_dir: str, ids: list, out_dir: str, backend_name: str, opts,
                      timing_only: bool = False) -> list:
    """The stage-2 collector command line for case ``ids`` of the work dir ``op_dir`` into ``out_dir``: precise
    kernel time, and on cuda the tensor instruction counts the numerator needs (``--pmu``
    :attr:`SearchOptions.stage2_pmu`, default auto = Nsight Compute when it is found and permitted, unless
    ``collect_args`` carry their own ``--pmu``; npu collects no counter: :mod:`mfulib.flops.executed` uses none
    there). ``timing_only`` (the re-timing runs): ``--pmu none`` on every backend, a ``--pmu`` of ``collect_args``
    dropped."""
    cmd = [sys.executable, COLLECTOR, "--quick", "--impl", "asc", "--op-dir", op_dir, "--output-dir", out_dir,
           "--cases", ",".join(map(str, ids)), "--backend", backend_name, "--device", str(opts.device_id),
           "--seed", str(opts.seed), "--case-timeout-s", str(opts.case_timeout_s)]
    extra = list(opts.collect_args)
    if timing_only:
        extra = [a for i, a in enumerate(extra) if not (a == "--pmu" or str(a).startswith("--pmu=")
                                                        or (i and extra[i - 1] == "--pmu"))] + ["--pmu", "none"]
    from mfulib.backends import backend_class
    counted = backend_class(backend_name).matrix_counter_documented and not backend_class(backend_name).pmu_in_profile
    if counted and not any(a == "--pmu" or str(a).startswith("--pmu=") for a in extra):
        cmd += ["--pmu", opts.stage2_pmu]  # tensor instruction counts for the executed-FLOPs numerator
    if opts.stage2_warmup is not None:
        cmd += ["--warmup", str(opts.stage2_warmup)]
    if opts.stage2_repeats is not None:
        cmd += ["--repeats", str(opts.stage2_repeats)]
    if opts.unverified_ok:
        cmd.append("--unverified-ok")
    return cmd + extra


@contextlib.contextmanager
def _stop_waits_for(proc, grace_s: float = STOP_GRACE_S):
    """On a stop (KeyboardInterrupt: Ctrl-C or SIGTERM, which reach the collector too - one process group) wait up
    to ``grace_s`` for the collector to write what it measured (performance.json, complete: false), then kill it."""
    try:
        yield
    except KeyboardInterrupt:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise


def run_collector(opdir: OpDir, ids: list, out_dir: str, backend_name: str, opts, log,
                  case_wall_s: dict | None = None, label: str = "stage 2", timing_only: bool = False) -> str:
    """Run the collector (:func:`collector_command`) on ``ids`` into ``out_dir`` (a subprocess, its progress lines
    driving a tqdm bar); returns the performance.json path. ``case_wall_s``, when given, receives {case id: seconds
    from the previous case's progress line (the first: from the collector's start, its start-up included) to this
    case's} - the per-case cost of the timing run plus its PMU pass. ``label`` prefixes its log lines and bar;
    ``timing_only``: :func:`collector_command`'s. Raises UserError when it wrote none."""
    from tqdm import tqdm
    cmd = collector_command(opdir.path, ids, out_dir, backend_name, opts, timing_only)
    perf = os.path.join(out_dir, "performance.json")
    if os.path.exists(perf):
        os.unlink(perf)
    log(f"{label}: " + " ".join(cmd[1:]))
    tty = opts.progress and sys.stderr.isatty()
    bar = tqdm(total=len(ids), desc=f"search {label} (collector)", unit="case", disable=not tty, file=sys.stderr)
    tail = []
    t_last = time.perf_counter()
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc, \
            _stop_waits_for(proc):
        for line in proc.stderr:
            tail = (tail + [line.rstrip()])[-20:]
            m = _PROGRESS.match(line)
            c = _CASE.match(line) if m else None
            if c and case_wall_s is not None:
                now = time.perf_counter()
                case_wall_s[int(c.group(1))] = case_wall_s.get(int(c.group(1)), 0.0) + now - t_last
                t_last = now
            if m and not tty:
                log(f"{label}: {line.rstrip()}")
            elif m:
                bar.total = int(m.group(2))
                bar.n = int(m.group(1))
                bar.refresh()
        rc = proc.wait()
    bar.close()
    if not os.path.exists(perf):
        raise UserError(f"{label}: the collector wrote no {perf} (exit status {rc}): " + " | ".join(tail[-6:]))
    return perf
