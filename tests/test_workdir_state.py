"""The work directory's state is the truth (docs/ARCHITECTURE.md#work-directory), driven through make on CPU with copies
of the bundled layout-A 2_Softmax (output/iter_1, iter_2, optimized + baseline kernels; 11 cases, the 4 small ones run
on CPU):

* step 1 is redone for another ITER / VARIANT / V or a source whose content changed, never for a touch; a V that
  does not exist is an error even though the work directory exists; VARIANT=baseline has its own work directory;
* only cases verify passed are timed: a case verify skipped or failed is never a per_case row (listed under selection.not_verified with the reason) and
  its slot goes to the next one; a selected case without a verify row is verified first and recorded;
* a failing verify keeps verify.json (naming the case) and stops make; an interrupted collect is redone by the
  next `make all`; decompose refuses an incomplete collection; `make status` says which step is what.
"""
import json
import os
import shutil
import signal
import subprocess

import pytest

from mfulib.pipeline import workdir_state
from mfulib.core.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOFTMAX = os.path.join(ROOT, "examples", "ops", "verify", "2_Softmax")
IMPL2 = os.path.join("output", "iter_2", "verify", "2_Softmax_triton_optimized.py")
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def make(*args, env=None, timeout=900):
    return subprocess.run(["make", "-C", ROOT, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def read(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture()
def softmax_src(tmp_path):
    src = tmp_path / "src" / "2_Softmax"
    shutil.copytree(SOFTMAX, src)
    return src


def pipeline(src, work, peak_cache, *extra):
    return ["OP=2_Softmax", f"V={src}", f"WORK={work}", "BACKEND=cpu", f"MFU_PEAK_CACHE_DIR={peak_cache}", *extra]


# ------------------------------------------------------------------------------------------------ step 1


@pytest.mark.e2e
def test_another_iter_variant_or_content_redoes_step_1_a_touch_does_not_and_a_missing_v_fails(softmax_src, tmp_path):
    work = tmp_path / "w"
    args = ["OP=2_Softmax", f"V={softmax_src}", f"WORK={work}"]
    r = make(*args, "prepare")
    assert r.returncode == 0, r.stderr
    pj = read(work / "prepare.json")
    assert pj["request"] == {"form": "A", "src": str(softmax_src), "iter": None, "variant": "optimized"}
    assert pj["sources"]["impl"]["path"].endswith(IMPL2)

    mtime = os.path.getmtime(work / "prepare.json")
    os.utime(softmax_src / IMPL2)  # touch: same content
    again = make(*args, "prepare")
    assert "Nothing to be done for 'prepare'" in again.stdout and os.path.getmtime(work / "prepare.json") == mtime

    it1 = make(*args, "ITER=1", "prepare")
    assert it1.returncode == 0, it1.stderr
    assert "ITER (unset) -> 1" in it1.stdout and "step 1 is redone" in it1.stdout
    assert "iter_1" in read(work / "prepare.json")["sources"]["impl"]["path"]
    assert [p for p in os.listdir(tmp_path) if p.startswith("w.bak-")]  # the old directory is kept
    assert "Nothing to be done" in make(*args, "ITER=1", "prepare").stdout

    base = make(*args, "ITER=1", "VARIANT=baseline", "prepare")
    assert base.returncode == 0 and "VARIANT 'optimized' -> 'baseline'" in base.stdout
    impl = read(work / "prepare.json")["sources"]["impl"]["path"]
    assert impl.endswith(os.path.join("iter_1", "verify", "2_Softmax_triton_baseline.py"))

    with open(impl, "a") as f:
        f.write("# edited\n")
    edited = make(*args, "ITER=1", "VARIANT=baseline", "prepare")
    assert edited.returncode == 0 and f"impl content changed ({impl})" in edited.stdout

    missing = make("OP=2_Softmax", f"V={tmp_path / 'nope'}", f"WORK={work}", "prepare")
    assert missing.returncode != 0 and "--src directory not found" in missing.stderr
    assert (work / "prepare.json").exists()  # the failed attempt left the work directory alone

    bench, gen = os.path.join(ROOT, "examples/ops/bench/zoo"), os.path.join(ROOT, "examples/ops/gen/zoo")
    no_iter = make("OP=2_Softmax", f"BENCH={bench}", f"GEN={gen}", "ITER=1", f"WORK={tmp_path / 'b'}", "prepare")
    assert no_iter.returncode != 0 and "only layout A has output/iter_<n>/verify" in no_iter.stderr
    assert "WORK=work/2_Softmax-baseline " in make("OP=2_Softmax", "VARIANT=baseline", "help").stdout
    assert "WORK=work/2_Softmax " in make("OP=2_Softmax", "help").stdout


# ------------------------------------------------------------------------------------------------ verify gate


def status_of(stdout: str) -> dict:
    """{step: (state, detail...)} from `make status` output; a detail wrapped onto further lines (indented, the
    step column blank) is joined to its step's line."""
    out, last = {}, None
    for line in stdout.splitlines():
        words = line.split()
        if words and words[0] in {s.name for s in workdir_state.STEPS}:
            state = " ".join(words[1:3]) if words[1:3] == ["not", "run"] or words[1:3] == ["not", "done"] \
                else words[1]
            out[words[0]] = (state, line)
            last = words[0]
        elif last and line.startswith(" ") and words:
            out[last] = (out[last][0], out[last][1] + " " + " ".join(words))
        else:
            last = None
    return out


@pytest.mark.e2e
def test_only_verified_cases_are_timed_and_a_failing_verify_keeps_its_report_naming_the_case(softmax_src, tmp_path):
    impl = softmax_src / IMPL2
    text = impl.read_text()
    broken = text.replace("    def forward(self, x, dim=-1):\n",
                          "    def forward(self, x, dim=-1):\n"
                          "        if tuple(x.shape) == (8, 1000):\n"
                          "            return torch.zeros_like(x)  # wrong on purpose: case 1\n", 1)
    assert broken != text
    impl.write_text(broken)
    work = tmp_path / "w"
    # verify leaves case 0 out (no row), fails case 1, passes 2 and 3, skips 4.. (inputs over 0.1 MB; 6 is bf16)
    args = pipeline(softmax_src, work, tmp_path / "cache", "VERIFY_ARGS=--cases 1-10 --max-input-mb 0.1")
    r = make(*args, "verify")
    assert r.returncode != 0
    v = read(work / "verify.json")
    assert v["failed"] == [1] and {c["case"]: c["status"] for c in v["cases"]}[1] == "fail"
    assert v["complete"] is False and v["missing"] == [0]
    (failed,) = [ln for ln in r.stderr.splitlines() if "step verify FAILED" in ln]
    assert "exit status 1" in failed and f"{work}/verify.json" in failed  # the kept report, named
    assert not (work / ".state" / "verify.ok").exists()
    st = status_of(make(*args, "status").stdout)
    assert st["verify"][0] == "failed" and "case 1 fail" in st["verify"][1]
    assert st["collect"][0] == "not run" and "verify failed" in st["collect"][1]

    # accepted: make goes on; the collector verifies case 0 first (no row), never times the failed case 1 (its
    # slot goes to case 2) nor the verify-skipped 4, 5, 7.. (the selection runs out of verified cases)
    r = make(*args, "ACCEPT_VERIFY_FAILURES=1", "COLLECT_ARGS=--max-cases 4", "collect")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (accepted,) = [ln for ln in r.stderr.splitlines() if "ACCEPT_VERIFY_FAILURES=1" in ln]
    assert "exit status 1 accepted" in accepted
    assert "verifying case(s) [0] first" in r.stderr
    (untimed,) = [ln for ln in r.stderr.splitlines() if "case 1 not timed" in ln]
    assert "not verified" in untimed
    perf = read(work / "performance.json")
    timed = [c["case"] for c in perf["per_case"] if not c.get("skipped")]
    # softmax has no matrix work, so the cpu backend ranks by bytes moved, smallest first: case 3 (fp16 [2, 4, 48],
    # 768 B in) < case 0 (fp32 [4, 64], 1024 B) < case 1 (failed verify: its slot goes on) < case 2 (80000 B)
    assert timed == perf["selection"]["order"] == [3, 0, 2] and perf["complete"] is True
    assert perf["selection"]["verified_now"] == [0]
    # the refused cases are never timed and never a per_case row (no MFU row, no plot point): only listed
    assert not {1, 4, 5, 7} & {c["case"] for c in perf["per_case"]}
    refused = {d["case"]: d for d in perf["selection"]["not_verified"]}
    assert {1, 4, 5, 7} <= set(refused)
    assert refused[1]["reason"].startswith("not verified: verify fail")
    assert refused[4]["reason"].startswith("not verified: verify skipped")
    assert "(33.55 MB) > --max-input-mb 0.1" in refused[4]["reason"]
    assert refused[1]["verify"] == {"status": "fail", "reason": refused[1]["verify"]["reason"], "forced": False}
    assert all(c["verify"] == {"status": "pass", "reason": None, "forced": False} for c in perf["per_case"]
               if c["case"] in timed)
    assert sorted(os.listdir(work / "prof")) == ["case0_asc", "case2_asc", "case3_asc", "runs.json"]
    v = read(work / "verify.json")  # the collector's own verification is recorded
    assert {c["case"]: c["status"] for c in v["cases"]}[0] == "pass" and v["complete"] and v["failed"] == [1]


# ------------------------------------------------------------------------------------------------ interrupt


def run_until_interrupted(args, marker):
    """Start make, send SIGINT to its process group (as Ctrl-C does) once ``marker`` is printed; return output."""
    proc = subprocess.Popen(["make", "-C", ROOT, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    out = []
    for line in proc.stdout:
        out.append(line)
        if line.startswith(marker):
            os.killpg(proc.pid, signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=300)
    return proc.returncode, "".join(out) + rest


@pytest.mark.e2e
def test_an_interrupted_collect_is_incomplete_refused_by_decompose_and_redone_by_the_next_make_all(softmax_src,
                                                                                                    tmp_path):
    work = tmp_path / "w"
    args = pipeline(softmax_src, work, tmp_path / "cache", "COLLECT_ARGS=--cases 0,3")
    rc, out = run_until_interrupted(args + ["all"], "[1/2] case 0")
    assert rc != 0, out[-2000:]
    perf = read(work / "performance.json")
    (missing,) = perf["missing"]
    assert perf["complete"] is False and (missing["case"], missing["impl"]) == (3, "asc")
    assert missing["reason"].startswith("not run") and "interrupted" in missing["reason"]
    assert not (work / ".state" / "collect.ok").exists() and not (work / "mfu_decompose.json").exists()
    st = status_of(make(*args, "status").stdout)
    assert st["collect"][0] == "failed" and "case 3 asc: not run" in st["collect"][1]
    assert st["decompose"][0] == "not run" and st["verify"][0] == "done"

    again = make(*args, "all")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "verify_op.py" not in again.stdout and "check_flops.py" not in again.stdout  # done steps stay done
    perf = read(work / "performance.json")
    assert perf["complete"] is True and perf["missing"] == [] and perf["n_cases_valid"] == 2
    assert read(work / ".state" / "previous" / "performance.json")["complete"] is False  # the evidence is kept
    assert read(work / "mfu_decompose.json")["complete"] is True

    # decompose refuses an incomplete collection unless told, and then marks its result
    from mfulib.report import decompose
    with open(work / "performance.json") as f:
        doc = json.load(f)
    doc.update(complete=False, missing=[{"case": 3, "impl": "asc", "reason": "not run: interrupted"}])
    (tmp_path / "partial").mkdir()
    with open(tmp_path / "partial" / "performance.json", "w") as f:
        json.dump(doc, f)
    with pytest.raises(UserError, match="incomplete collection .*case 3 asc.* re-run"):
        decompose.decompose(str(work), str(work / "peak.json"), reports=[("partial", str(tmp_path / "partial" /
                                                                                        "performance.json"))])
    marked = decompose.decompose(str(work), str(work / "peak.json"), allow_incomplete=True,
                                 reports=[("partial", str(tmp_path / "partial" / "performance.json"))])
    (missing,) = marked["missing"]
    assert marked["complete"] is False and missing.startswith("partial: case 3 asc") and "interrupted" in missing
    assert marked["warnings"][0].startswith("INCOMPLETE collection")

    # a content-identical touch of a source rebuilds nothing; status says every step is done
    os.utime(softmax_src / IMPL2)
    assert "Nothing to be done for 'all'" in make(*args, "all").stdout
    assert {k: v[0] for k, v in status_of(make(*args, "status").stdout).items()} == dict(
        {s: "done" for s in ("prepare", "verify", "flops", "collect", "peak", "decompose")},
        probe="not run", search="not run")  # step 2 is optional: make all without SEARCH=1 does not run it

    # a changed setting redoes its step and what follows, never "Nothing to be done"; the same settings again do
    changed = make(*args, "FLUSH_CACHE_MIB=8", "all")
    assert changed.returncode == 0, changed.stdout[-2000:] + changed.stderr[-2000:]
    assert "msprof_perf_summary.py" in changed.stdout and "verify_op.py" not in changed.stdout
    assert read(work / "performance.json")["flush_cache_mib"] == 8.0
    assert "FLUSH_CACHE_MIB=8\n" in (work / ".state" / "collect.settings").read_text()
    assert "Nothing to be done for 'all'" in make(*args, "FLUSH_CACHE_MIB=8", "all").stdout
    seeded = make(*args, "FLUSH_CACHE_MIB=8", "VERIFY_ARGS=--case-timeout-s 500", "-n", "all").stdout
    assert "verify_op.py" in seeded  # a verify setting redoes verify (dry run: -n)
    st = status_of(make(*args, "FLUSH_CACHE_MIB=16", "status").stdout)  # make status says so before the redo
    assert st["collect"][0] == "stale" and "FLUSH_CACHE_MIB" in st["collect"][1]
    assert st["decompose"][0] == "stale" and st["verify"][0] == "done"


# ------------------------------------------------------------------------------------------------ units


def test_prepare_verdict_names_the_choice_and_the_file_that_changed(tmp_path):
    src = tmp_path / "impl.py"
    src.write_text("x = 1\n")
    work = tmp_path / "w"
    work.mkdir()
    assert workdir_state.prepare_verdict(str(work), {"form": "A"}, {"impl": str(src)})[0] == "new"
    record = {"request": {"form": "A", "iter": None}, "sources": workdir_state.source_record({"impl": str(src)})}
    (work / "prepare.json").write_text(json.dumps(record))
    assert workdir_state.prepare_verdict(str(work), {"form": "A", "iter": None}, {"impl": str(src)})[0] == "ok"
    assert workdir_state.prepare_verdict(str(work), {"form": "A", "iter": 2}, {"impl": str(src)}) == \
        ("redo", "ITER (unset) -> 2")
    other = tmp_path / "other.py"
    other.write_text("x = 1\n")
    assert workdir_state.prepare_verdict(str(work), {"form": "A", "iter": None}, {"impl": str(other)}) == \
        ("redo", f"impl file {src} -> {other}")
    src.write_text("x = 2\n")
    assert workdir_state.prepare_verdict(str(work), {"form": "A", "iter": None}, {"impl": str(src)}) == \
        ("redo", f"impl content changed ({src})")
    (work / "prepare.json").write_text(json.dumps({"sources": {}}))
    assert "records no source choices" in workdir_state.prepare_verdict(str(work), {}, {})[1]


def test_the_gate_refuses_a_verify_json_of_another_backend_or_of_other_model_files(tmp_path):
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_msprof"))
    import tinyops
    from mfulib.core.opdir import OpDir
    from mfulib.schemas import verify_json
    from mfulib.verify.verified_cases import Gate
    od = OpDir(tinyops.make_workdir(tmp_path))
    doc = {"tool": verify_json.TOOL, "device": {"backend": "cuda"}, "inputs": verify_json.input_digests(od.path),
           "cases": [{"case": 0, "status": "pass"}, {"case": 1, "status": "skipped", "reason": "too big"}]}
    verify_json.write_verify_json(od.file("verify.json"), doc)
    with pytest.raises(UserError, match="verified on cuda.* on cpu.*re-run verify"):
        Gate(od, "cpu", "cpu")
    forced = Gate(od, "cpu", "cpu", forced=True)  # --unverified-ok: the rows are ignored, every case is marked
    ok, mark = forced.admits(0)
    assert ok and mark["forced"] and "verified on cuda" in mark["reason"]
    gate = Gate(od, "cuda", "cuda:0")
    assert gate.admits(0) == (True, {"status": "pass", "reason": None, "forced": False})
    assert gate.admits(1)[0] is False and "verify skipped (too big)" in gate.admits(1)[1]["reason"]
    # the flag times a refused case only where the selection rule (top-k / smallest-k) or --cases picks it
    assert gate.admits(1)[1]["reason"].endswith("--unverified-ok (make ACCEPT_UNVERIFIED_CASES=1) times it anyway "
                                                "(marked) when it is selected (--cases picks it)")
    assert gate.pending([0, 1, 2]) == [2]
    with open(od.model_new_py, "a") as f:
        f.write("# edited after verify\n")
    with pytest.raises(UserError, match="made for another model_new.py"):
        Gate(od, "cuda", "cuda:0")


def test_a_failure_make_recorded_is_failed_even_without_a_report_and_a_later_start_clears_it(tmp_path):
    # the step macro writes .state/<step>.failed (the exit status); a step that failed before writing any report
    # used to read "not run"
    st = tmp_path / ".state"
    st.mkdir()
    (st / "verify.started").touch()
    (st / "verify.failed").write_text("2\n")
    rows = {r["step"]: r for r in workdir_state.step_states(str(tmp_path), ("ok", ""))}
    assert rows["verify"]["state"] == "failed" and rows["verify"]["report"] == ""
    assert rows["verify"]["detail"].startswith("exit status 2") and "no report written" in rows["verify"]["detail"]
    assert rows["collect"]["state"] == "not run" and "verify failed" in rows["collect"]["detail"]
    os.utime(st / "verify.failed", (1, 1))  # a later run started (and was killed before recording anything)
    assert workdir_state.failure_record(str(tmp_path), "verify") is None
    assert {r["step"]: r["state"] for r in workdir_state.step_states(str(tmp_path), ("ok", ""))}["verify"] == "not run"


def test_make_status_warns_when_the_steps_ran_with_different_seeds(tmp_path):
    for name, seed in (("verify.json", 1), ("flops_check.json", 0), ("performance.json", 0)):
        (tmp_path / name).write_text(json.dumps({"seed": seed}))
    assert workdir_state.recorded_seeds(str(tmp_path)) == {"verify.json": 1, "flops_check.json": 0,
                                                           "performance.json": 0}
    table = workdir_state.status_table(str(tmp_path), ("ok", ""))
    (warning,) = [ln for ln in table.splitlines() if ln.startswith("warning: ")]
    assert "verify.json seed 1" in warning and "flops_check.json seed 0" in warning
    assert "performance.json seed 0" in warning
    (tmp_path / "verify.json").write_text(json.dumps({"seed": 0}))
    (tmp_path / "flops_check.json").unlink()
    assert workdir_state.seed_mismatch(str(tmp_path)) is None
    assert "warning" not in workdir_state.status_table(str(tmp_path), ("ok", ""))


def test_make_status_says_search_incomplete_when_the_budget_cut_the_probe(tmp_path):
    # unit level: the reports and stamps as make and the two steps leave them, no pipeline run
    probe = {"tool": "max_shape_probe", "schema": 1, "symbols": [], "candidates": [], "appended": {},
             "complete": False, "interrupted": "--budget-s 150 s reached"}
    retimed = {"runs": 4, "values": [0.61, 0.64, 0.62, 0.63], "median": 0.625, "min": 0.61, "max": 0.64,
               "spread": 0.03 / 0.625, "tie": [7, 9], "figure": "mfu_ach"}
    grid = {"tool": "mfu_grid_search", "schema": 1, "pool": [{"case": 7}, {"case": 9}], "stage1": [], "stage2": [],
            "cost_s": {}, "chosen_cases": [7, 9], "complete": True,
            "best": {"case": 7, "metric": "mfu", "mfu": 0.625, "mfu_kind": "ach", "retimed": retimed}}
    (tmp_path / "probe.json").write_text(json.dumps(probe))
    (tmp_path / "grid_search.json").write_text(json.dumps(grid))
    verify = {"tool": "verify_op.py", "cases": [{"case": 7, "status": "pass"}]}
    (tmp_path / "verify.json").write_text(json.dumps(verify))
    st = tmp_path / ".state"
    st.mkdir()
    for k, step in enumerate(("verify", "probe", "search")):
        (st / f"{step}.ok").touch()
        os.utime(st / f"{step}.ok", (2e9 + k, 2e9 + k))  # each stamp newer than the one before (and every input)
    rows = {r["step"]: r for r in workdir_state.step_states(str(tmp_path), ("ok", ""))}
    search = rows["search"]["detail"]
    assert rows["search"]["state"] == "done"  # make's view: the stamp stands ...
    assert search.startswith("search incomplete: the probe was cut by its budget (--budget-s 150 s reached)")
    assert "best so far: case 7 MFU 62.50% (median of 4 runs, spread 4.8%; tie with case 9)" in search
    assert "search incomplete" in workdir_state.status_table(str(tmp_path), ("ok", ""))
    # the resume advice: without probe.settings the PROBE_ARGS it ran with are unknown - say to add --budget-s to them
    generic = "make probe with --budget-s <more> added to the PROBE_ARGS it ran with resumes it from probe.json"
    assert search.endswith(f"; {generic}, then make search") and "PROBE_ARGS='" not in search
    assert rows["probe"]["detail"].endswith(f"({generic})")
    # with them (as the Makefile's step macro records them): kept, the budget replaced - never the defaults back
    (st / "probe.settings").write_text("PROBE_ARGS=--max-scale 4 --budget-s 20\nSEED=0\nBACKEND=cpu\n")
    kept = "make probe PROBE_ARGS='--max-scale 4 --budget-s <more>' resumes it from probe.json"
    rows = {r["step"]: r for r in workdir_state.step_states(str(tmp_path), ("ok", ""))}
    assert rows["search"]["detail"].endswith(f"; {kept}, then make search")
    assert rows["probe"]["detail"].endswith(f"({kept})")
    # a complete probe: the best point plainly, with its re-timing; a probe stopped by Ctrl-C is not a budget cut
    for end in ({"complete": True, "interrupted": None}, {"interrupted": "KeyboardInterrupt: a re-run resumes"}):
        (tmp_path / "probe.json").write_text(json.dumps(dict(probe, **end)))
        ok, detail = workdir_state.report_verdict("search", str(tmp_path / "grid_search.json"))
        assert ok and detail == "best: case 7 MFU 62.50% (median of 4 runs, spread 4.8%; tie with case 9)"


def test_a_stopped_search_without_its_stamp_is_not_done_not_failed(tmp_path):
    # a stop (Ctrl-C, the batch's --op-timeout-s) leaves grid_search.json marked interrupted and no stamp: make
    # redoes the step, and make status calls it "not done" with what it found so far - never "failed", which is an
    # exit status make recorded; a report that ended and says not ok stays "failed"
    grid = {"tool": "mfu_grid_search", "schema": 1, "pool": [{"case": 7}], "stage1": [], "chosen_cases": [],
            "stage2": [{"case": 7, "status": "ok", "metric_value": 0.0457, "mfu_ach": 0.0457}], "cost_s": {},
            "complete": False, "best": None, "interrupted": "SIGTERM after pool, stage1, stage2 - make search runs it "
                                                             "again"}
    (tmp_path / "grid_search.json").write_text(json.dumps(grid))
    (tmp_path / "probe.json").write_text(json.dumps({"tool": "max_shape_probe", "schema": 1, "complete": True,
                                                     "interrupted": None, "appended": {}, "candidates": []}))
    (tmp_path / "verify.json").write_text(json.dumps({"tool": "verify_op.py", "cases": [{"case": 7,
                                                                                          "status": "pass"}]}))
    st = tmp_path / ".state"
    st.mkdir()
    for k, step in enumerate(("verify", "probe")):
        (st / f"{step}.ok").touch()
        os.utime(st / f"{step}.ok", (2e9 + k, 2e9 + k))
    waits = {"flops": ["probe"], "collect": ["search"]}  # make's edges after its own search was stopped (SEARCH=1)
    rows = {r["step"]: r for r in workdir_state.step_states(str(tmp_path), ("ok", ""), waits=waits)}
    assert rows["search"]["state"] == "not done", rows["search"]
    assert rows["search"]["detail"] == ("stopped, make redoes it: interrupted (SIGTERM after pool, stage1, stage2 - "
                                        "make search runs it again); best so far: case 7 MFU@ach 4.57% (stage 2, "
                                        "not re-timed)")
    grid.update(interrupted=None)  # not complete and no stop recorded: a failure, as before
    (tmp_path / "grid_search.json").write_text(json.dumps(grid))
    rows = {r["step"]: r for r in workdir_state.step_states(str(tmp_path), ("ok", ""))}
    assert rows["search"]["state"] == "failed"


def test_a_search_stopped_in_its_re_timing_reports_the_best_median_so_far():
    # the finished re-timing runs are kept in the stage-2 rows (retimed): what was found is their best median, not
    # the one-process stage-2 figure (case 15 re-timed above case 17, although 17 led stage 2)
    from mfulib.schemas import grid_search_json
    rt = lambda vals: {"runs": len(vals), "values": vals, "median": sorted(vals)[len(vals) // 2]}  # noqa: E731
    doc = {"complete": False, "best": None, "retime": {"figure": "mfu_ach", "runs": 3},
           "stage2": [{"case": 17, "status": "ok", "metric_value": 0.20, "mfu_ach": 0.20,
                       "retimed": rt([0.20, 0.12, 0.16])},
                      {"case": 15, "status": "ok", "metric_value": 0.17, "mfu_ach": 0.17,
                       "retimed": rt([0.17, 0.19, 0.185])}]}
    assert grid_search_json.best_so_far(doc) == "case 15 MFU@ach 18.50% (median of 3 runs; the re-timing was stopped)"
    for r in doc["stage2"]:
        r["retimed"] = rt([r["metric_value"]])  # stage 2's own run only: nothing re-timed yet
    assert grid_search_json.best_so_far(doc) == "case 17 MFU@ach 20.00% (stage 2, not re-timed)"


def test_make_status_judges_the_search_edges_make_takes_and_says_which_make_redoes_a_step_off_them(tmp_path):
    """make status is given the search's edges make takes now (the Makefile's SEARCH_EDGES: with SEARCH=1 or once
    make ran the search in the work directory): a search whose stamp a hand run with other settings removed makes
    the collection stale there, as make redoes both; flops waits for the probe (judged after it, although listed
    before it). Off those edges, `make all` never runs the search: its row says which target does."""
    grid = {"tool": "mfu_grid_search", "schema": 1, "pool": [{"case": 0}], "stage1": [], "stage2": [], "cost_s": {},
            "chosen_cases": [0], "complete": True, "interrupted": None,
            "best": {"case": 0, "metric": "mfu", "mfu": 0.5, "mfu_kind": "ach"},
            "made_from": {"by_make": False, "settings": {"retime_runs": 0}, "files": {}}}
    (tmp_path / "grid_search.json").write_text(json.dumps(grid))
    (tmp_path / "probe.json").write_text(json.dumps({"tool": "max_shape_probe", "schema": 1, "complete": True,
                                                     "interrupted": None, "appended": {}, "candidates": [],
                                                     "symbols": []}))
    st = tmp_path / ".state"
    st.mkdir()
    (st / "search.made_from.json").write_text(json.dumps({"by_make": True, "settings": {"retime_runs": 3},
                                                          "files": {}}))
    for k, step in enumerate(("verify", "flops", "probe", "collect")):  # no search.ok: the hand run removed it
        (st / f"{step}.ok").touch()
        os.utime(st / f"{step}.ok", (2e9 + k, 2e9 + k))
    waits = {"flops": ["probe"], "collect": ["search"]}
    from mfulib.pipeline.step_graph import on_make_path
    assert on_make_path(workdir_state.STEPS, {}) == {"prepare", "verify", "flops", "collect", "peak", "decompose"}
    assert {"probe", "search"} <= on_make_path(workdir_state.STEPS, waits)
    rows = {r["step"]: r for r in workdir_state.step_states(str(tmp_path), ("ok", ""), waits=waits)}
    assert rows["search"]["state"] == "not done"
    assert rows["search"]["detail"].startswith("report present but make recorded no success (run by hand with "
                                               "other settings or inputs than make's (retime_runs 3 -> 0)): make "
                                               "redoes it"), rows["search"]
    assert rows["collect"]["state"] == "stale" and "search not done" in rows["collect"]["detail"]
    assert [r["step"] for r in workdir_state.step_states(str(tmp_path), ("ok", ""), waits=waits)] == list(
        s.name for s in workdir_state.STEPS)  # listed in make status's order, whatever order they were judged in
    rows = {r["step"]: r for r in workdir_state.step_states(str(tmp_path), ("ok", ""))}  # a work dir make never
    assert "make search redoes it (make all does only with SEARCH=1)" in rows["search"]["detail"]  # searched
    assert "search" not in rows["collect"]["detail"]
    (st / "probe.ok").unlink()  # a probe run by hand with other settings: flops waits for it, as make does
    rows = {r["step"]: r for r in workdir_state.step_states(str(tmp_path), ("ok", ""), waits=waits)}
    assert rows["probe"]["state"] == "not done" and "probe not done" in rows["flops"]["detail"], rows
    rows = {r["step"]: r for r in workdir_state.step_states(str(tmp_path), ("ok", ""))}
    assert "probe" not in rows["flops"]["detail"] and "make probe redoes it" in rows["probe"]["detail"]


_GENERIC = "make probe with --budget-s <more> added to the PROBE_ARGS it ran with resumes it from probe.json"


@pytest.mark.parametrize("recorded, given", [
    (None, None), ("", "--budget-s <more>"), ("--max-scale 4", "--max-scale 4 --budget-s <more>"),
    ("--budget-s 20 --max-scale 4", "--budget-s <more> --max-scale 4"),
    ("--max-scale 4 --budget-s=20", "--max-scale 4 --budget-s <more>"),
    ("--max-scale '4", None),  # not shell words: nothing to build on
])
def test_the_budget_cut_advice_keeps_the_probe_args_the_probe_ran_with(tmp_path, recorded, given):
    advice = _GENERIC if given is None else f"make probe PROBE_ARGS='{given}' resumes it from probe.json"
    if recorded is not None:
        (tmp_path / ".state").mkdir()
        (tmp_path / ".state" / "probe.settings").write_text(f"PROBE_ARGS={recorded}\nSEED=0\n")
    assert workdir_state.probe_resume_cut(str(tmp_path)) == advice
    assert workdir_state.read_settings(str(tmp_path), "probe") == (
        None if recorded is None else {"PROBE_ARGS": recorded.strip(), "SEED": "0"})


def test_a_report_left_by_an_earlier_run_whose_step_waits_on_a_failed_one_says_so(tmp_path):
    # a tester: after the search was redone and failed, collect read "report present but make recorded no success
    # (interrupted, or run outside make)" - it was neither; it waits for the search, which failed
    (tmp_path / "performance.json").write_text(json.dumps({
        "tool": "msprof_perf_summary", "schema": 1, "per_case": [{"case": 0, "kernel_time_ns": 1000.0}],
        "n_cases_valid": 1, "complete": True, "missing": []}))
    st = tmp_path / ".state"
    st.mkdir()
    (st / "search.failed").write_text("2\n")
    rows = {r["step"]: r for r in workdir_state.step_states(str(tmp_path), ("ok", ""),
                                                             waits={"collect": ["search"]})}
    assert rows["collect"]["state"] == "not done", rows["collect"]
    detail = rows["collect"]["detail"]
    assert "a step it waits for is not done: " in detail and "search failed" in detail
    assert "interrupted, or run outside make" not in rows["collect"]["detail"]


def test_a_failed_step_whose_report_a_hand_run_rewrote_as_passing_says_so(tmp_path):
    # a new user's report: make's flops step failed, check_flops.py run by hand then passed - make status still said
    # "exit status 1; its report is kept" of a report that now says PASSED
    st = tmp_path / ".state"
    st.mkdir()
    (st / "probe.started").touch()
    (st / "probe.failed").write_text("1\n")
    os.utime(st / "probe.started", (100, 100))
    os.utime(st / "probe.failed", (200, 200))
    doc = {"tool": "max_shape_probe", "schema": 1, "symbols": [], "candidates": [], "appended": {}, "complete": True}
    (tmp_path / "probe.json").write_text(json.dumps(doc))
    os.utime(tmp_path / "probe.json", (150, 150))  # the failing run's own report
    rows = {r["step"]: r for r in workdir_state.step_states(str(tmp_path), ("ok", ""))}
    assert rows["probe"]["state"] == "failed" and "rewritten" not in rows["probe"]["detail"]
    os.utime(tmp_path / "probe.json", (300, 300))  # rewritten after the failure, by a run outside make
    rows = {r["step"]: r for r in workdir_state.step_states(str(tmp_path), ("ok", ""))}
    assert rows["probe"]["state"] == "failed"
    assert "rewritten since, by a run outside make, and passes" in rows["probe"]["detail"], rows["probe"]["detail"]
