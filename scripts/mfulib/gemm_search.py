"""The GEMM shape search of step 5: seed shapes refined by a coordinate hill climb on m, n, k within a deadline.

mamf-finder walks a brute-force grid for hours; here a dozen seed shapes are refined by a coordinate hill climb
(steps 2048 -> 256 on m, n, k) until a time budget runs out, which finds the same plateau in seconds
(``bench/bench_peak_calib.py`` checks it against a >= 100-shape sweep). The best three shapes are then re-timed
with more iterations (:func:`confirm_best`) so a lucky noisy median does not set the ceiling.
"""
from __future__ import annotations

import math
import time

from .definitions import time_ns_at
from .gemm_timing import Device, measure_gemm


def neighbours(shape, step: int, lo: int, hi: int):
    """Shapes one ``step`` away from ``shape`` along m, n or k, within [lo, hi]."""
    m, n, k = shape
    out = []
    for dm, dn, dk in ((step, 0, 0), (-step, 0, 0), (0, step, 0), (0, -step, 0), (0, 0, step), (0, 0, -step)):
        s = (m + dm, n + dn, k + dk)
        if all(lo <= v <= hi for v in s):
            out.append(s)
    return out


class Sweep:
    """Timed GEMM shapes of one math mode, best first on demand. ``measure(shape)`` times a shape once.

    Shapes whose operands exceed ``max_operand_bytes`` or whose FLOPs exceed ``max_flop`` are not run; past
    ``deadline`` (``time.monotonic()``) nothing is run, and a shape that the best rate so far says would overrun the
    deadline is skipped (the first shape of a sweep always runs, with at least 3 iterations).
    """

    def __init__(self, dev: Device, mode: str, target_ms: float, max_operand_bytes: int, max_flop: float,
                 deadline: float = math.inf, on_result=None, timer=None):
        self.dev, self.mode, self.target_ms = dev, mode, target_ms
        # timer(m, n, k, target_ms=..., **kw) -> result dict; tests pass a synthetic one
        self.timer = timer or (lambda m, n, k, **kw: measure_gemm(dev, mode, m, n, k, **kw))
        self.max_operand_bytes, self.max_flop = max_operand_bytes, max_flop
        self.deadline = deadline
        self.results = {}
        self.errors = {}
        self.on_result = on_result

    def fits(self, shape) -> bool:
        m, n, k = shape
        item = 1 if self.mode == "int8" else (4 if self.mode in ("float32", "tf32") else 2)
        out_item = 4 if self.mode in ("int8", "float32", "tf32") else 2
        return ((m * k + k * n) * item + m * n * out_item <= self.max_operand_bytes
                and 2.0 * m * n * k <= self.max_flop)

    def measure(self, shape):
        shape = tuple(int(v) for v in shape)
        if shape in self.results or shape in self.errors or not self.fits(shape):
            return self.results.get(shape)
        left_ms = (self.deadline - time.monotonic()) * 1e3
        max_ms = None
        if self.results:
            if left_ms <= 0:
                return None
            rate = max(r["tflops"] for r in self.results.values())  # TFLOP/s = FLOP per ns / 1e3
            est_ms = time_ns_at(2.0 * shape[0] * shape[1] * shape[2], rate) / 1e6
            if est_ms * 6 > left_ms:  # 2 warm-up + 3 timed iterations + set-up would overrun
                return None
            max_ms = left_ms / 2 if math.isfinite(left_ms) else None
        try:
            r = self.timer(*shape, target_ms=self.target_ms, max_ms=max_ms)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # unsupported mode/shape, OOM: recorded, the sweep goes on
            self.errors[shape] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if self.dev is not None and self.dev.backend == "cuda" and "out of memory" in str(exc).lower():
                self.dev.torch.cuda.empty_cache()
            return None
        self.results[shape] = r
        if self.on_result:
            self.on_result(self, r)
        return r

    def best(self, n: int = 1):
        return sorted(self.results.values(), key=lambda r: -r["tflops"])[:n]


def hill_climb(sweep: Sweep, seeds, steps, lo: int, hi: int) -> None:
    """Measure ``seeds``, then move to the best neighbour along m/n/k with each step size until nothing improves
    or ``time.monotonic()`` passes ``sweep.deadline``. Seeds run until one succeeds even past the deadline, so every
    mode that runs at all gets a number."""
    deadline = sweep.deadline
    for s in seeds:
        if time.monotonic() > deadline and sweep.results:
            return
        sweep.measure(s)
    if not sweep.results:
        return
    for step in steps:
        while time.monotonic() < deadline:
            cur = sweep.best()[0]
            cur_shape = (cur["m"], cur["n"], cur["k"])
            for nb in neighbours(cur_shape, step, lo, hi):
                if time.monotonic() > deadline:
                    return
                sweep.measure(nb)
            new = sweep.best()[0]
            if (new["m"], new["n"], new["k"]) == cur_shape:
                break


def confirm_best(sweep: Sweep, top: int = 3, target_ms: float = 60.0) -> dict:
    """Re-time the ``top`` best shapes with more iterations; returns the best confirmed result.

    Taking the max of many noisy medians favours a lucky one; the confirmation run sets the reported peak.
    """
    best = None
    for r in sweep.best(top):
        max_ms = max(target_ms, 3 * r["median_ns"] / 1e6)
        again = sweep.timer(r["m"], r["n"], r["k"], target_ms=target_ms, max_iters=200, max_ms=max_ms)
        again["sweep_tflops"] = r["tflops"]
        if best is None or again["tflops"] > best["tflops"]:
            best = again
    return best
