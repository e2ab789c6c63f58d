"""make batch without running the pipeline: device assignment, isolation (failure, timeout with the process tree
killed), discovery of layout A roots, order, the peak-cache lock and the optional-requirements rule.

The pipeline is replaced by a labelled test double of make (STUB_MAKE below, passed as --make): it records the
arguments and environment each operator's child got and when it ran, then succeeds, fails or hangs as planned.
"""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from mfulib.batch import plan as batch  # noqa: E402
from mfulib.schemas import peak_json  # noqa: E402
from mdtable import md_row  # noqa: E402

BATCH = os.path.join(ROOT, "scripts", "mfu_batch.py")

# test double of `make OP=.. WORK=.. ... all`: records what it got;
# STUB_PLAN {op: ok|fail|hang|sigint|ctrl_c|graceful|stubborn|orphan|parallel}
STUB_MAKE = r'''#!/usr/bin/env python3
import json, os, subprocess, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
if sys.argv[-1] != "all":  # another target (the batch's `make report` after `all`): its arguments, beside the record
    target = os.path.join(os.environ["STUB_DIR"], args["OP"].replace("/", "__") + "." + sys.argv[-1] + ".args")
    open(target, "w").write(json.dumps(dict(args, env_FORCE=os.environ.get("FORCE"))))
    sys.exit(0)
op, start = args["OP"], time.time()
action = json.loads(os.environ.get("STUB_PLAN", "{}")).get(op, "ok")
rec = {"op": op, "args": args, "start": start, "env": {k: os.environ.get(k) for k in
       ("DEVICE_ID", "CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "MAKEFLAGS", "FORCE")}}
out = os.path.join(os.environ["STUB_DIR"], op.replace("/", "__") + ".json")
if action == "hang":  # a grandchild in a session of its own, as the collector's case runners are
    p = subprocess.Popen(["sleep", "120"], start_new_session=True)
    rec["grandchild"] = p.pid
    json.dump(rec, open(out, "w"))
    time.sleep(120)
if action in ("graceful", "stubborn", "orphan"):  # make stopped by SIGTERM
    # graceful: records it, ends its grandchild and exits; stubborn: ignores it; orphan: exits at once while its
    # step (a session of its own, as under device_lock.py) takes 1.5 s to write its report - make does not wait for
    # a step whose recipe shell died
    import signal
    STEP = ("import os, signal, sys, time\n"
            "def stop(s, f):\n"
            "    time.sleep(1.5)\n"
            "    open(sys.argv[1], 'w').write('written')\n"
            "    sys.exit(130)\n"
            "signal.signal(signal.SIGINT, stop)\n"
            "time.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", STEP, out + ".step"] if action == "orphan" else ["sleep", "120"],
                         start_new_session=True)
    rec["grandchild"] = p.pid
    json.dump(rec, open(out, "w"))
    def _stopped(signum, frame):
        if action == "orphan":
            os.killpg(p.pid, signal.SIGINT)
            os._exit(128 + signum)
        time.sleep(0.5)  # a step writing its interrupted report
        rec["stopped_by"] = signal.Signals(signum).name
        json.dump(rec, open(out, "w"))
        p.kill()
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if action == "stubborn" else _stopped)
    time.sleep(120)
if action == "parallel":  # SIGTERM while verify and the FLOPs check ran and peak waited for the lock: their lines
    import signal
    def _parallel(signum, frame):
        for step in ("verify", "flops"):
            print(f"step {step} interrupted (SIGTERM): stopping it (pid 1); it is not done, the next make redoes it")
        for step, line in (("flops", 254), ("verify", 242), ("peak", 270)):
            print(f"make: *** [Makefile:{line}: w/.state/{step}.ok] Terminated")
        sys.stdout.flush()
        os._exit(128 + signum)
    signal.signal(signal.SIGTERM, _parallel)
    time.sleep(120)
if action == "ctrl_c":  # the user's Ctrl-C while this operator runs: the batch's process group, then this child
    import signal
    while not os.path.exists(os.environ["STUB_PGID_FILE"]):
        time.sleep(0.05)
    os.killpg(int(open(os.environ["STUB_PGID_FILE"]).read()), signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)  # dies of it unless its parent blocked SIGINT (Ray's workers do)
if action == "sigint":  # what a Ctrl-C that reached the child before its setsid does
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
if action == "fail":
    print("error: planted failure in the stub", flush=True)
    print("make: step verify FAILED (exit status 1); its report is kept: x/verify.json", flush=True)
    sys.exit(2)
time.sleep(float(os.environ.get("STUB_SLEEP", "1.5")))
rec["end"] = time.time()
json.dump(rec, open(out, "w"))
'''


@pytest.fixture
def stub(tmp_path):
    path = tmp_path / "stub_make"
    path.write_text(STUB_MAKE)
    path.chmod(0o755)
    rec_dir = tmp_path / "stub"
    rec_dir.mkdir()
    return str(path), rec_dir


def run_batch(stub, out, *args, plan=None, env=None):
    e = dict(os.environ, STUB_DIR=str(stub[1]), STUB_PLAN=json.dumps(plan or {}), MAKEFLAGS="-j9 WORK=/nowhere",
             **(env or {}))
    r = subprocess.run([sys.executable, BATCH, "--out", str(out), "--make", stub[0], "--no-progress", *args],
                       capture_output=True, text=True, timeout=120, env=e)
    summary = json.loads((out / "batch_summary.json").read_text()) if (out / "batch_summary.json").exists() else None
    return r, summary


def gone(pid, wait_s=5.0):
    """True once ``pid`` has exited (absent, or a zombie its new parent has not reaped yet)."""
    t_end = time.monotonic() + wait_s
    while time.monotonic() < t_end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def need_ray():
    """Skip a RUNNER=ray test where Ray is not installed; fail it in CI, which installs requirements-ray.txt."""
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("ray is not importable in CI: .ci/run installs requirements-ray.txt")
        pytest.skip("ray is not installed (pip install -r requirements-ray.txt)")


def stub_records(stub):
    return {json.loads(p.read_text())["op"]: json.loads(p.read_text()) for p in stub[1].glob("*.json")}


@pytest.mark.e2e
def test_two_fake_device_ids_get_one_worker_each_running_in_parallel_longest_first(tmp_path, stub):
    ops = "zoo/1_BatchMatmul,zoo/2_Softmax,zoo/3_RMSNorm,zoo/4_FFN"
    r, s = run_batch(stub, tmp_path / "out", "--examples", "zoo", "--ops", ops, "--devices", "0,1",
                     "--backend", "cuda")
    assert r.returncode == 0, r.stdout + r.stderr
    recs = stub_records(stub)
    assert set(recs) == set(ops.split(","))
    rows = {row["name"]: row for row in s["rows"]}
    for op, rec in recs.items():
        dev = rows[op]["device"]
        assert dev in ("0", "1")
        # the child sees only its device, as index 0; the enclosing make's MAKEFLAGS never reach it
        assert rec["env"]["CUDA_VISIBLE_DEVICES"] == dev and rec["env"]["DEVICE_ID"] == "0"
        assert rec["args"]["DEVICE_ID"] == "0" and rec["env"]["MAKEFLAGS"] is None
        # each worker takes the lock of its physical device, not device 0's (which would serialise the workers)
        # (the Makefile names the lock by LOCK_DEVICE: tests/test_make_settings.py checks the path it gives)
        assert rec["args"]["LOCK_DEVICE"] == dev and "DEVICE_LOCK" not in rec["args"]
        assert rec["args"]["WORK"] == str(tmp_path / "out" / "ops" / op) and rec["args"]["BACKEND"] == "cuda"
    by_dev = {d: sorted((recs[o]["start"], recs[o]["end"]) for o in recs if rows[o]["device"] == d) for d in "01"}
    assert all(len(v) == 2 for v in by_dev.values())  # 4 jobs of equal length: two per worker
    for spans in by_dev.values():  # one worker runs one operator at a time
        assert spans[0][1] <= spans[1][0]
    a, b = by_dev["0"][0], by_dev["1"][0]
    assert a[0] < b[1] and b[0] < a[1]  # the two workers ran at the same time
    # longest first: the two largest by input bytes started first
    est = s["estimates"]
    first_two = sorted(recs, key=lambda o: recs[o]["start"])[:2]
    assert sorted(first_two) == sorted(sorted(est, key=lambda o: -est[o]["input_bytes"])[:2])
    assert s["workers"] == 2 and s["devices"] == ["0", "1"] and s["devices_from"] == "DEVICES="
    assert s["lpt_makespan_s"]["2"] < s["lpt_makespan_s"]["1"] == pytest.approx(s["sum_op_wall_s"])


class FakeProc:
    """Stands for a subprocess.Popen whose wait(timeout=) advances a fake clock instead of sleeping."""

    def __init__(self, clock, exits_at=None):
        self.clock, self.exits_at, self.waits = clock, exits_at, 0

    def wait(self, timeout=None):
        self.waits += 1
        self.clock[0] += timeout
        if self.exits_at is not None and self.clock[0] >= self.exits_at:
            return 0
        raise subprocess.TimeoutExpired("fake", timeout)


@pytest.mark.parametrize("exits_at, timeout_s, stop_at, outcome", [
    (3.0, 10.0, None, "done"),       # the child ends before its limit
    (None, 4.0, None, "timeout"),    # it never ends: the limit (OP_TIMEOUT_S) ends the wait
    (None, None, 2.0, "stopped"),    # no limit: the batch's interruption ends the wait
    (30.0, 0, None, "done"),         # 0 = no limit
])
def test_the_wait_for_an_operator_ends_by_exit_timeout_or_stop_on_its_clock(exits_at, timeout_s, stop_at, outcome):
    from mfulib.batch import job
    clock = [100.0]
    proc = FakeProc(clock, exits_at and 100.0 + exits_at)
    stop = (lambda: clock[0] >= 100.0 + stop_at) if stop_at else None
    assert job.wait_outcome(proc, timeout_s, stop, clock=lambda: clock[0]) == outcome
    ended = clock[0] - 100.0
    limit = {"done": exits_at, "timeout": timeout_s, "stopped": stop_at}[outcome]
    assert limit <= ended <= limit + 2 * job.POLL_S  # decided within a poll of the event, never by a real sleep


@pytest.mark.e2e
def test_a_failure_and_a_timeout_are_recorded_the_tree_killed_and_the_others_finish(tmp_path, stub):
    plan = {"zoo/2_Softmax": "fail", "zoo/3_RMSNorm": "hang"}
    r, s = run_batch(stub, tmp_path / "out", "--examples", "zoo", "--ops", "1_BatchMatmul,2_Softmax,3_RMSNorm",
                     "--op-timeout-s", "4", plan=plan, env={"STUB_SLEEP": "0.2"})
    assert r.returncode == 1, r.stdout + r.stderr
    rows = {row["name"]: row for row in s["rows"]}
    assert rows["zoo/1_BatchMatmul"]["status"] == "ok"
    failed = rows["zoo/2_Softmax"]
    assert failed["status"] == "failed" and failed["reason"].startswith("step verify failed (exit status 2)")
    assert "planted failure" in failed["reason"]
    assert rows["zoo/3_RMSNorm"]["status"] == "timeout" and "OP_TIMEOUT_S" in rows["zoo/3_RMSNorm"]["reason"]
    assert s["counts"]["failed"] == 1 and s["counts"]["timeout"] == 1 and s["counts"]["succeeded"] == 1
    assert s["counts"]["failed_why"] == {"step verify failed (exit status 2)": 1, "timeout (OP_TIMEOUT_S)": 1}
    grandchild = stub_records(stub)["zoo/3_RMSNorm"]["grandchild"]
    assert gone(grandchild)  # killed although it ran in a session of its own
    job = json.loads((tmp_path / "out" / "jobs" / "zoo__2_Softmax.json").read_text())
    assert job["failed_step"] == "verify" and job["rc"] == 2 and job["tool"] == "mfu_batch_job"


@pytest.mark.e2e
@pytest.mark.parametrize("action", ["graceful", "stubborn", "orphan"])
def test_a_timed_out_operator_gets_sigterm_and_its_grace_before_its_tree_is_killed(tmp_path, stub, action):
    """--op-timeout-s first sends SIGTERM to make alone (a real make passes it to the step, which records what it
    finished - tests/test_device_lock.py's "SIGTERM to make"), waits --stop-grace-s for make and its whole tree
    (a step outliving make included), then kills the tree: the grandchild in a session of its own too, although
    make (its parent) is gone by then."""
    t0 = time.monotonic()
    r, s = run_batch(stub, tmp_path / "out", "--examples", "zoo", "--ops", "2_Softmax", "--op-timeout-s", "2",
                     "--stop-grace-s", "3", plan={"zoo/2_Softmax": action})
    wall = time.monotonic() - t0
    row = s["rows"][0]
    rec = stub_records(stub)["zoo/2_Softmax"]
    assert row["status"] == "timeout" and r.returncode == 1, r.stdout + r.stderr
    if action != "stubborn":
        assert "make got SIGTERM and it and its steps exited within 3 s" in row["reason"], row["reason"]
        assert "the log names no step that was running" in row["reason"]  # the stub runs no step: none named
    if action == "graceful":
        assert rec["stopped_by"] == "SIGTERM"  # the step's own stop path ran and wrote its record
    elif action == "orphan":  # make was gone at once; its step was waited for, not killed mid-write
        assert (stub[1] / "zoo__2_Softmax.json.step").read_text() == "written"
    else:
        assert "stopped_by" not in rec and "still ran after 3 s (--stop-grace-s)" in row["reason"], row["reason"]
        assert wall >= 2 + 3  # the whole grace was given before the kill
    assert gone(rec["grandchild"])
    log = (tmp_path / "out" / "logs" / "zoo__2_Softmax.log").read_text()
    assert "# mfu_batch: timeout - SIGTERM to make, 3 s" in log


@pytest.mark.e2e
def test_a_timed_out_operator_records_every_step_that_was_running(tmp_path, stub):
    r, s = run_batch(stub, tmp_path / "out", "--examples", "zoo", "--ops", "2_Softmax", "--op-timeout-s", "1",
                     "--stop-grace-s", "5", plan={"zoo/2_Softmax": "parallel"})
    row = s["rows"][0]
    rec = json.loads((tmp_path / "out" / "jobs" / "zoo__2_Softmax.json").read_text())
    assert row["status"] == rec["status"] == "timeout", r.stdout + r.stderr
    assert rec["failed_steps"] == ["verify", "flops", "peak"] and rec["failed_step"] == "verify, flops, peak"
    assert "steps verify, flops, peak were running and got the stop" in rec["reason"]


@pytest.mark.e2e
def test_stop_grace_zero_kills_at_once_and_says_so(tmp_path, stub):
    r, s = run_batch(stub, tmp_path / "out", "--examples", "zoo", "--ops", "2_Softmax", "--op-timeout-s", "2",
                     "--stop-grace-s", "0", plan={"zoo/2_Softmax": "graceful"})
    row, rec = s["rows"][0], stub_records(stub)["zoo/2_Softmax"]
    assert row["status"] == "timeout" and "killed at once (--stop-grace-s 0)" in row["reason"], row["reason"]
    assert "stopped_by" not in rec and gone(rec["grandchild"])  # no SIGTERM reached it
    log = (tmp_path / "out" / "logs" / "zoo__2_Softmax.log").read_text()
    assert "killing the process tree at once (--stop-grace-s 0)" in log and "SIGTERM to make" not in log


@pytest.mark.parametrize("grace", ["-1", "1e9", "inf", "nan"])
def test_stop_grace_must_be_within_bounds(tmp_path, grace):
    # an unbounded grace would let a hung step outlive --op-timeout-s for ever
    r = subprocess.run([sys.executable, BATCH, "--out", str(tmp_path / "o"), "--examples", "zoo",
                        "--stop-grace-s", grace], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "must be 0 to 600 seconds" in r.stderr, r.stderr


def test_the_tree_kill_leaves_a_process_that_took_a_known_pid_alone(tmp_path):
    """A pid seen in the operator's tree before the SIGTERM may belong to another process by the time the grace ends
    (pids are reused): the kill goes by pid *and* start time, so that process survives."""
    from mfulib.batch import job
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        done = subprocess.Popen(["true"])
        done.wait()
        start = job._identities([other.pid])[other.pid]
        job.kill_tree(done, {other.pid: start + 1})  # "known" from an earlier process that had this pid
        time.sleep(0.3)
        assert other.poll() is None  # untouched
        job.kill_tree(done, {other.pid: start})  # the very process: killed
        assert other.wait(timeout=5) == -9
    finally:
        other.kill()
        other.wait()


def test_the_stopped_step_is_read_from_the_lock_wrappers_line(tmp_path):
    from mfulib.batch import job
    log = tmp_path / "op.log"
    log.write_text("STEP verify running\n\nstep search interrupted (SIGTERM): stopping it (pid 8080); it is not "
                   "done, the next make redoes it\nmake: *** [Makefile:317: x/.state/search.ok] Terminated\n")
    assert job.stopped_steps(str(log)) == ["search"]
    log.write_text("waiting for this work directory's CPU lock\ninterrupted\n")
    assert job.stopped_steps(str(log)) == [] and job.stopped_steps(str(tmp_path / "none.log")) == []


# a job's log when the time limit hit two steps make ran in parallel (ALL_JOBS) - on an accelerator the FLOPs check
# (host-only: no device lock) beside verify, which held the lock - and peak, still waiting for the lock (no wrapper
# line: make's line alone names it); a step interrupted in an earlier stretch of the log is not this stop's
PARALLEL_STOP = """# mfu_batch: zoo/2_Softmax on device 0 ({'DEVICE_ID': '0'}) at 2026-01-01T00:00:00+00:00
step probe interrupted (SIGINT): stopping it (pid 10); it is not done, the next make redoes it
make: *** [Makefile:310: w/.state/probe.ok] Interrupt
# mfu_batch: timeout - SIGTERM to make, 20 s for its step to record what it finished
verify 2_Softmax on cuda:0:  50%|#####     | 2/4
step verify interrupted (SIGTERM): stopping it (pid 11); it is not done, the next make redoes it

step flops interrupted (SIGTERM): stopping it (pid 12); it is not done, the next make redoes it
interrupted
make: *** [Makefile:254: w/.state/flops.ok] Terminated
make: *** [Makefile:242: w/.state/verify.ok] Terminated
make: *** [Makefile:270: w/.state/peak.ok] Terminated
"""


def test_a_stop_names_every_step_that_was_running_in_parallel(tmp_path):
    from mfulib.batch import job
    log = tmp_path / "op.log"
    log.write_text(PARALLEL_STOP)
    steps = job.stopped_steps(str(log))
    assert steps == ["verify", "flops", "peak"]  # before: "flops" alone (the last wrapper line)
    how = job._stopped_how(True, 20, steps)
    assert "steps verify, flops, peak were running and got the stop" in how
    assert "step verify was running and got the stop (its report" in job._stopped_how(False, 20, ["verify"])
    rec = {}
    job._set_failed_steps(rec, steps)
    assert rec == {"failed_steps": ["verify", "flops", "peak"], "failed_step": "verify, flops, peak"}
    job._set_failed_steps(rec, [])
    assert rec == {"failed_steps": [], "failed_step": None}


def test_a_job_record_from_before_failed_steps_reads_as_its_one_step_and_bad_ones_are_refused(tmp_path):
    from mfulib.core.errors import UserError
    from mfulib.schemas.batch_json import read_job_record, write_job_record
    path = tmp_path / "op.json"
    old = {"tool": "mfu_batch_job", "name": "op", "status": "timeout", "failed_step": "search"}
    path.write_text(json.dumps(old))
    assert read_job_record(str(path))["failed_steps"] == ["search"]
    path.write_text(json.dumps(dict(old, failed_step=None)))
    assert read_job_record(str(path))["failed_steps"] == []
    write_job_record(str(path), {"name": "op", "status": "timeout", "failed_step": "verify, flops",
                                 "failed_steps": ["verify", "flops"]})
    assert read_job_record(str(path))["failed_steps"] == ["verify", "flops"]
    for bad in ({"failed_steps": "verify"}, {"failed_steps": [1]}, {"failed_step": ["verify"]}):
        path.write_text(json.dumps(dict(old, **bad)))
        with pytest.raises(UserError, match=f"op.json.*{next(iter(bad))}"):
            read_job_record(str(path))


@pytest.mark.e2e
def test_finished_operators_are_skipped_on_a_rerun_unless_forced(tmp_path, stub):
    out = tmp_path / "out"
    run_batch(stub, out, "--examples", "zoo", "--ops", "2_Softmax", env={"STUB_SLEEP": "0"})
    first = stub_records(stub)["zoo/2_Softmax"]["start"]
    r, s = run_batch(stub, out, "--examples", "zoo", "--ops", "2_Softmax")
    assert r.returncode == 0 and stub_records(stub)["zoo/2_Softmax"]["start"] == first
    assert s["rows"][0]["resumed"] is True and s["counts"]["reused"] == 1
    # the earlier wall time now orders the batch
    assert "earlier run" in s["estimates"]["zoo/2_Softmax"]["source"]
    r, s = run_batch(stub, out, "--examples", "zoo", "--ops", "2_Softmax", "--force", env={"STUB_SLEEP": "0"})
    rec = stub_records(stub)["zoo/2_Softmax"]
    assert rec["start"] > first and rec["args"]["FORCE"] == "1" and s["rows"][0]["resumed"] is False


def test_layout_a_root_runs_the_newest_copy_per_operator_and_lists_the_others(tmp_path):
    root = tmp_path / "root"
    src = os.path.join(ROOT, "examples", "ops", "verify", "2_Softmax")
    for ts in ("20260101_0900", "20261201_0900"):
        shutil.copytree(src, root / f"op_2_Softmax_{ts}")
    shutil.copytree(src, root / "MyOp")
    (root / "notes").mkdir()
    jobs, skipped, broken = batch.discover_jobs({"kind": "A", "root": str(root)}, str(tmp_path / "out"))
    assert {j["name"]: j["make_vars"]["V"] for j in jobs} == {"2_Softmax": str(root / "op_2_Softmax_20261201_0900"),
                                                              "MyOp": str(root / "MyOp")}
    why = dict(skipped)
    assert why["op_2_Softmax_20260101_0900"].startswith("older copy of 2_Softmax")
    assert why["notes"].startswith("not a layout A operator dir") and broken == []


def test_device_ids_come_from_devices_then_the_visibility_variables():
    env = {"CUDA_VISIBLE_DEVICES": "2,3", "ASCEND_RT_VISIBLE_DEVICES": "4,5"}
    assert batch.resolve_devices(None, "auto", env)[:2] == (["4", "5"], "ASCEND_RT_VISIBLE_DEVICES")
    assert batch.resolve_devices(None, "cuda", env) == (["2", "3"], "CUDA_VISIBLE_DEVICES", ("CUDA_VISIBLE_DEVICES",))
    assert batch.resolve_devices("0,1", "npu", env) == (["0", "1"], "DEVICES=", ("ASCEND_RT_VISIBLE_DEVICES",))
    assert batch.resolve_devices(None, "cpu", env)[0] == [None]
    with pytest.raises(batch.UserError, match="distinct"):
        batch.resolve_devices("0,0", "cuda", env)


def test_lpt_makespan():
    assert batch.lpt_makespan([5, 4, 3, 3, 3], 2) == 10  # 5+3+3 | 4+3 -> LPT gives 10 (optimum 9)
    assert batch.lpt_makespan([5, 4, 3], 1) == 12 and batch.lpt_makespan([], 2) == 0


@pytest.mark.e2e
def test_the_peak_cache_lock_makes_a_second_calibration_wait(tmp_path):
    path = str(tmp_path / "cache" / "peak-cuda-h200.json")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from mfulib.schemas import peak_json\n"
        "with peak_json.cache_lock(sys.argv[2]):\n    print('held', flush=True); time.sleep(1.5)"),
        os.path.join(ROOT, "scripts"), path], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    t0 = time.monotonic()
    with peak_json.cache_lock(path) as locked:
        waited = time.monotonic() - t0
    holder.wait()
    assert locked and waited > 0.8


def test_ray_is_an_optional_requirement_imported_only_lazily():
    import ast
    with open(os.path.join(ROOT, "requirements-ray.txt")) as f:
        optional = {ln.split(">")[0].split("=")[0].split("[")[0].strip() for ln in f if ln.strip()
                    and not ln.startswith("#")}
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        assert "ray" not in f.read().split()
    assert optional == {"ray"}
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert "requirements-ray.txt" in f.read()
    for dirpath, _d, files in os.walk(os.path.join(ROOT, "scripts")):
        for fn in files:
            if fn.endswith(".py"):
                tree = ast.parse(open(os.path.join(dirpath, fn), encoding="utf-8").read())
                top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
                names = {a.name.split(".")[0] for n in top if isinstance(n, ast.Import) for a in n.names}
                names |= {n.module.split(".")[0] for n in top if isinstance(n, ast.ImportFrom) and n.module}
                assert "ray" not in names, f"{fn}: ray must be imported inside the RUNNER=ray code path only"


@pytest.mark.e2e
def test_an_interrupted_batch_writes_its_summary_and_a_rerun_redoes_nothing_finished(tmp_path, stub):
    import signal
    out = tmp_path / "out"
    cmd = [sys.executable, BATCH, "--out", str(out), "--make", stub[0], "--no-progress", "--examples", "zoo",
           "--ops", "1_BatchMatmul,2_Softmax,3_RMSNorm"]
    env = dict(os.environ, STUB_DIR=str(stub[1]), STUB_SLEEP="2")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
            json.loads(p.read_text()).get("status") == "ok" for p in (out / "jobs").glob("*.json")
            if p.stat().st_size):
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does (the children run in sessions of their own)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, text
    s = json.loads((out / "batch_summary.json").read_text())
    by = {r["name"]: r["status"] for r in s["rows"]}
    done = [n for n, st in by.items() if st == "ok"]
    assert s["interrupted"] is True and len(done) == 1
    assert sorted(st for st in by.values() if st != "ok") == ["interrupted", "not_run"]
    finished_at = stub_records(stub)[done[0]]["start"]
    r, s2 = run_batch(stub, out, "--examples", "zoo", "--ops", "1_BatchMatmul,2_Softmax,3_RMSNorm",
                      env={"STUB_SLEEP": "0"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert stub_records(stub)[done[0]]["start"] == finished_at  # not run again
    assert {x["name"]: x["resumed"] for x in s2["rows"]} == {n: n == done[0] for n in by}
    assert all(x["status"] == "ok" for x in s2["rows"]) and s2["interrupted"] is False


def test_summary_row_reads_the_headline_case_its_dragging_part_bound_and_the_search_choice(tmp_path):
    from mfulib.batch.summary import operator_row
    work = tmp_path / "ops" / "attn"
    work.mkdir(parents=True)
    parts = [{"part": "attn", "time_share": 0.7, "flops_share": 0.25, "mfu_ach": 0.1},  # 70% of time, 25% of work
             {"part": "proj", "time_share": 0.3, "flops_share": 0.75, "mfu_ach": 0.6}]
    rows = [{"report": "attn", "case": 0, "status": "ok", "dtype": "float16", "mfu_nom": 0.20, "mfu_ach": 0.22,
             "mbu": 0.05, "numerator": "checked", "parts": parts,
             "bound": {"label": "memory-bound", "source": "pmu:ncu", "evidence": {}, "note": None}},
            {"report": "attn", "case": 3, "status": "ok", "dtype": "float16", "mfu_nom": 0.30, "mfu_ach": 0.33,
             "mbu": 0.04, "numerator": "unverified", "parts": parts[1:]}]
    dec = {"tool": "mfu_decompose", "schema": 1, "reports": [{"label": "attn", "rows": rows}], "errors": [],
           "warnings": [], "maxima": {"mfu_ach": {"value": 0.22, "report": "attn", "case": 0}}}
    (work / "mfu_decompose.json").write_text(json.dumps(dec))
    (work / "grid_search.json").write_text(json.dumps({"best": {"case": 12, "scale": 4, "factors": {"batch": 4}}}))
    job = {"name": "attn", "layout": "B", "work": str(work), "log": str(tmp_path / "attn.log"), "older": []}
    rec = {"status": "ok", "reason": None, "wall_s": 12.5, "device": "1", "report_html": None}
    row = operator_row(job, rec)
    assert (row["mfu_ach"], row["mfu_nom"], row["headline"], row["numerator"]) == (0.22, 0.20, "MFU@ach", "checked")
    assert row["dragging_part"] == "attn" and row["bound"] == "memory-bound"
    # the figures' own case (the decomposition's headline), never the search's limit beside another case's MFU
    assert (row["case"], row["scale"], row["device"], row["wall_s"]) == (0, None, "1", 12.5)  # no probe.json
    assert row["search"] == "complete; limit: case 12 (no peak known: no utilisation)"
    probe = {"tool": "max_shape_probe", "schema": 1, "complete": True, "interrupted": None,
             "appended": {"0": {"source_case": 7, "factors": {"batch": 4}, "scale": 4}}}
    (work / "probe.json").write_text(json.dumps(probe))
    row = operator_row(job, rec)
    assert (row["case"], row["scale"], row["factors"]) == (0, 4, "batch x4")  # case 0 is the probe's batch x4
    probe["appended"] = {}
    (work / "probe.json").write_text(json.dumps(probe))
    row = operator_row(job, rec)
    assert (row["case"], row["scale"], row["factors"]) == (0, 1, "x1")  # an original case
    rows[0].pop("bound")
    rows[0]["parts"] = parts[1:]  # no part takes 2x its FLOPs share: nothing drags; no bound label: None ("—")
    (work / "mfu_decompose.json").write_text(json.dumps(dec))
    row = operator_row(job, rec)
    assert row["dragging_part"] is None and row["bound"] is None


def test_a_stopped_probe_or_search_makes_the_row_say_search_incomplete(tmp_path):
    """A stop (the batch's --op-timeout-s SIGTERM, a Ctrl-C) that ended the grid search, or the probe with no
    search after it, leaves its ``interrupted`` in the report: the row says so (a timed-out job has no MFU cell
    to tell it)."""
    from mfulib.batch.summary import counts, operator_row
    rows = []
    for name, probe, grid in (
            ("search_stopped", {"complete": True, "interrupted": None},
             {"best": {"case": 3}, "complete": False, "interrupted": "SIGINT (Ctrl-C, or make / the device lock / "
              "mfu_batch stopping it) after pool, stage1 - make search runs it again"}),
            ("probe_stopped", {"complete": False, "interrupted": "KeyboardInterrupt: a re-run resumes"}, None),
            ("probe_killed", {"complete": False, "interrupted": "running"}, None),  # SIGKILLed: its marker stays
            ("search_done", {"complete": True, "interrupted": None}, {"best": {"case": 3}, "complete": True,
                                                                      "interrupted": None})):
        work = tmp_path / "ops" / name
        work.mkdir(parents=True)
        (work / "probe.json").write_text(json.dumps(dict({"tool": "max_shape_probe", "schema": 1}, **probe)))
        if grid is not None:
            (work / "grid_search.json").write_text(json.dumps(grid))
        rows.append(operator_row({"name": name, "layout": "B", "work": str(work), "log": "x"},
                                 {"status": "timeout", "reason": "timed out", "wall_s": 1.0, "device": None,
                                  "report_html": None}))
    by = {r["name"]: r["search"] for r in rows}
    assert by["search_stopped"] == ("search incomplete: the search was stopped (SIGINT (Ctrl-C, or make / the device "
                                    "lock / mfu_batch stopping it) after pool, stage1 - make search runs it again); "
                                    "best so far: case 3 (no peak known: no utilisation)")
    assert by["probe_stopped"] == "search incomplete: the probe was stopped (KeyboardInterrupt: a re-run resumes)"
    assert by["probe_killed"] == "search incomplete: the probe was killed while it ran (it recorded no stop)"
    assert by["search_done"] == "complete; limit: case 3 (no peak known: no utilisation)"
    assert counts(rows, [])["search_incomplete"] == 3


def test_a_probe_cut_by_its_budget_makes_the_row_say_search_incomplete_never_a_plain_ok(tmp_path):
    from mfulib.batch.summary import counts, operator_row, write_outputs
    probe = {"tool": "max_shape_probe", "schema": 1, "symbols": [], "candidates": [], "appended": {},
             "complete": False, "interrupted": "--budget-s 150 s reached"}
    jobs, recs = [], {}
    for name, end in (("cut", {}), ("whole", {"complete": True, "interrupted": None}),
                      ("ctrl_c", {"interrupted": "KeyboardInterrupt: a re-run resumes"})):
        work = tmp_path / "ops" / name
        work.mkdir(parents=True)
        (work / "probe.json").write_text(json.dumps(dict(probe, **end)))
        tie = [3, 5] if name == "whole" else None
        (work / "grid_search.json").write_text(json.dumps({"best": {"case": 3, "scale": 2, "retimed": {"tie": tie}}}))
        jobs.append({"name": name, "layout": "B", "work": str(work), "log": str(tmp_path / f"{name}.log")})
        recs[name] = {"status": "ok", "reason": None, "wall_s": 1.0, "device": None, "report_html": None}
    rows = [operator_row(j, recs[j["name"]]) for j in jobs]
    by = {r["name"]: r for r in rows}
    assert by["cut"]["search"] == "search incomplete: the probe was cut by its budget (--budget-s 150 s reached)"
    assert by["whole"]["search"] == "complete; limit: case 3 (no peak known: no utilisation); tie: case 3 / case 5"
    assert by["ctrl_c"]["search"] == "complete; limit: case 3 (no peak known: no utilisation)"
    assert by["cut"]["status"] == "ok"  # the job itself ran
    assert (by["cut"]["case"], by["cut"]["scale"]) == (None, None)  # no decomposition here: no figures, no case
    c = counts(rows, [])
    assert c["search_incomplete"] == 1 and c["succeeded"] == 3
    summary = {"rows": rows, "counts": c, "skipped": [], "runner": "local", "workers": 1, "devices": [],
               "devices_from": "cpu", "wall_s": 3.0, "sum_op_wall_s": 3.0, "ideal_makespan_s": 3.0,
               "interrupted": False}
    paths = write_outputs(str(tmp_path), summary)
    md = open(paths["md"]).read()
    assert md_row(md, name="cut")["status"] == "ok (search incomplete)"
    assert md_row(md, name="cut")["search"].startswith("search incomplete")
    assert md_row(md, name="whole")["status"] == "ok" and "search incomplete 1 (a probe cut by its budget" in md
    assert "ok (search incomplete)" in open(paths["html"]).read()
    csv = open(paths["csv"]).read().splitlines()
    assert csv[0].split(",")[:8] == ["name", "layout", "status", "reason", "case", "scale", "factors", "search"]
    no_search = tmp_path / "ops" / "plain"
    no_search.mkdir()
    assert operator_row({"name": "plain", "layout": "B", "work": str(no_search), "log": "x"},
                        recs["cut"])["search"] is None


def test_bench_batch_speedup_compares_a_one_and_a_two_worker_run(tmp_path):
    from mfulib.schemas.batch_json import write_summary
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import batch_speedup

    def summary(d, workers, wall, rows):
        os.makedirs(d)
        write_summary(str(d), {"workers": workers, "devices": [str(i) for i in range(workers)], "wall_s": wall,
                               "rows": [{"name": n, "status": "ok", "wall_s": w, "device": dev, "mfu_ach": m,
                                         "mbu": None} for n, w, dev, m in rows]})
        return batch_speedup.read_summary(str(d / "batch_summary.json"))
    one = summary(tmp_path / "one", 1, 100.0, [("a", 50.0, "0", 0.5), ("b", 30.0, "0", 0.4), ("c", 20.0, "0", 0.3)])
    two = summary(tmp_path / "two", 2, 55.0, [("a", 50.0, "0", 0.51), ("b", 31.0, "1", 0.4), ("c", 21.0, "1", 0.3)])
    text = "\n".join(batch_speedup.compare(one, two))
    # LPT of 50, 30, 20 on two workers: 50 | 30+20 -> 50 s; ideal speed-up 100/50 = 2.00x; measured 100/55 = 1.82x
    (line,) = [ln for ln in text.splitlines() if "measured speed-up" in ln]
    assert "measured speed-up 1.82x" in line and "50.0 s of 100.0 s serial" in line
    assert "ideal speed-up 2.00x" in line and "reached 91%" in line
    a = md_row(text, operator="a")
    assert (a["device (1)"], a["wall s (1)"], a["device (N)"], a["wall s (N)"]) == ("0", "50.0", "0", "50.0")
    assert (a["headline (1)"], a["headline (N)"], a["rel. diff"]) == ("50.00%", "51.00%", "+2.0%")


@pytest.mark.e2e
def test_ctrl_c_under_runner_ray_kills_the_running_operators_and_records_them(tmp_path, stub):
    import signal
    need_ray()
    out = tmp_path / "out"
    env = dict(os.environ, STUB_DIR=str(stub[1]), STUB_PLAN=json.dumps({"zoo/2_Softmax": "hang",
                                                                      "zoo/3_RMSNorm": "hang"}))
    proc = subprocess.Popen([sys.executable, BATCH, "--out", str(out), "--make", stub[0], "--no-progress",
                             "--examples", "zoo", "--ops", "2_Softmax,3_RMSNorm", "--runner", "ray",
                             "--devices", "0,1", "--backend", "cpu"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(stub[1].glob("*.json"))) < 2:  # both tasks running
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, text
    s = json.loads((out / "batch_summary.json").read_text())
    assert [r["status"] for r in s["rows"]] == ["interrupted", "interrupted"] and s["runner"] == "ray"
    assert all(gone(rec["grandchild"]) for rec in stub_records(stub).values())


@pytest.mark.e2e
@pytest.mark.parametrize("runner", ["local", "ray"])
def test_a_ctrl_c_during_one_operator_starts_no_later_one(tmp_path, stub, runner):
    """One worker, four operators; the second one's child sends a real Ctrl-C (SIGINT to the batch's process group)
    and then receives one itself: that operator is interrupted and no later one starts (``not_run``, its stub never
    ran). Locally the child dies of the SIGINT before the batch's thread sees its own (the race INTERRUPT_GRACE_S
    closes); under Ray the child inherits the worker's blocked SIGINT and the batch's ray.cancel stops it."""
    import signal
    if runner == "ray":
        need_ray()
    out, pgid_file = tmp_path / "out", tmp_path / "pgid"
    env = dict(os.environ, STUB_DIR=str(stub[1]), STUB_SLEEP="0.5", STUB_PGID_FILE=str(pgid_file),
               STUB_PLAN=json.dumps({"zoo/2_Softmax": "ctrl_c"}))
    proc = subprocess.Popen([sys.executable, BATCH, "--out", str(out), "--make", stub[0], "--no-progress",
                             "--examples", "zoo", "--ops", "1_BatchMatmul,2_Softmax,3_RMSNorm,4_FFN",
                             "--runner", runner, "--devices", "0", "--backend", "cpu"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    pgid_file.write_text(str(proc.pid))
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, text
    s = json.loads((out / "batch_summary.json").read_text())
    by = {r["name"]: r["status"] for r in s["rows"]}
    assert by == {"zoo/1_BatchMatmul": "ok", "zoo/2_Softmax": "interrupted", "zoo/3_RMSNorm": "not_run",
                  "zoo/4_FFN": "not_run"}, text
    assert set(stub_records(stub)) <= {"zoo/1_BatchMatmul", "zoo/2_Softmax"}  # no later operator's make ran


@pytest.mark.e2e
def test_an_operator_ended_by_sigint_is_interrupted_not_failed(tmp_path, stub):
    """The race CI hit under load: Ctrl-C reaching a just-forked child (before its setsid) kills it with SIGINT, and
    the batch saw an exit status before its own interrupt - that operator is ``interrupted`` (resumable), never a
    ``failed`` one with a bogus reason."""
    r, s = run_batch(stub, tmp_path / "out", "--examples", "zoo", "--ops", "1_BatchMatmul,2_Softmax",
                     plan={"zoo/1_BatchMatmul": "sigint"})
    by = {row["name"]: row["status"] for row in s["rows"]}
    assert by == {"zoo/1_BatchMatmul": "interrupted", "zoo/2_Softmax": "ok"}, r.stdout + r.stderr


def test_a_job_whose_runner_raises_is_recorded_failed_and_the_pool_runs_the_others(tmp_path):
    """The local pool (concurrent.futures) turns an exception of the runner itself into that job's failed record;
    every other job still runs and reaches on_done (no sleeps: the jobs return at once)."""
    from mfulib.batch.plan import run_local
    jobs = [{"name": f"op{i}", "op": f"op{i}", "layout": "B", "work": str(tmp_path / f"w{i}"),
             "log": str(tmp_path / "logs" / f"op{i}.log"), "record": str(tmp_path / "jobs" / f"op{i}.json")}
            for i in range(5)]

    def run_job(job, opts, dev, restrict, stop):
        if job["name"] == "op2":
            raise OSError(39, "Directory not empty")
        return {"name": job["name"], "status": "ok", "device": dev}

    done = []
    interrupted = run_local(jobs, [0, 1], {"runner": "local"}, done.append, run_job)
    assert interrupted is False
    assert sorted(r["name"] for r in done) == [f"op{i}" for i in range(5)]
    failed = [r for r in done if r["status"] == "failed"]
    assert [r["name"] for r in failed] == ["op2"] and "OSError" in failed[0]["reason"]
    assert os.path.exists(jobs[2]["record"])  # the failed record is written, not left "running"


RACE = r"""
import json, signal, sys, threading
sys.path.insert(0, sys.argv[1])
from mfulib.batch import plan
# the wait ends as soon as the batch's thread has seen the Ctrl-C; a longer grace keeps a loaded host (the main
# thread scheduled late) from turning the race this test pins into a flaky failure
plan.INTERRUPT_GRACE_S = 10.0
signal.signal(signal.SIGINT, signal.default_int_handler)
main, ran, done = threading.main_thread().ident, [], []

def run_job(job, opts, dev, restrict, stop):
    ran.append(job["name"])
    if job["name"] == "op0":
        return {"name": "op0", "status": "ok"}
    signal.pthread_kill(main, signal.SIGINT)  # the user's Ctrl-C, to the batch's main thread as a terminal's reaches it
    return {"name": job["name"], "status": "interrupted"}

jobs = [{"name": f"op{i}", "op": f"op{i}", "layout": "B"} for i in range(3)]
interrupted = plan.run_local(jobs, [0], {}, done.append, run_job)
print(json.dumps({"interrupted": interrupted, "ran": ran, "done": [r["status"] for r in done]}))
"""


def test_a_job_interrupted_before_the_batch_sees_the_ctrl_c_starts_no_other(tmp_path):
    """A Ctrl-C that ends an operator's child (its status ``interrupted``) before the batch's own thread handles
    it: the worker waits for the batch's interrupt instead of starting the next job at once (the race behind a
    batch that showed two interrupted operators and none not run). The Ctrl-C is a real SIGINT, sent by the job just
    before it returns - in a fresh Python process of its own, as the batch runs: in a pytest-xdist worker the
    signal's delivery depends on what the worker ran before (an earlier fresh-clone run saw the SIGINT unseen)."""
    script = tmp_path / "race.py"
    script.write_text(RACE)
    r = subprocess.run([sys.executable, str(script), os.path.join(ROOT, "scripts")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"interrupted": True, "ran": ["op0", "op1"], "done": ["ok", "interrupted"]}, got


def test_a_ctrl_c_in_the_pool_delivers_each_finished_record_once(tmp_path):
    """Ctrl-C arriving right after a record was handed on (on_done raising KeyboardInterrupt once): that record is
    not handed on again while the pool winds down, and the run says it was interrupted."""
    from mfulib.batch.plan import run_local
    jobs = [{"name": f"op{i}", "op": f"op{i}", "layout": "B", "work": str(tmp_path / f"w{i}"),
             "log": str(tmp_path / f"op{i}.log"), "record": str(tmp_path / f"op{i}.json")} for i in range(3)]
    done, raised = [], []

    def on_done(rec):
        done.append(rec["name"])
        if not raised:
            raised.append(True)
            raise KeyboardInterrupt

    interrupted = run_local(jobs, [0], {}, on_done, lambda job, opts, dev, restrict, stop: {"name": job["name"]})
    assert interrupted is True
    assert len(done) == len(set(done)) and done[0] == "op0"


# ------------------------------------------------------------------------------------------------ resumed costs

def _record(path, **fields):
    from mfulib.schemas.batch_json import write_job_record
    write_job_record(str(path), {"name": "op", "op": "op", "layout": "B", **fields})


@pytest.mark.parametrize("prior, force, want", [
    (None, False, 0.0),  # no record: a run from scratch
    ({"status": "ok", "wall_s": 50.0, "wall_total_s": 70.0}, False, 0.0),  # an ok run is redone only with FORCE=1
    ({"status": "timeout", "wall_s": 30.0, "wall_total_s": 45.0}, False, 45.0),  # resumed twice: both stretches
    ({"status": "interrupted", "wall_s": 12.5}, False, 12.5),  # a record from before wall_total_s
    ({"status": "failed", "wall_s": 30.0, "wall_total_s": 45.0}, True, 0.0),  # FORCE=1 redoes every step
    ({"status": "running", "wall_s": None}, False, 0.0),  # a batch killed hard: no wall time known
    ({"status": "running", "wall_s": None, "wall_earlier_s": 20.0}, False, 20.0),  # ... but the runs before it are
])
def test_a_resumed_operator_carries_the_seconds_of_its_unfinished_runs(tmp_path, prior, force, want):
    from mfulib.batch.job import earlier_wall_s
    job = {"record": str(tmp_path / "op.json")}
    if prior is not None:
        _record(tmp_path / "op.json", **prior)
    assert earlier_wall_s(job, {"force": force}) == want
    (tmp_path / "op.json").write_text("{not json")
    assert earlier_wall_s(job, {}) == 0.0  # unreadable: as from scratch (the batch names the bad file elsewhere)


def test_the_longest_first_order_uses_an_operators_whole_cost(tmp_path):
    from mfulib.batch.plan import history
    from mfulib.schemas.batch_json import write_summary
    jobs = [{"name": n, "record": str(tmp_path / f"{n}.json")} for n in ("a", "b", "c")]
    _record(tmp_path / "a.json", status="ok", wall_s=10.0, wall_total_s=100.0)  # resumed after a 90 s timeout
    _record(tmp_path / "b.json", status="ok", wall_s=40.0)  # an older record: wall_s alone
    _record(tmp_path / "c.json", status="timeout", wall_s=30.0, wall_total_s=30.0)  # not finished: no cost yet
    assert history(str(tmp_path), None, jobs) == {"a": 100.0, "b": 40.0}
    rows = [{"name": "c", "status": "ok", "wall_s": 5.0, "wall_total_s": 65.0}]
    path = write_summary(str(tmp_path), {"rows": rows})
    assert history(str(tmp_path), path, jobs) == {"a": 100.0, "b": 40.0, "c": 65.0}


def test_a_timed_out_operator_resumed_by_the_next_batch_records_both_runs(tmp_path, stub):
    out = tmp_path / "out"
    r1, s1 = run_batch(stub, out, "--examples", "zoo", "--ops", "2_Softmax", "--op-timeout-s", "1.5",
                       "--stop-grace-s", "0", plan={"zoo/2_Softmax": "hang"})
    first = s1["rows"][0]
    assert first["status"] == "timeout" and first["wall_s"] >= 1.5 and first["wall_total_s"] == first["wall_s"]
    r2, s2 = run_batch(stub, out, "--examples", "zoo", "--ops", "2_Softmax", env={"STUB_SLEEP": "0.2"})
    row = s2["rows"][0]
    rec = json.loads((out / "jobs" / "zoo__2_Softmax.json").read_text())
    assert row["status"] == "ok" and rec["wall_earlier_s"] == first["wall_s"], r2.stdout + r2.stderr
    assert row["wall_total_s"] == pytest.approx(row["wall_s"] + first["wall_s"], abs=2e-3)
    assert "wall_total_s" in (out / "batch_summary.csv").read_text().splitlines()[0]


def test_a_runner_failure_keeps_the_seconds_of_the_runs_before_it(tmp_path):
    from mfulib.batch.job import earlier_wall_s, failed_record
    job = {"name": "op", "op": "op", "layout": "B", "record": str(tmp_path / "op.json"), "log": str(tmp_path / "l"),
           "work": str(tmp_path / "w")}
    _record(tmp_path / "op.json", status="timeout", wall_s=30.0, wall_earlier_s=15.0, wall_total_s=45.0)
    rec = failed_record(job, {}, "the batch could not run it: RuntimeError: boom")
    assert rec["wall_earlier_s"] == rec["wall_total_s"] == 45.0 and rec["wall_s"] is None
    assert earlier_wall_s(job, {}) == 45.0  # the next run still carries them


@pytest.mark.parametrize("field, value", [("wall_total_s", -50.0), ("wall_s", True), ("wall_earlier_s", float("nan")),
                                          ("wall_total_s", float("inf")), ("wall_s", "12")])
def test_a_job_record_with_impossible_seconds_is_refused_by_name(tmp_path, field, value):
    from mfulib.schemas.batch_json import read_job_record
    path = tmp_path / "op.json"
    path.write_text(json.dumps({"tool": "mfu_batch_job", "name": "op", "status": "timeout", field: value}))
    from mfulib.core.errors import UserError
    with pytest.raises(UserError, match=f"op.json.*{field}.*finite number >= 0"):
        read_job_record(str(path))


def test_the_whole_cost_is_never_below_the_last_run_and_ignores_nonsense():
    from mfulib.schemas.batch_json import whole_cost_s
    assert whole_cost_s({"wall_s": 10.0, "wall_total_s": 25.0}) == 25.0
    assert whole_cost_s({"wall_s": 100.0, "wall_total_s": 1.0}) == 100.0  # a total below its own last run
    assert whole_cost_s({"wall_s": 10.0, "wall_total_s": 0.0}) == 10.0  # a zero total does not hide wall_s
    assert whole_cost_s({"wall_s": -3.0, "wall_total_s": True}) is None  # a foreign summary row: not trusted
    assert whole_cost_s({"wall_s": None}) is None


def test_force_redoes_an_operator_once_not_again_in_its_report_make(tmp_path, stub):
    """FORCE=1 goes to the operator's ``make all`` only: the ``make report`` after it would otherwise redo step 1 and
    every step after it (a second backup of the work dir, twice the device time). ``make batch FORCE=1`` also
    exports FORCE=1 into the batch's environment (GNU make exports its command-line variables), which a child make
    takes unless its own command line sets FORCE: both child commands set it, and the child env drops it."""
    r, s = run_batch(stub, tmp_path / "out", "--examples", "zoo", "--ops", "2_Softmax", "--force",
                     env={"STUB_SLEEP": "0.1", "FORCE": "1"})
    assert s["rows"][0]["status"] == "ok", r.stdout + r.stderr
    rec = stub_records(stub)["zoo/2_Softmax"]
    assert rec["args"].get("FORCE") == "1" and rec["env"]["FORCE"] is None and rec["env"]["MAKEFLAGS"] is None
    assert [a for a in rec_command(tmp_path / "out") if a.startswith("FORCE")] == ["FORCE=1"]  # once, in `all`
    report_args = json.loads((stub[1] / "zoo__2_Softmax.report.args").read_text())
    assert report_args["FORCE"] == "" and report_args["env_FORCE"] is None and report_args["OP"] == "zoo/2_Softmax"


def rec_command(out):
    return json.loads((out / "jobs" / "zoo__2_Softmax.json").read_text())["command"]


@pytest.mark.parametrize("force", [True, False])
def test_the_child_makes_take_force_from_the_batch_alone_not_from_an_inherited_force(tmp_path, monkeypatch, force):
    """Real GNU make, a two-target Makefile (no pipeline): the environment of a ``make batch FORCE=1`` (FORCE=1
    exported, MAKEFLAGS naming it) must not reach ``make report``, nor ``make all`` of a batch without --force; a
    ``--make-arg FORCE=1`` does not either - the batch's --force alone decides."""
    from mfulib.batch import job as batch_job
    if not shutil.which("make"):
        pytest.skip("no make")
    (tmp_path / "Makefile").write_text("FORCE ?=\nall report:\n\t@echo \"$@ FORCE=[$(FORCE)]\"\n")
    monkeypatch.setenv("FORCE", "1")
    monkeypatch.setenv("MAKEFLAGS", " -- FORCE=1")
    monkeypatch.setenv("MAKELEVEL", "1")
    j = {"op": "zoo/2_Softmax", "work": str(tmp_path / "w"), "make_vars": {}}
    opts = {"make": "make", "skill_dir": str(tmp_path), "backend": "cpu", "force": force, "search": False,
            "make_args": ["FORCE=1"]}
    env = batch_job.child_env(None, False, ())
    assert "FORCE" not in env and "MAKEFLAGS" not in env

    def ran(cmd):
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
        return "\n".join(ln for ln in out.splitlines() if not ln.startswith("make"))  # not "Entering directory"
    assert ran(batch_job.make_command(j, opts, 0)) == f"all FORCE=[{'1' if force else ''}]"
    assert ran(batch_job.report_command(j, opts)) == "report FORCE=[]"
    # and with the enclosing make's environment left whole, the command line alone still decides
    env = dict(os.environ)
    assert ran(batch_job.report_command(j, opts)) == "report FORCE=[]"
    assert ran(batch_job.make_command(j, opts, 0)) == f"all FORCE=[{'1' if force else ''}]"


def test_an_interrupted_forced_batch_says_to_resume_without_force_and_names_what_it_did_not_reach():
    from mfulib.batch.driver import resume_advice
    assert resume_advice(False) == "run the same command again to resume"
    said = resume_advice(True)
    assert "WITHOUT FORCE=1" in said and "starts over" in said and "not reached" not in said
    said = resume_advice(True, ["zoo/3_RMSNorm", "zoo/4_FFN"])
    assert "zoo/3_RMSNorm,zoo/4_FFN" in said and said.endswith("OPS=zoo/3_RMSNorm,zoo/4_FFN FORCE=1 redoes them")


def test_a_cpu_worker_reads_as_the_cpu_not_none():
    from mfulib.schemas.batch_json import device_label, devices_label
    assert device_label(None) == "the CPU" and device_label(3) == "device 3" and device_label("0") == "device 0"
    assert devices_label([None]) == "the CPU" and devices_label([]) == "the CPU"
    assert devices_label(["0"]) == "device 0" and devices_label(["0", "1"]) == "devices 0, 1"


def test_a_rerun_keeps_the_last_five_earlier_logs_named_oldest_first(tmp_path):
    from mfulib.batch import job
    logs = tmp_path / "logs"
    (logs / "previous").mkdir(parents=True)
    log = logs / "zoo__2_Softmax.log"
    legacy = logs / "previous" / "zoo__2_Softmax.log"  # the one earlier log an older version kept
    legacy.write_text("run 0")
    os.utime(legacy, (1_700_000_000, 1_700_000_000))
    (logs / "previous" / "zoo__2_Softmax_v2.20200101T000000Z.log").write_text("another operator")
    assert job.keep_previous_log(str(log)) is None  # no log yet: nothing moved, nothing dropped
    t = 1_700_000_100
    for run in range(1, 8):  # seven re-runs; runs 3 and 4 end in the same second
        log.write_text(f"run {run}")
        os.utime(log, (t + run * 60 - (run == 4) * 60,) * 2)
        moved = job.keep_previous_log(str(log))
        assert not log.exists() and open(moved).read() == f"run {run}"
    kept = sorted(p.name for p in (logs / "previous").iterdir() if p.name.startswith("zoo__2_Softmax."))
    assert len(kept) == job.PREVIOUS_LOGS == 5
    assert [open(logs / "previous" / n).read() for n in kept] == [f"run {r}" for r in range(3, 8)]  # oldest first
    assert kept[:2] == ["zoo__2_Softmax.20231114T221800Z.log", "zoo__2_Softmax.20231114T221800Z_2.log"]
    assert (logs / "previous" / "zoo__2_Softmax_v2.20200101T000000Z.log").exists()  # not this operator's: kept


def test_a_subset_run_keeps_the_other_operators_earlier_rows_without_counting_them(tmp_path, stub):
    out = tmp_path / "out"
    r, s = run_batch(stub, out, "--examples", "zoo", "--ops", "2_Softmax,3_RMSNorm",
                     plan={"zoo/3_RMSNorm": "fail"}, env={"STUB_SLEEP": "0"})
    assert r.returncode == 1 and s["counts"]["failed"] == 1
    r, s = run_batch(stub, out, "--examples", "zoo", "--ops", "2_Softmax", "--force", env={"STUB_SLEEP": "0"})
    assert r.returncode == 0, r.stdout + r.stderr  # the earlier failure of an operator left out fails nothing
    rows = {row["name"]: row for row in s["rows"]}
    assert set(rows) == {"zoo/2_Softmax", "zoo/3_RMSNorm"}  # never-run operators of the set are not listed
    assert rows["zoo/2_Softmax"]["in_run"] is True and rows["zoo/2_Softmax"]["resumed"] is False
    old = rows["zoo/3_RMSNorm"]
    assert old["in_run"] is False and old["status"] == "failed" and "planted failure" in old["reason"]
    assert s["counts"]["operators"] == 1 and s["counts"]["failed"] == 0 and s["counts"]["earlier"] == 1
    md = (out / "batch_summary.md").read_text()
    assert "failed (earlier run, not in OPS)" in md and "1 more operator(s) of this output dir not in this run" in md
    assert "zoo/3_RMSNorm" in (out / "index.html").read_text()
    assert "in_run" in (out / "batch_summary.csv").read_text().splitlines()[0]
