"""The max-shape probe (step 2a): scale cases along chosen symbols under five gates, in cost order.

Per source case, one ladder of scale factors s = 2, 4, 8, ... <= ``max_scale`` per chosen symbol alone
(:mod:`mfulib.core.symbols`), then the joint ladder of the two symbols whose single ladders gained most (both at the
same factor; :func:`mfulib.search.ladder.run_ladders`), then a greedy forward selection after every source's pair
(:func:`mfulib.search.ladder.extend_joint`): while the last joint ladder gained over the earlier ones and another
symbol's single ladder gained over scale 1 (both by more than :data:`SATURATION_GAIN`), the joint ladder of its
symbols plus that one, all at one factor; each ladder stops at its first failing factor, is refined by
bisection between the last passing and the first failing factor (integers, at most ``refine_steps`` more
candidates) and has its own saturation stop. A candidate keeps ``factors`` {symbol: factor}; its ``scale`` is their
product. The gates, cheapest first, each recorded with its numbers (:func:`mfulib.schemas.probe_json.gate`):

1. **input bytes**, from the case description before any tensor exists (:func:`mfulib.core.cases.describe_case`):
   bytes <= ``max_bytes`` and <= verify's input cap of the backend (1 MB on the CPU interpreter: verify skips larger
   cases, so none is appended); :data:`HOST_COPIES` x bytes <= host memory (MemAvailable of /proc/meminfo, and the
   RLIMIT_AS headroom of this process: ``get_input_groups()`` builds on the host); on an accelerator
   :data:`DEVICE_COPIES` x bytes <= free device memory (``torch.<cuda|npu>.mem_get_info``). verify keeps the draw and
   a pristine clone, hence 2 copies; outputs are not known before running (an OOM then is gate 3's ``oom``).
2. **reference accepts**: the ``--flops-tool`` (check_flops.py ``--tracer-only``) as a subprocess on the staged
   candidate, with the seed of the timed run (data-dependent FLOPs from the same draw): traced, not rejected,
   FLOPs > 0 - or, for an operator without matrix work (its source case traces 0 FLOPs), input bytes > 0. A
   dependent that could not follow the scaling (:func:`mfulib.core.symbols.scale_case` refusals) fails here too.
3. **ModelNew matches** Model within verify's tolerance (:mod:`mfulib.search.probe_child`, its own process); ``oom``
   is a recorded failure, not fatal.
4. **one call** (the median wall time per call of back-to-back runs, :mod:`mfulib.core.wallclock`) <= ``max_ms``.
5. **effective bandwidth** input bytes / time <= :data:`BANDWIDTH_MARGIN` x the measured memory bandwidth (peak.json
   ``bandwidth_gbps``; without it the CUDA datasheet figure, and on NPU a 1.3 TB/s default,
   docs/sources.md#npu-bandwidth: :mod:`mfulib.search.probe_limits`); inputs that fit in L2 are exempt (they may beat
   HBM legitimately). It catches scaling that silently did nothing (a reference that ignores the scaled axis runs as
   fast as before).

The ladder and its bisection are :mod:`mfulib.search.ladder`; every passing candidate is appended to every case copy
of the work directory by :mod:`mfulib.search.probe_files`; the command around it (ranking, resume, probe.json) is
:mod:`mfulib.search.probe_run`.

Time and processes are injected (:class:`Probe` ``clock``, ``gate_runner``, ``tracer``), so the budget, hang and
saturation rules run in tests on a fake clock without a child process.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time

from mfulib.core import cases as _cases
from mfulib.core import symbols as _sym
from mfulib.core.definitions import actual_tflops
from mfulib.schemas import probe_json as pj
from mfulib.search import flops_law
from mfulib.core.symbols import factors_label
from mfulib.search.ladder import STOP, ladder
from mfulib.search.probe_files import backup, record_verify, rewrite_case_files, stage_candidate
from mfulib.search.probe_gates import (GateWorker, OutOfBudget, TraceJob, effective_gbps, gate1, gate2, gate4_floor,
                                       gate5, gates34, trace_threads)

SATURATION_GAIN = 0.05  # a doubling that raises wall TFLOP/s (GB/s) by less than this ends the source's ladder
# a source whose roofline floor at scale 1 is at least this fraction of --max-ms is timed at scale 1 before its
# ladder (Probe.source_too_slow): near the limit, a doomed x2 candidate costs a reference run at 2^k the work
EAGER_BASELINE_FRACTION = 1.0 / 8
#: traces started ahead and not yet used, per trace that may run ahead (``--trace-jobs``): a finished one holds only
#: its staged dir and output, so more can wait than run
HELD_PER_JOB = 4


def candidate_id(source_case: int, factors: dict) -> str:
    """Stable id of a candidate: ``c<case>:<symbol>x<factor>,...`` (a re-run finds its earlier verdict by it)."""
    return f"c{source_case}:" + ",".join(f"{k}x{v}" for k, v in sorted(factors.items()))


def _decided_by_floor(g4: dict, traced: bool) -> list:
    """The gates after gate 1 (``traced``: after gate 2) of a candidate whose gate 4 the roofline floor ``g4``
    decided: the ones it skips are recorded not run (ok null), then ``g4``."""
    skipped = [] if traced else [pj.gate(2, None, "not run: gate 4 fails on the predicted FLOPs' roofline floor")]
    return skipped + [pj.gate(3, None, "not run: gate 4 fails on the roofline floor alone"), g4]


SUPERSEDED = ("a verdict of an earlier run under another peak or wall-clock method (run_key): not reused, its "
              "timing dropped - a ladder that reaches it again re-runs it; until then the search times it afresh")


def supersede(candidates: list) -> None:
    """Drop the verdicts and timings of an earlier run's ``candidates`` (in place) when this run has another peak or
    wall-clock method (``run_key``): each keeps its ``new_case_id`` (its case stays appended, so ids stay stable)
    and gets ``superseded`` (:data:`SUPERSEDED`, with its old verdict) instead. Without this, the candidates this
    run's ladders do not reach would keep verdicts and gate-4 times of the old method under the new ``run_key`` -
    a later resume would reuse them as done and stage 1 would rank by their times."""
    for c in candidates:
        if c.get("verdict"):
            c.update(superseded=f"{c['verdict']}: {SUPERSEDED}", verdict=None, failed_gate=None, time_ms=None,
                     wall_figure=None, saturated=None)


class Probe:
    """One probe run over source cases of the OpDir ``od``; ``doc`` is the probe.json being built (resumed).

    Trace prefetch (``opts["trace_jobs"]`` > 0): gate 2 is a host-side subprocess (Python, torch, the tracer: ~5-12
    s on the H200 host) while gates 3-4 run on the device; so while one candidate runs, the tracer is already
    started for the next factor of its ladder and for the first factor of the next source cases (at most
    ``trace_jobs`` at once). A trace nobody needs (the ladder ended) is killed. Verdicts are the same either way:
    a prefetched trace is the same command on the same staged case.

    Saturation: each passing candidate's figure is its wall TFLOP/s (traced FLOPs / gate-4 time; GB/s of inputs for
    an operator without matrix work); once a factor raises it by less than :data:`SATURATION_GAIN` over the best
    so far (the source at scale 1 included, timed first - :meth:`baseline`), the ladder of that source ends there
    (``opts["saturation"]`` False: never). Budget: ``opts["budget_s"]`` bounds the whole run, inside a candidate
    too (its subprocess timeouts are capped by what is left); a candidate cut by it has no verdict
    (:class:`~mfulib.search.probe_gates.OutOfBudget` reaches the caller).

    Injected: ``clock`` (a callable returning seconds, :func:`time.monotonic` by default) for every budget and
    ``wall_s``; ``gate_runner`` (the object that runs gates 3-4, with :class:`~mfulib.search.probe_gates.GateWorker`'s
    ``call(request, timeout_s)`` and ``close()``; default: a GateWorker started on first use); ``tracer`` (what starts
    the gate-2 traces, with :mod:`mfulib.run.trace_zygote`'s ``start_tool``, ``stop`` and ``close_shared``; that
    module by default)."""

    def __init__(self, od, doc, groups, opts, limits, bw, log=print, clock=time.monotonic, gate_runner=None,
                 tracer=None):
        self.od, self.doc, self.opts, self.limits, self.bw, self.log = od, doc, opts, limits, bw, log
        self.clock, self.worker, self._tracer = clock, gate_runner, tracer
        self.group_of = {cid: g for g in groups for cid in g.cases}
        reuse = opts.get("reuse_verdicts", True)  # False: the previous run had other limits (its run_key)
        self.done = {c["candidate_id"]: c for c in doc["candidates"] if c.get("verdict") and reuse}
        if not reuse:
            doc["baselines"] = {}
            supersede(doc["candidates"])
        self.t0 = opts["t0"] if opts.get("t0") is not None else clock()  # the budget counts from the script's start
        self.out_of_budget = False
        self.prefetched = {}  # candidate id -> (tmp dir, staged dir, TraceJob): gate 2 started ahead
        self.evaluated = set()  # candidate ids this run evaluated (never traced ahead again)
        self.upcoming = []  # source cases after the current one (their first factor may be traced ahead)
        self.best = {}  # ladder key (source, "sym+sym") -> best wall figure of its passed candidates so far
        self.base_fig = {}  # source case -> its wall figure at scale 1 (None: not known)
        self.sources = {}  # source case -> (no_matrix, traced FLOPs at scale 1), set by set_source
        self.laws = {}  # group key -> the traced FLOPs' power law of its symbols (None: none holds)

    def close(self):
        """End the gate child and every trace started ahead (their processes and staged dirs)."""
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        for tmp, _staged, job in self.prefetched.values():
            job.kill()
            shutil.rmtree(tmp, ignore_errors=True)
        self.prefetched = {}
        self.tracer().close_shared()  # the warm start of the gate-2 traces (and any trace still running)

    def prefetch(self, wanted) -> None:
        """Start gate 2 ahead for ``wanted`` [(source, factors)] (in order, up to ``opts["trace_jobs"]`` traces
        *running* ahead at once, and :data:`HELD_PER_JOB` times that many started ahead and not yet used - a finished
        trace waiting for its turn holds only a staged dir): the tracer runs on the host while the device runs the
        current candidate's gates 3-4. Candidates that already have a verdict (this run's or a resumed one), fail
        gate 1 or cannot be scaled consistently are skipped (they need no trace)."""
        cap = int(self.opts.get("trace_jobs") or 0)
        for source, factors in wanted:
            running = sum(1 for _tmp, _staged, job in self.prefetched.values() if job.running())
            if running >= cap or len(self.prefetched) >= HELD_PER_JOB * cap:
                return
            cand, case, info, refusals = self.plan(source, factors)
            cid = cand["candidate_id"]
            if cid in self.prefetched or cid in self.done or cid in self.evaluated or refusals \
                    or not gate1(info, self.limits)["ok"] or self.predicted_gate4(source, cand, info) is not None:
                continue
            tmp = tempfile.mkdtemp(prefix="mfu_probe_")
            staged = stage_candidate(self.od, case, tmp)
            self.prefetched[cid] = (tmp, staged, self._trace(staged))

    def end_source(self, source: int, symbols=None) -> None:
        """The ladders of ``source`` are over (``symbols``: only the ladder of these symbols): traces started ahead
        for them are no longer needed (killed)."""
        def ours(cid):
            return cid.startswith(f"c{source}:") and (symbols is None or sorted(
                part.rsplit("x", 1)[0] for part in cid.split(":", 1)[1].split(",")) == sorted(symbols))
        for cid in [c for c in self.prefetched if ours(c)]:
            tmp, _staged, job = self.prefetched.pop(cid)
            job.kill()
            shutil.rmtree(tmp, ignore_errors=True)

    def next_factors(self, factors: dict):
        """The ladder's candidate after ``factors`` (every symbol of the ladder at the next factor; None at the
        top)."""
        s = max(factors.values())
        nxt = next((f for f in ladder(self.limits["max_scale"]) if f > s), None)
        return None if nxt is None else {n: nxt for n in factors}

    def first_candidate(self, source: int):
        """The first candidate of ``source``'s first ladder ({its first scaled symbol: 2}), or None."""
        return next(iter(self.ladder_starts(source)), None)

    def ladder_starts(self, source: int) -> list:
        """The first candidate of each of ``source``'s single ladders ({symbol: 2}), in the order they run: traced
        ahead, a ladder's start waits for no trace when the ladder before it ends (the real batched matmul's
        probe in the H100 referee pack waited 65 s of its 114 s for gate-2 traces; half its candidates had none
        ahead)."""
        return [{n: 2} for n in self.scaled_symbols(source)]

    def figure_of(self, source: int, factors: dict):
        """The wall figure of the candidate ``factors`` of ``source`` as recorded (None: not run, failed, unknown)."""
        cid = candidate_id(source, factors)
        c = next((c for c in reversed(self.doc["candidates"]) if c["candidate_id"] == cid), None) or self.done.get(cid)
        return (c or {}).get("wall_figure") if (c or {}).get("verdict") == "pass" else None

    def scaled_symbols(self, source: int) -> list:
        """The scaled symbols of ``source``'s group, in the analysis' order: one single ladder each."""
        return [x.name for x in self.group_of[source].symbols if x.scaled]

    def batch_symbols(self, source: int) -> tuple:
        """The scaled symbols of ``source``'s group of kind batch: the ladders rank them last
        (:func:`mfulib.search.ladder.run_ladders`)."""
        return tuple(x.name for x in self.group_of[source].symbols if x.scaled and x.kind == "batch")

    def _worker(self):
        if self.worker is None:
            self.worker = GateWorker(self.opts["device"])
        return self.worker

    def tracer(self):
        """What starts the gate-2 traces (the injected one, else :mod:`mfulib.run.trace_zygote`)."""
        if self._tracer is None:
            from mfulib.run import trace_zygote
            self._tracer = trace_zygote
        return self._tracer

    def _trace(self, staged: str) -> TraceJob:
        return TraceJob(self.opts["flops_tool"], staged, self.opts["seed"], tracer=self.tracer(), clock=self.clock,
                        threads=trace_threads(os.cpu_count(), int(self.opts.get("trace_jobs") or 0)))

    def _timeout(self):
        """(timeout s for the next subprocess, whether the budget - not --timeout-s - sets it)."""
        budget = self.opts.get("budget_s")
        if budget is None:
            return self.opts["timeout_s"], False
        left = budget - (self.clock() - self.t0)
        if left <= 0:
            self.out_of_budget = True
            raise OutOfBudget(f"--budget-s {budget:g} s reached")
        return (left, True) if left < self.opts["timeout_s"] else (self.opts["timeout_s"], False)

    def plan(self, source: int, factors: dict):
        """(candidate dict without gates, scaled case, case description, refusals) for ``factors`` {symbol: factor}
        of case ``source``."""
        g = self.group_of[source]
        info = self.od.describe(source)
        case, refusals = _sym.scale_case(self.od.read_cases()[source], info, g, factors)
        new_info = _cases.describe_case(case, source)
        cand = {"candidate_id": candidate_id(source, factors), "source_case": source,
                "scale": math.prod(factors.values()),
                "factors": factors, "input_bytes": new_info.input_bytes, "gates": [], "verdict": None,
                "failed_gate": None, "new_case_id": None, "time_ms": None, "flops": None, "wall_figure": None,
                "saturated": None, "wall_s": None}
        return cand, case, new_info, refusals

    def law(self, source: int):
        """The power law of the traced FLOPs in the group of ``source`` (:func:`mfulib.search.flops_law.fit`;
        recorded in probe.json ``flops_law`` with the reason when there is none), or None."""
        g = self.group_of[source]
        if g.key not in self.laws:
            traced = {int(k): v for k, v in (self.doc.get("traced_flops") or {}).items()}
            law, why = flops_law.fit(g.symbols, traced)
            self.laws[g.key] = law
            self.doc.setdefault("flops_law", {})[g.key] = law or {"none": why}
        return self.laws[g.key]

    def predicted_gate4(self, source: int, cand: dict, info):
        """Gate 4 failing on the roofline floor of the candidate's FLOPs as the power law predicts them, before
        gate 2 traces it (None: no law, or the floor does not decide). Sets ``cand["flops_predicted"]``."""
        flops = flops_law.predict(self.law(source), (self.doc.get("traced_flops") or {}).get(str(source)),
                                  cand["factors"])
        cand["flops_predicted"] = flops
        if flops is None:
            return None
        g4 = gate4_floor(flops, info.input_bytes, self.bw, self.opts["max_ms"])
        if g4 is not None:
            law = self.laws[self.group_of[source].key]
            g4["detail"] += (f"; FLOPs from the power law of {law['n_cases']} traced cases (exponents "
                             + ", ".join(f"{k} {v:g}" for k, v in law["exponents"].items()) + ")")
        return g4

    @staticmethod
    def figure(flops, input_bytes, time_ms, no_matrix):
        """Wall TFLOP/s (GB/s for no matrix work) of one call (gate 4's time per call); None when unknown."""
        if not time_ms or time_ms <= 0:
            return None
        if no_matrix:
            return effective_gbps(input_bytes, time_ms)
        return actual_tflops(flops, time_ms * 1e6) if flops else None

    def baseline(self, source: int, no_matrix: bool, flops, force: bool = False):
        """Time the source case at scale 1 in the gate child (no verify: verify.py checked it); the figure the
        first doubling is compared with. Kept in probe.json ``baselines`` and reused by a re-run. Run lazily, when
        the source's first factor has passed (a source whose ladder fails at once costs nothing more), or first
        (``force``) for a source near the time limit (:meth:`source_too_slow`)."""
        if not force and not self.opts.get("saturation", True):
            return None
        if not force and source in self.base_fig:
            return None
        key = str(source)
        rec = (self.doc.setdefault("baselines", {})).get(key)
        info = self.od.describe(source)
        if rec is None and not gate1(info, self.limits)["ok"]:
            rec = {"time_ms": None, "figure": None, "detail": "not timed: the case at scale 1 fails gate 1"}
            self.doc["baselines"][key] = rec
        if rec is None:
            timeout, cut = self._timeout()
            tmp = tempfile.mkdtemp(prefix="mfu_probe_")
            t0 = self.clock()
            try:
                staged = stage_candidate(self.od, self.od.read_cases()[source], tmp)
                _g3, g4, _row, t = gates34(self._worker(), staged, self.opts["seed"], self.opts["max_ms"], timeout,
                                           budget_cut=cut, time_only=True)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            rec = {"time_ms": t, "flops": flops, "input_bytes": info.input_bytes,
                   "figure": self.figure(flops, info.input_bytes, t, no_matrix),
                   "detail": (g4 or {}).get("detail"), "wall_s": round(self.clock() - t0, 3)}
            self.doc["baselines"][key] = rec
        self.base_fig[source] = rec.get("figure")
        return rec

    def source_too_slow(self, source: int, no_matrix: bool, flops):
        """Why ``source`` cannot yield a candidate within --max-ms (None: its ladder runs). Decided by its roofline
        floor at scale 1 (:func:`gate4_floor`, nothing runs), or, when that floor is within
        :data:`EAGER_BASELINE_FRACTION` of --max-ms, by timing it at scale 1 first (:meth:`baseline`): a source
        that already takes longer than --max-ms has no larger shape within it (more work runs no faster on a
        device it already fills), and its x2 candidate would trace and verify the reference at 2^k the work
        before failing gate 4. Raises OutOfBudget like the gates."""
        info, max_ms = self.od.describe(source), self.opts["max_ms"]
        floor = gate4_floor(flops, info.input_bytes, self.bw, max_ms)
        if floor is not None:
            return f"at scale 1 already {floor['detail']}"
        if gate4_floor(flops, info.input_bytes, self.bw, max_ms * EAGER_BASELINE_FRACTION) is None:
            return None  # far from the limit: the baseline stays lazy
        rec = self.baseline(source, no_matrix, flops, force=True) or {}
        t = rec.get("time_ms")
        if t is not None and t > max_ms:
            return (f"its own run at scale 1 takes {t:.4g} ms > --max-ms {max_ms:g} (timed first: its roofline "
                    f"floor is within {EAGER_BASELINE_FRACTION:g} x --max-ms): no larger shape runs within it")
        return None

    def set_source(self, source: int, no_matrix: bool, flops) -> None:
        """Declare the next source case (its scale-1 FLOPs for the saturation baseline)."""
        self.sources[source] = (no_matrix, flops)

    def _saturation(self, cand, no_matrix, key):
        """STOP when the passing ``cand`` raised the best figure of its ladder ``key`` (the source at scale 1
        included) by less than SATURATION_GAIN."""
        fig = cand["wall_figure"]
        src = cand["source_case"]
        if src not in self.base_fig and src in self.sources:
            try:
                self.baseline(src, *self.sources[src])
            except OutOfBudget:  # the candidate keeps its verdict; the next one stops the run
                self.out_of_budget = True
        known = [f for f in (self.best.get((src, key)), self.base_fig.get(src)) if f is not None]
        prev = max(known) if known else None
        if fig is not None:
            self.best[(src, key)] = max(self.best.get((src, key)) or 0.0, fig)
        if not self.opts.get("saturation", True) or fig is None or prev is None:
            return True
        unit = "GB/s" if no_matrix else "TFLOP/s"
        if fig < (1.0 + SATURATION_GAIN) * prev:
            along = key.replace("+", " and ")
            cand["saturated"] = (f"wall {fig:.4g} {unit} < (1 + {SATURATION_GAIN:g}) x best so far {prev:.4g} "
                                 f"{unit} ({'a fall' if fig < prev else 'a plateau'}): larger factors of case {src} "
                                 f"along {along} are not tried (--no-saturation-stop tries them)")
            return STOP
        return True

    def _record(self, cand: dict) -> None:
        """``cand`` into probe.json's candidates, in place of an earlier verdict of the same candidate id."""
        self.doc["candidates"] = [c for c in self.doc["candidates"] if c["candidate_id"] != cand["candidate_id"]]
        self.doc["candidates"].append(cand)

    def _same_as_appended(self, case: dict):
        """The passed candidate whose appended case line equals ``case`` (its JSON, keys sorted), else None."""
        line = json.dumps(case, sort_keys=True)
        for cid, a in self.doc["appended"].items():
            if json.dumps(json.loads(a["line"]), sort_keys=True) == line:
                return next((c for c in self.doc["candidates"] if c.get("new_case_id") == int(cid)
                             and c.get("verdict") == "pass" and not c.get("same_as_case")), None)
        return None

    def evaluate(self, source: int, factors: dict, no_matrix: bool, save, key: str = ""):
        """Run the gates on ``factors`` {symbol: factor} of ``source`` in the ladder ``key`` (its symbols joined by
        ``+``; its own saturation stop): True (pass), False (fail) or STOP (pass, saturated). Raises OutOfBudget
        when the budget ends before or during the candidate (no verdict recorded)."""
        cand, case, info, refusals = self.plan(source, factors)
        s, label = cand["scale"], factors_label(factors)
        cand["ladder"] = key
        self.evaluated.add(cand["candidate_id"])
        if cand["candidate_id"] in self.done:
            self.doc.setdefault("resumed", []).append(cand["candidate_id"])
            old = self.done[cand["candidate_id"]]
            if old["verdict"] != "pass":
                return False
            cand.update(wall_figure=old.get("wall_figure"), source_case=source)
            return self._saturation(cand, no_matrix, key)
        same = self._same_as_appended(case)
        if same is not None:  # two ladders reach one shape (case 0 seq x2 = case 1 batch x2): gated once
            cand.update({k: same.get(k) for k in ("gates", "flops", "time_ms", "wall_figure", "verdict",
                                                  "failed_gate")}, new_case_id=same["new_case_id"],
                        same_as_case=same["new_case_id"], wall_s=0.0)
            self._record(cand)
            save()
            self.log(f"case {source} {label}: the same case line as case {same['new_case_id']} (appended by "
                     f"{same['candidate_id']}): its verdict, not gated again")
            return self._saturation(cand, no_matrix, key)
        o = self.opts
        timeout, cut = self._timeout()
        t_start = self.clock()
        gates = [gate1(info, self.limits)]
        pre = self.prefetched.pop(cand["candidate_id"], None)
        tmp, staged, job = pre if pre else (tempfile.mkdtemp(prefix="mfu_probe_"), None, None)
        row = None
        try:
            ahead = self.predicted_gate4(source, cand, info) if gates[-1]["ok"] and not refusals else None
            if ahead is not None:  # decided without tracing the reference at 2^k the work
                if job is not None:
                    job.kill()
                gates += _decided_by_floor(ahead, traced=False)
            elif gates[-1]["ok"]:
                staged = staged or stage_candidate(self.od, case, tmp)
                if job is None and not refusals:
                    job = self._trace(staged)
                nxt = self.next_factors(factors)  # traced on the host while this candidate runs on the device
                self.prefetch(([(source, nxt)] if nxt else []) + [(source, f) for f in self.ladder_starts(source)]
                              + [(u, self.first_candidate(u)) for u in self.upcoming if self.first_candidate(u)])
                g2, cand["flops"] = gate2(o["flops_tool"], staged, o["seed"], timeout, no_matrix,
                                          info.input_bytes, refusals, budget_cut=cut, job=job, clock=self.clock)
                gates.append(g2)
                floor = gate4_floor(cand["flops"], info.input_bytes, self.bw, o["max_ms"]) if g2["ok"] else None
                if floor is not None:  # decided by the roofline: verify and timing would only burn the budget
                    gates += _decided_by_floor(floor, traced=True)
                elif g2["ok"]:
                    timeout, cut = self._timeout()
                    g3, g4, row, cand["time_ms"] = gates34(self._worker(), staged, o["seed"], o["max_ms"], timeout,
                                                           budget_cut=cut, accept_unverified=bool(
                                                               o.get("accept_unverified_reference")))
                    gates += [g for g in (g3, g4) if g is not None]
                    if g4 is not None and g4["ok"]:
                        gates.append(gate5(info.input_bytes, cand["time_ms"], self.bw))
        except OutOfBudget as exc:
            self.out_of_budget = True
            # no verdict (a re-run redoes it), but where its time went is kept: the gates it finished and the one cut
            self.doc["cut_candidate"] = {
                "candidate_id": cand["candidate_id"], "source_case": source, "scale": s, "factors": dict(factors),
                "gates_done": [g["gate"] for g in gates], "cut_in": "gate 2 (trace)" if len(gates) < 2
                else "gates 3-4 (verify, timing)", "wall_s": round(self.clock() - t_start, 3), "why": str(exc)}
            save()
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        cand["gates"] = gates
        cand["wall_s"] = round(self.clock() - t_start, 3)
        cand["verdict"], cand["failed_gate"] = pj.verdict_of(gates)
        if cand["verdict"] == "pass" and len(gates) < 5:
            cand["verdict"], cand["failed_gate"] = "fail", len(gates) + 1
        result = cand["verdict"] == "pass"
        if result:
            cand["wall_figure"] = self.figure(cand["flops"], info.input_bytes, cand["time_ms"], no_matrix)
            result = self._saturation(cand, no_matrix, key)
        self._record(cand)
        again = [k for k, a in self.doc["appended"].items() if a["candidate_id"] == cand["candidate_id"]]
        if cand["verdict"] == "pass" and again:  # re-evaluated under other limits: already in the case files
            cand["new_case_id"] = int(again[0])
        elif cand["verdict"] == "pass":
            backup(self.od, self.doc)
            new_id = self.doc["backup"]["n_cases"] + len(self.doc["appended"])
            cand["new_case_id"] = new_id
            self.doc["appended"][str(new_id)] = {"source_case": source, "factors": cand["factors"], "scale": s,
                                                 "candidate_id": cand["candidate_id"],
                                                 "line": json.dumps(case, ensure_ascii=False)}
            save()  # probe.json first: the case files are always re-derived from it
            rewrite_case_files(self.od, self.doc)
            cand["verify_json"] = record_verify(self.od, new_id, row, o["backend"], o["device"], new_id + 1, o["seed"])
        save()
        self.log(f"case {source} {label}: {cand['verdict']} ({cand['wall_s']:.1f} s)" + (
            f" at gate {cand['failed_gate']} ({next(g['detail'] for g in gates if g['gate'] == cand['failed_gate'])})"
            if cand["failed_gate"] else "") + (f"; saturated: {cand['saturated']}" if cand["saturated"] else ""))
        return result
