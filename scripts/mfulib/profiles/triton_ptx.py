"""What the compiler wrote: the matrix-instruction shapes of a launched Triton kernel, read from Triton's cache.

Triton writes every compiled kernel to its cache directory (``TRITON_CACHE_DIR``, default
``$TRITON_HOME/.triton/cache``; :func:`mfulib.run.worker.triton_cache_dir`) as one folder per compilation key,
``<key>/<name>.json`` (the metadata: ``name``, ``num_warps``, ``shared`` = dynamic shared memory in bytes, ``target``
{backend, arch}, ``hash``, ...) beside ``<key>/<name>.ptx`` (triton/compiler/compiler.py ``compile``: ``file_name =
src.name[:150]``, metadata ``<file_name>.json``; triton/runtime/cache.py ``FileCacheManager``; the same in Triton 3.6
and 3.8). An autotuned kernel leaves one folder per config tried, all of one name.

The PTX names each warpgroup MMA with its shape and types, ``wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16``
(PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate": ``wgmma.mma_async{.sp}.sync.aligned.shape.dtype
.atype.btype``, shape ``m64nNkK``), and each warp-level MMA as ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32``
(PTX ISA "Warp-level Matrix Multiply-Accumulate Instructions"). :func:`ptx_mma_shapes` counts them in the text
(static counts: instructions written, not executed).

The launched variant is the one compiled for the launch ncu profiled: same kernel name, ``num_warps * 32`` threads
= ncu's ``launch__block_size``, ``shared`` = ncu's ``launch__shared_mem_per_block_dynamic`` (Triton launches with
its metadata's ``shared`` as the dynamic shared memory; its kernels declare no static shared memory). Without an ncu
pass the same two facts come from CUPTI's kernel record of the timed launches (:func:`cupti_launch_configs`: the
product of ``block`` and ``shared memory``, which CUPTI reports as static + dynamic bytes - equal to ncu's dynamic
bytes for a Triton kernel: 98304 for both in the H200-recorded ``tests/fixtures/profiles/cuda/plain.json.gz`` and
``ncu_raw.csv``, static 0).
:func:`launched_variant` returns the record performance.json keeps per kernel (``per_case[].mma_shapes``,
:mod:`mfulib.schemas.performance_json`); :mod:`mfulib.flops.executed` turns it into FLOPs. Never raises for a
kernel: a missing cache, an unreadable file or no match is a record with ``status`` and ``why``.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re

WARP_SIZE = 32  # threads per warp on every NVIDIA GPU (PTX ISA, "Thread hierarchy"); Triton's metadata warp_size
WGMMA_RE = re.compile(r"\bwgmma\.mma_async(\.sp)?\.sync\.aligned\.m(\d+)n(\d+)k(\d+)((?:\.[a-z0-9]+)+)")
MMA_SYNC_RE = re.compile(r"\bmma\.sync\.aligned\.m(\d+)n(\d+)k(\d+)((?:\.[a-z0-9]+)+)")
MMA_SYNC_TYPES = ("row", "col", "satfinite")  # layout / saturation qualifiers, not types


def ptx_mma_shapes(ptx: str) -> dict:
    """{"wgmma": [...], "mma_sync": [...]} of PTX text: one entry per distinct instruction form, ``{"shape":
    "m64n128k16", "m", "n", "k", "types": "f32.f16.f16" (dtype.atype.btype), "sparse": bool (wgmma ``.sp``),
    "static_count": occurrences in the text}``, ordered by m, n, k, then types. Comments are not skipped: Triton's PTX
    carries none that name an instruction."""
    out = {"wgmma": {}, "mma_sync": {}}
    for m in WGMMA_RE.finditer(ptx):
        types = ".".join(m.group(5).strip(".").split(".")[:3])
        key = (int(m.group(2)), int(m.group(3)), int(m.group(4)), types, bool(m.group(1)))
        out["wgmma"][key] = out["wgmma"].get(key, 0) + 1
    for m in MMA_SYNC_RE.finditer(ptx):
        types = ".".join(t for t in m.group(4).strip(".").split(".") if t not in MMA_SYNC_TYPES)
        key = (int(m.group(1)), int(m.group(2)), int(m.group(3)), types, False)
        out["mma_sync"][key] = out["mma_sync"].get(key, 0) + 1
    return {kind: [{"shape": f"m{mm}n{n}k{k}", "m": mm, "n": n, "k": k, "types": t, "sparse": sp, "static_count": c}
                   for (mm, n, k, t, sp), c in sorted(d.items())] for kind, d in out.items()}


def compiled_variants(cache_dir: str, name: str) -> list:
    """Every compiled variant of kernel ``name`` in ``cache_dir``: ``[{"key" (the cache folder), "ptx_file",
    "ptx_sha256", "num_warps", "shared", "arch", "wgmma", "mma_sync"}]`` (``wgmma`` / ``mma_sync`` of
    :func:`ptx_mma_shapes`), sorted by folder. A metadata file whose ``name`` differs, or without its PTX beside it,
    is skipped (another backend's kernel, a half-written entry)."""
    out = []
    if not cache_dir or not os.path.isdir(cache_dir):
        return out
    for meta_path in sorted(glob.glob(os.path.join(glob.escape(cache_dir), "*", glob.escape(name[:150]) + ".json"))):
        ptx_path = meta_path[:-len(".json")] + ".ptx"
        try:
            with open(meta_path, encoding="utf-8") as f:
                meta = json.load(f)
            with open(ptx_path, "rb") as f:
                raw = f.read()
        except (OSError, ValueError):
            continue
        if not isinstance(meta, dict) or meta.get("name") != name:
            continue
        target = meta.get("target") if isinstance(meta.get("target"), dict) else {}
        shapes = ptx_mma_shapes(raw.decode("utf-8", errors="replace"))
        out.append({"key": os.path.basename(os.path.dirname(meta_path)), "ptx_file": ptx_path,
                    "ptx_sha256": hashlib.sha256(raw).hexdigest(), "num_warps": meta.get("num_warps"),
                    "shared": meta.get("shared"), "arch": target.get("arch"), **shapes})
    return out


def _same_shapes(variants) -> bool:
    forms = {json.dumps([v["wgmma"], v["mma_sync"]], sort_keys=True) for v in variants}
    return len(forms) == 1


def launched_variant(cache_dir: str, name: str, block_size, shared_dynamic_bytes, launch_source: str = "ncu") -> dict:
    """The record of the compiled variant(s) that match one profiled launch of kernel ``name`` (module docstring):
    ``{"status", "why", "cache_dir", "block_size", "shared_mem_dynamic_bytes", "candidates" (variants of that name),
    "variants" [the matching ones, :func:`compiled_variants` entries without ``mma_sync``/``wgmma`` duplicates
    removed]}``. ``status``: ``found`` (one or more variants match and all have the same MMA instruction forms),
    ``ambiguous`` (matching variants differ in their MMA forms: which one ran is unknown here; every matching one is
    kept in ``variants``, so that :func:`mfulib.flops.executed.variants_for_mode` can rule out those of another
    math mode than the case's), ``none`` (no cache, no
    variant of that name, or none matches the launch). ``block_size`` threads, ``shared_dynamic_bytes`` bytes
    (ncu's launch metrics, or CUPTI's launch record: ``launch_source`` "ncu" | "cupti", kept in the record; None when
    not measured: then that criterion cannot be applied and the record says so)."""
    rec = {"status": "none", "why": None, "cache_dir": cache_dir, "block_size": block_size,
           "shared_mem_dynamic_bytes": shared_dynamic_bytes, "launch_source": launch_source, "candidates": 0,
           "variants": []}
    if not cache_dir or not os.path.isdir(cache_dir):
        rec["why"] = f"no Triton cache directory {cache_dir!r}"
        return rec
    cands = compiled_variants(cache_dir, name)
    rec["candidates"] = len(cands)
    if not cands:
        rec["why"] = f"no compiled Triton kernel named {name!r} in {cache_dir} (not a Triton kernel, or compiled elsewhere)"
        return rec
    if block_size is None or shared_dynamic_bytes is None:
        rec["why"] = (("ncu gave no launch__block_size / launch__shared_mem_per_block_dynamic" if launch_source == "ncu"
                       else f"{launch_source} gave no single block size / shared memory") + " for this kernel: the "
                      "launched variant cannot be told among the compiled ones")
        return rec
    match = [v for v in cands if isinstance(v.get("num_warps"), int) and v["num_warps"] * WARP_SIZE == int(block_size)
             and isinstance(v.get("shared"), int) and v["shared"] == int(shared_dynamic_bytes)]
    rec["variants"] = match
    if not match:
        seen = sorted({(v.get("num_warps"), v.get("shared")) for v in cands}, key=str)
        rec["why"] = (f"none of the {len(cands)} compiled variant(s) of {name!r} (num_warps, shared: {seen[:6]}) "
                      f"matches the launch ({int(block_size)} threads, {int(shared_dynamic_bytes)} B dynamic shared "
                      "memory)")
        return rec
    if not _same_shapes(match):
        forms = sorted({", ".join(f"{w['shape']}.{w['types']}" for w in v["wgmma"] + v["mma_sync"]) or "no MMA"
                        for v in match})
        rec.update(status="ambiguous", why=f"{len(match)} compiled variants match the launch with different MMA "
                                           f"instructions ({'; '.join(forms)}): which one ran is unknown")
        return rec
    rec["status"] = "found"
    return rec


def kernel_records(pmu_by_kernel: dict, cache_dir: str) -> dict:
    """{kernel name: :func:`launched_variant` record} for every kernel of ``pmu_by_kernel`` ({name: canonical ncu
    counters}, :mod:`mfulib.profiles.pmu`) that ncu profiled (``launches`` > 0), matched by its function name
    (:func:`mfulib.profiles.ncu.short_kernel_name`), ``block_size`` and ``shared_mem_dynamic_bytes``. Counters are
    means over the profiled launches, so launches of one name with different configs match no variant."""
    from mfulib.profiles.ncu import short_kernel_name
    out = {}
    for name, c in (pmu_by_kernel or {}).items():
        if not isinstance(c, dict) or not c.get("launches"):
            continue
        out[name] = launched_variant(cache_dir, short_kernel_name(name), c.get("block_size"),
                                     c.get("shared_mem_dynamic_bytes"))
    return out


def cupti_launch_configs(rows, iterations) -> dict:
    """{kernel name: (threads per block, shared memory bytes) or (None, None)} of the CUPTI launch ``rows``
    (:meth:`mfulib.backends.cuda` launch rows: ``name``, ``iteration``, ``block`` [x, y, z], ``shared_memory``) of
    the ``iterations`` (iteration indices, the measured ones). A kernel launched with several configurations in them
    gets (None, None): its variant cannot be told by one launch (:func:`launched_variant` then says so)."""
    want = set(iterations)
    seen = {}
    for r in rows or []:
        if r.get("iteration") not in want or r.get("kind", "kernel") != "kernel":
            continue
        block, shared = r.get("block"), r.get("shared_memory")
        try:
            threads = int(block[0]) * int(block[1]) * int(block[2]) if block is not None else None
            shared = int(shared) if shared is not None else None
        except (TypeError, ValueError, IndexError):
            threads, shared = None, None
        seen.setdefault(str(r.get("name", "")), set()).add((threads, shared))
    return {name: (next(iter(c)) if len(c) == 1 else (None, None)) for name, c in seen.items()}


def cupti_kernel_records(configs: dict, cache_dir: str) -> dict:
    """{kernel name: :func:`launched_variant` record} from CUPTI launch configurations (:func:`cupti_launch_configs`),
    ``launch_source`` "cupti": the compiled variants a timing run without an ncu pass launched."""
    from mfulib.profiles.ncu import short_kernel_name
    return {name: launched_variant(cache_dir, short_kernel_name(name), threads, shared, launch_source="cupti")
            for name, (threads, shared) in (configs or {}).items()}
