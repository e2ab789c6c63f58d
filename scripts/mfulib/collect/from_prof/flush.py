"""Harness cache flushes inside a foreign profile's iterations, found by evidence, never by a kernel's name alone
(:func:`find_harness_flushes`); ``--l2-flush exclude|keep`` says what is done with them (:func:`apply_flush_rule`).

Inside this tool's own ranges and marker kernels nothing here applies: every launch that is not an
``mfu_harness_*`` kernel is the operator's. In a foreign profile a launch group is a harness flush only when all of
these hold (docs/sources.md#triton-do-bench, #l2-sizes):

1. **a known harness signature** (:data:`SIGNATURES`): the ``zero_`` of ``do_bench``'s cache buffer (torch's
   ``FillFunctor`` kernel / host op ``aten::zero_`` or ``aten::fill_`` on CUDA, the ``ZerosLike`` / ``Fill`` /
   ``Fills`` OP Types of ``aclnnInplaceZero`` / ``aclnnInplaceFillScalar`` on the NPU: Triton's
   ``clear_cache`` is ``cache.zero_()`` on CUDA and in Triton-Ascend), or ``buffer.float(); buffer.sum()`` - a
   cast **followed by** a sum over the same buffer (NPU OP Types ``Cast`` then ``ReduceSum``; CUDA
   ``direct_copy_kernel`` then a ``sum_functor`` reduction). A cast alone, a sum alone, or a Triton kernel named
   ``fill`` / ``reduce_sum`` is no signature. **On CUDA the element types decide where the trace carries them**
   (:func:`dtype_mismatch`): ``do_bench``'s cache is ``torch.empty(int(cache_size // 4), dtype=torch.int)``
   (``get_empty_cache_for_benchmark`` in ``triton/backends/nvidia/driver.py``; torch inductor's benchmarker in
   ``torch/_inductor/runtime/benchmarking.py`` makes the same ``dtype=torch.int`` buffer and ``zero_()``s it), so a
   fill of any other type is the operator's own; ``buffer.float()`` writes float32 and ``buffer.sum()`` reads what
   it wrote, so a cast to another type, or a sum of another type, is no ``float_sum``. The types come from torch's
   kernel names (``FillFunctor<T>``; ``sum_functor<T, acc, out>``, T the input; ``float16_copy_kernel_cuda`` /
   ``bfloat16_copy_kernel_cuda`` write 16-bit floats), else from the launching host op's ``Input type`` when
   recorded with ``record_shapes`` (``aten::zero_`` / ``aten::fill_`` / ``aten::sum``: the input; ``aten::copy_``:
   its first input, the destination). The H200 recordings under tests/fixtures/profiles/cuda show both kinds: the
   ``do_bench`` flushes (``flush_zero*``, the autotuning of ``autotune_user_ranges``) are ``FillFunctor<int>`` of
   ``int`` buffers; an operator's own ``fill_`` / ``zero_`` / ``.to(float16)`` / ``.sum()`` (``own_fill_sum_*``)
   are ``FillFunctor<float>``, a ``float16_copy_kernel_cuda`` writing ``c10::Half`` and a ``sum_functor<float, ...>``
   of the float buffer. (``do_bench`` also records a CUDA event - ``cudaEventRecordWithFlags`` - between the flush
   and ``fn()``; a flush loop timed by other means has none, so the events are not required.) msprof rows carry no
   such evidence here: the NPU rule is the signature alone;
2. **at the head or the tail of every iteration** (the same signature in each one, and not the whole iteration);
3. **a buffer at least the device's L2** (:data:`mfulib.core.nominal_peaks.L2_FACTS`, the profile's own L2
   record, ``--l2-mib``); for a device the facts do not know, at least :data:`UNKNOWN_DEVICE_FLUSH_BYTES` (256 MiB, ``do_bench``'s buffer on CUDA and
   larger than any L2 in the table). Buffer bytes: the largest tensor of the launch (msprof Input/Output Shapes x
   data type size; a chrome trace's host op ``Input Dims`` when recorded with ``record_shapes``; ncu
   ``dram__bytes``), else the documented upper bound duration x the device's nominal DRAM bandwidth (labelled
   ``estimated``);
4. **not a kernel of the implementation** (the ``@triton.jit`` kernels of ``model_new.py`` with ``--op-dir``).

``exclude`` (default) drops them, listed with their time; ``keep`` leaves them in the operator's time, flagged.
A signature at the head/tail of every iteration whose buffer or L2 size is unknown is kept and flagged; one whose
element types rule the harness out is kept and flagged with the types.
"""
from __future__ import annotations

import re

from mfulib.core.definitions import MIB
from mfulib.profiles import kernels as _kernels

L2_FLUSH_MODES = ("exclude", "keep")

# a device the facts do not know: a signature over at least this many bytes is a flush (Triton's CUDA
# get_empty_cache_for_benchmark: 256 MiB of int32, triton/backends/nvidia/driver.py; docs/sources.md#triton-do-bench)
UNKNOWN_DEVICE_FLUSH_BYTES = 256 * MIB

_FILL_OP_TYPES = {"zeroslike", "fill", "fills"}
_FILL_NAMES = re.compile(r"FillFunctor|aclnnInplaceZero|aclnnInplaceFill")
_FILL_HOST_OPS = {"aten::zero_", "aten::fill_"}
_CAST_NAMES = re.compile(r"direct_copy_kernel")
_CAST_HOST_OPS = {"aten::_to_copy", "aten::to", "aten::copy_"}
_SUM_NAMES = re.compile(r"sum_functor")
# CUDA element types (the spelling torch's kernel templates and the profiler's "Input type" share: int, float,
# c10::Half, ...): do_bench's cache buffer, what buffer.float() writes, and the kernels whose names give a type
HARNESS_CACHE_DTYPE = "int"
FLOAT_SUM_DTYPE = "float"
_FILL_DTYPE = re.compile(r"FillFunctor<\s*([^<>,]+?)\s*>")
_SUM_DTYPE = re.compile(r"sum_functor<\s*([^<>,]+?)\s*,")
_COPY_OUT_DTYPE = {"bfloat16_copy_kernel_cuda": "c10::BFloat16", "float16_copy_kernel_cuda": "c10::Half"}
#: signature -> what it is, for the flags
SIGNATURES = {"zero_fill": "do_bench's cache.zero_() / fill_ of a cache buffer",
              "float_sum": "buffer.float(); buffer.sum() (a cast, then a sum of the buffer)"}


def _op_type(row):
    return str(row.get("op_type") or "").replace("_", "").lower()


def is_fill(row) -> bool:
    """The launch of a torch ``zero_`` / ``fill_`` (the do_bench flush kernel), by OP Type, kernel or host op."""
    return _op_type(row) in _FILL_OP_TYPES or bool(_FILL_NAMES.search(str(row.get("name") or ""))) or \
        row.get("host_op") in _FILL_HOST_OPS


def _is_cast(row):
    return _op_type(row) == "cast" or bool(_CAST_NAMES.search(str(row.get("name") or ""))) or \
        row.get("host_op") in _CAST_HOST_OPS


def _is_sum(row):
    return _op_type(row) == "reducesum" or bool(_SUM_NAMES.search(str(row.get("name") or ""))) or \
        row.get("host_op") == "aten::sum"


def _host_type(row, host_ops):
    types = row.get("host_types") or []
    return str(types[0]) if row.get("host_op") in host_ops and types and types[0] else None


def _fill_dtype(row):
    m = _FILL_DTYPE.search(str(row.get("name") or ""))
    return m.group(1) if m else _host_type(row, _FILL_HOST_OPS)


def _cast_out_dtype(row):
    name = str(row.get("name") or "")
    for kernel, dtype in _COPY_OUT_DTYPE.items():  # bfloat16 first: "float16_copy" is inside "bfloat16_copy"
        if kernel in name:
            return dtype
    return _host_type(row, {"aten::copy_"})


def _sum_in_dtype(row):
    m = _SUM_DTYPE.search(str(row.get("name") or ""))
    return m.group(1) if m else _host_type(row, {"aten::sum"})


def dtype_mismatch(signature: str, launches):
    """Why the element types of one iteration's signature ``launches`` (rows, in start order) rule out the harness
    (module rule 1: do_bench's ``int`` cache, ``buffer.float()``'s float32), or None when they agree or are not in
    the trace."""
    if signature == "zero_fill":
        t = _fill_dtype(launches[0])
        if t is not None and t != HARNESS_CACHE_DTYPE:
            return f"it fills a {t} buffer; do_bench's cache is {HARNESS_CACHE_DTYPE} (torch.int)"
        return None
    out, into = _cast_out_dtype(launches[0]), _sum_in_dtype(launches[1])
    if out is not None and out != FLOAT_SUM_DTYPE:
        return f"the cast writes {out}; buffer.float() writes {FLOAT_SUM_DTYPE}"
    if into is not None and into != FLOAT_SUM_DTYPE:
        return f"the sum reads {into}; buffer.sum() after buffer.float() reads {FLOAT_SUM_DTYPE}"
    return None


def signature_at(seq, end: str):
    """``(signature, positions)`` of a harness signature at the ``head`` or ``tail`` of one iteration's launches
    (start order), or None."""
    n = len(seq)
    if end == "head":
        if n and is_fill(seq[0]):
            return "zero_fill", (0,)
        if n >= 2 and _is_cast(seq[0]) and _is_sum(seq[1]):
            return "float_sum", (0, 1)
    else:
        if n and is_fill(seq[-1]):
            return "zero_fill", (n - 1,)
        if n >= 2 and _is_cast(seq[-2]) and _is_sum(seq[-1]):
            return "float_sum", (n - 2, n - 1)
    return None


def _bytes(group, bandwidth_gbps):
    known = [(r["bytes"], r.get("bytes_source")) for r in group if r.get("bytes") is not None]
    if known:
        return max(known, key=lambda x: x[0])
    if bandwidth_gbps and all(r.get("duration_ns") for r in group):
        longest = max(r["duration_ns"] for r in group)
        return longest * bandwidth_gbps, f"estimated: duration x nominal {bandwidth_gbps:g} GB/s (an upper bound)"
    return None, None


def find_harness_flushes(rows, l2_bytes, bandwidth_gbps, own_kernels=()):
    """``(flush row indices, record)`` of the harness flushes among iteration-tagged ``rows`` (module rule).

    ``record``: ``flushes`` [{signature, end, names, launches, time_ns, bytes, bytes_source}], ``threshold_bytes``,
    ``undecided`` [text] (a signature everywhere whose buffer or L2 size is unknown, or below the threshold),
    ``not_harness`` [text] (a signature everywhere whose element types rule the harness out: :func:`dtype_mismatch`).
    """
    by_iter = {}
    for i, r in enumerate(rows):
        if r.get("iteration") is not None and not _kernels.is_harness(r.get("name")):
            by_iter.setdefault(r["iteration"], []).append(i)
    for idx in by_iter.values():
        idx.sort(key=lambda i: rows[i].get("start_ns") or 0)
    threshold = l2_bytes or UNKNOWN_DEVICE_FLUSH_BYTES
    record = {"flushes": [], "threshold_bytes": threshold, "undecided": [], "not_harness": []}
    hits = set()
    if not by_iter:
        return hits, record
    own = set(own_kernels or ())
    for end in ("head", "tail"):
        found = {}
        for it, idx in by_iter.items():
            sig = signature_at([rows[i] for i in idx], end)
            if sig is None or len(sig[1]) >= len(idx) or any(idx[p] in hits for p in sig[1]):
                break
            found[it] = (sig[0], [idx[p] for p in sig[1]])
        if len(found) < len(by_iter) or len({s for s, _ in found.values()}) != 1:
            continue  # not in every iteration, or not the same signature in each
        group = [i for _, ids in found.values() for i in ids]
        if any(rows[i].get("name") in own or rows[i].get("op_type") in own for i in group):
            continue
        sig = next(iter(found.values()))[0]
        names = sorted({str(rows[i].get("name"))[:80] for i in group})
        why = next((w for _, ids in found.values() if (w := dtype_mismatch(sig, [rows[i] for i in ids]))), None)
        if why:
            record["not_harness"].append(f"{SIGNATURES[sig]} at the {end} of every iteration ({names[0]}): {why} - "
                                         "the operator's own work, kept in its time")
            continue
        nbytes, how = None, None
        for _, ids in found.values():
            b, src = _bytes([rows[i] for i in ids], bandwidth_gbps)
            if b is None:
                nbytes, how = None, None
                break
            if nbytes is None or b < nbytes:
                nbytes, how = b, src
        if nbytes is None:
            record["undecided"].append(f"{SIGNATURES[sig]} at the {end} of every iteration ({names[0]}): buffer size "
                                       "unknown (no shapes recorded, no nominal bandwidth) - kept; record with shapes")
            continue
        if nbytes < threshold:
            if not l2_bytes:
                record["undecided"].append(f"{SIGNATURES[sig]} at the {end} of every iteration ({names[0]}) over "
                                           f"{nbytes / MIB:.0f} MiB: the device's L2 is unknown and the buffer is "
                                           f"below {threshold / MIB:.0f} MiB - kept; pass --l2-mib to decide")
            continue
        hits.update(group)
        record["flushes"].append({"signature": sig, "end": end, "names": names, "launches": len(group),
                                  "time_ns": float(sum(rows[i]["duration_ns"] or 0 for i in group)),
                                  "bytes": float(nbytes), "bytes_source": how})
    return hits, record


def apply_flush_rule(rows, l2_bytes, l2_source, bandwidth_gbps, mode: str, own_kernels=()):
    """The rule applied to one foreign profile's iteration-tagged ``rows``: ``(rows left, launches dropped, flags,
    record)``.

    ``mode``: ``exclude`` drops the flush launches, ``keep`` leaves them in (flagged); ``record`` holds
    ``l2_flush_launches``, ``l2_flush_ns`` (ns) and ``l2_flushes`` (per signature) when there are any."""
    hits, found = find_harness_flushes(rows, l2_bytes, bandwidth_gbps, own_kernels)
    flags, record, dropped, kept = [], {}, 0, list(rows)
    for text in found["undecided"] + found["not_harness"]:
        flags.append("flush-like launch(es) " + text)
    if not hits:
        return kept, dropped, flags, record
    total = sum(f["time_ns"] for f in found["flushes"])
    limit = (f"the L2 size {l2_bytes / MIB:.0f} MiB [{l2_source}]" if l2_bytes else
             f"{UNKNOWN_DEVICE_FLUSH_BYTES / MIB:.0f} MiB (device L2 unknown)")
    parts = [f"{f['launches']} x {SIGNATURES[f['signature']]} at the {f['end']} of each iteration over "
             f"{f['bytes'] / MIB:.0f} MiB from {f['bytes_source']}, {f['time_ns'] / 1e3:.1f} us"
             for f in found["flushes"]]
    text = (f"{len(hits)} L2-flush launch(es) (buffers >= {limit}; {'; '.join(parts)}), "
            f"{total / 1e3:.1f} us in total")
    if mode == "exclude":
        kept = [x for i, x in enumerate(rows) if i not in hits]
        dropped = len(hits)
        flags.append(text + ": harness work, excluded from the operator's time (--l2-flush keep keeps them)")
    else:
        flags.append(text + ": kept in the operator's time (--l2-flush keep)")
    record = {"l2_flush_launches": len(hits), "l2_flush_ns": total, "l2_flushes": found["flushes"]}
    return kept, dropped, flags, record
