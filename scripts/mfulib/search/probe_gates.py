"""The probe's five gates (:mod:`mfulib.search.probe`; SKILL.md step 2) and the persistent child that runs gates 3-4.

Each gate returns :func:`mfulib.schemas.probe_json.gate` dicts with its numbers and its own ``wall_s`` (seconds the
gate took, so probe.json shows where a probe's time went). Gate 1 allocates nothing; gate 2 runs the
``--flops-tool`` as a subprocess; gates 3 and 4 run in one persistent child process (:class:`GateWorker`, the
request/reply worker of :mod:`mfulib.run.worker`): Python, ``import torch`` and the device context are paid once per
probe, not once per candidate, and a candidate that crashes the child, hangs past its timeout, runs out of memory
or raises an error that may leave a sticky device fault ends that child (``retire``) - the next candidate gets a
fresh one, so the isolation of one process per candidate is kept where it matters.

Every timeout passed in is the smaller of the per-candidate ``--timeout-s`` and what is left of ``--budget-s``;
a gate cut short by the budget (not by its own limit) raises :class:`OutOfBudget`, so the candidate gets no verdict
and a re-run tries it again.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from mfulib.core.paths import SCRIPTS_DIR
from mfulib.run.worker import died_why, exit_status, log_tail
from mfulib.schemas import probe_json as pj
from mfulib.verify.slices import UNVERIFIED, UNVERIFIED_REASON
from mfulib.verify.verified_cases import over_input_cap

HOST_COPIES = 2
DEVICE_COPIES = 2
BANDWIDTH_MARGIN = 1.3
SCRIPTS = SCRIPTS_DIR
START_TIMEOUT_S = 180.0  # a fresh child: Python, import torch, the device context, compat (before its first case)


class OutOfBudget(Exception):
    """A gate was cut short by ``--budget-s`` (not by its own limit): the candidate stays without a verdict."""


def _timed(g: dict, t0: float, clock=time.monotonic) -> dict:
    g["wall_s"] = round(clock() - t0, 3)
    return g


def gate1(info, limits: dict) -> dict:
    """Gate 1 on a CaseInfo (:func:`mfulib.core.cases.describe_case`): nothing is allocated. Limits: ``max_bytes``,
    ``host_bytes`` (x :data:`HOST_COPIES`: verify keeps the draw and a pristine clone), ``verify_max_input_mb``
    (verify's input cap of the backend, :func:`mfulib.verify.verified_cases.over_input_cap`), ``device_free_bytes``
    (x :data:`DEVICE_COPIES`)."""
    t0 = time.monotonic()
    b = info.input_bytes
    if b > limits["max_bytes"]:
        return _timed(pj.gate(1, False, f"inputs {b / 1e9:.3g} GB > --max-bytes {limits['max_bytes'] / 1e9:.3g} GB",
                              b, limits["max_bytes"]), t0)
    host = limits.get("host_bytes")
    if host is not None and HOST_COPIES * b > host:
        return _timed(pj.gate(1, False, f"{HOST_COPIES} x inputs {HOST_COPIES * b / 1e9:.3g} GB > host memory "
                              f"{host / 1e9:.3g} GB ({limits.get('host_source')}): the host-side build would not fit",
                              HOST_COPIES * b, host), t0)
    capped = over_input_cap(b, limits.get("verify_max_input_mb"))
    if capped:  # verify skips such a case on this backend (the CPU interpreter): appending it would strand it
        return _timed(pj.gate(1, False, f"{capped}: verify's input cap on this backend (verify_op.py's default here: "
                              "verify would skip the case, so it is not appended)", b,
                              limits["verify_max_input_mb"] * 1e6), t0)
    dev = limits.get("device_free_bytes")
    if dev is not None and DEVICE_COPIES * b > dev:
        return _timed(pj.gate(1, False, f"{DEVICE_COPIES} x inputs {DEVICE_COPIES * b / 1e9:.3g} GB > free device "
                              f"memory {dev / 1e9:.3g} GB", DEVICE_COPIES * b, dev), t0)
    return _timed(pj.gate(1, True, f"inputs {b / 1e9:.3g} GB within --max-bytes, host and device memory", b,
                          limits["max_bytes"]), t0)


def trace_threads(cpus: int | None, trace_jobs: int) -> int | None:
    """torch's intra-op CPU threads for one gate-2 trace when the probe prefetches ``trace_jobs`` traces
    (:class:`mfulib.search.probe.Probe`): None (torch's default, a thread per core) without prefetch - one trace at
    a time -, else the ``cpus`` shared by the processes busy at once: ``trace_jobs`` traces ahead plus either the
    current candidate's trace or, once it has returned, the gate-3/4 child (gates 3-4 start only after gate 2):
    max(1, cpus // (trace_jobs + 1)). Why: a trace is Python-bound dispatch on meta or small tensors, yet each
    process's OpenMP pool spins a thread per core, so concurrent traces with default pools oversubscribe the host
    (``bench/bench_trace_threads.py`` measures both ways; its pack: ``bench/validation/cpu/trace_threads.json``)."""
    if trace_jobs <= 0:
        return None
    return max(1, int(cpus or 1) // (int(trace_jobs) + 1))


class TraceJob:
    """One ``--flops-tool --tracer-only --cases 0`` run on a staged candidate, started at construction (its own
    process group, stdout/stderr to files beside the staged dir; forked from the warm zygote of
    :mod:`mfulib.run.trace_zygote` when it runs, else a plain subprocess) and read by :func:`gate2` - at once, or later
    when the probe started it ahead (:class:`mfulib.search.probe.Probe`'s trace prefetch, while the device runs another
    candidate). ``kill()`` ends it and whatever it started. ``tracer``: what starts and stops it (``start_tool``,
    ``stop`` of :mod:`mfulib.run.trace_zygote`, the default); ``clock``: seconds (``t0``, its start); ``threads``:
    the trace's intra-op CPU threads (:func:`trace_threads`; None: torch's default)."""

    def __init__(self, flops_tool: str, staged: str, seed: int, tracer=None, clock=time.monotonic,
                 threads: int | None = None):
        if tracer is None:
            from mfulib.run import trace_zygote as tracer
        root = os.path.dirname(staged)
        self.flops_tool, self.out = flops_tool, os.path.join(root, "flops_check.json")
        self.log = os.path.join(root, "flops_tool.log")
        cmd = [sys.executable, flops_tool, "--op-dir", staged, "--tracer-only", "--cases", "0", "--seed", str(seed),
               "--quiet", "-o", self.out]
        self.tracer, self.t0 = tracer, clock()
        self.proc = tracer.start_tool(cmd[1:], self.log, threads=threads)  # forked warm (torch imported once) or plain

    def wait(self, timeout_s: float):
        """The exit status, or None when it did not end within ``timeout_s`` (it is killed then)."""
        try:
            return self.proc.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def running(self) -> bool:
        """Whether the trace is still running (it ended, or was killed, otherwise)."""
        return self.proc.poll() is None

    def kill(self) -> None:
        self.tracer.stop(self.proc)  # its group, and the pid itself (a fresh fork may not lead a group yet)

    def tail(self, n: int = 2) -> str:
        return log_tail(self.log, n)


def gate2(flops_tool: str, staged: str, seed: int, timeout_s: float, no_matrix: bool, input_bytes: int,
          refusals: list, budget_cut: bool = False, job: TraceJob | None = None, clock=time.monotonic) -> tuple:
    """(gate dict, flops or None): the reference traced on the staged candidate by ``flops_tool`` (a subprocess:
    ``--tracer-only --cases 0`` with the seed of the timed run - data-dependent FLOPs from the same draw).
    ``job``: that run, started earlier (prefetch); ``wall_s`` then counts from its start and ``waited_s`` says how
    long the probe waited for it. ``budget_cut``: ``timeout_s`` is what is left of the budget, so running out of
    it raises :class:`OutOfBudget`. ``clock``: seconds, the one ``job`` was started with."""
    t0 = clock()
    if refusals:
        return _timed(pj.gate(2, False, "the scaling cannot keep the case consistent: " + "; ".join(refusals)),
                      t0, clock), None
    job = job or TraceJob(flops_tool, staged, seed, clock=clock)
    try:
        rc = job.wait(timeout_s)
    except BaseException:  # Ctrl-C / SIGTERM while it runs: it must not outlive the probe
        job.kill()
        raise
    waited = round(clock() - t0, 3)
    t0 = job.t0
    if rc is None:
        if budget_cut:
            raise OutOfBudget(f"gate 2 ({os.path.basename(flops_tool)}) cut at --budget-s") from None
        return dict(_timed(pj.gate(2, False, f"{os.path.basename(flops_tool)} took more than {timeout_s:g} s"), t0,
                           clock), waited_s=waited), None
    out = job.out
    if not os.path.exists(out):
        return dict(_timed(pj.gate(2, False, f"{os.path.basename(flops_tool)} {exit_status(rc)}: "
                                          f"{job.tail() or 'it wrote nothing to stdout or stderr'}"), t0, clock),
                    waited_s=waited), None
    g, flops = _gate2_verdict(out, seed, no_matrix, input_bytes, t0, clock)
    g["waited_s"] = waited
    return g, flops


def _gate2_verdict(out: str, seed: int, no_matrix: bool, input_bytes: int, t0: float, clock) -> tuple:
    """Gate 2 from the flops tool's flops_check.json ``out``."""
    with open(out) as f:
        row = (json.load(f).get("per_case") or [{}])[0]
    tr = row.get("tracer") or {}
    flops = tr.get("total_flops")
    drawn = f"inputs_drawn={tr.get('inputs_drawn')}, seed {seed}" + (
        f", data values {tr.get('data_values')}" if tr.get("data_values") else "")
    if row.get("status") == "rejected" or tr.get("status") == "rejected":
        return _timed(pj.gate(2, False, f"the reference rejects the shape: {tr.get('reason') or row.get('diagnosis')}"),
                      t0, clock), None
    if tr.get("status") != "ok":
        return _timed(pj.gate(2, False, f"the tracer could not run the reference ({tr.get('status')}: "
                              f"{tr.get('reason')})"), t0, clock), None
    unseen = f"; unseen ops {tr.get('unseen_ops')}" if tr.get("unseen_ops") else ""
    if no_matrix:
        ok = input_bytes > 0
        return _timed(pj.gate(2, ok, f"no matrix work (the source case traces 0 FLOPs): bytes {input_bytes} "
                              f"{'>' if ok else '<='} 0; {drawn}", input_bytes, 0), t0, clock), flops
    ok = bool(flops) and flops > 0
    return _timed(pj.gate(2, ok, f"traced FLOPs {flops:.4g} {'>' if ok else '<='} 0; {drawn}{unseen}"
                          if flops is not None else "traced no FLOPs", flops, 0), t0, clock), flops


class GateWorker:
    """Parent side of the persistent gate-3/4 child (:func:`mfulib.search.probe_child.serve_main`): the probe's
    default gate runner. One per probe run; ``close()`` ends it and removes its log dir (a temp dir of its own).
    A child that died, timed out or retired is replaced on the next request."""

    def __init__(self, device: str):
        self.device, self.worker, self.starts = device, None, 0
        self.log_dir = tempfile.mkdtemp(prefix="mfu_probe_child_")

    def _ensure(self):
        from mfulib.run.worker import Worker, child_env
        if self.worker is not None and self.worker.alive():
            return False
        if self.worker is not None:
            self.worker.kill()
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from mfulib.search.probe_child import serve_main; "
                "sys.exit(serve_main(sys.argv[2]))")
        os.makedirs(self.log_dir, exist_ok=True)
        self.worker = Worker([sys.executable, "-c", code, SCRIPTS, self.device],
                             dict(child_env(os.environ), MFU_PROBE_CHILD="1"),
                             os.path.join(self.log_dir, "probe_child.log"))
        self.starts += 1
        return True

    def call(self, request: dict, timeout_s: float):
        """(reply message, outcome "done" | "timeout" | "died", wall s, returncode); a child that timed out or died
        leaves the message ``{"worker_log": the last lines of its own log}`` (its start-up, what ended it)."""
        fresh = self._ensure()
        rep = self.worker.call(request, timeout_s, min(timeout_s, START_TIMEOUT_S) if fresh else timeout_s)
        msg = rep.message if rep.outcome == "done" else {"worker_log": self.worker.tail()}
        if (rep.message or {}).get("retire") or rep.outcome != "done":
            self.worker.kill()  # retired (oom / error), timed out or died: the next candidate gets a fresh child
            self.worker = None
        return msg, rep.outcome, rep.wall_s, rep.returncode

    def close(self):
        if self.worker is not None:
            self.worker.close(grace_s=5.0)
            self.worker = None
        shutil.rmtree(self.log_dir, ignore_errors=True)  # the child's own log (a case logs beside its staged dir)


def gates34(worker, staged: str, seed: int, max_ms: float, timeout_s: float,
            budget_cut: bool = False, time_only: bool = False, accept_unverified: bool = False) -> tuple:
    """(gate 3 dict, gate 4 dict or None, verify row, time_ms): ModelNew verified against Model and timed in the
    persistent child. ``worker``: the gate runner (:class:`GateWorker` or a stand-in with its ``call``).
    ``time_only``: skip verify (the source case at scale 1, verified by verify.py before) -
    gate 3 is then None. ``budget_cut`` as in :func:`gate2`.

    Gate 3 records ``verified_by`` (the verify row's: full | batch_slice | head_slice | row_slice,
    :mod:`mfulib.verify.slices`). A row ``unverified`` (the whole reference does not fit and no slice verifies
    it) fails gate 3 - so the candidate is never appended and never the limit - unless ``accept_unverified``
    (``--accept-unverified-reference``): then it passes, is timed, and gate 3 says so (``verified_by``
    ``unverified``)."""
    log_path = os.path.join(os.path.dirname(staged), "child.log")
    req = {"op_dir": staged, "seed": seed, "max_ms": max_ms, "repeats": 3, "time_only": time_only,
           "log_path": log_path, "accept_unverified_reference": accept_unverified}
    msg, outcome, wall, rc = worker.call(req, timeout_s)
    if outcome == "timeout" and budget_cut:
        raise OutOfBudget("gates 3-4 cut at --budget-s")
    row, timing = (msg or {}).get("verify"), (msg or {}).get("time")
    if time_only:
        row = {"status": "pass", "reason": "time only (scale 1: verified by verify.py)"}
    if row is None:
        why = (f"no result within {timeout_s:g} s (killed)" if outcome == "timeout"
               else died_why(rc, log_tail(log_path), (msg or {}).get("worker_log")))
        g3 = pj.gate(3, False, f"verify: {why}")
        g3["wall_s"] = round(wall, 3)
        return g3, None, {"status": "timeout" if outcome == "timeout" else "crashed", "reason": why}, None
    g3 = None
    if not time_only:
        unverified = row.get("status") == UNVERIFIED
        ok3 = row.get("status") == "pass" or (unverified and accept_unverified)
        head = (f"verify {UNVERIFIED} ({UNVERIFIED_REASON}), " + ("accepted by --accept-unverified-reference"
                if accept_unverified else "never a limit without --accept-unverified-reference")
                if unverified else f"verify {row.get('status')}")
        g3 = pj.gate(3, ok3, f"{head}: " + (row.get("reason") or
                     f"max normalised error {row.get('max_norm_err')} <= tol {row.get('tol')}"),
                     row.get("max_norm_err"), row.get("tol"))
        g3["verified_by"] = UNVERIFIED if unverified else row.get("verified_by")
        g3["wall_s"] = (msg or {}).get("verify_s")
        if not ok3:
            return g3, None, row, None
    if timing is None or timing.get("status") != "ok":
        why = (timing or {}).get("reason") or (f"no timing within {timeout_s:g} s" if outcome == "timeout"
                                               else died_why(rc, log_tail(log_path), (msg or {}).get("worker_log")))
        g4 = pj.gate(4, False, f"timing {(timing or {}).get('status', 'missing')}: {why}", None, max_ms)
        g4["wall_s"] = (timing or {}).get("wall_s")
        return g3, g4, row, None
    t = timing["time_ms"]
    g4 = pj.gate(4, t <= max_ms, f"one call {t:.4g} ms {'<=' if t <= max_ms else '>'} --max-ms {max_ms:g} "
                 f"({wall_how(timing)})", t, max_ms)
    g4["wall_s"] = timing.get("wall_s")
    return g3, g4, row, t


def wall_how(timing: dict) -> str:
    """How gate 4's time was taken, for its detail: the runs and calls of :func:`mfulib.search.probe_child.time_run`."""
    n, k = timing.get("calls_per_run") or 1, len(timing.get("runs_ms") or [])
    if n == 1:
        return f"median of {k} synchronised call(s)"
    return f"median of {k} runs of {n} back-to-back calls, wall time per call; one synchronised call " \
           f"{timing.get('single_ms', float('nan')):.4g} ms"


def effective_gbps(input_bytes: int, time_ms: float):
    """Input bytes over one run's time in GB/s (= bytes per ns, :mod:`mfulib.core.definitions`); None without a time."""
    return input_bytes / (time_ms * 1e6) if time_ms and time_ms > 0 else None


def gate4_floor(flops, input_bytes: int, bw: dict, max_ms: float):
    """Gate 4 decided before anything runs: a failing gate dict when the candidate's roofline floor already exceeds
    ``max_ms``, else None (the candidate is timed). The floor is the larger of FLOPs / (:data:`BANDWIDTH_MARGIN` x
    ``bw["peak_tflops_max"]``, the highest peak over every dtype, measured or nominal) and, for inputs larger than
    L2, input bytes / (:data:`BANDWIDTH_MARGIN` x ``bw["bandwidth_gbps"]``): no run reads its inputs or does its
    FLOPs faster than that (the roofline, Williams et al. 2009), so a case of 2 s of work at peak is not verified and
    timed for minutes only to fail at 4 s. ``flops``: traced FLOPs (gate 2); ms = 1e-3 s."""
    t0 = time.monotonic()
    parts = []
    if flops and bw.get("peak_tflops_max"):
        parts.append((flops / (BANDWIDTH_MARGIN * bw["peak_tflops_max"] * 1e12) * 1e3,
                      f"{flops:.4g} FLOPs / ({BANDWIDTH_MARGIN:g} x {bw['peak_tflops_max']:.4g} TFLOP/s, the "
                      "highest peak of peak.json)"))
    l2 = bw.get("l2_bytes") or 0
    if bw.get("bandwidth_gbps") and input_bytes > l2:
        parts.append((input_bytes / (BANDWIDTH_MARGIN * bw["bandwidth_gbps"] * 1e9) * 1e3,
                      f"{input_bytes / 1e9:.4g} GB of inputs / ({BANDWIDTH_MARGIN:g} x {bw['bandwidth_gbps']:.4g} "
                      "GB/s)"))
    if not parts:
        return None
    floor_ms, why = max(parts)
    if floor_ms <= max_ms:
        return None
    return _timed(pj.gate(4, False, f"predicted: one run >= {floor_ms:.4g} ms ({why}) > --max-ms {max_ms:g}; not "
                          "run", floor_ms, max_ms), t0)


def gate5(input_bytes: int, time_ms: float, bw: dict) -> dict:
    """Effective bandwidth input_bytes / time against :data:`BANDWIDTH_MARGIN` x the memory bandwidth ``bw``
    (:func:`mfulib.search.probe_limits.bandwidth_limit`); inputs that fit in L2 are exempt (they may beat HBM
    legitimately)."""
    t0 = time.monotonic()
    eff_gbps = effective_gbps(input_bytes, time_ms)
    eff_gbps = float("inf") if eff_gbps is None else eff_gbps
    l2 = bw.get("l2_bytes")
    if l2 and input_bytes <= l2:
        return _timed(pj.gate(5, True, f"inputs {input_bytes} B fit in L2 ({l2} B): exempt", eff_gbps, None), t0)
    if not bw.get("bandwidth_gbps"):
        return _timed(pj.gate(5, None, f"not checked: {bw.get('source')} - run peak_calib.py (peak.json in the work "
                              "dir)", eff_gbps, None), t0)
    limit = BANDWIDTH_MARGIN * bw["bandwidth_gbps"]
    ok = eff_gbps <= limit
    return _timed(pj.gate(5, ok, f"effective {eff_gbps:.4g} GB/s {'<=' if ok else '>'} {BANDWIDTH_MARGIN} x "
                          f"{bw['bandwidth_gbps']:.4g} GB/s ({bw['source']})" + ("" if ok else
                          ": faster than memory allows - the scaling did nothing (a reference ignoring the scaled "
                          "axis?)"), eff_gbps, limit), t0)
