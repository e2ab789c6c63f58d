"""The max-shape probe (spec step 2, issue 15 item 2): scale cases along chosen symbols under five gates, in cost order.

Per source case, a ladder of scale factors s = 2, 4, 8, ... <= ``max_scale`` is applied to every chosen symbol
(:mod:`mfulib.core.symbols`); the ladder stops at the first failing factor and is refined by bisection between the last
passing and the first failing factor (integers, at most ``refine_steps`` more candidates). The gates, cheapest
first, each recorded with its numbers (:func:`mfulib.schemas.probe_json.gate`):

1. **input bytes**, from the case description before any tensor exists (:func:`mfulib.core.cases.describe_case`):
   bytes <= ``max_bytes``; :data:`HOST_COPIES` x bytes <= host memory (MemAvailable of /proc/meminfo, and the
   RLIMIT_AS headroom of this process: ``get_input_groups()`` builds on the host); on an accelerator
   :data:`DEVICE_COPIES` x bytes <= free device memory (``torch.<cuda|npu>.mem_get_info``). verify keeps the draw and
   a pristine clone, hence 2 copies; outputs are not known before running (an OOM then is gate 3's ``oom``).
2. **reference accepts**: the ``--flops-tool`` (check_flops.py ``--tracer-only``) as a subprocess on the staged
   candidate, with the seed of the timed run (data-dependent FLOPs from the same draw): traced, not rejected,
   FLOPs > 0 - or, for an operator without matrix work (its source case traces 0 FLOPs), input bytes > 0. A
   dependent that could not follow the scaling (:func:`mfulib.core.symbols.scale_case` refusals) fails here too.
3. **ModelNew matches** Model within verify's tolerance (:mod:`mfulib.search.probe_child`, its own process); ``oom`` is a
   recorded failure, not fatal.
4. **one run** (median of synchronised wall-clock runs) <= ``max_ms``.
5. **effective bandwidth** input bytes / time <= :data:`BANDWIDTH_MARGIN` x the measured memory bandwidth (peak.json
   ``bandwidth_gbps``; without it the CUDA datasheet figure, and on NPU the spec's 1.3 TB/s default,
   :data:`NPU_DEFAULT_GBPS`); inputs that fit in L2 are exempt (they may beat HBM legitimately). It catches
   scaling that silently did nothing (a reference that ignores the scaled axis runs as fast as before).

Case files: every passing candidate is appended to every case copy of the work directory (``<Op>_perf_cases.jsonl``,
``model.json`` and prepare's aliases) after the originals were backed up into :data:`BACKUP_DIR`; the files are
always rewritten as originals + the appended lines recorded in probe.json (atomic per file), so an interrupted
probe leaves the originals' lines intact and a re-run reconciles and resumes. ``restore`` puts the originals back.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time

from mfulib.core.paths import SCRIPTS_DIR
from mfulib.core import cases as _cases
from mfulib.core import symbols as _sym
from mfulib.core.definitions import actual_tflops, is_positive
from mfulib.core.errors import UserError
from mfulib.core.jsonio import write_text_atomic
from mfulib.search import flops_law
from mfulib.schemas import probe_json as pj

from mfulib.search.probe_gates import (BANDWIDTH_MARGIN, DEVICE_COPIES, HOST_COPIES, GateWorker, OutOfBudget,  # noqa: F401
                          TraceJob, effective_gbps, gate1, gate2, gate4_floor, gate5, gates34)

SATURATION_GAIN = 0.05  # a doubling that raises wall TFLOP/s (GB/s) by less than this ends the source's ladder
# a source whose roofline floor at scale 1 is at least this fraction of --max-ms is timed at scale 1 before its
# ladder (Probe.source_too_slow): near the limit, a doomed x2 candidate costs a reference run at 2^k the work
EAGER_BASELINE_FRACTION = 1.0 / 8
NPU_DEFAULT_GBPS = 1300.0  # spec step 2, gate 5 table: "输入字节/耗时 ≤ 1.3TB/s" (Ascend 910B); measure it instead
BACKUP_DIR = pj.BACKUP_DIR
SCRIPTS = SCRIPTS_DIR


# ------------------------------------------------------------------------------------------------ limits
def host_free_bytes() -> tuple:
    """(bytes, source) the host can still give: min(MemAvailable, RLIMIT_AS soft limit - this process's VmSize)."""
    import resource
    out, src = None, []
    try:
        with open("/proc/meminfo") as f:
            mem = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in f if ln.split()[1:2]}
        out, src = mem["MemAvailable"], ["MemAvailable (/proc/meminfo)"]
    except (OSError, KeyError, ValueError):
        pass
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        vm = 0
        try:
            with open("/proc/self/status") as f:
                vm = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:"))
        except (OSError, StopIteration):
            pass
        head = max(0, soft - vm)
        if out is None or head < out:
            out = head
        src.append(f"RLIMIT_AS {soft} B - VmSize {vm} B")
    return out, "; ".join(src) or "unknown"


def device_free_bytes(backend: str, index: int):
    """Free memory of the accelerator (None on cpu, where the host check covers it)."""
    if backend == "cpu":
        return None
    import torch
    mod = torch.cuda if backend == "cuda" else getattr(torch, "npu")
    return int(mod.mem_get_info(index)[0])


def cpu_l2_bytes():
    """L2 size of cpu0 from Linux sysfs (/sys/devices/system/cpu/cpu0/cache/index*/{level,size}), or None."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for idx in sorted(os.listdir(base)):
            with open(os.path.join(base, idx, "level")) as f:
                if f.read().strip() != "2":
                    continue
            with open(os.path.join(base, idx, "size")) as f:
                text = f.read().strip().upper()
            mult = {"K": 1024, "M": 1024 ** 2}.get(text[-1:], 1)
            return int(text.rstrip("KM")) * mult
    except (OSError, ValueError):
        return None
    return None


def bandwidth_limit(op_dir: str, backend: str, index: int, peak_json_path=None) -> dict:
    """{bandwidth_gbps, source, l2_bytes, peak_tflops_max}: the memory bandwidth gate 5 compares against, the L2
    exemption, and the highest peak of peak.json over every dtype, measured or nominal (TFLOP/s; int8 TOPS count as
    the same operations) for gate 4's roofline floor (:func:`mfulib.search.probe_gates.gate4_floor`; None without
    peak.json). The nominal (datasheet) figures count because a calibration of some dtypes only (``peak_calib.py
    --dtypes fp32``) would otherwise put an fp16 or TF32 operator's floor 8-15x too high and fail candidates that run
    well within --max-ms."""
    from mfulib.schemas import peak_json
    path = peak_json_path or os.path.join(op_dir, peak_json.FILE_NAME)
    bw, src, l2, top = None, None, None, None
    if os.path.exists(path):
        peak = peak_json.read_peak_json(path)
        bw, src = peak.get("bandwidth_gbps"), f"{path} bandwidth_gbps (measured)"
        nominal = (peak.get("nominal") or {}).get("tflops") if isinstance(peak.get("nominal"), dict) else None
        vals = [v for d in (peak.get("peak_tflops"), peak.get("peak_tops"), nominal) if isinstance(d, dict)
                for v in d.values() if is_positive(v)]
        top = max(vals) if vals else None
        l2 = (peak.get("device") or {}).get("l2_cache_bytes") if isinstance(peak.get("device"), dict) else None
    if backend != "cpu":
        from mfulib.core.device import device_identity
        ident = device_identity(backend, index)
        l2 = l2 or ident.get("l2_cache_bytes")
        if bw is None and backend == "cuda":
            from mfulib.peaks.nominal import nominal_for_identity
            bw, src = nominal_for_identity(ident).get("bandwidth_gbps"), "CUDA datasheet (mfulib.peaks.nominal)"
        if bw is None and backend == "npu":
            bw, src = NPU_DEFAULT_GBPS, "spec default 1.3 TB/s (910B); run peak_calib.py to measure"
    else:
        l2 = l2 or cpu_l2_bytes()
    return {"bandwidth_gbps": bw, "source": src or "none: no peak.json with bandwidth_gbps", "l2_bytes": l2,
            "peak_tflops_max": top}


# ------------------------------------------------------------------------------------------------ staging
def stage_candidate(od, case: dict, root: str) -> str:
    """A directory under ``root`` that mirrors the work dir (symlinks) with case files holding only ``case``.
    Result files of the work dir are not linked, so no tool run there can touch them."""
    staged = os.path.join(root, "work")
    os.makedirs(staged)
    names = set(od.case_file_names())
    for name in os.listdir(od.path):
        src = os.path.join(od.path, name)
        if name in names:
            with open(os.path.join(staged, name), "w", encoding="utf-8") as f:
                f.write(_cases.dump_case_lines([case]))
        elif name.endswith(".py") or name == "prepare.json" or not (name.endswith(".json") or os.path.isdir(src)):
            os.symlink(src, os.path.join(staged, name))
    return staged


# ------------------------------------------------------------------------------------------------ write-back
def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def backup(od, doc: dict) -> dict:
    """Copy the original case files into BACKUP_DIR once (kept across runs); returns doc["backup"]."""
    if doc.get("backup") and os.path.isdir(doc["backup"]["dir"]):
        return doc["backup"]
    bdir = od.file(BACKUP_DIR)
    os.makedirs(bdir, exist_ok=True)
    files = {}
    for name in od.case_file_names():
        dst = os.path.join(bdir, name)
        if not os.path.exists(dst):
            shutil.copy2(od.file(name), dst)
        files[name] = _sha(dst)
    n = len(_cases.read_case_file(os.path.join(bdir, os.path.basename(od.cases_path))))
    doc["backup"] = {"dir": bdir, "files": files, "n_cases": n}
    return doc["backup"]


def check_resumable(od, doc: dict) -> None:
    """Refuse to resume from a probe.json whose backup or operator files no longer match the work directory
    (re-prepared cases, edited model.py / model_new.py): resuming would overwrite new case files with old ones or
    reuse verdicts about other code. UserError naming the fix (``--restore``, or delete probe.json and
    BACKUP_DIR)."""
    from mfulib.schemas import verify_json as vj
    b = doc.get("backup")
    fix = f"run --restore first, or delete {pj.FILE_NAME} and {BACKUP_DIR}/ if the work dir was re-prepared"
    if b:
        for name in b["files"]:
            with open(os.path.join(b["dir"], name), "rb") as f:
                orig = f.read()
            cur = open(od.file(name), "rb").read() if os.path.exists(od.file(name)) else b""
            if not cur.startswith(orig.rstrip(b"\n")):
                raise UserError(f"{od.file(name)}: does not start with the original lines backed up in "
                                f"{b['dir']} - the case file changed since the last probe; {fix}")
    if doc.get("inputs") and doc["inputs"] != vj.input_digests(od.path):
        raise UserError(f"{od.path}: model.py / model_new.py changed since {pj.FILE_NAME} was written; {fix}")


def rewrite_case_files(od, doc: dict) -> None:
    """Every case copy := its original (from the backup, byte for byte) + the appended lines in id order."""
    b = doc["backup"]
    lines = [doc["appended"][k]["line"] for k in sorted(doc["appended"], key=int)]
    for name in b["files"]:
        with open(os.path.join(b["dir"], name), encoding="utf-8", newline="") as f:  # CRLF kept as it is
            text = f.read()
        eol = "\r\n" if "\r\n" in text else "\n"  # appended lines end as the file's own lines do
        if lines and text and not text.endswith("\n"):
            text += eol
        write_text_atomic(od.file(name), text + "".join(ln + eol for ln in lines))
    od._cases = None


def restore(od, doc: dict) -> list:
    """Put the backed-up case files back, drop verify.json rows of appended ids; returns the restored names."""
    b = doc.get("backup")
    if not b or not os.path.isdir(b["dir"]):
        raise UserError(f"{od.path}: no probe backup ({BACKUP_DIR}) - nothing to restore")
    for name in b["files"]:
        src = os.path.join(b["dir"], name)
        with open(src, encoding="utf-8", newline="") as f:  # byte for byte: CRLF and a BOM stay
            write_text_atomic(od.file(name), f.read())
    from mfulib.schemas import verify_json as vj
    vpath = od.file(vj.FILE_NAME)
    if os.path.exists(vpath):
        vdoc = vj.read_verify_json(vpath)
        vdoc["cases"] = [r for r in vdoc["cases"] if r["case"] < b["n_cases"]]
        vj.write_verify_json(vpath, vj.finish(vdoc, b["n_cases"]))
    shutil.rmtree(b["dir"])
    doc["appended"], doc["backup"] = {}, None
    for c in doc.get("candidates") or []:
        c["new_case_id"] = None
    return sorted(b["files"])


def record_verify(od, new_id: int, row: dict, backend: str, device: str, n_cases: int, seed: int) -> str:
    """Merge the candidate's verify row into verify.json under its new case id (skipped, with the reason returned,
    when verify.json was made on another backend)."""
    from mfulib.verify import correctness as _verify
    from mfulib.core.jsonio import provenance
    from mfulib.schemas import verify_json as vj
    path = od.file(vj.FILE_NAME)
    if os.path.exists(path) and vj.backend_of(vj.read_verify_json(path)) not in (None, backend):
        return f"verify.json is from backend {vj.backend_of(vj.read_verify_json(path))}: row not merged"

    def new_doc():
        doc = provenance(vj.TOOL, vj.SCHEMA, device={"backend": backend, "device": device,
                                                     "why": "verified by max_shape_probe (gate 3)"})
        doc.update(op=od.op_name, work_dir=od.path, seed=seed, tolerance=_verify.TOLERANCE,
                   tolerance_tf32=_verify.TOLERANCE_TF32, cases=[])
        return doc
    row = dict(row, case=new_id, verified_by="max_shape_probe gate 3")
    vj.merge_rows(path, [row], n_cases, new_doc=new_doc, updates={"inputs": vj.input_digests(od.path)})
    return "merged"


# ------------------------------------------------------------------------------------------------ ladder
def ladder(max_scale: int) -> list:
    """Scale factors 2, 4, 8, ... up to ``max_scale`` (``max_scale`` itself last when it is not a power of 2)."""
    out, s = [], 2
    while s <= max_scale:
        out.append(s)
        s *= 2
    if max_scale >= 2 and out[-1] != max_scale:
        out.append(max_scale)
    return out


STOP = "stop"  # an evaluate() result: passed, but the ladder ends here (saturated)


def search_factor(evaluate, max_scale: int, refine_steps: int = 3) -> list:
    """Try the ladder then bisect: ``evaluate(s) -> bool | STOP`` (pass / fail / passed-but-saturated). Returns
    [(s, passed)] in the order tried.

    The ladder stops at the first failing s; bisection then runs between the last passing factor (1 when none
    passed: the original case) and the first failing one, until they are adjacent or ``refine_steps`` are used.
    A :data:`STOP` ends the ladder without bisection: a larger factor would not raise the figure (saturation)."""
    tried, lo, hi = [], 1, None
    for s in ladder(max_scale):
        ok = evaluate(s)
        tried.append((s, ok is True or ok == STOP))
        if ok == STOP:
            return tried
        if not ok:
            hi = s
            break
        lo = s
    steps = 0
    while hi is not None and hi - lo > 1 and steps < refine_steps:
        mid = (lo + hi) // 2
        ok = evaluate(mid)
        passed = ok is True or ok == STOP
        tried.append((mid, passed))
        lo, hi = (mid, hi) if passed else (lo, mid)
        steps += 1
    return tried


# ------------------------------------------------------------------------------------------------ the run
def candidate_id(source_case: int, factors: dict) -> str:
    """Stable id of a candidate: ``c<case>:<symbol>x<factor>,...`` (a re-run finds its earlier verdict by it)."""
    return f"c{source_case}:" + ",".join(f"{k}x{v}" for k, v in sorted(factors.items()))


def _decided_by_floor(g4: dict, traced: bool) -> list:
    """The gates after gate 1 (``traced``: after gate 2) of a candidate whose gate 4 the roofline floor ``g4``
    decided: the ones it skips are recorded not run (ok null), then ``g4``."""
    skipped = [] if traced else [pj.gate(2, None, "not run: gate 4 fails on the predicted FLOPs' roofline floor")]
    return skipped + [pj.gate(3, None, "not run: gate 4 fails on the roofline floor alone"), g4]


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
    (:class:`~mfulib.search.probe_gates.OutOfBudget` reaches the caller)."""

    def __init__(self, od, doc, groups, opts, limits, bw, log=print):
        self.od, self.doc, self.opts, self.limits, self.bw, self.log = od, doc, opts, limits, bw, log
        self.group_of = {cid: g for g in groups for cid in g.cases}
        reuse = opts.get("reuse_verdicts", True)  # False: the previous run had other limits (its run_key)
        self.done = {c["candidate_id"]: c for c in doc["candidates"] if c.get("verdict") and reuse}
        if not reuse:
            doc["baselines"] = {}
        self.t0 = opts.get("t0") or time.monotonic()  # the budget counts from the script's start
        self.out_of_budget = False
        self.prefetched = {}  # candidate id -> (tmp dir, staged dir, TraceJob): gate 2 started ahead
        self.upcoming = []  # source cases after the current one (their first factor may be traced ahead)
        self.best = {}  # source case -> best wall figure so far
        self.sources = {}  # source case -> (no_matrix, traced FLOPs at scale 1), set by set_source
        self.laws = {}  # group key -> the traced FLOPs' power law of its symbols (None: none holds)
        self.worker = None

    def close(self):
        """End the gate child and every trace started ahead (their processes and staged dirs)."""
        if self.worker is not None:
            self.worker.close()
            shutil.rmtree(self.worker.log_dir, ignore_errors=True)  # the child's own log (a case logs beside it)
            self.worker = None
        for tmp, _staged, job in self.prefetched.values():
            job.kill()
            shutil.rmtree(tmp, ignore_errors=True)
        self.prefetched = {}
        from mfulib.run import trace_zygote
        trace_zygote.close_shared()  # the warm start of the gate-2 traces (and any trace still running)

    def prefetch(self, wanted) -> None:
        """Start gate 2 ahead for ``wanted`` [(source, s)] (in order, up to ``opts["trace_jobs"]`` outstanding):
        the tracer runs on the host while the device runs the current candidate's gates 3-4. Candidates that
        already have a verdict, fail gate 1 or cannot be scaled consistently are skipped (they need no trace)."""
        cap = int(self.opts.get("trace_jobs") or 0)
        for source, s in wanted:
            if len(self.prefetched) >= cap:
                return
            cand, case, info, refusals = self.plan(source, s)
            cid = cand["candidate_id"]
            if cid in self.prefetched or cid in self.done or refusals or not gate1(info, self.limits)["ok"] \
                    or self.predicted_gate4(source, cand, info) is not None:
                continue
            tmp = tempfile.mkdtemp(prefix="mfu_probe_")
            staged = stage_candidate(self.od, case, tmp)
            self.prefetched[cid] = (tmp, staged, TraceJob(self.opts["flops_tool"], staged, self.opts["seed"]))

    def end_source(self, source: int) -> None:
        """The ladder of ``source`` is over: traces started ahead for it are no longer needed (killed)."""
        for cid in [c for c in self.prefetched if c.startswith(f"c{source}:")]:
            tmp, _staged, job = self.prefetched.pop(cid)
            job.kill()
            shutil.rmtree(tmp, ignore_errors=True)

    def next_factor(self, s: int):
        """The ladder's factor after ``s`` (None at the top)."""
        lad = ladder(self.limits["max_scale"])
        return next((f for f in lad if f > s), None)

    def _worker(self):
        if self.worker is None:
            self.worker = GateWorker(self.opts["device"], tempfile.mkdtemp(prefix="mfu_probe_child_"))
        return self.worker

    def _timeout(self):
        """(timeout s for the next subprocess, whether the budget - not --timeout-s - sets it)."""
        budget = self.opts.get("budget_s")
        if budget is None:
            return self.opts["timeout_s"], False
        left = budget - (time.monotonic() - self.t0)
        if left <= 0:
            self.out_of_budget = True
            raise OutOfBudget(f"--budget-s {budget:g} s reached")
        return (left, True) if left < self.opts["timeout_s"] else (self.opts["timeout_s"], False)

    def plan(self, source: int, s: int):
        """(candidate dict without gates, scaled case, refusals) for scale ``s`` of case ``source``."""
        g = self.group_of[source]
        factors = {x.name: s for x in g.symbols if x.scaled}
        info = self.od.describe(source)
        case, refusals = _sym.scale_case(self.od.read_cases()[source], info, g, factors)
        new_info = _cases.describe_case(case, source)
        cand = {"candidate_id": candidate_id(source, factors), "source_case": source, "scale": s,
                "factors": factors, "input_bytes": new_info.input_bytes, "gates": [], "verdict": None,
                "failed_gate": None, "new_case_id": None, "time_ms": None, "flops": None, "wall_figure": None,
                "saturated": None, "wall_s": None}
        return cand, case, new_info, refusals

    def law(self, source: int):
        """The power law of the traced FLOPs in the group of ``source`` (:func:`mfulib.search.flops_law.fit`; recorded in
        probe.json ``flops_law`` with the reason when there is none), or None."""
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
        """Wall TFLOP/s (GB/s for no matrix work) of one synchronised run; None when unknown."""
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
        if not force and source in self.best:
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
            t0 = time.monotonic()
            try:
                staged = stage_candidate(self.od, self.od.read_cases()[source], tmp)
                _g3, g4, _row, t = gates34(self._worker(), staged, self.opts["seed"], self.opts["max_ms"], timeout,
                                           budget_cut=cut, time_only=True)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            rec = {"time_ms": t, "flops": flops, "input_bytes": info.input_bytes,
                   "figure": self.figure(flops, info.input_bytes, t, no_matrix),
                   "detail": (g4 or {}).get("detail"), "wall_s": round(time.monotonic() - t0, 3)}
            self.doc["baselines"][key] = rec
        if rec.get("figure") is not None:
            self.best[source] = max(self.best.get(source, 0.0), rec["figure"])
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

    def _saturation(self, cand, no_matrix):
        """STOP when the passing ``cand`` raised the source's best figure by less than SATURATION_GAIN."""
        fig = cand["wall_figure"]
        src = cand["source_case"]
        if src not in self.best and src in self.sources:
            try:
                self.baseline(src, *self.sources[src])
            except OutOfBudget:  # the candidate keeps its verdict; the next one stops the run
                self.out_of_budget = True
        prev = self.best.get(src)
        if fig is not None:
            self.best[src] = max(prev or 0.0, fig)
        if not self.opts.get("saturation", True) or fig is None or prev is None:
            return True
        unit = "GB/s" if no_matrix else "TFLOP/s"
        if fig < (1.0 + SATURATION_GAIN) * prev:
            cand["saturated"] = (f"wall {fig:.4g} {unit} < (1 + {SATURATION_GAIN:g}) x best so far {prev:.4g} "
                                 f"{unit} ({'a fall' if fig < prev else 'a plateau'}): larger factors of case {src} "
                                 "are not tried (--no-saturation-stop tries them)")
            return STOP
        return True

    def evaluate(self, source: int, s: int, no_matrix: bool, save):
        """Run the gates on scale ``s`` of ``source``: True (pass), False (fail) or STOP (pass, saturated).
        Raises OutOfBudget when the budget ends before or during the candidate (no verdict recorded)."""
        cand, case, info, refusals = self.plan(source, s)
        if cand["candidate_id"] in self.done:
            self.doc.setdefault("resumed", []).append(cand["candidate_id"])
            old = self.done[cand["candidate_id"]]
            if old["verdict"] != "pass":
                return False
            cand.update(wall_figure=old.get("wall_figure"), source_case=source)
            return self._saturation(cand, no_matrix)
        o = self.opts
        timeout, cut = self._timeout()
        t_start = time.monotonic()
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
                    job = TraceJob(o["flops_tool"], staged, o["seed"])
                nxt = self.next_factor(s)  # traced on the host while this candidate runs on the device
                self.prefetch(([(source, nxt)] if nxt else []) + [(u, 2) for u in self.upcoming])
                g2, cand["flops"] = gate2(o["flops_tool"], staged, o["seed"], timeout, no_matrix,
                                          info.input_bytes, refusals, budget_cut=cut, job=job)
                gates.append(g2)
                floor = gate4_floor(cand["flops"], info.input_bytes, self.bw, o["max_ms"]) if g2["ok"] else None
                if floor is not None:  # decided by the roofline: verify and timing would only burn the budget
                    gates += _decided_by_floor(floor, traced=True)
                elif g2["ok"]:
                    timeout, cut = self._timeout()
                    g3, g4, row, cand["time_ms"] = gates34(self._worker(), staged, o["seed"], o["max_ms"], timeout,
                                                           budget_cut=cut)
                    gates += [g for g in (g3, g4) if g is not None]
                    if g4 is not None and g4["ok"]:
                        gates.append(gate5(info.input_bytes, cand["time_ms"], self.bw))
        except OutOfBudget as exc:
            self.out_of_budget = True
            # no verdict (a re-run redoes it), but where its time went is kept: the gates it finished and the one cut
            self.doc["cut_candidate"] = {
                "candidate_id": cand["candidate_id"], "source_case": source, "scale": s,
                "gates_done": [g["gate"] for g in gates], "cut_in": "gate 2 (trace)" if len(gates) < 2
                else "gates 3-4 (verify, timing)", "wall_s": round(time.monotonic() - t_start, 3), "why": str(exc)}
            save()
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        cand["gates"] = gates
        cand["wall_s"] = round(time.monotonic() - t_start, 3)
        cand["verdict"], cand["failed_gate"] = pj.verdict_of(gates)
        if cand["verdict"] == "pass" and len(gates) < 5:
            cand["verdict"], cand["failed_gate"] = "fail", len(gates) + 1
        result = cand["verdict"] == "pass"
        if result:
            cand["wall_figure"] = self.figure(cand["flops"], info.input_bytes, cand["time_ms"], no_matrix)
            result = self._saturation(cand, no_matrix)
        self.doc["candidates"] = [c for c in self.doc["candidates"] if c["candidate_id"] != cand["candidate_id"]]
        self.doc["candidates"].append(cand)
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
        self.log(f"case {source} x{s}: {cand['verdict']} ({cand['wall_s']:.1f} s)" + (
            f" at gate {cand['failed_gate']} ({next(g['detail'] for g in gates if g['gate'] == cand['failed_gate'])})"
            if cand["failed_gate"] else "") + (f"; saturated: {cand['saturated']}" if cand["saturated"] else ""))
        return result
