"""The L2-flush rule of ``--from-prof``: which launches inside a foreign profile's window are harness work
(a cache flush), and what ``--l2-flush exclude|keep`` does with them.

An L2-flush launch is a fill / zero / memset, cast or sum kernel
(:data:`FLUSH_OP_TYPES`, :data:`FLUSH_NAME_PATTERNS`) over a buffer at least the L2 size. Buffer bytes: the
largest tensor of its shapes (msprof Input/Output Shapes x dtype size; the host op's ``Input Dims`` in a
chrome trace recorded with ``record_shapes``), ncu ``dram__bytes_write.sum``; else *estimated* as duration x
the device's nominal DRAM bandwidth (:mod:`mfulib.core.nominal_peaks` datasheet table; a fill is bandwidth-bound, and the
estimate is an upper bound of its bytes, so a fill just under the L2 size can be misjudged - it is labelled
estimated). L2 size: ``--l2-mib``, the profile (ncu ``device__attribute_l2_cache_size``; kept profiles' device
record ``l2_cache_bytes``; msprof info.json.N AI-core frequency -> 910B variant; docs/sources.md#l2-sizes), else
:data:`L2_FACTS` by device name.
``--l2-flush exclude`` (default) drops them, counted in ``harness_launches_dropped``; ``keep`` leaves them in
the operator's time, flagged. A flush-like kernel whose size or the L2 size is unknown is kept and flagged.
"""
from __future__ import annotations

import re

from mfulib.profiles import kernels as _kernels
from mfulib.core.definitions import MIB

L2_FLUSH_MODES = ("exclude", "keep")

# L2 sizes by device name (regex, bytes, source); used when neither --l2-mib nor the profile gives one
L2_FACTS = [
    (r"H200", 60 * MIB, "torch L2_cache_size of an H200, 60 MiB (docs/sources.md#l2-sizes)"),
    (r"^Ascend910B4$", 100663296, "Ascend910B4.ini l2_size 96 MiB (docs/sources.md#l2-sizes)"),
    (r"^Ascend910B[123]C?$", 201326592, "Ascend910B1/B2/B2C/B3.ini l2_size 192 MiB (docs/sources.md#l2-sizes)"),
]
# runtime (ai_core_num, aic_frequency MHz) of info.json.N -> L2 of the 910B variant with that pair
# (docs/sources.md#l2-sizes: inferred from the ini table: only 910B4, 20 cores at 1500 MHz, has 96 MiB; 910B1/B2/B2C/B3
# run 20-25 cores at 1800/1850 MHz with 192 MiB)
NPU_L2_BY_FREQ = {1500.0: 100663296, 1800.0: 201326592, 1850.0: 201326592}

# msprof OP Type -> flush kind (the OP Type vocabulary of real exports, docs/sources.md#msprof-csv; torch_npu's zero_
# runs ZerosLike, fill_ Fill/Fills)
FLUSH_OP_TYPES = {"cast": "cast", "reducesum": "reduce_sum", "zeroslike": "fill", "fill": "fill", "fills": "fill",
                  "memset": "memset"}
# kernel / host-op names -> flush kind (CUDA: at::native FillFunctor = fill_/zero_, sum_functor = sum,
# direct_copy_kernel = cast/copy; msprof Op Names such as aclnnInplaceZero_ZerosLikeAiCore_ZerosLike)
FLUSH_NAME_PATTERNS = [
    ("fill", re.compile(r"FillFunctor|fill_kernel|aten::fill_|aten::zero_|ZerosLike|InplaceZero|InplaceFill")),
    ("memset", re.compile(r"memset", re.I)),
    ("reduce_sum", re.compile(r"ReduceSum|reduce_sum|sum_functor|aten::sum\b")),
    ("cast", re.compile(r"(?:^|[^A-Za-z])Cast(?:$|[^a-z])|direct_copy_kernel|aten::_to_copy")),
]


def l2_from_facts(name):
    """``(L2 bytes, source)`` of a device name by :data:`L2_FACTS`, or ``(None, None)``."""
    for pat, size, src in L2_FACTS:
        if name and re.search(pat, str(name)):
            return float(size), src
    return None, None


def flush_kind(row):
    """The L2-flush kind a launch's name suggests (fill | memset | reduce_sum | cast), or None."""
    op_type = str(row.get("op_type") or "").replace("_", "").lower()
    if op_type in FLUSH_OP_TYPES:
        return FLUSH_OP_TYPES[op_type]
    for text in (row.get("name"), row.get("host_op")):
        for kind, pat in FLUSH_NAME_PATTERNS:
            if text and pat.search(str(text)):
                return kind
    return None


def find_flushes(rows, l2_bytes, bandwidth_gbps):
    """``(flush indices, undecided)`` of the L2-flush launches among ``rows`` (module docstring rule).

    ``undecided``: [(index, why)] for flush-like launches whose buffer size or the L2 size is unknown."""
    hits, undecided = {}, []
    for i, r in enumerate(rows):
        kind = flush_kind(r)
        if kind is None or _kernels.is_harness(r.get("name")):
            continue
        nbytes, src = r.get("bytes"), r.get("bytes_source")
        if nbytes is None and bandwidth_gbps and r.get("duration_ns"):
            nbytes, src = r["duration_ns"] * bandwidth_gbps, f"estimated: duration x nominal {bandwidth_gbps:g} GB/s"
        if nbytes is None or not l2_bytes:
            undecided.append((i, "buffer size unknown" if nbytes is None else "L2 size unknown"))
            continue
        if nbytes >= l2_bytes:
            hits[i] = {"kind": kind, "bytes": nbytes, "bytes_source": src}
    return hits, undecided


def apply_flush_rule(rows, l2_bytes, l2_source, bandwidth_gbps, mode: str):
    """The rule applied to one profile's ``rows``: ``(rows left, launches dropped, flags, record)``.

    ``mode``: ``exclude`` drops the flush launches, ``keep`` leaves them in (flagged); ``record`` holds
    ``l2_flush_launches`` and ``l2_flush_ns`` (ns) when there are any (the case's ``from_profile`` block)."""
    hits, undecided = find_flushes(rows, l2_bytes, bandwidth_gbps)
    kept = list(rows)
    dropped, flags, record = 0, [], {}
    if hits:
        total = sum(rows[i]["duration_ns"] or 0 for i in hits)
        kinds = sorted({h["kind"] for h in hits.values()})
        big = min(h["bytes"] for h in hits.values())
        how = sorted({h["bytes_source"] for h in hits.values()})
        text = (f"{len(hits)} L2-flush launch(es) ({'/'.join(kinds)} over buffers >= the L2 size "
                f"{l2_bytes / MIB:.0f} MiB [{l2_source}], smallest {big / MIB:.0f} MiB from {how[0]}), "
                f"{total / 1e3:.1f} us in total")
        if mode == "exclude":
            kept = [x for i, x in enumerate(rows) if i not in hits]
            dropped = len(hits)
            flags.append(text + ": harness work, excluded from the operator's time (--l2-flush keep keeps them)")
        else:
            flags.append(text + ": kept in the operator's time (--l2-flush keep)")
        record = {"l2_flush_launches": len(hits), "l2_flush_ns": total}
    if undecided:
        flags.append(f"{len(undecided)} flush-like launch(es) (fill/zero/memset/cast/sum) kept in the operator's time: "
                     f"{undecided[0][1]} ({rows[undecided[0][0]].get('name', '')[:60]}) - pass --l2-mib or "
                     "record shapes to decide")
    return kept, dropped, flags, record
