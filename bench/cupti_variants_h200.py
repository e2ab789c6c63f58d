#!/usr/bin/env python3
"""The compiled variant a launch ran, told by CUPTI's launch record, held to ncu's (the H200), and what it settles.

  python3 bench/cupti_variants_h200.py --out $OUT/cupti        # on the GPU machine (~1-2 min, Triton cache cold)

The search's counting pass (:mod:`mfulib.search.counting`) skips the Nsight Compute run of a case whose compiled
kernels already decide it: :func:`mfulib.flops.executed.settled_without_counts` reads the variant each kernel ran
from CUPTI's launch record (block threads, shared memory: :func:`mfulib.profiles.triton_ptx.cupti_launch_configs`)
instead of ncu's launch metrics. This bench holds that to the hardware on the zoo operator 5_MHABlock as shipped:

1. prepare a work dir with :data:`CASES` (head dims 64 and 128, fp16 and fp32/tf32);
2. run the collector twice on every case, one shared Triton cache: ``--pmu none`` (the timing run stage 2 makes:
   ``mma_shapes`` from CUPTI) and ``--pmu ncu`` (``mma_shapes`` from ncu's launch metrics, and the counters);
3. per case and kernel, compare the two records (status, block threads, dynamic shared memory, the cache folder of
   the matched variant), and per case compare what the counting pass would skip with what the count says: where
   ``settled_without_counts`` (on the ``--pmu none`` entry) gives a reason, ``executed_flops`` on the ncu entry must
   give no executed count with that same reason (:func:`compare`).

Writes ``<out>/result.json`` and prints a table; exit status 1 when a record or an outcome disagrees. Every number
is what the tools wrote.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
sys.path.insert(0, SCRIPTS)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from executed_flops_h200 import prepare_mha_command, write_mha_cases  # noqa: E402 - the MHA block's cases
# head dim = hidden / heads: 64 (the flash kernel's QK and PV both m64n64), 128 (QK m64n64, PV m64n128), 64 in tf32
CASES = ({"x": [4, 512, 1024], "head_num": 16, "dtype": "float16"},
         {"x": [2, 1024, 2048], "head_num": 16, "dtype": "float16"},
         {"x": [1, 256, 512], "head_num": 8, "dtype": "float32"})
TINY_CASES = ({"x": [1, 32, 64], "head_num": 1, "dtype": "float32"},)  # --tiny: the steps on the CPU interpreter
KEYS = ("status", "block_size", "shared_mem_dynamic_bytes")


def variant_keys(rec):
    return sorted(v.get("key") for v in (rec or {}).get("variants") or [])


def compare(none_rep: dict, ncu_rep: dict) -> list:
    """Per case of the two performance.json documents (``--pmu none`` and ``--pmu ncu`` of the same cases): the
    kernels' CUPTI and ncu records side by side with ``same`` (the first told by CUPTI, the second by ncu - an ncu
    pass that failed leaves a CUPTI record there -, and status, block threads, dynamic shared memory and matched
    variant folders equal), and ``settled`` (:func:`mfulib.flops.executed.settled_without_counts` of the
    none entry) beside ``counted`` (:func:`mfulib.flops.executed.executed_flops` of the ncu entry) with ``agree``:
    a settled case must count to None with the same reason; an unsettled one agrees whatever the count says."""
    from mfulib.core.definitions import peak_key
    from mfulib.flops import executed
    cap = (ncu_rep.get("device") or {}).get("capability") or (none_rep.get("device") or {}).get("capability")
    by_case = {e["case"]: e for e in ncu_rep.get("per_case") or []}
    rows = []
    for e in none_rep.get("per_case") or []:
        n = by_case.get(e["case"])
        if n is None or e.get("skipped"):
            continue
        mode = peak_key(e.get("compute_dtype"), bool(e.get("tf32"))) if e.get("compute_dtype") else None
        kernels = []
        for k in e.get("kernels") or []:
            a = (e.get(executed.SHAPES_FIELD) or {}).get(k["name"]) or {}
            b = (n.get(executed.SHAPES_FIELD) or {}).get(k["name"]) or {}
            same = a.get("launch_source") == "cupti" and b.get("launch_source") == "ncu" \
                and all(_num(a.get(x)) == _num(b.get(x)) for x in KEYS) and variant_keys(a) == variant_keys(b)
            shown = KEYS + ("launch_source",)
            kernels.append({"name": k["name"], "same": same, "cupti": {x: a.get(x) for x in shown},
                            "ncu": {x: b.get(x) for x in shown}, "variants_cupti": variant_keys(a),
                            "variants_ncu": variant_keys(b),
                            "wgmma": sorted({w["shape"] for v in a.get("variants") or []
                                             for w in v.get("wgmma") or []})})
        settled = executed.settled_without_counts(e, "cuda", cap, mode)
        ex, src, why = executed.executed_flops(n, "cuda", cap, mode)
        agree = settled is None or (ex is None and _refusal(why) is not None and _refusal(why) in settled)
        rows.append({"case": e["case"], "mode": mode, "capability": cap, "kernels": kernels, "settled": settled,
                     "counted": {"executed": ex, "source": src, "why": why}, "agree": agree})
    return rows


def _num(v):
    """A launch figure as a float (ncu's are floats, CUPTI's ints); text (a status) as it is."""
    return v if v is None or isinstance(v, str) else float(v)


def _refusal(why):
    """The PTX part of a count's refusal (what follows the counter description), None for another refusal."""
    marker = "per counted instruction); "
    return why.split(marker, 1)[1] if why and marker in why else None


def run(out: str, timeout_s: float, backend: str = "cuda", cases=CASES) -> dict:
    work, cases_file = os.path.join(out, "work"), os.path.join(out, "cases", "5_MHABlock_cases.jsonl")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.dirname(cases_file), exist_ok=True)
    write_mha_cases(cases_file, cases)
    env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(out, "triton_cache"), PYTHONUNBUFFERED="1")
    py, steps = sys.executable, []
    cmds = [prepare_mha_command(cases_file, work)]
    for pmu in ("none", "ncu"):
        cmds.append([py, os.path.join(SCRIPTS, "ops_profiling", "msprof_perf_summary.py"), "--quick", "--impl", "asc",
                     "--op-dir", work, "--output-dir", os.path.join(out, pmu), "--backend", backend, "--cases",
                     ",".join(map(str, range(len(cases)))), "--repeats", "3", "--unverified-ok",
                     "--pmu", pmu if backend == "cuda" else "none"])
    for cmd in cmds:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        steps.append({"cmd": " ".join(cmd[1:]), "rc": p.returncode, "tail": (p.stdout + p.stderr)[-1500:]})
        if p.returncode != 0:
            return {"steps": steps, "error": f"step failed: {cmd[1]}", "rows": []}
    from mfulib.schemas.performance_json import load_report
    none_rep = load_report(os.path.join(out, "none", "performance.json"))
    ncu_rep = load_report(os.path.join(out, "ncu", "performance.json"))
    return {"steps": steps, "device": ncu_rep.get("device"), "cases": list(cases), "rows": compare(none_rep, ncu_rep)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (result.json, work dir, both collectors' reports)")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="limit of each step, s (default 300)")
    ap.add_argument("--tiny", action="store_true", help="one tiny case on the CPU interpreter: the steps run, no "
                                                          "record to compare (cpu has no CUPTI and no ncu)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    res = run(a.out, a.timeout_s, "cpu" if a.tiny else "cuda", TINY_CASES if a.tiny else CASES)
    with open(os.path.join(a.out, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
    for s in res["steps"]:
        print(f"rc {s['rc']}: {s['cmd'][:120]}")
    if res.get("error"):
        print(res["error"], "\n", res["steps"][-1]["tail"])
        return 1
    ok = True
    for r in res["rows"]:
        for k in r["kernels"]:
            ok &= k["same"]
            print(f"case {r['case']} {r['mode']}: {k['name']}: cupti {k['cupti']} ncu {k['ncu']} variants "
                  f"{k['variants_cupti']} / {k['variants_ncu']} wgmma {k['wgmma']}: "
                  + ("SAME" if k["same"] else "DIFFER"))
        ok &= r["agree"]
        told = (r["counted"]["why"] or r["counted"]["source"] or "")[:160]
        print(f"case {r['case']}: settled {'yes' if r['settled'] else 'no'}; count: executed "
              f"{r['counted']['executed']} ({told}): {'AGREE' if r['agree'] else 'DISAGREE'}")
    if a.tiny:  # nothing to compare on cpu: the steps ran, every case a row with no kernel record
        print(f"--tiny: {len(res['rows'])} case(s) through both collector runs on cpu")
        return 0 if res["rows"] else 1
    print("all records and outcomes agree" if ok and res["rows"] else "DISAGREEMENT (or nothing measured)")
    return 0 if ok and res["rows"] else 1


if __name__ == "__main__":
    sys.exit(main())
