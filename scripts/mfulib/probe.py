"""The max-shape probe (spec step 2, issue 15 item 2): scale cases along chosen symbols under five gates, in cost order.

Per source case, a ladder of scale factors s = 2, 4, 8, ... <= ``max_scale`` is applied to every chosen symbol
(:mod:`mfulib.symbols`); the ladder stops at the first failing factor and is refined by bisection between the last
passing and the first failing factor (integers, at most ``refine_steps`` more candidates). The gates, cheapest
first, each recorded with its numbers (:func:`mfulib.schemas.probe_json.gate`):

1. **input bytes**, from the case description before any tensor exists (:func:`mfulib.cases.describe_case`):
   bytes <= ``max_bytes``; :data:`HOST_COPIES` x bytes <= host memory (MemAvailable of /proc/meminfo, and the
   RLIMIT_AS headroom of this process: ``get_input_groups()`` builds on the host); on an accelerator
   :data:`DEVICE_COPIES` x bytes <= free device memory (``torch.<cuda|npu>.mem_get_info``). verify keeps the draw and
   a pristine clone, hence 2 copies; outputs are not known before running (an OOM then is gate 3's ``oom``).
2. **reference accepts**: the ``--flops-tool`` (check_flops.py ``--tracer-only``) as a subprocess on the staged
   candidate, with the seed of the timed run (data-dependent FLOPs from the same draw): traced, not rejected,
   FLOPs > 0 - or, for an operator without matrix work (its source case traces 0 FLOPs), input bytes > 0. A
   dependent that could not follow the scaling (:func:`mfulib.symbols.scale_case` refusals) fails here too.
3. **ModelNew matches** Model within verify's tolerance (:mod:`mfulib.probe_child`, its own process); ``oom`` is a
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
import subprocess
import sys
import tempfile
import time

from . import cases as _cases
from . import symbols as _sym
from .errors import UserError
from .jsonio import write_text_atomic
from .schemas import probe_json as pj

HOST_COPIES = 2
DEVICE_COPIES = 2
BANDWIDTH_MARGIN = 1.3
NPU_DEFAULT_GBPS = 1300.0  # spec step 2, gate 5 table: "输入字节/耗时 ≤ 1.3TB/s" (Ascend 910B); measure it instead
BACKUP_DIR = pj.BACKUP_DIR
SCRIPTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    """{bandwidth_gbps, source, l2_bytes}: the memory bandwidth gate 5 compares against, and the L2 exemption."""
    from .schemas import peak_json
    path = peak_json_path or os.path.join(op_dir, peak_json.FILE_NAME)
    bw, src, l2 = None, None, None
    if os.path.exists(path):
        peak = peak_json.read_peak_json(path)
        bw, src = peak.get("bandwidth_gbps"), f"{path} bandwidth_gbps (measured)"
        l2 = (peak.get("device") or {}).get("l2_cache_bytes") if isinstance(peak.get("device"), dict) else None
    if backend != "cpu":
        from .device import device_identity
        ident = device_identity(backend, index)
        l2 = l2 or ident.get("l2_cache_bytes")
        if bw is None and backend == "cuda":
            from .peaks import nominal_for_identity
            bw, src = nominal_for_identity(ident).get("bandwidth_gbps"), "CUDA datasheet (mfulib.peaks)"
        if bw is None and backend == "npu":
            bw, src = NPU_DEFAULT_GBPS, "spec default 1.3 TB/s (910B); run peak_calib.py to measure"
    else:
        l2 = l2 or cpu_l2_bytes()
    return {"bandwidth_gbps": bw, "source": src or "none: no peak.json with bandwidth_gbps", "l2_bytes": l2}


# ------------------------------------------------------------------------------------------------ gates
def gate1(info, limits: dict) -> dict:
    """Gate 1 on a CaseInfo: nothing is allocated."""
    b = info.input_bytes
    if b > limits["max_bytes"]:
        return pj.gate(1, False, f"inputs {b / 1e9:.3g} GB > --max-bytes {limits['max_bytes'] / 1e9:.3g} GB",
                       b, limits["max_bytes"])
    host = limits.get("host_bytes")
    if host is not None and HOST_COPIES * b > host:
        return pj.gate(1, False, f"{HOST_COPIES} x inputs {HOST_COPIES * b / 1e9:.3g} GB > host memory "
                       f"{host / 1e9:.3g} GB ({limits.get('host_source')}): the host-side build would not fit",
                       HOST_COPIES * b, host)
    dev = limits.get("device_free_bytes")
    if dev is not None and DEVICE_COPIES * b > dev:
        return pj.gate(1, False, f"{DEVICE_COPIES} x inputs {DEVICE_COPIES * b / 1e9:.3g} GB > free device memory "
                       f"{dev / 1e9:.3g} GB", DEVICE_COPIES * b, dev)
    return pj.gate(1, True, f"inputs {b / 1e9:.3g} GB within --max-bytes, host and device memory", b,
                   limits["max_bytes"])


def gate2(flops_tool: str, staged: str, seed: int, timeout_s: float, no_matrix: bool, input_bytes: int,
          refusals: list) -> tuple:
    """(gate dict, flops or None): the reference traced on the staged candidate by ``flops_tool``."""
    if refusals:
        return pj.gate(2, False, "the scaling cannot keep the case consistent: " + "; ".join(refusals)), None
    out = os.path.join(os.path.dirname(staged), "flops_check.json")
    cmd = [sys.executable, flops_tool, "--op-dir", staged, "--tracer-only", "--cases", "0", "--seed", str(seed),
           "--quiet", "-o", out]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return pj.gate(2, False, f"{os.path.basename(flops_tool)} took more than {timeout_s:g} s"), None
    if not os.path.exists(out):
        tail = (r.stderr or r.stdout).strip().splitlines()[-2:]
        return pj.gate(2, False, f"{os.path.basename(flops_tool)} exit {r.returncode}: {' | '.join(tail)}"), None
    with open(out) as f:
        row = (json.load(f).get("per_case") or [{}])[0]
    tr = row.get("tracer") or {}
    flops = tr.get("total_flops")
    drawn = f"inputs_drawn={tr.get('inputs_drawn')}, seed {seed}" + (
        f", data values {tr.get('data_values')}" if tr.get("data_values") else "")
    if row.get("status") == "rejected" or tr.get("status") == "rejected":
        return pj.gate(2, False, f"the reference rejects the shape: {tr.get('reason') or row.get('diagnosis')}"), None
    if tr.get("status") != "ok":
        return pj.gate(2, False, f"the tracer could not run the reference ({tr.get('status')}: "
                       f"{tr.get('reason')})"), None
    unseen = f"; unseen ops {tr.get('unseen_ops')}" if tr.get("unseen_ops") else ""
    if no_matrix:
        ok = input_bytes > 0
        return pj.gate(2, ok, f"no matrix work (the source case traces 0 FLOPs): bytes {input_bytes} "
                       f"{'>' if ok else '<='} 0; {drawn}", input_bytes, 0), flops
    ok = bool(flops) and flops > 0
    return pj.gate(2, ok, f"traced FLOPs {flops:.4g} {'>' if ok else '<='} 0; {drawn}{unseen}"
                   if flops is not None else "traced no FLOPs", flops, 0), flops


def gates34(staged: str, device: str, seed: int, max_ms: float, timeout_s: float) -> tuple:
    """(gate 3 dict, gate 4 dict or None, verify row, time_ms): ModelNew verified and timed in a child process."""
    out, spec = os.path.join(os.path.dirname(staged), "child.jsonl"), os.path.join(os.path.dirname(staged), "spec.json")
    with open(spec, "w") as f:
        json.dump({"op_dir": staged, "device": device, "seed": seed, "max_ms": max_ms, "out": out}, f)
    from .worker import child_env
    code = "import sys; sys.path.insert(0, sys.argv[1]); from mfulib.probe_child import child_main; child_main(sys.argv[2])"
    rc, err = None, ""
    try:
        r = subprocess.run([sys.executable, "-c", code, SCRIPTS, spec], capture_output=True, text=True,
                           timeout=timeout_s, env=dict(child_env(os.environ), TMPDIR=os.path.dirname(staged)))
        rc, err = r.returncode, " | ".join((r.stderr or "").strip().splitlines()[-2:])
    except subprocess.TimeoutExpired:
        rc = "timeout"
    msgs = [json.loads(ln) for ln in open(out).read().split("\n")[:-1]] if os.path.exists(out) else []
    row = next((m["verify"] for m in msgs if "verify" in m), None)
    timing = next((m["time"] for m in msgs if "time" in m), None)
    if row is None:
        why = f"no result within {timeout_s:g} s (killed)" if rc == "timeout" else f"the child died (exit {rc}): {err}"
        return pj.gate(3, False, f"verify: {why}"), None, {"status": "timeout" if rc == "timeout" else "crashed",
                                                          "reason": why}, None
    ok3 = row.get("status") == "pass"
    g3 = pj.gate(3, ok3, f"verify {row.get('status')}: " + (row.get("reason") or
                 f"max normalised error {row.get('max_norm_err')} <= tol {row.get('tol')}"),
                 row.get("max_norm_err"), row.get("tol"))
    if not ok3:
        return g3, None, row, None
    if timing is None or timing.get("status") != "ok":
        why = (timing or {}).get("reason") or (f"no timing within {timeout_s:g} s" if rc == "timeout" else f"exit {rc}")
        return g3, pj.gate(4, False, f"timing {(timing or {}).get('status', 'missing')}: {why}", None, max_ms), row, None
    t = timing["time_ms"]
    return g3, pj.gate(4, t <= max_ms, f"one run {t:.4g} ms {'<=' if t <= max_ms else '>'} --max-ms {max_ms:g} "
                       f"(median of {len(timing['runs_ms'])} synchronised runs)", t, max_ms), row, t


def gate5(input_bytes: int, time_ms: float, bw: dict) -> dict:
    """Effective bandwidth input_bytes / time against BANDWIDTH_MARGIN x the memory bandwidth (L2-resident exempt)."""
    eff_gbps = input_bytes / (time_ms * 1e-3) / 1e9 if time_ms and time_ms > 0 else float("inf")
    l2 = bw.get("l2_bytes")
    if l2 and input_bytes <= l2:
        return pj.gate(5, True, f"inputs {input_bytes} B fit in L2 ({l2} B): exempt", eff_gbps, None)
    if not bw.get("bandwidth_gbps"):
        return pj.gate(5, None, f"not checked: {bw.get('source')} - run peak_calib.py (peak.json in the work dir)",
                       eff_gbps, None)
    limit = BANDWIDTH_MARGIN * bw["bandwidth_gbps"]
    ok = eff_gbps <= limit
    return pj.gate(5, ok, f"effective {eff_gbps:.4g} GB/s {'<=' if ok else '>'} {BANDWIDTH_MARGIN} x "
                   f"{bw['bandwidth_gbps']:.4g} GB/s ({bw['source']})" + ("" if ok else
                   ": faster than memory allows - the scaling did nothing (a reference ignoring the scaled axis?)"),
                   eff_gbps, limit)


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
    from .schemas import verify_json as vj
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
        with open(os.path.join(b["dir"], name), encoding="utf-8") as f:
            text = f.read()
        if lines and text and not text.endswith("\n"):
            text += "\n"
        write_text_atomic(od.file(name), text + "".join(ln + "\n" for ln in lines))
    od._cases = None


def restore(od, doc: dict) -> list:
    """Put the backed-up case files back, drop verify.json rows of appended ids; returns the restored names."""
    b = doc.get("backup")
    if not b or not os.path.isdir(b["dir"]):
        raise UserError(f"{od.path}: no probe backup ({BACKUP_DIR}) - nothing to restore")
    for name in b["files"]:
        src = os.path.join(b["dir"], name)
        with open(src, encoding="utf-8") as f:
            write_text_atomic(od.file(name), f.read())
    from .schemas import verify_json as vj
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
    from . import verify as _verify
    from .jsonio import provenance
    from .schemas import verify_json as vj
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


def search_factor(evaluate, max_scale: int, refine_steps: int = 3) -> list:
    """Try the ladder then bisect: ``evaluate(s) -> bool`` (pass). Returns [(s, passed)] in the order tried.

    The ladder stops at the first failing s; bisection then runs between the last passing factor (1 when none
    passed: the original case) and the first failing one, until they are adjacent or ``refine_steps`` are used."""
    tried, lo, hi = [], 1, None
    for s in ladder(max_scale):
        ok = evaluate(s)
        tried.append((s, ok))
        if not ok:
            hi = s
            break
        lo = s
    steps = 0
    while hi is not None and hi - lo > 1 and steps < refine_steps:
        mid = (lo + hi) // 2
        ok = evaluate(mid)
        tried.append((mid, ok))
        lo, hi = (mid, hi) if ok else (lo, mid)
        steps += 1
    return tried


# ------------------------------------------------------------------------------------------------ the run
def candidate_id(source_case: int, factors: dict) -> str:
    """Stable id of a candidate: ``c<case>:<symbol>x<factor>,...`` (a re-run finds its earlier verdict by it)."""
    return f"c{source_case}:" + ",".join(f"{k}x{v}" for k, v in sorted(factors.items()))


class Probe:
    """One probe run over ``source_ids`` of the OpDir ``od``; ``doc`` is the probe.json being built (resumed)."""

    def __init__(self, od, doc, groups, opts, limits, bw, log=print):
        self.od, self.doc, self.opts, self.limits, self.bw, self.log = od, doc, opts, limits, bw, log
        self.group_of = {cid: g for g in groups for cid in g.cases}
        reuse = opts.get("reuse_verdicts", True)  # False: the previous run had other limits (its run_key)
        self.done = {c["candidate_id"]: c for c in doc["candidates"] if c.get("verdict") and reuse}
        self.t0 = time.monotonic()
        self.out_of_budget = False

    def plan(self, source: int, s: int):
        """(candidate dict without gates, scaled case, refusals) for scale ``s`` of case ``source``."""
        g = self.group_of[source]
        factors = {x.name: s for x in g.symbols if x.scaled}
        info = self.od.describe(source)
        case, refusals = _sym.scale_case(self.od.read_cases()[source], info, g, factors)
        new_info = _cases.describe_case(case, source)
        cand = {"candidate_id": candidate_id(source, factors), "source_case": source, "scale": s,
                "factors": factors, "input_bytes": new_info.input_bytes, "gates": [], "verdict": None,
                "failed_gate": None, "new_case_id": None, "time_ms": None, "flops": None}
        return cand, case, new_info, refusals

    def evaluate(self, source: int, s: int, no_matrix: bool, save) -> bool:
        cand, case, info, refusals = self.plan(source, s)
        if cand["candidate_id"] in self.done:
            self.doc.setdefault("resumed", []).append(cand["candidate_id"])
            return self.done[cand["candidate_id"]]["verdict"] == "pass"
        budget = self.opts["budget_s"]
        if budget is not None and time.monotonic() - self.t0 > budget:
            self.out_of_budget = True
            return False
        o = self.opts
        gates = [gate1(info, self.limits)]
        tmp = tempfile.mkdtemp(prefix="mfu_probe_")
        row = None
        try:
            if gates[-1]["ok"]:
                staged = stage_candidate(self.od, case, tmp)
                g2, cand["flops"] = gate2(o["flops_tool"], staged, o["seed"], o["timeout_s"], no_matrix,
                                          info.input_bytes, refusals)
                gates.append(g2)
                if g2["ok"]:
                    g3, g4, row, cand["time_ms"] = gates34(staged, o["device"], o["seed"], o["max_ms"],
                                                           o["timeout_s"])
                    gates += [g for g in (g3, g4) if g is not None]
                    if g4 is not None and g4["ok"]:
                        gates.append(gate5(info.input_bytes, cand["time_ms"], self.bw))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        cand["gates"] = gates
        cand["verdict"], cand["failed_gate"] = pj.verdict_of(gates)
        if cand["verdict"] == "pass" and len(gates) < 5:
            cand["verdict"], cand["failed_gate"] = "fail", len(gates) + 1
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
        self.log(f"case {source} x{s}: {cand['verdict']}" + (f" at gate {cand['failed_gate']} "
                 f"({next(g['detail'] for g in gates if g['gate'] == cand['failed_gate'])})"
                 if cand["failed_gate"] else ""))
        return cand["verdict"] == "pass"
