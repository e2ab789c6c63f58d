"""The shape search's wall clock (mfulib.core.wallclock): back-to-back calls amortise the launch + synchronize
latency, so the probe's gate 4 and stage 1 rank a short kernel by its rate, not by the latency.

On the H100, real 1_BatchMatmul's [1, 2048, 4096] x [4096, 2048] case (kernel ~56 us) showed 121 us per synchronised
call; ranked so, the search's limit was a 24x-scaled case 12% below the brute force's best. The device here is a
labelled test double: a virtual queue (a call adds its kernel time, a synchronize waits for the queue to drain and
then pays a fixed latency) on a virtual clock that only the device advances, given to the wall-clock functions in
place of time.perf_counter: no sleeps, so a loaded host (CI's 2 cores under xdist) cannot stretch a 0.5 ms latency
into 3 ms and change how many calls a run makes.
"""
import pytest

from mfulib.core import wallclock
from mfulib.search import probe_child


class FakeDevice:
    """Test double of an asynchronous device on a virtual clock (``now``, seconds; ``clock()`` reads it):
    ``launch`` queues ``kernel_s`` of work and returns at once; ``sync`` advances the clock until the queue has
    drained, then ``latency_s`` more (the synchronize's round trip)."""

    def __init__(self, latency_s):
        self.latency_s, self.busy_until, self.launches, self.syncs, self.now = latency_s, 0.0, 0, 0, 0.0

    def clock(self):
        return self.now

    def launch(self, kernel_s):
        self.busy_until = max(self.busy_until, self.now) + kernel_s
        self.launches += 1

    def sync(self):
        self.syncs += 1
        self.now = max(self.now, self.busy_until) + self.latency_s


class FakeOpDir:
    """Test double of an OpDir whose case 0 runs one kernel of ``kernel_s`` on ``dev`` (a BuiltCase's fields:
    ``model(*args)`` is one call, ``staging`` its directory)."""

    def __init__(self, dev, kernel_s, staging):
        self.dev, self.kernel_s, self.staging = dev, kernel_s, staging

    def build_case(self, case_id, impl, seed, device):
        dev, kernel_s, staging = self.dev, self.kernel_s, self.staging

        class Built:
            args = []

            def __init__(self):
                self.staging = staging

            @staticmethod
            def model():
                dev.launch(kernel_s)

            def close(self):
                pass
        return Built()


def test_calls_per_burst_sizes_a_run_to_the_target_within_its_bounds():
    assert wallclock.calls_per_burst(0.121) == 83  # ceil(10 / 0.121): the H100 case above, ~10 ms per run
    assert wallclock.calls_per_burst(2.5) == 4
    assert wallclock.calls_per_burst(25.0) == 1  # a call longer than the target runs alone
    assert wallclock.calls_per_burst(0.001) == wallclock.BURST_MAX_CALLS
    assert wallclock.calls_per_burst(0.0) == wallclock.BURST_MAX_CALLS
    assert wallclock.calls_per_burst(None) == wallclock.BURST_MAX_CALLS
    assert wallclock.calls_per_burst(1.0, target_ms=3.0, max_calls=2) == 2


def test_a_burst_synchronises_once_and_divides_its_wall_time_by_the_calls():
    ticks = iter([10.0, 10.5])  # a fake clock: 500 ms for the whole run
    calls, syncs = [], []
    per_call = wallclock.burst_ms(lambda: calls.append(1), lambda: syncs.append(1), 20, clock=lambda: next(ticks))
    assert per_call == pytest.approx(25.0) and len(calls) == 20 and len(syncs) == 1


def _time(latency_s, kernel_s, max_ms=4000.0):
    import tempfile
    dev = FakeDevice(latency_s)
    orig = probe_child._sync, wallclock.size_burst.__defaults__, wallclock.burst_ms.__defaults__
    probe_child._sync = lambda device: dev.sync()
    # time_run calls both with their default clock (time.perf_counter): the device's virtual clock instead
    wallclock.size_burst.__defaults__ = (orig[1][0], dev.clock)
    wallclock.burst_ms.__defaults__ = (dev.clock,)
    try:
        with tempfile.TemporaryDirectory() as staging:
            return probe_child.time_run(FakeOpDir(dev, kernel_s, staging), "cuda:0", 0, max_ms, 3), dev
    finally:
        probe_child._sync, wallclock.size_burst.__defaults__, wallclock.burst_ms.__defaults__ = orig


def test_gate_4_amortises_the_synchronize_latency_over_back_to_back_calls():
    t, dev = _time(latency_s=0.5e-3, kernel_s=0.2e-3)
    assert t["status"] == "ok"
    assert t["single_ms"] == pytest.approx(0.7)  # one synchronised call: kernel + latency
    n = t["calls_per_run"]
    assert n == wallclock.calls_per_burst(t["single_ms"]) and n >= 10
    assert len(t["runs_ms"]) == 3 and dev.syncs == 2 + 3  # warm-up, single, then one sync per run
    assert dev.launches == 2 + 3 * n
    # (n x 0.2 + 0.5) / n ms per call: near the kernel (0.2 ms), far below the synchronised call
    assert t["time_ms"] == pytest.approx(0.2 + 0.5 / n) and t["time_ms"] < 0.6 * t["single_ms"]


def test_a_call_over_max_ms_is_timed_once_and_not_repeated():
    t, dev = _time(latency_s=0.0, kernel_s=30e-3, max_ms=20.0)
    assert t["time_ms"] > 20.0 and t["runs_ms"] == [t["single_ms"]] and t["calls_per_run"] == 1
    assert dev.launches == 2  # warm-up and the one timed call: no run of a call that already fails gate 4


def test_the_ranking_follows_the_kernel_rate_not_the_latency():
    """A small case (1 unit of work in 0.2 ms) outruns a large one (8 units in 2.0 ms: 4 per ms against 5), but one
    synchronised call (+0.5 ms each) ranks the large one first (3.2 per ms against 1.4); back-to-back runs do not."""
    latency = 0.5e-3
    small, _ = _time(latency, 0.2e-3)
    large, _ = _time(latency, 2.0e-3)
    assert 8 / large["single_ms"] > 1 / small["single_ms"]  # the old measurement's ranking: large first
    assert 1 / small["time_ms"] > 8 / large["time_ms"]  # back-to-back: small first, as the kernels run


def test_size_burst_times_one_synchronised_call_and_sizes_the_runs_from_it():
    ticks = iter([1.0, 1.0 + 2.0 ** -8])  # a fake clock: 3.90625 ms for the one call (exact in binary)
    calls, syncs = [], []
    single, n = wallclock.size_burst(lambda: calls.append(1), lambda: syncs.append(1), clock=lambda: next(ticks))
    assert single == pytest.approx(3.90625) and n == 3 and len(calls) == len(syncs) == 1  # ceil(10 / 3.90625)


def test_an_oom_inside_a_run_of_calls_blames_memory_kept_across_calls_not_the_shape(tmp_path):
    """A ModelNew that holds every output (a leak) fits one call but not a run of n: the reason says so, so the
    user frees the memory instead of reading the shape as too large; an OOM on the first call stays plain."""
    import torch

    class Leaky(FakeOpDir):  # test double: the 3rd call and later run out of memory
        def build_case(self, case_id, impl, seed, device):
            built, held = super().build_case(case_id, impl, seed, device), []

            def model():
                held.append(1)
                if len(held) > self.fits:
                    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")
            built.model = model
            return built
    orig = probe_child._sync
    probe_child._sync = lambda device: None
    try:
        for fits, blamed in ((2, True), (0, False)):
            od = Leaky(None, 0.0, str(tmp_path))
            od.fits = fits
            t = probe_child.time_run(od, "cuda:0", 0, 4000.0, 3)
            assert t["status"] == "oom" and "out of memory" in t["reason"]
            assert ("keep memory from call to call" in t["reason"]) is blamed, t["reason"]
            assert ("pick smaller cases" in t["reason"]) is not blamed, t["reason"]  # one piece of advice, not two
    finally:
        probe_child._sync = orig
