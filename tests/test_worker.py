"""Persistent workers (mfulib/run/worker.py, mfulib/backends/runner.py): cases run one after another in one process,
and a case that crashes, hangs or runs out of memory still stays in that case - the next one gets a fresh worker."""
import json
import os
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_msprof"))
import tinyops  # noqa: E402

from mfulib.run import worker  # noqa: E402
from mfulib.collect.driver import Options, collect  # noqa: E402


def child_reports(work):
    """{(case, impl): report.json of the kept attempt} of a collection run with keep_prof=work."""
    out = {}
    for name in os.listdir(os.path.join(work, "prof")):
        path = os.path.join(work, "prof", name, "report.json")
        if os.path.exists(path):
            case, impl = name[len("case"):].split("_")
            with open(path) as f:
                out[(int(case), impl)] = json.load(f)
    return out


def run(work, cases, **kw):
    opts = dict(op_dir=work, output_dir=work, impl="asc", warmup=0, repeats=1, backend="cpu", cases=cases,
                keep_prof=work, progress=False, retry=0,
                unverified_ok=True)  # the workers' own crash/hang handling (verify would exclude these cases first)
    opts.update(kw)
    return collect(Options(**opts))


@pytest.mark.e2e
def test_cases_share_one_worker_until_a_crash_and_the_next_case_gets_a_fresh_one(tmp_path):
    work = tinyops.make_workdir(tmp_path, variant="crash1024")
    rep = run(work, [0, 4, 1, 2])  # 1 (1024 elements) calls os.abort()
    status = {c["case"]: c["impls"]["asc"]["status"] for c in rep["per_case"]}
    assert status == {0: "ok", 4: "ok", 1: "crashed", 2: "ok"}
    crash = next(c for c in rep["per_case"] if c["case"] == 1)
    assert "SIGABRT" in crash["asc_error"]
    reps = child_reports(work)
    assert reps[(0, "asc")]["pid"] == reps[(4, "asc")]["pid"]  # one process ran both cases
    assert reps[(4, "asc")]["specs_in_process"] == 2 and reps[(4, "asc")]["wall_s"]["imports"] == 0.0
    assert reps[(2, "asc")]["pid"] != reps[(0, "asc")]["pid"] and reps[(2, "asc")]["specs_in_process"] == 1
    # the crashing case's own output stays in its own log (fds 1/2 point at the case's child.log)
    with open(os.path.join(work, "prof", "case1_asc", "child.log")) as f:
        assert "Fatal Python error: Aborted" in f.read()


@pytest.mark.e2e
def test_a_hang_is_killed_by_its_timeout_and_the_next_case_still_runs_in_a_new_worker(tmp_path):
    work = tinyops.make_workdir(tmp_path, variant="hang1024")
    rep = run(work, [0, 1, 4], case_timeout_s=8)  # the collector's own case timeout (the one real-time test of it)
    by = {c["case"]: c for c in rep["per_case"]}
    assert by[1]["asc_error"].startswith("timeout") and by[1]["asc_us"] is None and rep["n_cases_valid"] == 2
    assert by[0]["asc_us"] > 0 and by[4]["asc_us"] > 0
    reps = child_reports(work)
    assert reps[(4, "asc")]["pid"] != reps[(0, "asc")]["pid"]


OOM_IMPL = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        if x.numel() == 1024:
            torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: the host allocator refuses it at once
        return x * 2 + 1
'''


@pytest.mark.e2e
def test_an_out_of_memory_case_retires_its_worker(tmp_path):
    work = tinyops.make_workdir(tmp_path)
    with open(os.path.join(work, "model_new.py"), "w") as f:
        f.write(OOM_IMPL)
    rep = run(work, [0, 1, 4], impl="asc")
    by = {c["case"]: c for c in rep["per_case"]}
    assert by[1]["impls"]["asc"]["status"] == "oom" and by[4]["impls"]["asc"]["status"] == "ok"
    reps = child_reports(work)
    assert reps[(1, "asc")]["pid"] == reps[(0, "asc")]["pid"]  # the oom is the case's own report ...
    assert reps[(4, "asc")]["pid"] != reps[(1, "asc")]["pid"]  # ... and the worker was replaced after it


@pytest.mark.e2e
def test_impl_both_builds_the_inputs_once_per_case(tmp_path):
    work = tinyops.make_workdir(tmp_path)
    rep = run(work, [0, 4], impl="both", repeats=2)
    assert all(c["speedup"] for c in rep["per_case"])
    reps = child_reports(work)
    assert [reps[(c, i)]["inputs_reused"] for c in (0, 4) for i in ("ref", "asc")] == [False, True, False, True]
    assert len({r["pid"] for r in reps.values()}) == 1


@pytest.mark.e2e
def test_mfu_worker_0_runs_every_case_in_its_own_process(tmp_path, monkeypatch):
    monkeypatch.setenv(worker.WORKER_ENV, "0")
    work = tinyops.make_workdir(tmp_path)
    run(work, [0, 4])
    reps = child_reports(work)
    assert reps[(0, "asc")]["pid"] != reps[(4, "asc")]["pid"]
    assert reps[(4, "asc")]["specs_in_process"] == 1


ECHO = textwrap.dedent('''
    import os, sys
    sys.path.insert(0, sys.argv[1])
    from mfulib.run.worker import serve

    def handler(req):
        print("case", req["n"], "pid", os.getpid())
        if req.get("exit"):
            os._exit(7)
        if req.get("sleep"):
            import time
            time.sleep(req["sleep"])
        return {"n2": req["n"] * 2, "retire": bool(req.get("retire"))}

    sys.exit(serve(handler))
''')


@pytest.fixture
def echo_worker(tmp_path, repo_root):
    script = tmp_path / "echo.py"
    script.write_text(ECHO)
    made = []

    def start():
        w = worker.Worker([sys.executable, str(script), os.path.join(repo_root, "scripts")],
                          worker.child_env(os.environ), str(tmp_path / f"w{len(made)}.log"))
        made.append(w)
        return w
    yield start
    for w in made:
        w.kill()


@pytest.mark.e2e
def test_worker_protocol_replies_logs_per_request_exit_timeout_and_retire(echo_worker, tmp_path):
    w = echo_worker()
    logs = [str(tmp_path / f"case{i}.log") for i in range(2)]
    for i, log in enumerate(logs):
        r = w.call({"n": i + 1, "log_path": log}, timeout_s=30, start_timeout_s=60)
        assert r.outcome == "done" and r.message["n2"] == 2 * (i + 1)
    texts = [open(p).read() for p in logs]
    assert texts[0].startswith("case 1 pid ") and texts[1].startswith("case 2 pid ")
    assert texts[0].split()[-1] == texts[1].split()[-1] == str(w.pid)  # the same process answered both
    r = w.call({"n": 3, "exit": True}, timeout_s=30, start_timeout_s=60)
    assert r.outcome == "died" and r.returncode == 7
    w = echo_worker()
    r = w.call({"n": 4, "sleep": 60}, timeout_s=1, start_timeout_s=60)
    assert r.outcome == "timeout" and not w.alive()
    w = echo_worker()
    r = w.call({"n": 5, "retire": True}, timeout_s=30, start_timeout_s=60)
    assert r.outcome == "done" and r.message["retire"]
    w.proc.wait(timeout=30)
    assert w.proc.returncode == 0  # a retiring handler ends the worker after its reply


def test_every_worker_shares_one_triton_cache_directory(monkeypatch, tmp_path):
    monkeypatch.delenv(worker.TRITON_CACHE_ENV, raising=False)
    monkeypatch.setenv("TRITON_HOME", str(tmp_path))
    assert worker.child_env(os.environ)[worker.TRITON_CACHE_ENV] == os.path.join(str(tmp_path), ".triton", "cache")
    monkeypatch.setenv(worker.TRITON_CACHE_ENV, str(tmp_path / "mine"))
    assert worker.child_env(os.environ)[worker.TRITON_CACHE_ENV] == str(tmp_path / "mine")


DYING = textwrap.dedent('''
    import sys
    sys.path.insert(0, sys.argv[1])
    from mfulib.run.worker import serve
    print("worker up")

    def handler(req):
        print("building case", req["n"])
        raise MemoryError("cannot allocate 64 GiB (test double)")

    sys.exit(serve(handler))
''')


def test_a_worker_that_dies_in_a_case_leaves_its_cause_in_that_case_log(tmp_path, repo_root):
    # the exception that ends the worker used to be printed after the output went back to the worker's own log:
    # "the child died (exit 1): " with nothing after it. Now the case log has the traceback, the worker log its start
    script = tmp_path / "dying.py"
    script.write_text(DYING)
    w = worker.Worker([sys.executable, str(script), os.path.join(repo_root, "scripts")],
                      worker.child_env(os.environ), str(tmp_path / "w.log"))
    case_log = str(tmp_path / "case.log")
    r = w.call({"n": 3, "log_path": case_log}, timeout_s=30, start_timeout_s=60)
    assert r.outcome == "died" and r.returncode == 1
    tail = worker.log_tail(case_log)
    assert "MemoryError: cannot allocate 64 GiB (test double)" in tail
    assert "building case 3" in open(case_log).read()  # the case's output is in the case's log, not the worker's
    assert "worker up" in w.tail(50) and "building case" not in w.tail(50) and "MemoryError" in w.tail()
    why = worker.died_why(r.returncode, tail, w.tail())
    assert why.startswith("the child died (exit 1): ") and "MemoryError" in why
    w.kill()


def test_an_exit_status_names_the_signal_and_an_empty_tail_says_so():
    assert worker.exit_status(1) == "exit 1"
    assert worker.exit_status(-9).startswith("killed by SIGKILL (signal 9: out of host memory")
    assert worker.died_why(-11, "", "") == ("the child died (killed by SIGSEGV (signal 11: a crash in native code)): "
                                           "it wrote nothing to stdout or stderr")
    assert worker.died_why(1, "x" * 700).endswith("x" * 600) and "..." in worker.died_why(1, "x" * 700)
