"""Roofline and headroom of a case and of its parts; what fixing a part buys; official MFU vs the PMU view.

Definitions (Williams, Waterman & Patterson, "Roofline: an insightful visual performance model", CACM 2009):

* arithmetic intensity ``ai_flop_per_byte = flops / bytes`` with the semantic FLOPs of flops.py and the
  compulsory bytes (``input_bytes + output_bytes`` of performance.json: every input read once, every output written
  once); the PMU's ``dram_bytes`` (ncu ``dram__bytes.sum``; msprof main-memory GB/s x duration) are reported
  beside it, never instead of it;
* ``attainable_tflops = min(peak_tflops, ai x bandwidth_gbps / 1e3)`` (GB/s x FLOP/B = GFLOP/s; /1e3 = TFLOP/s),
  with the measured peak of the case's dtype and the measured copy bandwidth of peak.json;
* ``headroom = attainable_tflops / achieved_tflops`` (>= 1: how many times faster the roofline allows);
* per part, the bytes behind its arithmetic intensity (``bytes_source``): the case's compulsory bytes when the part
  is the whole case (it holds every kernel of the case: its roofline is then the case's, same figures); else its
  kernels' measured DRAM bytes (PMU ``dram_bytes``); else none - ``roof`` is ``"unknown"`` and ``attainable_tflops``
  and ``headroom`` are None (never the compute roof by default);
* per part, ``mfu_if_fixed``: the operator's MFU@ach if that part alone ran at its target throughput - its own
  attainable where its bytes are known, else the best throughput a sibling part of the same case reaches when that
  is higher than its own (``target_source`` says which; neither: no target, ``mfu_if_fixed`` None) - with the other
  parts' times unchanged:
  ``T' = T - t_k + flops_k / target_k``, ``mfu_if_fixed = flops / T' / peak``; ``payoff = mfu_if_fixed - mfu_ach``
  ranks the parts (:func:`rank_by_payoff`);
* official vs PMU view (SKILL.md "官方口径与 PMU 口径"): official MFU = semantic FLOPs / time / peak of all cores;
  PMU MFU = executed FLOPs (counters) / time / (peak x active-core fraction); ``redundancy = executed /
  semantic`` FLOPs (> 1: work the kernel does beyond the operator's definition, e.g. masked tiles computed).
"""
from __future__ import annotations

from mfulib.core.definitions import actual_tflops, finite_or_none, mfu, time_ns_at


def attainable_tflops(ai_flop_per_byte, peak_tflops, bandwidth_gbps):
    """``min(peak, ai x bandwidth / 1e3)`` in TFLOP/s; the memory roof alone when the peak is unknown, None when
    neither is known or ``ai`` is None."""
    ai, peak, bw = finite_or_none(ai_flop_per_byte), finite_or_none(peak_tflops), finite_or_none(bandwidth_gbps)
    if ai is None:
        return None
    roofs = [r for r in (peak, ai * bw / 1e3 if bw else None) if r is not None]
    return min(roofs) if roofs else None


def roofline(flops, compulsory_bytes, time_ns, peak_tflops, bandwidth_gbps, dram_bytes=None) -> dict:
    """The ``roofline`` object of one case: ``ai_flop_per_byte, compulsory_bytes, dram_bytes, attainable_tflops,
    achieved_tflops, headroom, mfu_if_fixed`` (here: the MFU@ach at the attainable throughput) plus ``roof``
    (``"compute"`` | ``"memory"``: which roof bounds the attainable figure). Units: FLOPs, bytes, ns, TFLOP/s, GB/s.

    Example (hand-derived, tests/test_roofline_reading.py): 2e9 FLOPs, 1e7 bytes, 100_000 ns, peak 100 TFLOP/s,
    1000 GB/s -> ai = 2e9 / 1e7 = 200 FLOP/B; memory roof 200 x 1000 / 1e3 = 200 TFLOP/s > peak, so attainable =
    100 (compute roof); achieved = 2e9 / 1e5 / 1e3 = 20 TFLOP/s; headroom 100 / 20 = 5; mfu_if_fixed 1.0.
    """
    flops, nbytes, t = finite_or_none(flops), finite_or_none(compulsory_bytes), finite_or_none(time_ns)
    ai = flops / nbytes if flops and nbytes else None
    att = attainable_tflops(ai, peak_tflops, bandwidth_gbps)
    ach = actual_tflops(flops, t) if flops and t else None
    bw, peak = finite_or_none(bandwidth_gbps), finite_or_none(peak_tflops)
    roof = None
    if att is not None:
        roof = "memory" if (bw and peak is not None and ai * bw / 1e3 < peak) or peak is None else "compute"
    return {"ai_flop_per_byte": ai, "compulsory_bytes": nbytes, "dram_bytes": finite_or_none(dram_bytes),
            "dram_ai_flop_per_byte": flops / dram_bytes if flops and finite_or_none(dram_bytes) else None,
            "attainable_tflops": att, "achieved_tflops": ach,
            "headroom": att / ach if att and ach else None, "roof": roof,
            "mfu_if_fixed": mfu(att, peak) if att is not None else None}


def part_rooflines(parts: list, case_flops, case_time_ns, peak_tflops, bandwidth_gbps, case_bytes=None) -> None:
    """Add ``roofline`` to every part (in place): ``parts`` are decompose rows' parts (``part``, ``kernels``,
    ``flops``, ``time_ns``, ``tflops``, ``dram_bytes`` optional); ``case_bytes`` the case's compulsory bytes
    (input + output). See the module docstring for ``bytes_source``, ``mfu_if_fixed``, ``target_tflops``,
    ``target_source`` and ``payoff``. A part holding every kernel of the case gets the case's roofline
    (:func:`roofline` of the case's FLOPs, bytes and time). Parts without FLOPs (``other``) get the time they
    cost: ``mfu_if_fixed`` = the MFU with that part's time removed (its work is not counted, so its target is
    "gone"); None when the part holds (nearly) all the time - no kernel matched a counted part, and removing it
    leaves nothing measured to divide by (the KERNEL_PARTS patterns match no kernel)."""
    flops, total = finite_or_none(case_flops), finite_or_none(case_time_ns)
    peak, cbytes = finite_or_none(peak_tflops), finite_or_none(case_bytes)
    base = mfu(actual_tflops(flops, total), peak) if flops and total else None
    tput = {p["part"]: p.get("tflops") for p in parts if p.get("tflops")}
    for p in parts:
        pf, t = finite_or_none(p.get("flops")), finite_or_none(p.get("time_ns"))
        dram = finite_or_none(p.get("dram_bytes"))
        whole = bool(p.get("kernels")) and not any(q.get("kernels") for q in parts if q is not p)
        ach = p.get("tflops")
        if whole and pf and cbytes:
            rf = roofline(pf, cbytes, total, peak, bandwidth_gbps, dram)
            src_bytes, t, ach = "case compulsory bytes", total, rf["achieved_tflops"]
        elif pf and dram:
            rf = roofline(pf, dram, t, peak, bandwidth_gbps, dram)
            rf["compulsory_bytes"], src_bytes = None, "PMU dram_bytes"
        else:
            rf = roofline(pf, None, t, peak, bandwidth_gbps, dram)
            src_bytes = None
        att = rf["attainable_tflops"]
        siblings = [v for k, v in tput.items() if k != p["part"]]
        if att is not None:
            target, src = att, f"own attainable ({src_bytes})"
        elif pf and siblings and ach and max(siblings) > ach:
            target, src = max(siblings), "best sibling part"
        else:
            target, src = None, None
        fixed = None
        if flops and total and t is not None and peak:
            if not pf:  # no counted FLOPs (e.g. 'other'): fixing = removing its time
                rest = total - t  # what the case takes without this part's time
                fixed = base if t <= 0 else (mfu(actual_tflops(flops, rest), peak) if rest > 1e-3 * total else None)
            elif src_bytes and whole:  # the part is the case: fixing it = the case at its attainable
                fixed = rf["mfu_if_fixed"]
            elif target and ach and target > ach:
                fixed = mfu(actual_tflops(flops, total - t + time_ns_at(pf, target)), peak)
            elif target:
                fixed = base
        p["roofline"] = dict(rf, achieved_tflops=ach, bytes_source=src_bytes,
                             roof=rf["roof"] if att is not None else ("unknown" if pf else None),
                             mfu_if_fixed=fixed, target_tflops=target, target_source=src,
                             payoff=fixed - base if fixed is not None and base is not None else None)


def rank_by_payoff(parts: list) -> list:
    """Part names by ``roofline.payoff``, largest first (parts without a payoff last, in their order)."""
    keyed = [(p["part"], ((p.get("roofline") or {}).get("payoff"))) for p in parts]
    return [n for n, _ in sorted(keyed, key=lambda kv: (kv[1] is None, -(kv[1] or 0.0)))]


def pmu_view(semantic_flops, executed_flops, time_ns, peak_tflops, active_fraction) -> dict:
    """The official-vs-PMU table of one case: ``official_mfu`` (semantic FLOPs, all cores), ``pmu_mfu`` (executed
    FLOPs over the active cores' share of the peak), ``redundancy`` (executed / semantic), ``active_core_fraction``.
    Missing inputs give None fields."""
    sem, ex, t = finite_or_none(semantic_flops), finite_or_none(executed_flops), finite_or_none(time_ns)
    peak, frac = finite_or_none(peak_tflops), finite_or_none(active_fraction)
    official = mfu(actual_tflops(sem, t), peak) if sem and t else None
    pm = mfu(actual_tflops(ex, t), peak * frac) if ex and t and peak and frac else None
    return {"official_mfu": official, "pmu_mfu": pm, "executed_flops": ex, "semantic_flops": sem,
            "redundancy": ex / sem if ex and sem else None, "active_core_fraction": frac}
