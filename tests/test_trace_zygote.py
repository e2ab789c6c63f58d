"""mfulib.run.trace_zygote: gate-2 traces forked from the warm forkserver give what a plain subprocess gives, are
killed as one, and leave nothing behind when their parent dies."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_ops  # noqa: E402

from mfulib.run import trace_zygote as tz  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK_FLOPS = os.path.join(ROOT, "scripts", "check_flops.py")

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote forks: Linux only")]


def _ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead
        return f.read().split(")")[-1].split()[0] != "Z"


def test_a_forked_trace_writes_what_a_plain_subprocess_writes(tmp_path):
    work = probe_ops.make_workdir(tmp_path)
    assert tz.shared() is not None, tz._SHARED["failed"]
    try:
        outs = {}
        for how in ("zygote", "plain"):
            out = str(tmp_path / f"{how}.json")
            argv = [CHECK_FLOPS, "--op-dir", work, "--tracer-only", "--seed", "0", "--quiet", "-o", out]
            if how == "zygote":
                job = tz.start_tool(argv, str(tmp_path / "z.log"))
                assert isinstance(job, tz.ZygoteJob) and _ppid(job.pid) != os.getpid()  # forked by the server
                assert job.wait(120) == 0, open(tmp_path / "z.log").read()
            else:
                assert subprocess.run([sys.executable] + argv, capture_output=True, timeout=120).returncode == 0
            outs[how] = [{k: r.get(k) for k in ("case", "shape", "tracer")} for r in json.load(open(out))["per_case"]]
        for rows in outs.values():
            for r in rows:
                r["tracer"].pop("wall_s", None)
        assert outs["zygote"] == outs["plain"] and len(outs["zygote"]) >= 2
        # a failing tool reports its exit status and its output lands in the log
        job = tz.start_tool([CHECK_FLOPS, "--op-dir", str(tmp_path / "missing")], str(tmp_path / "bad.log"))
        assert job.wait(60) not in (0, None)
        assert open(tmp_path / "bad.log").read().strip()
    finally:
        tz.close_shared()


def test_kill_ends_a_hanging_trace_and_the_zygote_dies_with_its_parent(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys, time
        sys.path.insert(0, {os.path.join(ROOT, "scripts")!r})
        from mfulib.run import trace_zygote as tz
        if __name__ == "__main__":  # the forkserver imports the caller's main
            hang = {str(tmp_path / "hang.py")!r}
            open(hang, "w").write("import time\\ntime.sleep(600)\\n")
            a = tz.start_tool([hang], {str(tmp_path / "a.log")!r})
            b = tz.start_tool([hang], {str(tmp_path / "b.log")!r})
            assert isinstance(a, tz.ZygoteJob), tz._SHARED["failed"]
            while not os.path.exists({str(tmp_path / "a.log")!r}):  # opened after its setsid: a group to kill
                time.sleep(0.01)
            os.killpg(a.pid, signal.SIGKILL)
            print("killed rc", a.wait(20), flush=True)
            ppid = open(f"/proc/{{b.pid}}/stat").read().rsplit(")", 1)[1].split()[1]
            print("pids", ppid, b.pid, flush=True)
            time.sleep(600)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        first = parent.stdout.readline()
        assert first.startswith("killed rc -9"), first
        zpid, bpid = map(int, parent.stdout.readline().split()[1:])
        assert _alive(zpid) and _alive(bpid)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (_alive(zpid) or _alive(bpid)):
        time.sleep(0.1)
    assert not _alive(zpid) and not _alive(bpid)  # nothing left running: the zygote, then its child


def test_probe_verdicts_are_the_same_with_and_without_the_zygote(tmp_path):
    runs = {}
    for flag in ("1", "0"):
        work = probe_ops.make_workdir(tmp_path / flag)
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "max_shape_probe.py"), "--dir", work,
                            "--backend", "cpu", "--cases", "0", "--max-scale", "4", "--no-saturation-stop",
                            "--scale-dims", "seq"],  # one ladder: a joint pair chosen by timings could differ
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, MFU_TRACE_ZYGOTE=flag))
        assert r.returncode == 0, r.stderr
        doc = json.load(open(os.path.join(work, "probe.json")))
        runs[flag] = ([(c["scale"], c["verdict"], c.get("flops")) for c in doc["candidates"]], doc["traced_flops"])
    assert runs["1"] == runs["0"] and runs["1"][0]


def test_what_a_trace_started_dies_too_when_the_probe_is_sigkilled(tmp_path):
    # a flops tool that starts its own subprocess (in the trace child's process group) and hangs
    tool = tmp_path / "spawns.py"
    tool.write_text(textwrap.dedent(f"""
        import subprocess, sys, time
        p = subprocess.Popen(["sleep", "300"])
        open({str(tmp_path / "grandchild.pid")!r}, "w").write(str(p.pid))
        time.sleep(300)
    """))
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.join(ROOT, "scripts")!r})
        from mfulib.run import trace_zygote as tz
        if __name__ == "__main__":
            job = tz.start_tool([{str(tool)!r}], {str(tmp_path / "t.log")!r})
            assert isinstance(job, tz.ZygoteJob), tz._SHARED["failed"]
            ppid = open(f"/proc/{{job.pid}}/stat").read().rsplit(")", 1)[1].split()[1]
            print("pids", ppid, job.pid, flush=True)
            time.sleep(600)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    gpid = None
    try:
        zpid, cpid = map(int, parent.stdout.readline().split()[1:])
        end = time.monotonic() + 60
        while not (tmp_path / "grandchild.pid").exists() or not (tmp_path / "grandchild.pid").read_text():
            assert time.monotonic() < end, "the tool did not start its subprocess"
            time.sleep(0.1)
        gpid = int((tmp_path / "grandchild.pid").read_text())
        assert _alive(gpid)
        parent.send_signal(signal.SIGKILL)  # no cleanup runs in the probe
        parent.wait(10)
        end = time.monotonic() + 10
        while any(_alive(p) for p in (zpid, cpid, gpid)) and time.monotonic() < end:
            time.sleep(0.1)
        assert not _alive(zpid) and not _alive(cpid)
        assert not _alive(gpid), "the trace's own subprocess outlived the probe"
    finally:
        if parent.poll() is None:
            parent.kill()
        if gpid and _alive(gpid):
            os.kill(gpid, signal.SIGKILL)


def test_a_forked_tool_ends_like_a_process_threads_atexit_and_unclosed_files_included(tmp_path):
    # what a Python process does at its end: a tool relying on it writes the same files forked as run plainly
    tool = tmp_path / "ends.py"
    tool.write_text(textwrap.dedent("""
        import atexit, sys, threading, time
        out = sys.argv[1]
        atexit.register(lambda: open(out + ".atexit", "w").write("atexit"))
        f = open(out + ".unclosed", "w")
        f.write("unclosed")
        def late():
            time.sleep(0.5)
            open(out + ".thread", "w").write("thread")
        threading.Thread(target=late).start()
        sys.exit(3)
    """))
    try:
        job = tz.start_tool([str(tool), str(tmp_path / "z")], str(tmp_path / "z.log"))
        assert isinstance(job, tz.ZygoteJob) and job.wait(60) == 3
    finally:
        tz.close_shared()
    assert subprocess.run([sys.executable, str(tool), str(tmp_path / "p")], timeout=60).returncode == 3
    for kind in ("atexit", "unclosed", "thread"):
        assert (tmp_path / f"p.{kind}").read_text() == kind  # the plain subprocess
        assert (tmp_path / f"z.{kind}").exists() and (tmp_path / f"z.{kind}").read_text() == kind, kind


def test_the_inherited_heap_is_frozen_and_the_tools_own_cycles_are_still_collected_at_its_end(tmp_path):
    # gc.freeze in the child: the exit's collection skips the server's torch heap, never the tool's own garbage -
    # an object held only by a reference cycle is finalised by that collection, as at a plain interpreter's end
    tool = tmp_path / "cycle.py"
    tool.write_text(textwrap.dedent("""
        import gc, sys
        out = sys.argv[1]
        open(out + ".frozen", "w").write(str(gc.get_freeze_count()))
        class Note:
            def __del__(self):
                with open(out + ".cycle", "w") as g:
                    g.write("cycle")
        a, b = [], []
        a.append(b); b.append(a)
        a.append(Note())
        del a, b
    """))
    try:
        job = tz.start_tool([str(tool), str(tmp_path / "z")], str(tmp_path / "z.log"))
        assert isinstance(job, tz.ZygoteJob) and job.wait(60) == 0, open(tmp_path / "z.log").read()
    finally:
        tz.close_shared()
    assert subprocess.run([sys.executable, str(tool), str(tmp_path / "p")], timeout=60).returncode == 0
    assert (tmp_path / "p.cycle").read_text() == "cycle"  # the plain interpreter's end
    assert int((tmp_path / "z.frozen").read_text()) > 10000  # torch's preloaded objects
    assert (tmp_path / "z.cycle").read_text() == "cycle"


def test_a_forked_tool_runs_in_the_callers_directory_and_environment(tmp_path, monkeypatch):
    # a relative tool path, relative files and an environment variable set after the zygote started
    (tmp_path / "tool.py").write_text("import os\nopen('where.txt', 'w').write(os.getcwd() + ' ' + "
                                      "os.environ.get('MFU_TEST_LATE', '-'))\n")
    assert tz.shared() is not None, tz._SHARED["failed"]
    try:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("MFU_TEST_LATE", "set-later")
        job = tz.start_tool(["tool.py"], "tool.log")
        assert isinstance(job, tz.ZygoteJob) and job.wait(60) == 0, (tmp_path / "tool.log").read_text()
    finally:
        tz.close_shared()
    assert (tmp_path / "where.txt").read_text() == f"{tmp_path} set-later"


def test_a_trace_dies_with_its_forkserver_and_the_next_trace_gets_a_fresh_one(tmp_path):
    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(600)\n")
    job = tz.start_tool([str(hang)], str(tmp_path / "h.log"))
    try:
        assert isinstance(job, tz.ZygoteJob), tz._SHARED["failed"]
        server = _ppid(job.pid)
        assert server != os.getpid()
        end = time.monotonic() + 60
        while not (tmp_path / "h.log").exists():  # opened after the child's prctl
            assert time.monotonic() < end, "the trace did not start"
            time.sleep(0.05)
        os.kill(server, signal.SIGKILL)
        assert job.wait(20) not in (0, None)
        end = time.monotonic() + 20
        while _alive(job.pid) and time.monotonic() < end:
            time.sleep(0.1)
        assert not _alive(job.pid)  # PR_SET_PDEATHSIG: the server was its parent
        (tmp_path / "ok.py").write_text("print('ok')\n")
        again = tz.start_tool([str(tmp_path / "ok.py")], str(tmp_path / "ok.log"))  # the dead server restarted
        assert isinstance(again, tz.ZygoteJob) and again.wait(120) == 0
        assert (tmp_path / "ok.log").read_text() == "ok\n"
    finally:
        tz.close_shared()


def test_threads_cap_the_tools_torch_threads_forked_or_plain(tmp_path, monkeypatch):
    # torch was imported by the server, so OMP_NUM_THREADS alone would come too late in a forked child: the child
    # sets torch's intra-op threads itself; a plain subprocess reads the variable at its own import
    tool = tmp_path / "threads.py"
    tool.write_text("import os, sys, torch\nopen(sys.argv[1], 'w').write(f\"{torch.get_num_threads()} "
                    "{os.environ.get('OMP_NUM_THREADS', '-')}\")\n")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert tz.shared() is not None, tz._SHARED["failed"]
    try:
        for name, threads in (("one", 1), ("default", None)):
            job = tz.start_tool([str(tool), str(tmp_path / f"z_{name}")], str(tmp_path / f"z_{name}.log"), threads)
            assert isinstance(job, tz.ZygoteJob) and job.wait(60) == 0, (tmp_path / f"z_{name}.log").read_text()
    finally:
        tz.close_shared()
    monkeypatch.setenv(tz.ENV, "0")
    job = tz.start_tool([str(tool), str(tmp_path / "p_one")], str(tmp_path / "p_one.log"), 1)
    assert not isinstance(job, tz.ZygoteJob) and job.wait(60) == 0
    default = int((tmp_path / "z_default").read_text().split()[0])
    assert (tmp_path / "z_one").read_text() == "1 1" and (tmp_path / "p_one").read_text() == "1 1"
    assert (tmp_path / "z_default").read_text() == f"{default} -" and default >= 1
