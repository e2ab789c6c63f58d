"""Test doubles of the probe's time and processes: a fake clock, a fake tracer (gate 2 and the ranking trace) and a
fake gate runner (gates 3-4), injected into :func:`mfulib.search.probe_run.run` - no sleep, no subprocess.

The operator is the batched matmul of tests/probe_ops.py (A [b, m, k] @ B [b, k, n], fp32); its behaviour is a
:class:`Op` (the ``PROBE_OP_MODE`` modes of probe_ops, as numbers instead of sleeps):

* traced FLOPs 2*b*m*k*n; ``reject_m``: the reference refuses m > ``limit``; a trace takes ``trace_s`` seconds
  (``slowref``: 30 s) after a start of ``warmup_s`` (the trace zygote's warm-up);
* one ModelNew call takes ``call_s`` seconds, or by mode: ``slow`` 0.3 s when m > limit; ``flat`` FLOPs / 2.5e5
  (a constant 0.25 MFLOP/s); ``rate`` FLOPs / ``rate(b, m, k, n)`` (a throughput that depends on the shape);
  ``membound`` input bytes / 0.5 GB/s; ``lazy`` the same for A built with m = 4 (a
  reference that ignores the scaled axis); ``sleep1`` ``sleep_s``;
* verify: ``wrong`` fails when m > limit, ``oom`` runs out of memory (the child retires), ``die`` ends the child
  (exit 1, a traceback in the case's log); verify costs one call,
  timing a warm-up call and up to 3 calls stopped once their sum exceeds --max-ms (:mod:`mfulib.search.probe_child`).

A process outlives its timeout by the simulated clock only: a wait that would pass the timeout advances the clock
by the timeout and reports a timeout, as the real worker and trace do.
"""
import json
import statistics
import subprocess
from dataclasses import dataclass

from mfulib.core.opdir import OpDir


class FakeClock:
    """Seconds that pass only when a fake process says so."""

    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += max(0.0, s)


@dataclass
class Op:
    mode: str = "ok"
    limit: int = 64
    sleep_s: float = 1.0
    trace_s: float = 1.0
    warmup_s: float = 0.0
    call_s: float = 0.001
    rate: object = None  # mode "rate": a function (b, m, k, n) -> the FLOP/s one ModelNew call runs at

    def dims(self, case: dict) -> tuple:
        a, b = ({e["name"]: e["shape"] for e in case["inputs"]}[n] for n in ("A", "B"))
        return a[0], a[1], a[2], b[2]

    def flops(self, case: dict) -> float:
        b, m, k, n = self.dims(case)
        return 2.0 * b * m * k * n

    def call_seconds(self, case: dict) -> float:
        b, m, k, n = self.dims(case)
        big = m > self.limit
        if self.mode == "slow" and big:
            return 0.3
        if self.mode == "flat":
            return self.flops(case) / 2.5e5
        if self.mode == "rate":
            return self.flops(case) / self.rate(b, m, k, n)
        if self.mode == "membound":
            return (b * m * k + b * k * n) * 4 / 0.5e9
        if self.mode == "lazy":
            return (b * 4 * k + b * k * n) * 4 / 0.5e9
        if self.mode == "sleep1":
            return self.sleep_s
        return self.call_s


class FakeProc:
    """A trace that ends ``duration`` clock seconds after its start, writing its flops_check.json then."""

    def __init__(self, clock, duration, finish):
        self.clock, self.t_end, self.finish, self.rc, self.killed = clock, clock() + duration, finish, None, False

    def wait(self, timeout=None):
        if self.killed:
            return -9
        if timeout is not None and self.clock() + timeout < self.t_end:
            self.clock.advance(timeout)
            raise subprocess.TimeoutExpired("fake trace", timeout)
        self.clock.advance(self.t_end - self.clock())
        if self.rc is None:
            self.rc = self.finish()
        return self.rc

    def poll(self):
        if self.killed:
            return -9
        if self.rc is None and self.clock() >= self.t_end:  # ended by now (the clock passed its end)
            self.rc = self.finish()
        return self.rc


class FakeTracer:
    """``start_tool`` / ``stop`` / ``close_shared`` of :mod:`mfulib.run.trace_zygote`: ``--tracer-only`` runs of
    check_flops.py on an op dir, answered from its case file. ``traced``: the case shapes every run was given."""

    def __init__(self, clock: FakeClock, op: Op, durations=()):
        self.clock, self.op, self.procs, self.traced, self.closed = clock, op, [], [], 0
        self.threads = []  # the threads= each start_tool call was given
        self.durations = list(durations)  # seconds of the first runs, in order (then op.trace_s)

    def start_tool(self, argv, log, threads=None):
        self.threads.append(threads)
        self.clock.advance(self.op.warmup_s)
        op_dir, out = argv[argv.index("--op-dir") + 1], argv[argv.index("-o") + 1]
        cases = OpDir(op_dir).read_cases()
        ids = ([int(x) for x in argv[argv.index("--cases") + 1].split(",")] if "--cases" in argv
               else list(range(len(cases))))
        with open(log, "w") as f:
            f.write("fake tracer\n")
        duration = 30.0 if self.op.mode == "slowref" else self.durations.pop(0) if self.durations else self.op.trace_s

        def finish():
            rows = []
            for i in ids:
                b, m, k, n = self.op.dims(cases[i])
                self.traced.append((b, m, k, n))
                if self.op.mode == "reject_m" and m > self.op.limit:
                    tr = {"status": "rejected", "reason": f"case rejected: m {m} > {self.op.limit}"}
                    rows.append({"case": i, "status": "rejected", "tracer": tr})
                    continue
                rows.append({"case": i, "status": "ok", "tracer": {"status": "ok", "total_flops": self.op.flops(
                    cases[i]), "inputs_drawn": True}})
            with open(out, "w") as f:
                json.dump({"per_case": rows}, f)
            return 0
        proc = FakeProc(self.clock, duration, finish)
        self.procs.append(proc)
        return proc

    def stop(self, proc) -> None:
        proc.killed = True

    def close_shared(self) -> None:
        self.closed += 1

    def running(self) -> list:
        """Traces neither finished nor killed (a probe must leave none)."""
        return [p for p in self.procs if p.rc is None and not p.killed]


class FakeGateRunner:
    """The gate runner's ``call(request, timeout_s)`` -> (reply, outcome, wall_s, returncode) of
    :class:`mfulib.search.probe_gates.GateWorker`, answered from the staged case. ``requests``: (case dims,
    time_only) of every call; ``children``: how many children the real runner would have started (a retire or a
    timeout ends one)."""

    def __init__(self, clock: FakeClock, op: Op):
        self.clock, self.op, self.requests, self.children, self.alive, self.closed = clock, op, [], 0, False, False

    def call(self, req: dict, timeout_s: float):
        case = OpDir(req["op_dir"]).read_cases()[0]
        b, m, k, n = self.op.dims(case)
        self.requests.append(((b, m, k, n), bool(req.get("time_only"))))
        if not self.alive:
            self.children, self.alive = self.children + 1, True
        call_s, big, reply, spent = self.op.call_seconds(case), m > self.op.limit, {}, 0.0
        if self.op.mode == "die" and big:  # the child exits in verify: its last words in the case's log
            with open(req["log_path"], "a") as f:
                f.write("Traceback (most recent call last):\nRuntimeError: shape too large (test double)\n")
            self.clock.advance(call_s)
            self.alive = False
            return {"worker_log": "probe child started (test double)"}, "died", call_s, 1
        if not req.get("time_only"):
            spent += call_s
            if self.op.mode == "wrong" and big:
                row = {"status": "fail", "max_norm_err": 1.0, "tol": 1e-3}
            elif self.op.mode == "oom" and big:
                row = {"status": "oom", "reason": "CUDA out of memory. Tried to allocate 64.00 GiB (test double)"}
            else:
                row = {"status": "pass", "max_norm_err": 0.0, "tol": 1e-3}
            reply.update(verify=row, verify_s=spent)
            if row["status"] != "pass":
                return self._reply(dict(reply, retire=row["status"] == "oom"), spent, timeout_s)
        t0, runs = spent, []
        spent += call_s  # the warm-up (compiling) call
        for _ in range(3):
            spent += call_s
            runs.append(call_s * 1e3)
            if sum(runs) > req["max_ms"]:
                break
        reply["time"] = {"status": "ok", "time_ms": statistics.median(runs), "runs_ms": runs,
                         "wall_s": round(spent - t0, 3)}
        return self._reply(dict(reply, retire=False), spent, timeout_s)

    def _reply(self, msg, spent, timeout_s):
        if spent > timeout_s:  # killed at its timeout: no reply, the next candidate gets a fresh child
            self.clock.advance(timeout_s)
            self.alive = False
            return None, "timeout", timeout_s, -9
        self.clock.advance(spent)
        if msg.get("retire"):
            self.alive = False
        return msg, "done", spent, None

    def close(self) -> None:
        self.closed = True
