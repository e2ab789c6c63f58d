#!/usr/bin/env python3
"""Generate ``bench/RESULTS.md`` from the packed validation results: never typed in, always regenerated.

Reads every ``<stage>.json`` that ``bench/validate_h200.py`` packed into ``--pack-dir`` (committed beside this
script, in ``bench/validation/<device>/``) and writes one Markdown file with a section per stage:

* device, driver, versions, date and git commit of each stage;
* kernel time vs Nsight Compute (``ncu``) and vs CUDA events on one GEMM (``gemm``, an independent timing);
* FLOPs: flops.py vs the tracer per measured case (``makeall``; the batch's cases when packed);
* peaks: calibrated vs a wide sweep (``peaks_wide`` bf16/fp16/fp32, ``peaks`` int8/fp8), clocks and regime;
* tool wall time: ``make all`` per operator (cold/warm Triton cache) and per step (``overhead``);
* PMU: bound classes from Nsight Compute counters (``pmu``);
* the limit search vs a brute force (``referee``) and the MFU tables of the batch (``batch``).

A stage that is not packed yet is listed as "not run" - the file says what it lacks rather than leaving a gap.
``--check`` exits 1 when the file on disk differs from what the pack regenerates (a test runs it).

  python3 bench/make_results.py                       # bench/validation/h200 -> bench/RESULTS.md
  python3 bench/make_results.py --check               # is bench/RESULTS.md what the pack gives?
"""
import argparse
import json
import os
import re
import sys

import freshness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PACK = os.path.join(ROOT, "bench", "validation", "h200")
DEFAULT_OUT = os.path.join(ROOT, "bench", "RESULTS.md")
ORDER = ("env", "ncu", "gemm", "makeall", "overhead", "peaks_wide", "peaks", "pmu", "pmu_micro", "gemm_grid",
         "executed", "cupti", "referee", "batch")


def load_pack(pack_dir):
    """{stage: packed dict} for every <stage>.json in ``pack_dir`` (unknown names are kept, sorted last)."""
    pack = {}
    for name in sorted(os.listdir(pack_dir)) if os.path.isdir(pack_dir) else []:
        if name.endswith(".json"):
            with open(os.path.join(pack_dir, name)) as f:
                pack[name[:-5]] = json.load(f)
    return pack


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join("-" if v is None else str(v).replace("|", "\\|").replace("\n", " ") for v in r)
            + " |" for r in rows]
    return "\n".join(out)


def pct(x, digits=1):
    return None if x is None else f"{100 * x:.{digits}f}%"


def num(x, digits=1):
    return None if x is None else f"{x:,.{digits}f}"


def ops(*names):
    """Path prefixes of the bundled operators ``names`` (reference, cases, flops.py, implementation)."""
    return tuple(f"examples/ops/{kind}/{n}" for n in names for kind in ("bench", "gen"))


#: the whole tool a `make` pipeline runs (the package's old-name table, mfulib/__init__.py's MOVED, measures nothing)
TOOL = ("scripts/", "Makefile")
NOT_MEASURED = ("scripts/mfulib/__init__.py",)
PEAKS = ("scripts/peak_calib.py", "scripts/mfulib/peaks/", "scripts/mfulib/core/")
BOUND = ("scripts/mfulib/profiles/", "scripts/mfulib/report/bound.py", "scripts/mfulib/core/")
#: what each section measures: path prefixes of the measured tree (bench/freshness.py judges them by content)
MEASURES = {
    "env": (),  # nvidia-smi and versions only
    "ncu": TOOL + ("bench/ncu_vs_profiler.py",) + ops("zoo/5_MHABlock", "zoo/1_BatchMatmul", "zoo/4_FFN"),
    "gemm": TOOL + ("bench/bench_gemm_mfu.py",),
    "makeall": TOOL + ops("zoo/5_MHABlock", "zoo/1_BatchMatmul"),
    "overhead": TOOL + ("bench/bench_tool_overhead.py",) + ops("zoo/5_MHABlock", "zoo/1_BatchMatmul"),
    "peaks_wide": PEAKS + ("bench/bench_peak_calib.py",),
    "peaks": PEAKS + ("bench/bench_peaks_h200.py",),
    "pmu": TOOL + ("bench/pmu_h200.sh",) + ops("zoo/5_MHABlock"),
    "pmu_micro": BOUND + ("bench/pmu_bound_h200.py",),
    "gemm_grid": BOUND + ("bench/gemm_grid_h200.py", "scripts/mfulib/run/compat.py") + ops("zoo/5_MHABlock"),
    "executed": TOOL + ("bench/executed_flops_h200.py", "bench/executed_ops/") + ops("zoo/5_MHABlock"),
    "cupti": TOOL + ("bench/cupti_variants_h200.py",) + ops("zoo/5_MHABlock"),
    "referee": TOOL + ("bench/bench_search_vs_bruteforce.py", "bench/referee_bruteforce.py", "examples/ops/"),  # its operators: any bundled one
    # the referee's brute-force part alone (its operator row's part_trees["brute"]): bench/referee_bruteforce.py
    # (points, timing, verify, the summary's inputs), the operators, and exactly the library modules it imports
    # (freshness.import_closure: mfulib.search never, nor mfulib.run.trace_zygote); the driver's brute-side
    # functions (write_brute_dir, part_brute, brute_summary) are pinned by a test
    "referee_brute": ("bench/referee_bruteforce.py", "examples/ops/")
    + tuple(freshness.import_closure("bench/referee_bruteforce.py")),
    "batch": TOOL + ("examples/ops/",),
}


def measured(name, st):
    """The path prefixes stage ``name`` measures: MEASURES, else the tool and the bench script its command ran."""
    if name in MEASURES:
        return MEASURES[name]
    script = re.search(r"\bbench/[\w./-]+\.(?:py|sh)", st.get("command") or "")
    return TOOL + ((script.group(0),) if script else ())


def freshness_of(name, st, now):
    """{"state": fresh | stale | unknown | none, "changed": [paths]} of packed stage ``name`` against the module
    hashes ``now``: a batch is judged by every call that finished one of its results."""
    prefixes = measured(name, st)
    if not prefixes:
        return {"state": "none", "changed": []}
    runs = [st]
    if name == "batch":
        calls = (st.get("result") or {}).get("calls") or []
        used = {o.get("finished_by_call") for o in (st.get("result") or {}).get("ops") or []}
        runs = [c for i, c in enumerate(calls, 1) if i in used] or [st]
    changed = set()
    for run in runs:
        then = freshness.pack_hashes(run)
        if then is None:
            return {"state": "unknown", "changed": [], "commit": run.get("git_commit")}
        changed.update(freshness.stale_modules(prefixes, then, now, exclude=NOT_MEASURED))
    return {"state": "stale" if changed else "fresh", "changed": sorted(changed)}


def _by_dir(paths):
    """``paths`` grouped by directory: "dir/ (n)", with the file names where a directory has three or fewer."""
    dirs = {}
    for p in paths:
        d, _, f = p.rpartition("/")
        dirs.setdefault(d, []).append(f)
    return ", ".join(f"`{fs[0]}`" if not d else f"`{d}/` ({', '.join(fs)})" if len(fs) <= 3 else
                     f"`{d}/` ({len(fs)} files)" for d, fs in sorted(dirs.items()))


def fresh_line(f):
    """The freshness note of a section (computed by :func:`freshness_of`, never typed)."""
    if f is None or f["state"] == "none":
        return ""
    if f["state"] == "unknown":
        return (f"\n\n> **Freshness unknown:** the pack records no source hashes and its commit "
                f"`{f.get('commit') or '?'}` is not in this clone.")
    if f["state"] == "fresh":
        return "\n\n> **Fresh:** no code this section measures changed since its pack (judged by content)."
    return (f"\n\n> **Stale:** {len(f['changed'])} file(s) this section measures changed since its pack (judged by "
            f"content, moves followed; re-measure): {_by_dir(f['changed'])}.")


def tree_commit_of(tree):
    """The commit whose measured sources hash to ``tree`` (bench/freshness.py's committed tree cache, written by
    ``--cache-trees``), or None: a pack's ``git_commit`` comes from the device copy's .git, which can be stale."""
    return (freshness._cache().get("trees") or {}).get(tree) if tree else None


def stamp(st):
    wall = st.get("wall_s")
    text = (f"*{st.get('created_at', '?')}, commit `{st.get('git_commit') or '?'}`, "
            + (f"{wall} s*" if wall is not None else "wall time not recorded*"))
    for key in ("git_commit_note", "call_note"):  # notes added to a pack after the call (who and why, in the text)
        if st.get(key):
            text += f"\n\n> **{key.replace('_', ' ')}:** {st[key]}"
    src = st.get("source") or {}
    tree_commit = tree_commit_of(src.get("tree_sha256"))
    if tree_commit and st.get("git_commit") and not tree_commit.startswith(st["git_commit"]):
        text += (f"\n\n> **Measured tree:** `{src['tree_sha256'][:12]}`, the sources of commit `{tree_commit[:7]}` "
                 f"(freshness.py's tree cache); the device copy's .git named `{st['git_commit']}`.")
    if src.get("tree_matches_expected") is False:
        text += (f"\n\n> **Tree mismatch:** the device ran a tree hashing to `{src.get('tree_sha256', '?')[:12]}`, "
                 f"not the `{src.get('tree_sha256_expected', '?')[:12]}` computed before the call.")
    return text + fresh_line(st.get("freshness"))


def counters(c, keys):
    return ", ".join(f"{k.replace('_pct', '')} {c[k]:.1f}%" if k.endswith("_pct") else f"{k} {c[k]:g}"
                     for k in keys if isinstance((c or {}).get(k), (int, float)))


NCU_SHOWN = ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "tensor_pipe_pct",
             "achieved_occupancy_pct", "waves_per_sm")


def sec_pmu(st):
    r = st.get("result") or {}
    pc = r.get("pmu_collection") or {}
    krows = []
    for c in r.get("cases") or []:
        for k, v in (c.get("pmu") or {}).items():
            krows.append([c["case"], c["dtype"], k[:32], num((v or {}).get("duration_ns", 0) / 1e3, 1),
                          counters(v, NCU_SHOWN)])
    brows, prow = [], []
    for row in r.get("rows") or []:
        kb = row.get("kernel_bounds") or {}
        brows.append([row["case"], row["dtype"], pct(row.get("mfu_ach")), (row.get("bound") or {}).get("label"),
                      "; ".join(f"{k[:24]}: {v.get('label')}" for k, v in kb.items())])
        for part in row.get("parts") or []:
            rf = part.get("roofline") or {}
            prow.append([row["case"], part.get("part"), pct(part.get("mfu_ach")), (part.get("bound") or {}).get("label"),
                         num(rf.get("headroom"), 2), pct(rf.get("mfu_if_fixed")), (part.get("bound") or {}).get("note")])
    reg = (r.get("regime") or {}).get("note")
    return (f"## PMU counters and bound classes: the MHA block under Nsight Compute (`bench/pmu_h200.sh`)\n\n"
            f"{stamp(st)}\n\n`make OP=zoo/5_MHABlock BACKEND=cuda PMU=ncu all`, then `make report` "
            f"(committed as `examples/reports/zoo_5_MHABlock_h200.html`). ncu {pc.get('ncu_version')}, cache control "
            f"{pc.get('cache_control')}, {pc.get('iterations')} iteration(s) profiled per case, metrics dropped: "
            f"{pc.get('metrics_dropped')}. Regime: {reg}\n\nCounters per kernel (mean over the profiled launches):\n\n"
            + table(["case", "dtype", "kernel", "ncu us", "counters"], krows)
            + "\n\nBound per case and kernel:\n\n" + table(["case", "dtype", "MFU@ach", "case bound", "kernels"], brows)
            + "\n\nPer part (roofline headroom = attainable / achieved; MFU@ach of the case if this part alone "
              "reached its target):\n\n"
            + table(["case", "part", "MFU@ach", "bound", "headroom", "case MFU if fixed", "why"], prow))


def _observed(k):
    """The class a known-kernel pack classified a kernel as: ``observed`` (the bench's own name-matched kernels),
    else the older packs' ``bound.label``."""
    return k.get("observed") or (k.get("bound") or {}).get("label")


def sec_pmu_micro(st):
    r = st.get("result") or {}
    rows = [[k["kernel"][:44], k.get("expected"), _observed(k), counters(k.get("counters"), NCU_SHOWN)]
            for k in r.get("kernels") or []]
    return (f"## Bound classes on known kernels (`bench/pmu_bound_h200.py`)\n\n{stamp(st)}\n\n{r.get('device')}, "
            f"compute capability {r.get('capability')}; counters unavailable: {r.get('pmu_unavailable')}; metrics "
            f"rejected by this ncu: {r.get('rejected_metrics') or 'none'}. The expected class is the kernel's "
            "design intent, written in the script before the run and matched by the kernel's exact name (packs before the "
            "name-matched bench: a large GEMM, a copy, a small layer_norm, matched by name substring).\n\n"
            + table(["kernel", "expected", "classified", "counters"], rows))


def executed_checks(r: dict) -> dict:
    """The executed-FLOPs criteria from bench/executed_flops_h200.py's result: the MHA cases' executed >= traced
    (the tiles pad, a causal kernel runs whole diagonal blocks), tril_bmm's executed equal to its hand tile model
    (within 0.1%) and chosen as the numerator (``num_src`` not the tracer)."""
    mha = (r.get("measure") or {}).get("per_case") or []
    tril = (r.get("tril") or {}).get("per_case") or []
    mha_ok = bool(mha) and all(x.get("executed") and x.get("traced") and x["executed"] >= x["traced"] for x in mha)
    tril_ok = bool(tril) and all(
        x.get("executed") and abs(x["executed"] / x["tile_model"]["executed"] - 1) <= 1e-3
        and (x.get("numerator") or {}).get("num_src") not in (None, "tracer") for x in tril)
    return {"mha": mha, "tril": tril, "mha_ok": mha_ok, "tril_ok": tril_ok}


def _tile_ratio(x):
    return num(x["executed"] / x["tile_model"]["executed"] if x.get("executed") else None, 4)


def sec_executed(st):
    r = st.get("result") or {}
    c = executed_checks(r)
    body = (st.get("extras") or {}).get("result.md") or "(no result.md)"
    return (f"## Executed vs traced FLOPs on Hopper (`bench/executed_flops_h200.py`)\n\n{stamp(st)}\n\n"
            f"`{st.get('command', '')}` exit status {st.get('rc')}. Executed FLOPs = the "
            "kernel's ncu count of warpgroup MMA instructions (`tensor_inst_executed_gmma`) x the FLOPs of the wgmma shape its compiled "
            "PTX names (matched to the launched variant); the numerator is min(traced, executed). MHA (zoo/5) "
            "executed >= traced on every case: " + _verdict(c["mha_ok"]) + "; tril_bmm executed = the hand tile "
            "model and `num_src` from the hardware count: " + _verdict(c["tril_ok"]) + ".\n\n" + body.strip()
            .replace("# Executed vs traced", "### Executed vs traced"))


def cupti_checks(r):
    """(kernels told alike / kernels, cases that agree / cases) of a cupti stage result (bench/cupti_variants_h200.py
    ``rows``)."""
    rows = r.get("rows") or []
    ks = [k for x in rows for k in x.get("kernels") or []]
    return sum(1 for k in ks if k.get("same")), len(ks), sum(1 for x in rows if x.get("agree")), len(rows)


def sec_cupti(st):
    r = st.get("result") or {}
    same, n_k, agree, n_c = cupti_checks(r)
    rows = [[x["case"], x.get("mode"), k["name"], k["cupti"].get("block_size"),
             k["cupti"].get("shared_mem_dynamic_bytes"), k["ncu"].get("block_size"),
             k["ncu"].get("shared_mem_dynamic_bytes"), ", ".join(k.get("wgmma") or []),
             "yes" if k.get("same") else "**no**", "yes" if x.get("settled") else "no",
             "yes" if x.get("agree") else "**no**"]
            for x in r.get("rows") or [] for k in x.get("kernels") or []]
    return (f"## The launched variant from CUPTI vs ncu (`bench/cupti_variants_h200.py`)\n\n{stamp(st)}\n\n"
            f"`{st.get('command', '')}` exit status {st.get('rc')}. The zoo MHA block's cases, collected twice in one "
            "Triton cache: `--pmu none` (each kernel's compiled variant told by CUPTI's block threads and shared "
            "memory, what the search's stage 2 reads) and `--pmu ncu` (told by ncu's launch metrics). Variant told "
            f"alike: {same}/{n_k} kernels; a case the compiled kernels settle (no count run by the search) counts to "
            f"no executed FLOPs for the same reason under ncu: {agree}/{n_c} cases.\n\n"
            + table(["case", "mode", "kernel", "CUPTI threads", "CUPTI shared B", "ncu threads", "ncu shared B",
                     "wgmma", "same variant", "settled", "agrees"], rows))


def sec_gemm_grid(st):
    r = st.get("result") or {}
    by = {(k["variant"], k.get("m"), k["n"], k.get("k")): k for k in r.get("ncu") or []}
    by_n = {(k["variant"], k["n"]): k for k in r.get("ncu") or []}  # packs before the m/k keys
    rows = []
    for t in r.get("timing") or []:
        k = by.get((t["variant"], t["m"], t["n"], t["k"])) or by_n.get((t["variant"], t["n"])) or {}
        c = k.get("counters") or {}
        tiles = (f"{t['block_m']}x{t['block_n']}x{t['block_k']}, {t['num_warps']} warps, {t['num_stages']} stages"
                 if t.get("block_m") else "-" if t.get("kernel") == "cublas" else "128x128x64, 8 warps, "
                 f"{t.get('num_stages', 3)} stages")
        if "error" in t:
            rows.append([t["variant"], f"{t['m']}x{t['n']}x{t['k']}", tiles, "-", "-", "-", "error", t["error"][:80]])
            continue
        rows.append([t["variant"], f"{t['m']}x{t['n']}x{t['k']}", tiles, t.get("grid") or "-",
                     num(t["median_ns"] / 1e3), num(t["tflops"]),
                     (k.get("bound") or {}).get("label", "-" if t.get("kernel") == "cublas" else "not profiled"),
                     counters(c, ("sm_throughput_pct", "memory_throughput_pct", "tensor_pipe_pct",
                                  "achieved_occupancy_pct"))])
    return (f"## The MHA example's GEMM under ncu (`bench/gemm_grid_h200.py`)\n\n{stamp(st)}\n\n{r.get('device')}, "
            f"torch {r.get('torch')}; `{r.get('example')}` `matmul_kernel` (the example's persistent kernel) and "
            "variants of it on the projections of the bundled cases ([2, 8192, 4096]: M = 16384, K = 4096, N = 12288 "
            "and 4096; [1, 16384, 2048]: M = 16384, K = 2048, N = 6144), bf16; `matmul_variant` is the example's "
            "kernel without the K mask (int64 or int32 offsets), `matmul_simple` the tutorial-style GEMM of "
            "`bench/pmu_bound_h200.py`, cuBLAS is `torch.matmul` (timed, not profiled); time = median of 20 "
            f"CUDA-event launches; counters unavailable: {r.get('pmu_unavailable')}.\n\n"
            + table(["variant", "M x N x K", "tiles", "grid", "us", "TFLOP/s", "bound", "counters"], rows))


def sec_env(st):
    r = st["result"]
    smi, ver, ncu = r.get("nvidia_smi") or {}, r.get("versions") or {}, r.get("ncu") or {}
    rows = [["GPU", smi.get("name") or ver.get("name")], ["driver", smi.get("driver_version")],
            ["SM clock now / max", f"{smi.get('clocks.sm')} / {smi.get('clocks.max.sm')}"],
            ["power limit", smi.get("power.limit")], ["python", ver.get("python")], ["torch", ver.get("torch")],
            ["CUDA (torch)", ver.get("cuda")], ["triton", ver.get("triton")],
            ["Nsight Compute", f"{ncu.get('version')} ({ncu.get('path')})" if ncu.get("path") else "not found"],
            ["ncu counters permitted", ncu.get("counters_permitted")]]
    return "## Device\n\n" + stamp(st) + "\n\n" + table(["", "value"], rows)


def sec_ncu(st):
    r = st.get("result") or {}
    rows = [[x["op"], x["case"], x["position"], x["kernel"][:40], num(x["collector_median_us"], 2),
             num(x["ncu_median_us"], 2), None if x["diff"] is None else f"{x['diff']:+.2%}",
             "yes" if x["eligible"] else "no", {True: "yes", False: "NO", None: "-"}[x["within_tolerance"]]]
            for x in r.get("rows") or []]
    head = (f"## Kernel time: collector (CUPTI via torch.profiler) vs Nsight Compute\n\n{stamp(st)}\n\n"
            f"`bench/ncu_vs_profiler.py`: the same child under `ncu --clock-control none --cache-control "
            f"{r.get('cache_control')}`, medians over the measured iterations. Kernels >= {r.get('min_us')} us "
            f"within {pct(r.get('tolerance'), 0)}: **{r.get('within')}/{r.get('eligible')}**.\n\n")
    notes = "".join(f"\n* {n}" for n in r.get("notes") or [])
    return head + table(["op", "case", "#", "kernel", "collector us", "ncu us", "diff", ">= min", "within"],
                        rows) + ("\n\nNotes:" + notes if notes else "")


def sec_gemm(st):
    r = st.get("result") or {}
    if not r:
        return "## Kernel time vs CUDA events (one GEMM)\n\n" + stamp(st) + "\n\nno result: " + st.get("log_tail", "")[-500:]
    m, n, k = r["shape"]
    rows = [["pipeline (collector + decompose)", num(r["kernel_time_ns"] / 1e3), num(r["decompose_row"].get(
        "actual_tflops")), pct(r["mfu_ach"], 2)],
            [f"CUDA events ({r['launches_per_round']} back-to-back launches)", num(r["event_time_ns"] / 1e3),
             num(r["tflops_events"]), pct(r["mfu_events"], 2)]]
    return (f"## Kernel time vs an independent timing (CUDA events)\n\n{stamp(st)}\n\n`bench/bench_gemm_mfu.py`: "
            f"GEMM {m}x{n}x{k} bf16, measured bf16 peak {num(r['peak_bf16_tflops'])} TFLOP/s. Ratio of the two "
            f"MFU figures **{r['ratio']:.4f}** (tolerance {pct(r['tolerance'], 0)}): "
            f"{'PASS' if r['pass'] else 'FAIL'}.\n\n" + table(["timing", "us", "TFLOP/s", "MFU@ach"], rows))


def sec_makeall(st):
    r = st.get("result") or {}
    rows, frows = [], []
    for run in r.get("runs") or []:
        mx = (run.get("maxima") or {})
        best = mx.get("mfu_ach") or {}
        rows.append([run["op"], run["mode"], run.get("rc", run.get("skipped")), num(run.get("wall_s")),
                     "yes" if isinstance(run.get("wall_s"), (int, float)) and run["wall_s"] <= r.get("target_s", 60)
                     and run.get("rc") == 0 else "no",
                     pct(best.get("value")) if isinstance(best, dict) else best])
        if run["mode"] == "warm":
            for c in run.get("cases") or []:
                t, f = c.get("flops_tracer"), c.get("flops")
                frows.append([run["op"], c["case"], c["dtype"], f"{f:.4g}" if f else f, f"{t:.4g}" if t else t,
                              f"{f / t:.4f}" if f and t else None, c.get("numerator")])
    out = (f"## Tool wall time: `make all` from an empty work dir\n\n{stamp(st)}\n\n{r.get('method', '')}. "
           f"Target <= {r.get('target_s')} s (warm Triton cache).\n\n"
           + table(["op", "Triton cache", "rc", "wall s", "<= target", "best MFU@ach"], rows))
    out += ("\n\n## FLOPs: flops.py vs the independent tracer (cases measured by `make all`)\n\n"
            + table(["op", "case", "dtype", "flops.py", "tracer", "ratio", "numerator"], frows))
    return out


def sec_overhead(st):
    r = st.get("result") or {}
    rows = []
    for run in r.get("runs") or []:
        for s in run.get("steps") or []:
            rows.append([run["op"], run["mode"], s["step"], num(s.get("wall_s"), 2), num(s.get("host_cpu_s"), 2),
                         num(s.get("device_busy_s"), 4), num(s.get("wall_per_busy"), 1), s.get("rc")])
        if run.get("all"):  # one `make all` (steps in parallel where the device lock allows)
            a = run["all"]
            rows.append([run["op"], run["mode"], "**make all**", num(a.get("wall_s"), 2), num(a.get("host_cpu_s"), 2),
                         num(a.get("device_busy_s"), 4), num(a.get("wall_per_busy"), 1), a.get("rc")])
        if run.get("steps"):
            busy = sum(s.get("device_busy_s") or 0 for s in run["steps"])
            rows.append([run["op"], run["mode"], "**TOTAL**", num(run.get("total_wall_s"), 2),
                         num(sum(s.get("host_cpu_s") or 0 for s in run["steps"]), 2), num(busy, 4),
                         num(run["total_wall_s"] / busy, 1) if busy else None, ""])
    return (f"## Tool overhead per step (`bench/bench_tool_overhead.py`)\n\n{stamp(st)}\n\nOne `make <step>` at a "
            "time from an empty work dir, cold peak cache; device-busy = kernel time x iterations from the step's "
            "own results.\n\n"
            + table(["op", "Triton cache", "step", "wall s", "host CPU s", "device-busy s", "wall/busy", "rc"], rows))


def sec_peaks_wide(st):
    r = st.get("result") or {}
    rows = [[x["mode"], num(x["calib_tflops"]), "x".join(str(x["calib_shape"][c]) for c in "mnk")
             if x.get("calib_shape") else None, num(x["wide_tflops"]),
             "x".join(str(x["wide_shape"][c]) for c in "mnk") if x.get("wide_shape") else None, x["wide_shapes"],
             f"{x['ratio']:.3f}" if x.get("ratio") else None] for x in r.get("rows") or []]
    grid, pk = r.get("grid") or {}, st.get("peak_json") or {}
    sweep = (f"Wide sweep: m, n in {grid.get('mn')}, k in {grid.get('k')}, {grid.get('target_ms')} ms per shape. "
             if grid else "")
    return (f"## Peaks: calibration vs a wide sweep (`bench/bench_peak_calib.py`)\n\n{stamp(st)}\n\n"
            f"`{st.get('command', '')}`. {sweep}Calibration "
            f"{num(r.get('calibration_s'))} s ({num(r.get('process_s_at_calibration_end'))} s from process start, "
            f"limit {r.get('max_calibration_s')} s); pass: **{r.get('pass')}** (every ratio >= {r.get('min_ratio')}).\n\n"
            + table(["dtype", "calibrated TFLOP/s", "shape", "sweep best", "sweep shape", "shapes", "ratio"], rows)
            + (f"\n\nThe same calibration, every dtype: {_peak_list(pk)}" if pk else ""))


def _peak_list(r):
    """Calibrated peaks of every dtype (TFLOP/s; int8 TOPS) and the copy bandwidth, as one line."""
    items = [f"{k} {num(v)}" for k, v in (r.get("peak_tflops") or {}).items() if k != "int8"]
    items += [f"{k} {num(v)} TOPS" for k, v in (r.get("peak_tops") or {}).items()]
    bw = r.get("bandwidth_gbps")
    return "; ".join(items) + (f"; copy bandwidth {num(bw, 0)} GB/s" if bw else "") + \
        " (TFLOP/s unless marked)."


def sec_peaks(st):
    r = st.get("result") or {}
    rows = [[x["mode"], x.get("unit"), num(x["calibrated"]), x.get("calibrated_b_layout"),
             num(x["sweep_best"]), x.get("sweep_best_layout"),
             ", ".join(f"{k}: {num(v)}" for k, v in (x.get("sweep_best_by_layout") or {}).items()),
             f"{x['ratio']:.3f}" if x.get("ratio") else None] for x in r.get("rows") or []]
    reg, clk = r.get("regime") or {}, r.get("calibration_clocks") or {}
    return (f"## Peaks: int8 and fp8 (`bench/bench_peaks_h200.py`)\n\n{stamp(st)}\n\nCalibration "
            f"{num(r.get('calibration_s'))} s; regime {reg.get('kind')} (duty cycle "
            f"{pct(reg.get('duty_cycle_measured'), 0)}); SM clock during calibration {clk.get('sm_clock_mhz')}; "
            f"throttle reasons seen {clk.get('throttle_reasons_seen')}. int8 within 10% of the sweep: "
            f"**{r.get('int8_within_10pct')}**.\n\n"
            + table(["dtype", "unit", "calibrated", "B layout", "sweep best", "layout", "by layout", "ratio"], rows)
            + (f"\n\nThe same calibration, every dtype: {_peak_list(r)}" if r.get("peak_tflops") else ""))


def yes_no(v):
    return {True: "yes", False: "NO", None: None}.get(v, v)


def _cost_parts(parts) -> str:
    """`` (probe 36, stage 2 36, retime 28, other 8)``: the split of a search's wall cost, s (empty for packs that
    predate it)."""
    names = {"probe": "probe", "stage1": "stage 1", "stage2": "stage 2", "retime": "retime", "counts": "counting",
             "grid_other": "other"}
    shown = [f"{names[k]} {num(v)}" for k, v in (parts or {}).items() if k in names and v >= 0.5]
    return f" ({', '.join(shown)})" if shown else ""


def referee_miss_why(op: dict, crit: dict) -> str | None:
    """Why a referee row misses, from its own figures (None when it passes or lacks them): the limit's gap against
    the combined spread of the two re-timings, and for the cost, the smallest share of the search that alone exceeds
    ``cost_max`` x the brute force's wall (the grid search's collector runs - stage 2, retime, counting - a number
    of runs that does not depend on the space's size; else the probe; else both), with the brute force's size when
    it ran complete (a small space is cheap to time exhaustively)."""
    why = []
    if op.get("limit_ok") is False:
        why.append(f"limit: search / brute {num(op.get('ratio'), 3)} < {crit.get('ratio_min')} and the gap "
                   f"{pct(abs(op.get('gap') or 0), 2)} exceeds the combined spread {pct(op.get('combined_spread'), 2)}")
    brute_s, cap = op.get("brute_cost_s"), crit.get("cost_max")
    if op.get("cost_ok") is False and brute_s and cap:
        parts, allowed = op.get("search_cost_parts_s") or {}, cap * brute_s
        fixed = sum(parts.get(k) or 0 for k in ("stage2", "retime", "counts"))
        b = op.get("brute") or {}
        space = (f"; the brute force timed its whole space ({sum((b.get('statuses') or {}).values())} points) in "
                 f"{num(brute_s)} s" if b.get("complete") else "")
        if fixed > allowed:
            why.append(f"cost: the grid search's collector runs alone (stage 2 + retime + counting, {num(fixed)} s, "
                       f"a number of runs that no space size changes) are {pct(fixed / brute_s, 0)} of the brute "
                       f"force's{space}")
        elif (parts.get("probe") or 0) > allowed:
            why.append(f"cost: the probe alone ({num(parts['probe'])} s) is {pct(parts['probe'] / brute_s, 0)} of "
                       f"the brute force's{space}")
        else:
            why.append(f"cost: probe {num(parts.get('probe'))} s + collector runs {num(fixed)} s together exceed "
                       f"{pct(cap, 0)} of the brute force's {num(brute_s)} s{space}")
    return "; ".join(why) or None


def cost_calls_note(op):
    """The caveat on a referee row's cost ratio when its two wall costs come from different device calls: the brute
    force kept from an earlier call (``--redo-search`` re-runs only the search side; the parts' trees differ) - the
    host of each call, its CPU speed included, sets its side's seconds. None when both came from one tree."""
    trees = op.get("part_trees") or {}
    brute, search = trees.get("brute"), trees.get("search") or trees.get("probe")
    if not brute or not search or brute == search:
        return None
    return (f"the two costs come from different device calls (brute force: tree {brute[:12]}, kept; search: tree "
            f"{search[:12]}), so each call's host speed is in its side's seconds")


def sec_referee(st):
    r = st.get("result") or {}
    crit, cfg = r.get("criteria") or {}, r.get("settings") or {}
    rows, diff = [], []
    for op in r.get("ops") or []:
        if "ratio" not in op:
            rows.append([op["op"]] + [None] * 10 + [op.get("skipped") or "parts done: " + (", ".join(
                op.get("parts_done") or []) or "none") + "".join(f"; {e[:160]}" for e in op.get("errors") or [])])
            continue
        kind, b, sb = op.get("figure_kind"), op.get("brute") or {}, op.get("search_best") or {}
        val = (lambda v: pct(v, 2)) if kind != "TF/s" else (lambda v: num(v, 4))
        med = (lambda vs: sorted(vs)[len(vs) // 2] if vs else None)
        rate = "GB/s" if op.get("metric") == "mbu" else "TF/s"
        probe = op.get("probe") or {}
        rows.append([op["op"], kind, f"{val(med(op.get('search_values') or []))} (case {sb.get('case')}, "
                     f"{_factors(sb.get('factors'))})", f"{val(med(op.get('brute_values') or []))} (case "
                     f"{b.get('source_case')}, {_factors(b.get('factors'))}; {b.get('verified')})",
                     num(op.get("ratio"), 3), f"{_g(op.get('search_rate'))} / {_g(op.get('brute_rate'))} {rate}",
                     yes_no(op.get("limit_ok")), f"{num(op.get('search_cost_s'))}" + _cost_parts(op.get("search_cost_parts_s"))
                     + ("" if probe.get("complete") else " (probe cut by its budget)")
                     + (f"; step 1's verify {num(op['step1_verify_s'])} s apart" if op.get("step1_verify_s") else ""),
                     f"{num(op.get('brute_cost_s'))} ({num(b.get('first_call_s'))})"
                     + (f"; estimated, {num(b.get('wall_s'))} s measured" if op.get("brute_cost_estimated") else ""),
                     f"{pct(op.get('cost_ratio'))} {yes_no(op.get('cost_ok'))}", yes_no(op.get("pass")),
                     "; ".join(n for n in (referee_miss_why(op, crit), cost_calls_note(op)) if n) or None])
        spread = ", ".join(val(v) for v in op.get("search_values") or []) + " / " + ", ".join(
            val(v) for v in op.get("brute_values") or [])
        diff.append([op["op"], op.get("differ"), spread, val(op.get("combined_spread")),
                     ", ".join(f"{k} {v}" for k, v in sorted((b.get("statuses") or {}).items())),
                     (op.get("brute_plan") or {}).get("sources")])
    pending = r.get("pending") or []
    return (f"## Limit search vs a brute force (`bench/bench_search_vs_bruteforce.py`)\n\n{stamp(st)}\n\n"
            f"`{st.get('command', '')}` exit status {st.get('rc')}. {r.get('device')}. Per operator: the search as "
            "a user runs it (`max_shape_probe.py --budget-s "
            f"{cfg.get('probe_budget_s')}`, then `mfu_grid_search.py`) against an independent brute force over the "
            f"top {cfg.get('top')} original cases by flops.py FLOPs x every non-empty subset of their batch and "
            f"sequence axes (and k of a matmul of two data operands) x powers of two up to x{cfg.get('max_scale')}, "
            "under the probe's limits (inputs + outputs <= 10e9 B, one call <= 4000 ms, verify as far as the "
            "reference runs), timed by its own method (ModelNew only, device events after an L2 flush). Both "
            f"limits are then re-timed by the collector in {crit.get('retimes')} interleaved runs (one timing "
            "method, one peak.json, flops.py as the numerator); the figures are the re-timings' medians. Pass: "
            f"search / brute >= {crit.get('ratio_min')} or a gap within the combined spread (max - min) of the "
            f"two re-timings, at a search cost <= {pct(crit.get('cost_max'), 0)} of the brute force's (wall "
            "seconds; the brute force's first calls - compilation - in brackets; one Triton cache for both; the search's "
            "cost split into its probe and the grid search's stage 1, stage 2 (with the PMU pass in packs before the counting pass), cross-run retime, the counting pass on the leaders and "
            "the rest of its process where the pack records it; step 1's verify of the original cases, which "
            "`make all` runs before the probe with or without the search, is shown apart where the pack ran it "
            "and is not the search's cost - in packs without it, the grid search's verify gate verified the "
            "original cases it needed, inside 'other').\n\n"
            + ("**Partial:** " + "; ".join(pending) + " (the next call resumes).\n\n" if pending else "")
            + table(["operator", "figure", "search limit", "brute-force best", "search / brute", "rate search / "
                     "brute", "limit ok", "search cost s", "brute cost s (first calls)", "cost ratio", "pass",
                     "note"], rows)
            + ("\n\nWhere the two limits differ, the re-timings (search / brute force) and the brute force's "
               "points by verdict:\n\n" + table(["operator", "where they differ", "re-timings", "combined spread",
                                                  "brute-force points", "source cases"], diff) if diff else ""))


def _g(x):
    return None if x is None else f"{x:.4g}"


def _factors(f):
    return ", ".join(f"{k} x{v}" for k, v in (f or {}).items()) or "x1"


def _evidence(ev):
    return ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in (ev or {}).items()
                     if v is not None)


def _best(op, key):
    m = (op.get("maxima") or {}).get(key) or {}
    return None if m.get("value") is None else f"{pct(m['value'])} (case {m.get('case')}, {m.get('dtype')})"


def _limit(op):
    s = op.get("search") or {}
    b = s.get("best") or {}
    if not b:
        return None if not s else "no best (" + ("incomplete" if not s.get("complete") else "stage 2 measured none") + ")"
    v, kind = (b.get("mfu"), "MFU@" + str(b.get("mfu_kind"))) if b.get("mfu") is not None else (b.get("mbu"), "MBU")
    key = "mbu" if kind == "MBU" else "mfu_" + str(b.get("mfu_kind"))
    again = next((r.get(key) for r in op.get("rows") or [] if r.get("case") == b.get("case")), None)
    return (f"{pct(v)} {kind} (case {b.get('case')}, scale {b.get('scale')}; pool {s.get('pool')}, {s.get('scaled')} "
            "scaled)" + ("" if again is None else f"; re-timed by the collection: {pct(again)}"))


def _probe(op):
    p = op.get("probe")
    if not p:
        return None
    stop = p.get("stop_reason") or p.get("interrupted") or ("complete" if p.get("complete") else "incomplete")
    cut = p.get("cut") or {}
    if cut:
        stop += f"; cut in {cut.get('cut_in')} of case {cut.get('source_case')} x{cut.get('scale')} after " \
                f"{num(cut.get('wall_s'))} s"
    return f"{p.get('passed')}/{p.get('candidates')} passed, {p.get('appended')} appended ({stop})"


def _flops(op):
    f = op.get("flops_check")
    if not f:
        return None
    lo, hi = f.get("ratio_min"), f.get("ratio_max")
    return f"{f.get('verdict')} ({f.get('n_cases')} cases" + (f", ratio {lo:.4g}..{hi:.4g}" if lo is not None and
                                                              hi is not None else "") + ")"


def sec_batch(st):
    r = st.get("result") or {}
    ops = r.get("ops") or []
    final = sum(1 for o in ops if o.get("status") in ("ok", "failed", "timeout"))
    crows = []
    for i, c in enumerate(r.get("calls") or [], 1):
        s = c.get("settings") or {}
        crows.append([i, c.get("created_at"), c.get("git_commit"), c.get("rc"), num(c.get("wall_s")),
                      len(c.get("ran") or []), len(c.get("finished") or []),
                      "; ".join(f"{x['name']} ({x['why']})" for x in c.get("stale") or []) or None,
                      s.get("op_timeout_s"),
                      f"`{s.get('probe_args')}`", f"`{s.get('search_args')}`", s.get("pmu"), s.get("keep_prof")])
    orows, prows = [], []
    for o in ops:
        head = (o.get("maxima") or {}).get("mfu_ach") or (o.get("maxima") or {}).get("mbu") or {}
        hrow = next((x for x in o.get("rows") or [] if x.get("case") == head.get("case")), None)
        orows.append([o["name"], o.get("status"), o.get("finished_by_call"), num(o.get("wall_s")),
                      len(o.get("rows") or []) or None,
                      _best(o, "mfu_ach"), _best(o, "mbu"), ((hrow or {}).get("bound") or {}).get("label"),
                      _limit(o), _probe(o), _flops(o), (o.get("reason") or "")[:200] or None])
        for part in (hrow or {}).get("parts") or []:
            b = part.get("bound") or {}
            prows.append([o["name"], hrow.get("case"), part.get("part"), pct(part.get("mfu_ach")),
                          pct(part.get("time_share")), b.get("label"), b.get("source"), _evidence(b.get("evidence"))])
    skipped = "".join(f"\n* {s['name']}: {s['why']}" for s in r.get("skipped") or [])
    head = (f"## Batch over the bundled and real-case operators, with the search (`scripts/mfu_batch.py`)\n\n"
            f"{stamp(st)}\n\n`mfu_batch.py --examples {(r.get('settings') or {}).get('examples')} --search` on the "
            f"device, resumable across calls (validate_h200's batch stage: finished operators are skipped, the one "
            f"running at a call's limit is interrupted and resumed from its make stamps). Real-case data "
            f"(MFU_SHARED_DATA) present: {r.get('shared_data')}. "
            + (f"**Complete:** {final}/{len(ops)} operators have a final status." if r.get("complete") else
               f"**Partial:** {final}/{len(ops)} operators have a final status; the next call resumes.")
            + "\n\nCalls and the settings each used:\n\n"
            + table(["call", "at", "commit", "rc", "wall s", "operators run", "finished", "run again",
                     "op timeout s", "PROBE_ARGS", "SEARCH_ARGS", "PMU", "KEEP_PROF"], crows))
    by = [o.get("finished_by_call") for o in ops if o.get("finished_by_call")]
    calls, keys = r.get("calls") or [], r.get("measure_keys") or []
    sets = {json.dumps({k: (calls[i - 1].get("settings") or {}).get(k) for k in keys}, sort_keys=True)
            for i in by if 0 < i <= len(calls)}
    if not keys:
        same = "Settings per result: not recorded (a pack older than `finished_by_call`)."
    elif len(sets) <= 1:
        same = (f"Every final result was measured under one setting ({', '.join(keys)}): an operator finished "
                "under other settings is run again (validate_h200's `drop_stale`).")
    else:
        same = f"**Mixed settings:** the final results come from {len(sets)} different settings."
    same += (" The limits here come from the batch's own probe and search settings (above) and may differ from "
             "the search section's, which probes with its own settings and reports MFU@nom; a limit is one "
             "measurement of the best point, shown beside the collection's re-timing of the same case (two "
             "timings in two processes; each work dir's `mfu_decompose` note compares their kernel times with the "
             "runs' repeat spreads).")
    return (head + "\n\n" + same + "\n\nPer operator (call = the call that finished it; best MFU@ach and MBU over "
            "the measured cases; bound class of the headline "
            "case; limit = the search's best point; probe = candidates that passed the five gates; FLOPs check = "
            "flops.py vs the tracer, flops_check.json):\n\n"
            + table(["operator", "status", "call", "wall s", "cases", "best MFU@ach", "best MBU", "bound",
                     "limit (search)", "probe", "FLOPs check", "reason"], orows)
            + "\n\nPer part of each operator's headline case (bound source: `pmu:ncu` where the counters ran, else "
              "the fp32-vs-fp16 fallback):\n\n"
            + table(["operator", "case", "part", "MFU@ach", "time share", "bound", "source", "evidence"], prows)
            + ("\n\nSkipped:" + skipped if skipped else ""))


def sec_generic(name, st):
    """Stages whose result shape is owned by their bench script: its Markdown tables, as it wrote them."""
    extras = st.get("extras") or {}
    body = "\n\n".join(f"### {k}\n\n{v.strip()}" for k, v in extras.items()) or \
        "```\n" + json.dumps(st.get("result"), indent=1, default=str)[:4000] + "\n```"
    return f"## {name}\n\n{stamp(st)}\n\n`{st.get('command', '')}` exit status {st.get('rc')}\n\n{body}"


TITLES = {"env": "Device", "ncu": "Kernel time: collector vs Nsight Compute",
          "gemm": "Kernel time vs an independent timing (CUDA events)", "makeall": "Tool wall time: `make all`",
          "overhead": "Tool overhead per step", "peaks_wide": "Peaks: calibration vs a wide sweep (bf16, fp16, fp32)",
          "peaks": "Peaks: int8 and fp8", "pmu": "PMU counters and bound classes (Nsight Compute)",
          "pmu_micro": "Bound classes on known kernels", "gemm_grid": "The MHA example's GEMM under ncu",
          "executed": "Executed vs traced FLOPs on Hopper",
          "cupti": "The launched variant from CUPTI vs ncu",
          "referee": "Limit search vs a brute force",
          "batch": "Batch over the bundled and real-case operators: MFU tables"}
SECTIONS = {"env": sec_env, "ncu": sec_ncu, "gemm": sec_gemm, "makeall": sec_makeall, "overhead": sec_overhead,
            "peaks_wide": sec_peaks_wide, "peaks": sec_peaks, "pmu": sec_pmu, "pmu_micro": sec_pmu_micro,
            "gemm_grid": sec_gemm_grid, "executed": sec_executed, "cupti": sec_cupti, "referee": sec_referee,
            "batch": sec_batch}


def _verdict(ok):
    return {True: "yes", False: "**NO**"}.get(ok, "unverified")


FRESH_MARK = {"fresh": "yes", "stale": "**stale**", "unknown": "unknown", "none": "-"}


def summary_rows(pack):
    """[claim, measured, criterion, met, code unchanged, section] for each packed stage with a pass/fail criterion -
    read from the stage's own figures, so a stage that is absent or has no result gives no row (never an invented
    number). "code unchanged" is the stage's freshness (``freshness`` key set by :func:`render`)."""
    out = []
    for stage, row, *own in _summary_rows(pack):
        state = ((pack.get(stage) or {}).get("freshness") or {}).get("state", "unknown")
        cell = own[0] if own and own[0] else FRESH_MARK[state]
        if own and own[0] and state == "stale":  # a part from an earlier tree, and the pack's own tree changed too
            cell += "; and the code of the pack's own tree changed since (the section names it)"
        out.append(row + [cell, TITLES[stage]])
    return out


def referee_op_fresh(st: dict, op: dict):
    """None when every part of a referee operator was measured by the tree of its pack, or by an earlier tree whose
    code under what that part measures is the same (judged by content: that tree's module hashes from the cache
    that ``bench/freshness.py --cache-trees`` writes), else the mark that it was not, naming the changed modules: a
    resumed referee pack carries operators measured by earlier calls (their trees in ``op["trees"]``; rows from
    before the per-part stamps have none). With ``op["part_trees"]`` ({part: tree}) the brute force's part is
    judged by MEASURES["referee_brute"] (its own code: a search-side re-run, ``--redo-search``, keeps it) and the
    other parts by MEASURES["referee"]; without it every tree by MEASURES["referee"]."""
    src = (st or {}).get("source") or {}
    part_trees = op.get("part_trees") or {}
    trees = [(t, "referee_brute" if p == "brute" else "referee") for p, t in part_trees.items()] or \
        [(t, "referee") for t in op.get("trees") or []]  # the trees of its measuring parts (probe, search, ...)
    if not trees:
        return "**stale** (measured before per-part tree stamps)"
    pack_trees = {src.get("tree_sha256"), src.get("tree_sha256_expected")} - {None}
    changed = set()
    for tree, measures in sorted(set(trees)):
        if tree in pack_trees:
            continue  # an earlier tree: fresh when the code that part measures is the same
        then = freshness.tree_modules(tree)
        if then is None or not src.get("modules"):
            return "**stale** (measured by an earlier tree, its code unknown here)"
        changed.update(freshness.stale_modules(MEASURES[measures], then, src["modules"], NOT_MEASURED))
    if changed:
        return f"**stale** (measured by an earlier tree; changed since: {', '.join(sorted(changed))})"
    return None  # measured by this pack's tree, or one with the same measured code: the section's freshness applies


def bf16_peaks(pack):
    """[(section title, bf16 TFLOP/s)] of every packed calibration, in pack order."""
    out = []
    for name, get in (("peaks_wide", lambda st: ((st.get("peak_json") or {}).get("peak_tflops") or {})),
                      ("peaks", lambda st: ((st.get("result") or {}).get("peak_tflops") or {})),
                      ("gemm", lambda st: {"bfloat16": (st.get("result") or {}).get("peak_bf16_tflops")})):
        v = get(pack.get(name) or {}).get("bfloat16") if pack.get(name) else None
        if isinstance(v, (int, float)):
            out.append((TITLES[name], v))
    return out


def _summary_rows(pack):
    """(stage, [claim, measured, criterion, met]) per criterion of :func:`summary_rows`."""
    rows = []
    r = (pack.get("ncu") or {}).get("result") or {}
    if r.get("eligible"):
        rows.append(("ncu", ["kernel time = Nsight Compute", f"{r.get('within')}/{r.get('eligible')} kernels within",
                             f"{pct(r.get('tolerance'), 0)} (>= {r.get('min_us')} us)",
                             _verdict(r.get("within") == r.get("eligible"))]))
    r = (pack.get("gemm") or {}).get("result") or {}
    if r.get("ratio") is not None:
        rows.append(("gemm", ["MFU = independent CUDA-event timing", f"ratio {r['ratio']:.4f}",
                              f"within {pct(r.get('tolerance'), 0)}", _verdict(r.get("pass"))]))
    r = (pack.get("peaks_wide") or {}).get("result") or {}
    if r.get("rows"):
        lo = min((x["ratio"] for x in r["rows"] if x.get("ratio")), default=None)
        rows.append(("peaks_wide", ["peak = best of a wide sweep", None if lo is None else f"min ratio {lo:.3f}",
                                    f">= {r.get('min_ratio')}", _verdict(r.get("pass"))]))
    r = (pack.get("peaks") or {}).get("result") or {}
    if r.get("rows"):
        ratios = ", ".join(f"{x['mode']} {x['ratio']:.3f}" for x in r["rows"] if x.get("ratio"))
        rows.append(("peaks", ["int8 / fp8 peak = best of a sweep", f"ratio {ratios}",
                               f"int8 >= {r.get('min_ratio_int8')}", _verdict(r.get("int8_within_10pct"))]))
    peaks = bf16_peaks(pack)
    if len(peaks) > 1:
        vals = [v for _, v in peaks]
        spread = (max(vals) - min(vals)) / min(vals)
        rows.append(("peaks_wide", ["bf16 peak stable across device calls",
                                    ", ".join(num(v) for v in vals) + f" TFLOP/s (spread {spread:.1%})",
                                    "none (information: each call calibrates its own peak, and MFU@ach divides by "
                                    "its call's)", "-"]))
    r = (pack.get("pmu_micro") or {}).get("result") or {}
    known = [k for k in r.get("kernels") or [] if k.get("expected")]
    if known:
        bad = [k for k in known if _observed(k) != k["expected"]]
        classes = sorted({k["expected"] for k in known} - {k["expected"] for k in bad})
        why = "".join(f"; {k['kernel'][:40]}: expected {k['expected']}, classified {_observed(k)} (SM "
                      f"{num((k.get('counters') or {}).get('sm_throughput_pct'))}%, memory "
                      f"{num((k.get('counters') or {}).get('memory_throughput_pct'))}%)" for k in bad)
        rows.append(("pmu_micro", ["bound class = a known kernel's design intent",
                                   f"{len(known) - len(bad)}/{len(known)} agree (classes observed: "
                                   f"{', '.join(classes) or 'none'}){why}", "all agree",
                                   _verdict(not bad)]))
    r = (pack.get("makeall") or {}).get("result") or {}
    warm = [x for x in r.get("runs") or [] if x.get("mode") == "warm"]
    if warm:
        ok = [x for x in warm if x.get("rc") == 0 and isinstance(x.get("wall_s"), (int, float))
              and x["wall_s"] <= r.get("target_s", 60)]
        rows.append(("makeall", ["`make all` (warm Triton cache)",
                                 ", ".join(f"{x['op']} {num(x.get('wall_s'))} s" for x in warm),
                                 f"<= {r.get('target_s', 60)} s", _verdict(len(ok) == len(warm))]))
    r = (pack.get("executed") or {}).get("result") or {}
    if r.get("measure") or r.get("tril"):
        c = executed_checks(r)
        n_ok = sum(1 for x in c["mha"] if x.get("executed") and x.get("traced") and x["executed"] >= x["traced"])
        rows.append(("executed", ["executed FLOPs >= traced where the kernel pads (zoo/5_MHABlock)",
                                  f"{n_ok}/{len(c['mha'])} cases", "all", _verdict(c["mha_ok"])]))
        rows.append(("executed", ["a dense reference that over-counts takes the executed numerator (tril_bmm)",
                                  ", ".join(f"case {x['case']}: executed / tile model {_tile_ratio(x)}, num_src "
                                            f"{(x.get('numerator') or {}).get('num_src')}" for x in c["tril"]),
                                  "= tile model, num_src not tracer", _verdict(c["tril_ok"])]))
    r = (pack.get("cupti") or {}).get("result") or {}
    if r.get("rows"):
        same, n_k, agree, n_c = cupti_checks(r)
        rows.append(("cupti", ["the compiled variant CUPTI tells = ncu's (zoo/5_MHABlock)", f"{same}/{n_k} kernels",
                               "all", _verdict(same == n_k)]))
        rows.append(("cupti", ["a count the compiled kernels settle = the count's outcome", f"{agree}/{n_c} cases",
                               "all", _verdict(agree == n_c)]))
    r = (pack.get("referee") or {}).get("result") or {}
    crit = r.get("criteria") or {}
    for op in r.get("ops") or []:
        if "ratio" in op:
            rows.append(("referee", [f"search finds the limit ({op['op']})", f"search / brute {num(op.get('ratio'), 3)}"
                                     f", cost {pct(op.get('cost_ratio'))}", f">= {crit.get('ratio_min')} or within "
                                     f"the re-timings' spread, cost <= {pct(crit.get('cost_max'), 0)}",
                                     _verdict(op.get("pass"))], referee_op_fresh(pack.get("referee"), op)))
    r = (pack.get("batch") or {}).get("result") or {}
    if r.get("ops"):
        ok = sum(1 for o in r["ops"] if o.get("status") == "ok")
        rows.append(("batch", ["batch over every bundled and real-case operator", f"{ok}/{len(r['ops'])} ok",
                               "all complete", _verdict(bool(r.get("complete")) and ok == len(r["ops"]))]))
    return rows


def render(pack_dir):
    """The whole RESULTS.md text for the packs in ``pack_dir``."""
    pack = load_pack(pack_dir)
    now = freshness.tree_hashes(ROOT)["modules"]
    pack = {name: dict(st, freshness=freshness_of(name, st, now)) for name, st in pack.items()}
    rel = os.path.relpath(pack_dir, ROOT)
    parts = [f"# Validation results ({os.path.basename(pack_dir)})\n\nGenerated by `bench/make_results.py` from the "
             f"packed results in `{rel}/` (written by `bench/validate_h200.py` on the device). Do not edit by "
             "hand: re-run the generator."]
    rows = summary_rows(pack)
    if rows:
        parts.append("## At a glance\n\nEach criterion as the stage measured it (details in the sections below). "
                     "\"code unchanged\": whether the code the section measures is, by content, the code its pack "
                     "measured (`bench/freshness.py`; a **stale** row is to be measured again):\n\n"
                     + table(["claim", "measured", "criterion", "met", "code unchanged", "section"], rows))
    missing = [s for s in ORDER if s not in pack]
    for name in list(ORDER) + sorted(set(pack) - set(ORDER)):
        st = pack.get(name)
        if st is None:  # never an invented number: the section says it has none
            parts.append(f"## {TITLES[name]}\n\nNot run yet: no `{name}.json` in `{rel}/` (`bench/validate_h200.py "
                         f"--stages {name}` on the device).")
            continue
        fn = SECTIONS.get(name)
        st = dict(st, pack_dir=pack_dir)  # sections that read files kept beside the packs (the search's state tar)
        parts.append(fn(st) if fn else sec_generic(TITLES.get(name, name), st))
    if missing:
        parts.append("## Not run yet\n\n" + ", ".join(f"`{m}`" for m in missing))
    return "\n\n".join(parts) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pack-dir", default=DEFAULT_PACK, help="packed stage results (default: bench/validation/h200)")
    p.add_argument("--out", default=DEFAULT_OUT, help="Markdown file to write (default: bench/RESULTS.md)")
    p.add_argument("--check", action="store_true", help="do not write: exit 1 when --out differs from the pack")
    args = p.parse_args(argv)
    text = render(args.pack_dir)
    if args.check:
        try:
            with open(args.out) as f:
                same = f.read() == text
        except OSError:
            same = False
        print(f"{args.out}: {'matches' if same else 'DIFFERS from'} {args.pack_dir}")
        return 0 if same else 1
    with open(args.out + ".tmp", "w") as f:
        f.write(text)
    os.replace(args.out + ".tmp", args.out)
    print(f"wrote {args.out} from {len(load_pack(args.pack_dir))} packed stages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
