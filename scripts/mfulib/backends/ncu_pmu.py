"""Nsight Compute PMU pass of the CUDA backend: per-kernel counters from one more run of the case's child.

PMU counters (:class:`NcuPmu`): kernel *times* always come from CUPTI. Counters per kernel come from one more run
of the same child under Nsight Compute (``ncu --csv --page raw --clock-control none --cache-control <all|none>``;
ncu serialises launches and replays each one per counter pass, so its durations are never used as the kernel time).
Only the launches inside the child's iterations are profiled: the child (spec ``pmu_nvtx``) wraps each iteration in
an NVTX push/pop range that ``--nvtx --nvtx-include <range>/`` selects, and ``--launch-count`` caps the run at
iterations x launches per iteration; the priming call (compilation, autotuning) and cache flushes stay outside.
Where the NVTX filter profiles nothing, a second run filters by kernel name and keeps the last launches (their
names must repeat the CUPTI sequence). The verdict of a probe (a tiny kernel under ncu) is taken once per collector
run: ``ERR_NVGPUCTRPERM``, a profiler library that does not load or a missing ncu become ``pmu_unavailable`` and
the collection goes on without counters.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from mfulib.profiles import pmu as pmu_names

# canonical counter -> the ncu metrics passed to --metrics for it (several: combined as mfulib.profiles.pmu says, max of
# the MMA pipes, sum of their instructions); the names, aliases and sources are owned by mfulib/profiles/pmu.py
# (NCU_METRIC_OF)
NCU_METRICS = {key: (names if key in pmu_names.SUMMED else names[:1]) for key, names in pmu_names.NCU_METRIC_OF.items()}
PMU_NVTX_RANGE = "mfu_pmu_iter"
PMU_BACKENDS = ("cuda",)
CACHE_CONTROLS = ("all", "none")
PROBE_CODE = ("import torch; x = torch.ones(4096, device='cuda'); y = (x * 2.0).sum(); torch.cuda.synchronize(); "
              "print('probe', float(y))")
NCU_CANDIDATES = ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")
RUNNER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner.py")
PERM_FIX = ("the GPU's performance counters are restricted to admin users: run as root, or load the driver with "
            "NVreg_RestrictProfilingToAdminUsers=0 (NVIDIA's ERR_NVGPUCTRPERM page); kernel times are unaffected")


def ncu_metric_names(metrics=None) -> list:
    """The flat ncu metric list of ``metrics`` ({canonical: (ncu metric, ...)}, default :data:`NCU_METRICS`)."""
    return list(dict.fromkeys(m for names in (metrics or NCU_METRICS).values() for m in names))


def find_ncu(path=None):
    """The ncu executable: ``path`` when given (None when it does not exist), else ``ncu`` on PATH, else the CUDA
    toolkit's usual places (:data:`NCU_CANDIDATES`, glob patterns; the newest version first); None when none."""
    import glob
    if path:
        return shutil.which(path) or (path if os.path.isfile(path) and os.access(path, os.X_OK) else None)
    found = [p for pat in NCU_CANDIDATES for p in sorted(glob.glob(pat), reverse=True) if os.access(p, os.X_OK)]
    return shutil.which("ncu") or (found[0] if found else None)


def ncu_counters(rec, metrics=None) -> dict:
    """{canonical counter: value or None} of one ncu launch record (:func:`mfulib.profiles.ncu.parse_ncu_csv`), through
    :func:`mfulib.profiles.pmu.from_ncu_record`; a counter whose metrics are all absent or ``n/a`` is None (never 0).
    ``metrics`` (the probe's surviving list) is accepted for symmetry: dropped metrics are simply absent."""
    return pmu_names.from_ncu_record(rec)


def match_kernel(ncu_name: str, names) -> str | None:
    """The CUPTI kernel name ``ncu_name`` denotes: the same string, else the only one with the same function
    identifier (:func:`mfulib.profiles.ncu.short_kernel_name`); None when none or several do."""
    from mfulib.profiles.ncu import short_kernel_name
    if ncu_name in names:
        return ncu_name
    short = short_kernel_name(ncu_name)
    hits = [n for n in names if short_kernel_name(n) == short]
    return hits[0] if len(hits) == 1 else None


def average_by_kernel(recs, names, metrics=None) -> tuple:
    """(pmu, unmatched): ``pmu`` {CUPTI kernel name: {canonical counter: mean over its profiled launches, or None;
    ``launches``: how many were averaged}} for every name of ``names`` (launches 0 and every counter None for a
    kernel ncu did not profile); ``unmatched``: ncu kernel names that match no CUPTI name."""
    per, unmatched = {n: [] for n in names}, []
    for rec in recs:
        name = match_kernel(str(rec.get("kernel_name") or ""), names)
        if name is None:
            unmatched.append(rec.get("kernel_name"))
            continue
        per[name].append(ncu_counters(rec, metrics))
    pmu = {}
    for name, rows in per.items():
        ent = pmu_names.average_launches(rows)
        for key in pmu_names.NCU_COUNTERS:  # a kernel ncu did not profile: every counter None, launches 0
            ent.setdefault(key, None)
        pmu[name] = ent
    return pmu, sorted(set(map(str, unmatched)))


def last_iterations(recs, sequence, iterations: int) -> tuple:
    """(records, None) of the last ``iterations`` x len(``sequence``) launches when their function names repeat the
    CUPTI ``sequence`` position by position, else ([], why)."""
    from mfulib.profiles.ncu import short_kernel_name
    n = iterations * len(sequence)
    if len(recs) < n:
        return [], f"profiled {len(recs)} launch(es) by name, fewer than {iterations} iteration(s) x {len(sequence)}"
    tail = recs[len(recs) - n:]
    want = [short_kernel_name(x) for x in sequence]
    got = [short_kernel_name(r.get("kernel_name")) for r in tail]
    if any(g != want[j % len(want)] for j, g in enumerate(got)):
        return [], f"the last launches {got[-len(want):]} do not repeat the CUPTI sequence {want}"
    return tail, None


def ncu_failure(text: str, rc) -> str:
    """Why an ncu run gave no counters, from its output: ERR_NVGPUCTRPERM (with the fix), ncu's first
    ``==ERROR==`` line (e.g. a profiler library that does not load), or the exit status and last line."""
    if "ERR_NVGPUCTRPERM" in text:
        return f"ncu: ERR_NVGPUCTRPERM - {PERM_FIX}"
    errs = [ln.strip() for ln in text.splitlines() if ln.startswith("==ERROR==")]
    if errs:
        return "ncu: " + errs[0][len("==ERROR=="):].strip()[:300]
    last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "no output")
    return f"ncu profiled no kernel (exit status {rc}): {last[:300]}"


def _run(cmd, cwd, env, timeout_s, out_path):
    """Run ``cmd`` in its own process group with stdout+stderr to ``out_path``; (rc or None on timeout, text)."""
    with open(out_path, "w", encoding="utf-8") as out:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                    start_new_session=True)
        except OSError as exc:
            return -1, f"==ERROR== cannot start {cmd[0]}: {exc}"
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
    with open(out_path, encoding="utf-8", errors="replace") as f:
        return rc, f.read()


class NcuPmu:
    """Per-kernel counters from Nsight Compute for the collector's measured cases (see the module docstring).

    ``ncu``: executable (None: :func:`find_ncu`); ``cache_control``: ``all`` (caches flushed before every replayed
    launch) or ``none`` (warm, as back-to-back iterations run); ``iterations``: iterations profiled per case;
    ``timeout_s``: limit of one ncu run. :meth:`probe` is asked once (its verdict is kept); :meth:`collect_case`
    never raises for the case: a failure becomes ``pmu_unavailable``.
    """

    source = "ncu"

    def __init__(self, ncu=None, cache_control="none", iterations=2, timeout_s=600.0, requested="auto", log=None):
        if cache_control not in CACHE_CONTROLS:
            from mfulib.core.errors import UserError
            raise UserError(f"--ncu-cache-control {cache_control!r}: choose all or none (or auto)")
        self.ncu = find_ncu(ncu)
        self.ncu_given = ncu
        self.cache_control = cache_control
        self.iterations = max(int(iterations), 1)
        self.timeout_s = float(timeout_s)
        self.requested = requested
        self.log = log or (lambda msg: None)
        self.metrics = dict(NCU_METRICS)
        self.dropped = []
        self._verdict = None
        self.version = None

    def base_command(self) -> list:
        return [self.ncu, "--csv", "--page", "raw", "--print-units", "base", "--clock-control", "none",
                "--cache-control", self.cache_control, "--metrics", ",".join(ncu_metric_names(self.metrics))]

    def _drop_unknown(self, text) -> bool:
        """Drop the metrics ncu's error lines name (an ncu/GPU without them); True when any was dropped."""
        errs = "\n".join(ln for ln in text.splitlines() if ln.startswith("==ERROR==") or "metric" in ln.lower())
        bad = [m for m in ncu_metric_names(self.metrics) if m in errs]
        if not bad:
            return False
        self.dropped += bad
        self.metrics = {k: tuple(m for m in v if m not in bad) for k, v in self.metrics.items()}
        self.metrics = {k: v for k, v in self.metrics.items() if v}
        return bool(self.metrics)

    def probe(self) -> dict:
        """{available, reason, ncu, ncu_version, metrics, metrics_dropped}: can ncu read counters here? A tiny
        kernel is profiled once per collector run (the verdict is cached on this object)."""
        if self._verdict is not None:
            return self._verdict
        import tempfile
        if self.ncu is None:
            why = (f"ncu not found ({self.ncu_given} is not executable)" if self.ncu_given else
                   "ncu not found (not on PATH nor in " + ", ".join(NCU_CANDIDATES) + "; --ncu PATH names one)")
            self._verdict = {"available": False, "reason": why}
            return self._verdict
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            v = subprocess.run([self.ncu, "--version"], capture_output=True, text=True, timeout=60)
            self.version = (v.stdout.strip().splitlines() or [None])[-1]
        tmp = tempfile.mkdtemp(prefix="mfu_ncu_probe_")
        try:
            for _ in range(3):  # unknown metrics are dropped and the probe repeated
                cmd = self.base_command() + ["--launch-count", "1", sys.executable, "-c", PROBE_CODE]
                rc, text = _run(cmd, tmp, dict(os.environ), min(self.timeout_s, 300.0), os.path.join(tmp, "p.csv"))
                from mfulib.profiles.ncu import parse_ncu_csv
                recs = parse_ncu_csv(text) if rc is not None else []
                if recs:
                    self._verdict = {"available": True, "reason": None}
                    break
                if rc is None:
                    self._verdict = {"available": False, "reason": "ncu: the probe (one tiny kernel) timed out"}
                    break
                if "ERR_NVGPUCTRPERM" not in text and self._drop_unknown(text):
                    continue
                self._verdict = {"available": False, "reason": ncu_failure(text, rc)}
                break
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self._verdict.update(ncu=self.ncu, ncu_version=self.version)
        return self._verdict

    def run_record(self) -> dict:
        """performance.json's top-level ``pmu_collection`` (what was asked, what the probe found, how ncu ran)."""
        v = self.probe()
        return {"requested": self.requested, "tool": "ncu", "available": v["available"], "reason": v["reason"],
                "ncu": self.ncu, "ncu_version": self.version, "cache_control": self.cache_control,
                "clock_control": "none", "iterations": self.iterations,
                "metrics": {k: list(m) for k, m in self.metrics.items()}, "metrics_dropped": list(self.dropped)}

    def collect_case(self, spec: dict, sequence: list, names: list, out_dir: str, env: dict) -> dict:
        """Counters of one measured case: its child (``spec``: the collector's spec of that case) run once more
        under ncu in ``out_dir`` (``spec.json``, ``ncu.csv`` = ncu's stdout+stderr, ``report.json``).

        ``sequence``: the CUPTI kernel names of one iteration; ``names``: the case's kernel names. Returns
        {pmu, pmu_source, pmu_unavailable, pmu_launches, pmu_csv, flags, mma_shapes} (``mma_shapes``: the MMA
        instructions of each profiled kernel's compiled variant in the child's Triton cache,
        :func:`mfulib.profiles.triton_ptx.kernel_records`); never raises for the case."""
        from mfulib.core.jsonio import write_json_atomic
        from mfulib.profiles.ncu import parse_ncu_csv
        from mfulib.profiles.triton_ptx import kernel_records
        from mfulib.run.worker import triton_cache_dir
        v = self.probe()
        out = {"pmu": None, "pmu_source": None, "pmu_unavailable": v["reason"], "pmu_launches": 0, "pmu_csv": None,
               "flags": [], "mma_shapes": None}
        if not v["available"]:
            return out
        if not sequence:
            out["pmu_unavailable"] = "ncu: no kernel sequence from CUPTI to profile"
            return out
        os.makedirs(out_dir, exist_ok=True)
        spec = dict(spec, warmup=0, repeats=self.iterations, profile=False, markers=False, pmu_nvtx=PMU_NVTX_RANGE,
                    report_path=os.path.join(out_dir, "report.json"), trace_path=os.path.join(out_dir, "trace.json"))
        spec_path = os.path.join(out_dir, "spec.json")
        write_json_atomic(spec_path, spec)
        child = [sys.executable, RUNNER_PATH, "--spec", spec_path]
        n = self.iterations * len(sequence)
        csv_path = os.path.join(out_dir, "ncu.csv")
        t0 = time.perf_counter()
        rc, text = _run(self.base_command() + ["--nvtx", "--nvtx-include", f"{PMU_NVTX_RANGE}/", "--launch-count",
                                               str(n)] + child, out_dir, env, self.timeout_s, csv_path)
        recs = parse_ncu_csv(text) if rc is not None else []
        if rc is not None and not recs and "ERR_NVGPUCTRPERM" not in text:
            # no launch inside the NVTX ranges: filter by name instead and keep the last n launches
            regex = "regex:^(" + "|".join(re.escape(s) for s in dict.fromkeys(sequence)) + ")$"
            rc, text = _run(self.base_command() + ["--kernel-name-base", "function", "--kernel-name", regex] + child,
                            out_dir, env, self.timeout_s, csv_path)
            recs = parse_ncu_csv(text) if rc is not None else []
            if recs:
                recs, why = last_iterations(recs, sequence, self.iterations)
                if why:
                    out["pmu_unavailable"] = f"ncu: {why}"
                    out["pmu_csv"] = csv_path
                    return out
                out["flags"].append("ncu: the NVTX filter profiled no launch; the last launches by kernel name were "
                                    "used")
        out["pmu_csv"] = csv_path
        wall = time.perf_counter() - t0
        if rc is None:
            out["pmu_unavailable"] = f"ncu: no result within {self.timeout_s:g} s (raise --case-timeout-s)"
            return out
        if not recs:
            out["pmu_unavailable"] = ncu_failure(text, rc)
            return out
        pmu, unmatched = average_by_kernel(recs, names, self.metrics)
        if unmatched:
            out["flags"].append(f"ncu profiled kernels CUPTI did not record in the iterations (left out): "
                                f"{unmatched[:4]}")
        missing = [k for k, e in pmu.items() if not e["launches"]]
        if missing:
            out["flags"].append(f"ncu profiled no launch of {missing[:4]}: their counters are None")
        out.update(pmu=pmu, pmu_source=self.source, pmu_unavailable=None, pmu_launches=len(recs),
                   mma_shapes=kernel_records(pmu, triton_cache_dir(env)))
        self.log(f"  ncu: {len(recs)} launch(es) of {len(pmu) - len(missing)} kernel(s) profiled in {wall:.1f} s")
        return out


class NoPmu:
    """The stand-in when no PMU is collected (``--pmu none``, or a backend without an ncu path): ``reason`` goes to
    every measured case's ``pmu_unavailable``."""

    source = None

    def __init__(self, reason, requested="none", tool=None):
        self.reason = reason
        self.requested = requested
        self.tool = tool

    def probe(self) -> dict:
        return {"available": False, "reason": self.reason}

    def run_record(self) -> dict:
        """``pmu_collection``: nothing collected by this pass (``tool`` names the backend's own profiler, if any)."""
        return {"requested": self.requested, "tool": self.tool, "available": None if self.tool else False,
                "reason": self.reason}

    def collect_case(self, spec, sequence, names, out_dir, env) -> dict:
        return {"pmu": None, "pmu_source": None, "pmu_unavailable": self.reason, "pmu_launches": 0, "pmu_csv": None,
                "flags": [], "mma_shapes": None}


def pmu_plan(backend_name: str, mode: str, ncu=None, cache_control="auto", flush_cache_mib=0.0, iterations=2,
             timeout_s=600.0, log=None):
    """The PMU collector of a run: :class:`NcuPmu` or :class:`NoPmu`.

    ``mode``: ``none`` -> none; ``ncu`` / ``auto`` on a backend of :data:`PMU_BACKENDS` -> ncu (probed on first
    use: not found or not permitted leaves every case's ``pmu_unavailable`` set and the run goes on); other
    backends -> none (npu counters come from msprof itself). ``cache_control`` ``auto``: ``all`` when the collector
    flushes the cache before iterations (``flush_cache_mib`` > 0), else ``none`` - the counters describe the regime
    the kernel times were measured in. Raises UserError for ``ncu`` on a backend without it.
    """
    from mfulib.core.errors import UserError
    if mode not in ("auto", "ncu", "none"):
        raise UserError(f"--pmu {mode!r}: choose auto, ncu or none")
    if cache_control not in ("auto",) + CACHE_CONTROLS:
        raise UserError(f"--ncu-cache-control {cache_control!r}: choose auto, all or none")
    if mode == "none" and (backend_name in PMU_BACKENDS or backend_name == "npu"):
        return NoPmu("--pmu none: no PMU counters collected", "none")
    if backend_name not in PMU_BACKENDS:  # the CPU: none to collect, whatever --pmu says (never "--pmu none: ...")
        if mode == "ncu":
            raise UserError(f"--pmu ncu: Nsight Compute profiles CUDA kernels, the backend is {backend_name} - use "
                            "--backend cuda, or --pmu auto/none")
        if backend_name == "npu":
            return NoPmu("npu: counters are msprof's own --aic-metrics columns (per_case pmu_source)", mode, "msprof")
        return NoPmu(f"{backend_name} backend: no hardware counters (Triton interpreter)", mode)
    cc = cache_control if cache_control != "auto" else ("all" if flush_cache_mib and flush_cache_mib > 0 else "none")
    return NcuPmu(ncu, cc, iterations, timeout_s, requested=mode, log=log)
