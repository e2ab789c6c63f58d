#!/usr/bin/env python3
"""Executed FLOPs on Hopper, held to known shapes: the MHA block's GEMM and causal attention under ncu (the H200).

  python3 bench/executed_flops_h200.py --out $OUT/executed            # on the GPU machine (~3-5 min)
  python3 bench/executed_flops_h200.py --out /tmp/ex --compile-only   # anywhere (CPU): compiler part + fixtures
  python3 bench/executed_flops_h200.py --out /tmp/ex --tiny           # CPU: every step on tiny cases, no counters

Two parts:

1. **compile** (any host, no GPU): the kernels the tests read are compiled by Triton for target sm_90 into a fresh
   ``TRITON_CACHE_DIR`` (``triton.compile``; Triton's own cache layout) and their ``<name>.json`` + ``<name>.ptx``
   are copied to ``<out>/fixtures/triton_cache/<key>/`` with ``manifest.json`` (which kernel, which config, Triton
   version). :data:`FIXTURE_KERNELS`: the zoo MHA ``matmul_kernel`` at its fp16 and fp32 tiles (and the fp16 tile
   in bf16: same warps and shared memory, another MMA input type), the zoo
   ``flash_attn_fwd_kernel`` at head dim 128 (two wgmma shapes) and a toy ``mm_tile_kernel`` at 128x64 and 64x128
   (same warps and shared memory, different N).
2. **measure** (CUDA + ncu; skipped with ``--compile-only``): the zoo operator 5_MHABlock, reference and
   implementation as shipped, on :data:`CASES`, through the project's own steps (prepare explicit form, verify,
   check_flops, the collector with ``--pmu ncu``, all in ``<out>/work``, the Triton cache ``<out>/triton_cache``).
   Per case: the traced FLOPs (flops_check.json's tracer count), the executed FLOPs
   (:func:`mfulib.flops.executed.executed_flops` over performance.json), the numerator rule
   (:func:`mfulib.search.numerator.numerator`: min and ``num_src``) and, per kernel, the executed count beside an
   independent tile model of the GEMM (2 * 128*ceil(M/128) * 256*ceil(N/256) * 64*ceil(K/64) per launch: the fp16
   tiles of ``gemm_tiles``) - the padding of a shape that is not a tile multiple. The PTX/metadata files of the
   launched variants (performance.json ``mma_shapes``) are copied to ``<out>/fixtures/h200_triton_cache/``.

3. **tril** (same steps): ``bench/executed_ops/tril_bmm*.py``, C = tril(A @ B), a dense reference whose kernel
   skips the tiles above the diagonal: the operator where min(traced, executed) must take the executed count
   (``num_src: executed``); beside it a hand tile model (:func:`tril_tile_model`).

Writes ``<out>/result.json`` and ``<out>/result.md``; every number is what the tools wrote (no value typed here
but the tile sizes of the zoo's ``gemm_tiles``, which the model checks against).
"""
import argparse
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
sys.path.insert(0, SCRIPTS)
ZOO_REF = os.path.join(ROOT, "examples", "ops", "bench", "zoo", "5_MHABlock.py")
ZOO_IMPL = os.path.join(ROOT, "examples", "ops", "gen", "zoo", "5_MHABlock_triton_optimized.py")
ZOO_FLOPS = os.path.join(ROOT, "examples", "ops", "bench", "zoo", "5_MHABlock_flops.py")
# case 0: every GEMM dimension a tile multiple (M = 2048, N = 3072 / 1024, K = 1024), head dim 64 (QK and PV both
# wgmma n64), causal - the kernel skips whole masked key blocks; case 1: no dimension a multiple (M = 1500,
# N = 3000 / 1000, K = 1000), head dim 40, not causal - the tiles pad. Note: the tracer counts only the kept pairs of
# a causal mask (on the CPU, --tiny case 0: 2,629,632 = projections 4 x 2*64*64*64 + attention 2 x 2 x 2080 pairs x
# 32 x 2 heads), so tile-granular execution stays >= traced and min() keeps the tracer here
CASES = ({"x": [4, 512, 1024], "head_num": 16, "causal": True}, {"x": [3, 500, 1000], "head_num": 25, "causal": False})
TINY_CASES = ({"x": [1, 64, 64], "head_num": 2, "causal": True}, {"x": [1, 40, 48], "head_num": 2, "causal": False})
GEMM_TILE = (128, 256, 64)  # examples/ops/gen/zoo/5_MHABlock_triton_optimized.py gemm_tiles(fp16)
FIXTURE_KERNELS = (  # (label, kernel source, constexprs, signature types, num_warps, num_stages)
    ("zoo5 matmul_kernel fp16 128x256x64", "matmul", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8},
     "fp16", 8, 3),
    ("zoo5 matmul_kernel bf16 128x256x64", "matmul", {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8},
     "bf16", 8, 3),
    ("zoo5 matmul_kernel fp32 (tf32) 128x128x32", "matmul", {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32,
                                                             "GROUP_M": 8}, "fp32", 8, 3),
    ("zoo5 flash_attn_fwd_kernel fp16 d128 (QK n64, PV n128)", "attn", {"CAUSAL": True, "BLOCK_M": 128, "BLOCK_N": 64,
                                                                        "BLOCK_D": 128}, "fp16", 8, 3),
    ("toy mm_tile_kernel 128x64x64", "toy", {"BM": 128, "BN": 64, "BK": 64}, "fp16", 4, 3),
    ("toy mm_tile_kernel 64x128x64", "toy", {"BM": 64, "BN": 128, "BK": 64}, "fp16", 4, 3),
)
TOY = '''
import triton, triton.language as tl
@triton.jit
def mm_tile_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(a + rm[:, None] * K + (k + rk)[None, :]), tl.load(b + (k + rk)[:, None] * N + rn[None, :]))
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))
'''


def _zoo_kernels():
    """The zoo implementation's module (its torch_npu import served by the project's compatibility layer)."""
    import importlib.util
    from mfulib.run import compat
    compat.install("cpu")
    spec = importlib.util.spec_from_file_location("zoo5_impl", ZOO_IMPL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _toy_kernel(tmp):
    import importlib.util
    path = os.path.join(tmp, "toy_mm_tile.py")  # @triton.jit needs a real source file
    with open(path, "w") as f:
        f.write(TOY)
    spec = importlib.util.spec_from_file_location("toy_mm_tile", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.mm_tile_kernel


def compile_fixtures(out: str) -> dict:
    """Part 1 (module docstring): compile :data:`FIXTURE_KERNELS` for sm_90 into ``<out>/compile_cache`` and copy
    each variant's metadata + PTX under ``<out>/fixtures/triton_cache``; returns the manifest."""
    cache = os.path.join(out, "compile_cache")
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    os.environ["TRITON_CACHE_DIR"] = cache  # read by triton at compile time
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    zoo = _zoo_kernels()
    toy = _toy_kernel(out)
    fns = {"matmul": zoo.matmul_kernel, "attn": zoo.flash_attn_fwd_kernel, "toy": toy}
    manifest = {"triton_version": triton.__version__, "target": "cuda sm_90 (compiled on this host, no GPU)",
                "kernels": []}
    for label, which, constexprs, ty, warps, stages in FIXTURE_KERNELS:
        fn = fns[which]
        sig = {}
        for name in fn.arg_names:
            if name in constexprs:
                sig[name] = "constexpr"
            elif name.endswith("_ptr") or name in ("a", "b", "c"):
                sig[name] = "*" + ty
            elif name == "qk_scale_log2":
                sig[name] = "fp32"
            else:
                sig[name] = "i32"
        t0 = time.perf_counter()
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs), target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": warps, "num_stages": stages})
        manifest["kernels"].append({"label": label, "name": k.metadata.name, "num_warps": k.metadata.num_warps,
                                    "shared": k.metadata.shared, "hash": k.metadata.hash, "constexprs": constexprs,
                                    "compile_s": round(time.perf_counter() - t0, 2)})
    dst = os.path.join(out, "fixtures", "triton_cache")
    copy_variants(glob.glob(os.path.join(cache, "*", "*.ptx")), dst)
    with open(os.path.join(dst, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


def copy_variants(ptx_files, dst: str) -> list:
    """Copy each ``<key>/<name>.ptx`` with its ``<name>.json`` to ``dst/<key>/`` (Triton's layout); the copies."""
    done = []
    for ptx in sorted(set(ptx_files)):
        meta = ptx[:-len(".ptx")] + ".json"
        if not os.path.exists(meta):
            continue
        key = os.path.basename(os.path.dirname(ptx))
        os.makedirs(os.path.join(dst, key), exist_ok=True)
        for f in (ptx, meta):
            shutil.copy2(f, os.path.join(dst, key, os.path.basename(f)))
        done.append(os.path.join(key, os.path.basename(ptx)))
    return done


def _run(cmd, log, env, timeout=420):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    log.append({"cmd": cmd, "rc": p.returncode, "wall_s": round(time.perf_counter() - t0, 1),
                "tail": (p.stdout + p.stderr)[-1500:]})
    return p.returncode


def gemm_tile_model(m: int, n: int, k: int) -> float:
    """FLOPs the zoo GEMM's tiles compute for C[m, n] = A[m, k] B[k, n] (every tile whole: padded)."""
    bm, bn, bk = GEMM_TILE
    return 2.0 * bm * math.ceil(m / bm) * bn * math.ceil(n / bn) * bk * math.ceil(k / bk)


def write_mha_cases(path: str, cases) -> None:
    """The zoo MHA block's case file at ``path`` (JSON Lines): per case ``x`` (shape), ``head_num``, ``causal``
    (default True) and ``dtype`` of x (default float16)."""
    with open(path, "w") as f:
        for c in cases:
            f.write(json.dumps({"inputs": [
                {"name": "x", "type": "tensor", "required": True, "dtype": c.get("dtype", "float16"), "shape": c["x"]},
                {"name": "head_num", "type": "attr", "required": True, "dtype": "int", "value": c["head_num"]},
                {"name": "causal", "type": "attr", "required": True, "dtype": "bool",
                 "value": c.get("causal", True)}]}) + "\n")


def prepare_mha_command(cases_file: str, work: str) -> list:
    """prepare_op_dir.py's command line: the zoo MHA block as shipped, with ``cases_file``, into ``work``."""
    return [sys.executable, os.path.join(SCRIPTS, "prepare_op_dir.py"), "--ref", ZOO_REF, "--cases", cases_file,
            "--impl", ZOO_IMPL, "--dst", work]


def measure(out: str, backend: str, cases=CASES) -> dict:
    """Part 2 (module docstring) on ``backend`` with ``cases`` (cuda with ncu; cpu runs the same steps on the
    interpreter without counters: executed FLOPs None, ``num_src`` tracer, the why said)."""
    from mfulib.flops.executed import SHAPES_FIELD, executed_flops
    from mfulib.core.definitions import peak_key
    from mfulib.search.numerator import numerator
    work = os.path.join(out, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(out, "cases"), exist_ok=True)  # beside the work dir, never inside it
    cases_file = os.path.join(out, "cases", "5_MHABlock_cases.jsonl")
    write_mha_cases(cases_file, cases)
    env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(out, "triton_cache"), PYTHONUNBUFFERED="1")
    py, log = sys.executable, []
    rc = _run(prepare_mha_command(cases_file, work), log, env)
    if rc == 0:
        shutil.copy2(ZOO_FLOPS, os.path.join(work, "flops.py"))
        for cmd in ([py, os.path.join(SCRIPTS, "verify_op.py"), "--op-dir", work, "--backend", backend],
                    [py, os.path.join(SCRIPTS, "check_flops.py"), "--op-dir", work, "--backend", backend],
                    [py, os.path.join(SCRIPTS, "ops_profiling", "msprof_perf_summary.py"), "--quick", "--mfu",
                     "--impl", "asc", "--op-dir", work, "--output-dir", work, "--backend", backend, "--cases", "0,1",
                     "--repeats", "3", "--pmu", "ncu" if backend == "cuda" else "none"]):
            rc = _run(cmd, log, env)
            if rc != 0:
                break
    res = {"backend": backend, "cases": list(cases), "steps": log, "per_case": []}
    perf = os.path.join(work, "performance.json")
    if not os.path.exists(perf):
        res["error"] = "no performance.json (see steps)"
        return res
    from mfulib.schemas.performance_json import load_report
    rep = load_report(perf)
    cap = (rep.get("device") or {}).get("capability")
    check = {}
    with open(os.path.join(work, "flops_check.json")) as f:
        for row in json.load(f).get("cases") or []:
            check[row.get("case")] = row
    ptx = []
    for e in rep["per_case"]:
        mode = peak_key(e.get("compute_dtype"), bool(e.get("tf32"))) if e.get("compute_dtype") else None
        ex, src, why = executed_flops(e, rep.get("backend"), cap, mode)
        traced = e.get("flops_tracer")
        c = cases[e["case"]]
        b, s, h = c["x"]
        m = b * s
        row = {"case": e["case"], "shape": e.get("shape"), "causal": c["causal"], "flops_py": e.get("flops"),
               "flops_parts": e.get("flops_parts"), "traced": traced, "executed": ex, "executed_src": src,
               "executed_why": why, "numerator": numerator(traced, ex, src, why), "kernels": [],
               "gemm_tile_model": {"qkv": gemm_tile_model(m, 3 * h, h), "out": gemm_tile_model(m, h, h),
                                   "dense_qkv": 2.0 * m * 3 * h * h, "dense_out": 2.0 * m * h * h}}
        from mfulib.flops.executed import kernel_flops
        for k in e.get("kernels") or []:
            counters = (e.get("pmu") or {}).get(k["name"])
            rec = (e.get(SHAPES_FIELD) or {}).get(k["name"])
            v, how = kernel_flops(counters, rep.get("backend"), cap, mode, rec)
            row["kernels"].append({"name": k["name"], "launches_per_iter": k.get("launches_per_iter"),
                                   "executed_per_launch": v, "how": how, "counters": counters, "compiled": rec})
            for var in (rec or {}).get("variants") or []:
                ptx.append(var["ptx_file"])
        res["per_case"].append(row)
    res["fixtures"] = copy_variants(ptx, os.path.join(out, "fixtures", "h200_triton_cache"))
    return res


TRIL_DIR = os.path.join(ROOT, "bench", "executed_ops")
# A [b, m, k] @ B [b, k, n], fp16: case 0 square, 128-tile multiples (16 x 16 tiles, 136 on or below the diagonal);
# case 1 no dimension a multiple (1500 x 1400, k 1000: 12 x 11 tiles, 77 computed, k padded to 1024)
TRIL_CASES = (((4, 2048, 1024), (4, 1024, 2048)), ((2, 1500, 1000), (2, 1000, 1400)))
TRIL_TINY = (((1, 64, 32), (1, 32, 64)), ((1, 40, 48), (1, 48, 72)))


def tril_tile_model(b: int, m: int, n: int, k: int, tiles=(128, 128, 64)) -> dict:
    """The tril_bmm kernel's executed matrix FLOPs by hand (bench/executed_ops/tril_bmm_triton.py): per batch, the
    tiles on or below the diagonal (first column <= last row) x 2 * BM * BN * BK * ceil(k / BK); and the dense
    2 * b * m * n * k the reference computes."""
    bm, bn, bk = tiles
    kept = sum(1 for tm in range(math.ceil(m / bm)) for tn in range(math.ceil(n / bn)) if tn * bn <= tm * bm + bm - 1)
    return {"tiles": [bm, bn, bk], "tiles_computed": kept, "tiles_all": math.ceil(m / bm) * math.ceil(n / bn),
            "executed": float(b * kept * 2 * bm * bn * bk * math.ceil(k / bk)), "dense": 2.0 * b * m * n * k}


def _tril_tiles(m, n, k):
    """The kernel's own (BLOCK_M, BLOCK_N, BLOCK_K) for a float16 problem (tril_bmm_triton.tile_config)."""
    import torch
    sys.path.insert(0, TRIL_DIR)
    from tril_bmm_triton import tile_config
    return tile_config(m, n, k, torch.float16)[:3]


def measure_tril(out: str, backend: str, cases=TRIL_CASES) -> dict:
    """The operator whose dense reference over-counts (bench/executed_ops/tril_bmm*.py) through the same steps as
    :func:`measure`: traced (the reference's dense bmm), executed (the counters x the compiled MMA shapes), the
    numerator (``num_src`` executed expected on Hopper) and the hand tile model beside it."""
    from mfulib.flops.executed import executed_flops
    from mfulib.core.definitions import peak_key
    from mfulib.search.numerator import numerator
    work = os.path.join(out, "work_tril")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(out, "cases"), exist_ok=True)
    cases_file = os.path.join(out, "cases", "tril_bmm_cases.jsonl")
    with open(cases_file, "w") as f:
        for a, b in cases:
            f.write(json.dumps({"inputs": [
                {"name": "A", "type": "tensor", "required": True, "dtype": "float16", "shape": list(a)},
                {"name": "B", "type": "tensor", "required": True, "dtype": "float16", "shape": list(b)}]}) + "\n")
    env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(out, "triton_cache"), PYTHONUNBUFFERED="1")
    py, log = sys.executable, []
    rc = _run([py, os.path.join(SCRIPTS, "prepare_op_dir.py"), "--ref", os.path.join(TRIL_DIR, "tril_bmm.py"),
               "--cases", cases_file, "--impl", os.path.join(TRIL_DIR, "tril_bmm_triton.py"), "--dst", work], log, env)
    if rc == 0:
        shutil.copy2(os.path.join(TRIL_DIR, "tril_bmm_flops.py"), os.path.join(work, "flops.py"))
        for cmd in ([py, os.path.join(SCRIPTS, "verify_op.py"), "--op-dir", work, "--backend", backend],
                    [py, os.path.join(SCRIPTS, "check_flops.py"), "--op-dir", work, "--backend", backend],
                    [py, os.path.join(SCRIPTS, "ops_profiling", "msprof_perf_summary.py"), "--quick", "--mfu",
                     "--impl", "asc", "--op-dir", work, "--output-dir", work, "--backend", backend, "--cases", "0,1",
                     "--repeats", "3", "--pmu", "ncu" if backend == "cuda" else "none"]):
            rc = _run(cmd, log, env)
            if rc != 0:
                break
    res = {"backend": backend, "cases": [list(map(list, c)) for c in cases], "steps": log, "per_case": []}
    perf = os.path.join(work, "performance.json")
    if not os.path.exists(perf):
        res["error"] = "no performance.json (see steps)"
        return res
    from mfulib.schemas.performance_json import load_report
    rep = load_report(perf)
    cap = (rep.get("device") or {}).get("capability")
    for e in rep["per_case"]:
        mode = peak_key(e.get("compute_dtype"), bool(e.get("tf32"))) if e.get("compute_dtype") else None
        ex, src, why = executed_flops(e, rep.get("backend"), cap, mode)
        (b, m, k), (_b, _k, n) = cases[e["case"]]
        res["per_case"].append({"case": e["case"], "shape": e.get("shape"), "flops_py": e.get("flops"),
                                "traced": e.get("flops_tracer"), "executed": ex, "executed_src": src,
                                "executed_why": why, "numerator": numerator(e.get("flops_tracer"), ex, src, why),
                                "tile_model": tril_tile_model(b, m, n, k, _tril_tiles(m, n, k)),
                                "asc_us": e.get("asc_us")})
    return res


def markdown(res: dict) -> str:
    def g(v):
        return "—" if v is None else f"{v:.6g}"
    lines = ["# Executed vs traced FLOPs (5_MHABlock)", "", f"backend {res.get('backend')}", "",
             "| case | shape | causal | traced | executed | numerator | num_src |", "|---|---|---|---|---|---|---|"]
    for r in res.get("per_case") or []:
        n = r["numerator"]
        lines.append(f"| {r['case']} | {r['shape']} | {r['causal']} | {g(r['traced'])} | {g(r['executed'])} | "
                     f"{g(n.get('numerator'))} | {n.get('num_src')} |")
    lines += ["", "| case | kernel | launches | executed per launch | how |", "|---|---|---|---|---|"]
    for r in res.get("per_case") or []:
        for k in r["kernels"]:
            lines.append(f"| {r['case']} | {k['name']} | {k['launches_per_iter']} | {g(k['executed_per_launch'])} | "
                         f"{k['how']} |")
    lines += ["", "GEMM tile model (padded) vs dense, per case: " + "; ".join(
        f"case {r['case']}: qkv {g(r['gemm_tile_model']['qkv'])} vs {g(r['gemm_tile_model']['dense_qkv'])}, out "
        f"{g(r['gemm_tile_model']['out'])} vs {g(r['gemm_tile_model']['dense_out'])}" for r in res.get("per_case") or [])]
    return "\n".join(lines) + "\n"


def markdown_tril(res: dict) -> str:
    def g(v):
        return "—" if v is None else f"{v:.6g}"
    lines = ["", "# Executed vs traced FLOPs (tril_bmm: a dense reference that over-counts)", "",
             "| case | shape | traced | executed | tile model (executed) | dense | numerator | num_src |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res.get("per_case") or []:
        n, t = r["numerator"], r["tile_model"]
        lines.append(f"| {r['case']} | {r['shape']} | {g(r['traced'])} | {g(r['executed'])} | {g(t['executed'])} "
                     f"({t['tiles_computed']}/{t['tiles_all']} tiles) | {g(t['dense'])} | {g(n.get('numerator'))} | "
                     f"{n.get('num_src')} |")
    if res.get("error"):
        lines.append(f"\nerror: {res['error']}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--compile-only", action="store_true", help="part 1 only (no GPU needed)")
    ap.add_argument("--tiny", action="store_true", help="part 2 on the cpu backend with tiny cases (no GPU)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    res = {"compile": compile_fixtures(args.out)}
    if not args.compile_only:
        res["measure"] = measure(args.out, "cpu", TINY_CASES) if args.tiny else measure(args.out, "cuda")
        res["tril"] = (measure_tril(args.out, "cpu", TRIL_TINY) if args.tiny else measure_tril(args.out, "cuda"))
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    md = markdown(res.get("measure") or {}) + markdown_tril(res.get("tril") or {})
    with open(os.path.join(args.out, "result.md"), "w") as f:
        f.write(md)
    print(md)
    print(json.dumps({"wall_s": res["wall_s"], "compiled": [k["label"] for k in res["compile"]["kernels"]]}))


if __name__ == "__main__":
    main()
