"""Overlapping kernels of one iteration: flagged, with the union of their intervals and the overlap beside the sum
(profiles/kernels.py). Fixture values are hand-made launch rows; the expected numbers are computed by hand below."""
from mfulib.profiles import kernels


def _iteration(it, base, overlap=True):
    # A [base+100, base+200), B [base+150, base+300) on another stream (overlaps A by 50 ns when overlap), C after a
    # 100 ns gap [base+400, base+450)
    b_start = base + 150 if overlap else base + 200
    return [{"name": "A", "start_ns": base + 100, "duration_ns": 100, "iteration": it},
            {"name": "B", "start_ns": b_start, "duration_ns": 150 if overlap else 100, "iteration": it},
            {"name": "C", "start_ns": base + 400, "duration_ns": 50, "iteration": it}]


def test_union_of_intervals_by_hand():
    rows = [{"start_ns": 100, "duration_ns": 100}, {"start_ns": 150, "duration_ns": 150},
            {"start_ns": 160, "duration_ns": 10}, {"start_ns": 400, "duration_ns": 50}]
    assert kernels.interval_union_ns(rows) == 200 + 50  # [100, 300) and [400, 450)
    assert kernels.interval_union_ns([]) == 0.0


def test_overlapping_kernels_are_flagged_and_the_sum_stays_the_kernel_time():
    rows = [r for it in range(3) for r in _iteration(it, 1000 * (it + 1))]
    s = kernels.summarize(rows, warmup=1, repeats=2)
    assert s["status"] == "ok"
    assert s["kernel_time_ns"] == 100 + 150 + 50  # the sum: MFU's denominator
    assert s["kernel_union_ns"] == 250  # [100, 300) + [400, 450)
    assert s["kernel_overlap_ns"] == 50
    assert s["span_ns"] == 350 and s["launch_overhead_ns"] == 100  # the 300..400 gap, not max(350 - 300, 0) = 50
    assert any(f.startswith("kernel_overlap: kernels of iterations [1, 2]") for f in s["flags"])


def test_without_overlap_nothing_changes():
    rows = [r for it in range(3) for r in _iteration(it, 1000 * (it + 1), overlap=False)]
    s = kernels.summarize(rows, warmup=1, repeats=2)
    assert s["kernel_time_ns"] == s["kernel_union_ns"] == 250 and s["kernel_overlap_ns"] == 0
    assert s["launch_overhead_ns"] == s["span_ns"] - s["kernel_time_ns"] == 100
    assert not any("kernel_overlap" in f for f in s["flags"])
