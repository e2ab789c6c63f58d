"""The GEMM shape search of step 5: seed shapes refined by a coordinate hill climb on m, n, k within a deadline.

mamf-finder walks a brute-force grid for hours; here a dozen seed shapes are refined by a coordinate hill climb
(steps 2048 -> 256 on m, n, k) until a time budget runs out, which finds the same plateau in seconds
(``bench/bench_peak_calib.py`` checks it against a >= 100-shape sweep). The best three shapes are then re-timed
with more iterations (:func:`confirm_best`) so a lucky noisy median does not set the ceiling.
"""
from __future__ import annotations

import math
import time

from mfulib.core.definitions import time_ns_at
from mfulib.core.failures import is_out_of_memory
from mfulib.peaks.gemm_timing import DEFAULT_B_LAYOUT, Bench, measure_gemm

# bytes per element of A/B and of C per math mode (int8 -> int32 out; fp8 -> bf16 out; NPU int8 -> bf16, fewer)
_IN_BYTES = {"int8": 1, "float8_e4m3fn": 1, "float32": 4, "tf32": 4}
_OUT_BYTES = {"int8": 4, "float8_e4m3fn": 2, "float32": 4, "tf32": 4}


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

    def __init__(self, dev: Bench, mode: str, target_ms: float, max_operand_bytes: int, max_flop: float,
                 deadline: float = math.inf, on_result=None, timer=None, b_layout: str = DEFAULT_B_LAYOUT):
        self.dev, self.mode, self.target_ms = dev, mode, target_ms
        self.b_layout = b_layout  # B operand layout every shape is timed with (see gemm_timing.b_layouts)
        # timer(m, n, k, target_ms=..., b_layout=..., **kw) -> result dict; tests pass a synthetic one
        self.timer = timer or (lambda m, n, k, **kw: measure_gemm(dev, mode, m, n, k, **kw))
        self.max_operand_bytes, self.max_flop = max_operand_bytes, max_flop
        self.deadline = deadline
        self.results = {}
        self.errors = {}
        self.on_result = on_result

    def fits(self, shape) -> bool:
        m, n, k = shape
        item, out_item = _IN_BYTES.get(self.mode, 2), _OUT_BYTES.get(self.mode, 2)
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
            r = self.timer(*shape, target_ms=self.target_ms, max_ms=max_ms, b_layout=self.b_layout)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # unsupported mode/shape, OOM: recorded, the sweep goes on
            self.errors[shape] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if self.dev is not None and is_out_of_memory(exc):
                self.dev.backend.empty_cache()  # the allocator's cached blocks back before the next shape
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


def probe_layouts(sweep: Sweep, seeds, layouts) -> dict:
    """Time the first seed that fits once per B layout, keep the fastest as ``sweep.b_layout``; returns
    ``{"shape": [m, n, k], "tflops": {layout: value}, "errors": {layout: text}, "chosen": layout}``.

    Why: the int8 path of torch ran 132.5 TOPS with B row-major and 1,018.6 TOPS with B column-major on the H200
    (bench/RESULTS.md, "Peaks: int8 and fp8"; bench/probe_lowp_gemm.py sweeps both); which layout a library's fast path
    takes differs per library, so both are timed. The chosen layout's result stays in the sweep (it is not timed again).
    With one layout nothing is probed.
    """
    out = {"shape": None, "tflops": {}, "errors": {}, "chosen": sweep.b_layout}
    if len(layouts) < 2:
        out["chosen"] = sweep.b_layout = layouts[0] if layouts else sweep.b_layout
        return out
    shape = next((tuple(s) for s in seeds if sweep.fits(s)), None)
    if shape is None:
        return out
    out["shape"] = list(shape)
    kept = {}
    for lay in layouts:
        try:
            r = sweep.timer(*shape, target_ms=sweep.target_ms, b_layout=lay)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # a layout the library rejects
            out["errors"][lay] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            continue
        out["tflops"][lay] = r["tflops"]
        kept[lay] = r
    if kept:
        best = max(kept, key=lambda lay: kept[lay]["tflops"])
        out["chosen"] = sweep.b_layout = best
        sweep.results[shape] = kept[best]
        if sweep.on_result:
            sweep.on_result(sweep, kept[best])
    return out


def confirm_best(sweep: Sweep, top: int = 3, target_ms: float = 60.0) -> dict:
    """Re-time the ``top`` best shapes with more iterations; returns the best confirmed result, with
    ``sweep_tflops`` (the shape's sweep figure) and ``candidates`` ([{m, n, k, sweep_tflops, tflops, spread}]).

    Taking the max of many noisy medians favours a lucky one; the confirmation run sets the reported peak, and its
    iteration spread ((p90 - p10) / median) says how far the number can be trusted.
    """
    best, cands = None, []
    for r in sweep.best(top):
        max_ms = max(target_ms, 3 * r["median_ns"] / 1e6)
        again = sweep.timer(r["m"], r["n"], r["k"], target_ms=target_ms, max_iters=200, max_ms=max_ms,
                            b_layout=sweep.b_layout)
        again["sweep_tflops"] = r["tflops"]
        cands.append({"m": r["m"], "n": r["n"], "k": r["k"], "sweep_tflops": r["tflops"],
                      "tflops": again["tflops"], "spread": again.get("spread")})
        if best is None or again["tflops"] > best["tflops"]:
            best = again
    if best is not None:
        best["candidates"] = cands
    return best
