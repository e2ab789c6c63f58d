"""Where a foreign profile's launches ran: the device its case is read from (:func:`choose_device`) and kernels of
one iteration overlapping on several streams (:func:`stream_overlap_note`).

A trace of several devices (chrome-trace kernel events carry the device as their ``pid``; msprof rows their
``Device_id``) is read for one device: ``--device N``, else the one that ran the implementation's kernels (the
``@triton.jit`` names of ``model_new.py`` with ``--op-dir``), else the one with the most launches - said in the
flags either way. Overlap across streams is only noted here: the kernel time stays the sum of durations
(docs/ARCHITECTURE.md#kernel-time).
"""
from __future__ import annotations

from collections import Counter

from mfulib.profiles import kernels as _kernels


def choose_device(rows, device=None, own_kernels=()):
    """``(rows of one device, flags, problems, record)``; ``record``: ``devices`` {device: launches}, ``device``
    (the one read) and ``device_chosen_by``. Rows of a single-device profile come back unchanged."""
    count = Counter(r.get("device") for r in rows if r.get("device") is not None)
    if len(count) <= 1 and device is None:
        return rows, [], [], ({"devices": {str(k): v for k, v in count.items()}} if count else {})
    record = {"devices": {str(k): v for k, v in sorted(count.items(), key=lambda kv: str(kv[0]))}}
    if device is not None:
        if device not in count:
            return rows, [], [f"--device {device}: the profile has no kernel of that device (its devices: "
                              f"{sorted(count, key=str)}) - give one of them"], record
        pick, how = device, "--device"
    else:
        names = set(own_kernels)
        own = Counter(r.get("device") for r in rows if r.get("device") is not None and r.get("name") in names)
        if own:
            pick, how = own.most_common(1)[0][0], "the implementation's kernels"
        else:
            pick, how = count.most_common(1)[0][0], "the most launches"
    record.update(device=pick, device_chosen_by=how)
    flags = [f"the profile holds kernels of {len(count)} devices {dict(record['devices'])}: device {pick} is read "
             f"({how}) - --device N reads another"] if len(count) > 1 else []
    return [r for r in rows if r.get("device") in (pick, None)], flags, [], record


def stream_overlap_note(rows, iterations):
    """A flag when kernels of one of ``iterations`` on different streams overlap in time (their durations are
    summed into the kernel time all the same), else None."""
    worst = 0
    by = {}
    for r in rows:
        if r.get("iteration") in iterations and not _kernels.is_harness(r.get("name")) and \
                _kernels.is_valid_record(r):
            by.setdefault(r["iteration"], []).append(r)
    hit = 0
    for rs in by.values():
        rs.sort(key=lambda r: r["start_ns"])
        end = {}
        overlap = 0
        for r in rs:
            s = r.get("stream")
            others = [e for k, e in end.items() if k != s and e > r["start_ns"]]
            if others:
                overlap += min(max(others), r["start_ns"] + r["duration_ns"]) - r["start_ns"]
            end[s] = max(end.get(s, 0), r["start_ns"] + r["duration_ns"])
        if overlap:
            hit += 1
            worst = max(worst, overlap)
    if not hit:
        return None
    return (f"multi-stream overlap: in {hit} of {len(by)} measured iteration(s) kernels on different streams run "
            f"at the same time (up to {worst / 1e3:.1f} us per iteration); the kernel time sums their durations")
