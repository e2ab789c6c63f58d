"""The Makefile's per-step settings files ($(WORK)/.state/<step>.settings) and the search's edges with a stand-in
Python (no torch, fast): the fake ``PY`` answers prepare's parse-time ``--check`` with "ok" (a prepare run rewrites
prepare.json), hands the Makefile's other parse-time questions (``-c`` snippets reading a JSON field) to the real
interpreter, and records every script it is asked to run, failing the collector when its arguments contain
``--fail-me`` (and the FLOPs check when ``FAIL_FLOPS`` is set; exit 4, refused settings, on ``--refuse-me``); a grid search it is asked to run leaves a grid_search.json, as the real one does."""
import sys
import json
import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FAKE_PY = """#!/bin/sh
case "$*" in *--check*) echo ok; exit 0;; esac
case "$1" in -c) exec "%s" "$@";; esac
echo "$(basename "$1") $*" >> "$CALLS"
case "$1" in */prepare_op_dir.py) while [ $# -gt 0 ]; do [ "$1" = --dst ] && touch "$2/prepare.json"; shift; done;;
esac
case "$*" in *--fail-me*) exit 2;; esac
case "$*" in *--refuse-me*) exit 4;; esac
case "$*" in *"check_flops.py --op-dir"*) [ -n "$FAIL_FLOPS" ] && exit 1;; esac
case "$*" in *mfu_grid_search.py*) while [ $# -gt 0 ]; do [ "$1" = --dir ] && touch "$2/grid_search.json"; shift; done;;
esac
exit 0
"""


def fake_work(tmp_path):
    py = tmp_path / "py"
    py.write_text(FAKE_PY % sys.executable)
    py.chmod(0o755)
    work = tmp_path / "w"
    work.mkdir()
    for name in ("prepare.json", "model.py", "model_new.py", "flops.py", "performance.json"):
        (work / name).write_text("{}\n")
    from mfulib.schemas.peak_json import METHOD_VERSION  # a peak.json of today's method: make keeps it
    (work / "peak.json").write_text(json.dumps({"method": {"method_version": METHOD_VERSION}}) + "\n")
    calls = tmp_path / "calls"
    env = dict(os.environ, CALLS=str(calls))
    for k in ("COLLECT_ARGS", "SEED", "BACKEND", "PMU", "FLUSH_CACHE_MIB", "DEVICE_ID", "MAKEFLAGS", "MFLAGS"):
        env.pop(k, None)

    def make(*args):
        if calls.exists():
            calls.unlink()
        r = subprocess.run([shutil.which("make"), "-C", ROOT, "OP=zoo/2_Softmax", f"WORK={work}", f"PY={py}",
                            "BACKEND=cpu", f"DEVICE_LOCK={tmp_path / 'lock'}", *args], capture_output=True,
                           text=True, env=env, timeout=60)
        return r, (calls.read_text() if calls.exists() else "")
    return work, make


def test_a_settings_forced_rerun_that_fails_leaves_no_stamp_so_the_next_make_redoes_it(tmp_path):
    work, make = fake_work(tmp_path)
    r, calls = make("collect")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "msprof_perf_summary.py" in calls and (work / ".state" / "collect.ok").exists()
    r, calls = make("collect")
    assert r.returncode == 0 and calls == "", calls  # done: nothing runs

    r, calls = make("collect", "COLLECT_ARGS=--fail-me")  # a changed setting re-runs collect, which fails
    assert r.returncode != 0 and "msprof_perf_summary.py" in calls, r.stdout + r.stderr
    assert "step collect FAILED" in r.stderr
    assert not (work / ".state" / "collect.ok").exists()  # not the stamp of the run before it
    r, calls = make("collect")  # "the next make redoes it" (a make not given COLLECT_ARGS included)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "msprof_perf_summary.py" in calls


def test_a_failed_step_is_recorded_so_status_says_failed_not_interrupted(tmp_path):
    # the user's repro: `make all`, then `make collect COLLECT_ARGS="--bogus"` (exit 2) - make status said "not done
    # ... interrupted, or run outside make". The step macro records the exit status in .state/collect.failed (also
    # with a relative WORK: the collector's recipe cd's into it) and status reads it; a killed run records nothing.
    from mfulib.pipeline import workdir_state
    work, make = fake_work(tmp_path)
    rel = os.path.relpath(work, ROOT)
    r, calls = make(f"WORK={rel}", "collect")
    assert r.returncode == 0, r.stdout + r.stderr
    r, calls = make(f"WORK={rel}", "collect", "COLLECT_ARGS=--fail-me")
    assert r.returncode == 2 and "step collect FAILED (exit status 2)" in r.stderr, r.stdout + r.stderr
    assert "before writing a new" in r.stderr  # the report there is the earlier run's (found from inside WORK too)
    assert (work / ".state" / "collect.failed").read_text().strip() == "2"
    rows = {x["step"]: x for x in workdir_state.step_states(str(work), ("ok", ""))}
    assert rows["collect"]["state"] == "failed", rows["collect"]
    assert rows["collect"]["detail"].startswith("exit status 2") and "no new report" in rows["collect"]["detail"]

    # a run killed before it could record anything (a .failed older than the last .started) is not called failed by
    # the record: with this stand-in report ("{}") the state comes from the report alone
    (work / ".state" / "collect.started").touch()
    os.utime(work / ".state" / "collect.failed", (1, 1))
    assert workdir_state.failure_record(str(work), "collect") is None
    rows = {x["step"]: x for x in workdir_state.step_states(str(work), ("ok", ""))}
    assert "exit status" not in rows["collect"]["detail"], rows["collect"]

    r, calls = make(f"WORK={rel}", "collect")  # the next make redoes it; success removes the record
    assert r.returncode == 0 and "msprof_perf_summary.py" in calls, r.stdout + r.stderr
    assert (work / ".state" / "collect.ok").exists() and not (work / ".state" / "collect.failed").exists()


def test_the_device_lock_is_named_by_lock_device_which_defaults_to_device_id(tmp_path):
    # a batch worker runs with DEVICE_ID=0 (its only visible device) and LOCK_DEVICE=<physical id>: its steps must
    # take that device's lock, the one a plain make with DEVICE_ID=<physical id> takes (an accelerator's lock is
    # named by it: mfulib/pipeline/device_lock.py; the CPU's is per work directory)
    work, _make = fake_work(tmp_path)

    def dry(*args):
        r = subprocess.run([shutil.which("make"), "-C", ROOT, "-n", "OP=zoo/2_Softmax", f"WORK={work}",
                            f"PY={tmp_path / 'py'}", "BACKEND=cuda", *args, "verify"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout
    lock = f"device_lock.py --backend cuda --device {{}} --work {work} "
    assert lock.format(0) in dry()
    assert lock.format(3) in dry("DEVICE_ID=3")
    out = dry("DEVICE_ID=0", "LOCK_DEVICE=3")
    assert lock.format(3) in out and "verify_op.py --op-dir" in out and "--device 0" in out
    assert f"--lock {tmp_path}/l " in dry(f"DEVICE_LOCK={tmp_path}/l")


def test_a_step_rerun_by_a_cascade_keeps_the_arguments_it_last_ran_with(tmp_path):
    """COLLECT_ARGS given once is sticky: a collect re-run because SEED changed keeps it; `COLLECT_ARGS=` (given,
    empty) goes back to the default and re-runs."""
    work, make = fake_work(tmp_path)
    r, calls = make("collect", "COLLECT_ARGS=--keep-me", "PMU=auto")
    assert r.returncode == 0 and "--keep-me" in calls and "--pmu auto" in calls, r.stdout + r.stderr
    r, calls = make("collect", "SEED=7")  # SEED given and changed: collect runs again, with its own last arguments
    assert r.returncode == 0 and "--seed 7" in calls, r.stdout + r.stderr
    assert "--keep-me" in calls and "--pmu auto" in calls, calls
    r, calls = make("collect", "SEED=7")
    assert r.returncode == 0 and calls == "", calls  # nothing changed: nothing runs
    r, calls = make("collect", "SEED=7", "COLLECT_ARGS=")
    assert r.returncode == 0 and "msprof_perf_summary.py" in calls and "--keep-me" not in calls, calls
    assert "COLLECT_ARGS=\n" in (work / ".state" / "collect.settings").read_text()


def test_a_redo_of_step_1_redoes_every_step_that_builds_on_it(tmp_path):
    """A redo of step 1 replaces the work directory; flops and peak must run again there, not keep the stamps make
    read from the directory before (their rules name prepare.json as a normal prerequisite)."""
    work, make = fake_work(tmp_path)
    r, calls = make("verify", "flops", "peak")
    assert r.returncode == 0, r.stdout + r.stderr
    r, calls = make("verify", "flops", "peak")
    assert r.returncode == 0 and calls == "", calls  # all done: nothing runs
    r, calls = make("verify", "flops", "peak", "FORCE=1")  # step 1 redone
    assert r.returncode == 0, r.stdout + r.stderr
    for script in ("prepare_op_dir.py", "verify_op.py", "check_flops.py", "peak_calib.py"):
        assert script in calls, (script, calls)


def test_a_search_whose_stamp_a_hand_run_removed_is_redone_before_the_collection_and_make_status_is_told(tmp_path):
    """The new user's report: `make SEARCH=1 all`, then mfu_grid_search.py by hand with other settings (it removes
    make's stamp of the search), then make status said "search not done, make redoes it; collect stale" while the
    next `make all` did nothing - and a collection redone later silently measured the top-k cases, not the search's.
    Once make has run the search in a work directory, collect waits for it without SEARCH=1: make redoes the search
    (with its own settings), then collects with --search-json; make status is given the same edges."""
    from mfulib.pipeline import workdir_state
    work, make = fake_work(tmp_path)
    r, calls = make("collect", "SEARCH=1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert calls.index("max_shape_probe.py") < calls.index("check_flops.py")  # flops waits for the probe
    assert calls.index("mfu_grid_search.py") < calls.index("msprof_perf_summary.py")
    (collect,) = [ln for ln in calls.splitlines() if "msprof_perf_summary.py" in ln]
    assert collect.endswith("--search-json grid_search.json"), collect
    r, calls = make("collect")
    assert r.returncode == 0 and calls == "", calls  # done, with or without SEARCH=1

    made = {"by_make": True, "settings": {"retime_runs": 3}, "files": {}}  # make's record of its search
    (work / ".state" / "search.made_from.json").write_text(json.dumps(made))
    said = []
    workdir_state.record_run(str(work), "search", dict(made, by_make=False, settings={"retime_runs": 0}), said.append)
    assert not (work / ".state" / "search.ok").exists() and "the next make redoes it" in said[0]
    r, _ = make("-n", "status")  # (-n: the stand-in prepare_op_dir.py would touch prepare.json)
    assert r.returncode == 0 and "--waits 'flops:probe collect:search search:flops'" in r.stdout, r.stdout  # make's own graph
    r, calls = make("collect")  # no SEARCH=1: the search is redone first, then collected
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mfu_grid_search.py" in calls and "max_shape_probe.py" not in calls, calls
    (collect,) = [ln for ln in calls.splitlines() if "msprof_perf_summary.py" in ln]
    assert collect.endswith("--search-json grid_search.json"), collect
    assert make("collect")[1] == ""

    # a stamp whose report is gone is no finished search: redone, never a collection of the top-k cases instead
    (work / "grid_search.json").unlink()
    r, calls = make("collect")
    assert r.returncode == 0 and "mfu_grid_search.py" in calls and "--search-json grid_search.json" in calls, calls
    # a search stopped by Ctrl-C (make's own run: no stamp, .started stays) is redone by a make without SEARCH=1 too
    (work / ".state" / "search.ok").unlink()
    r, calls = make("collect")
    assert r.returncode == 0 and "mfu_grid_search.py" in calls, calls


def test_without_a_search_make_collects_the_top_k_cases_never_a_grid_search_json_it_did_not_make(tmp_path):
    """A work directory make never searched: collect does not wait for a search and tells the collector so
    (--no-search-json: a grid_search.json a hand run left there is not make's); status gets no search edge; a
    COLLECT_ARGS that chooses for itself is left alone."""
    work, make = fake_work(tmp_path)
    (work / "grid_search.json").write_text("{}\n")  # a hand run's, without make's stamp
    r, calls = make("collect")
    assert r.returncode == 0 and "mfu_grid_search.py" not in calls and "max_shape_probe.py" not in calls, calls
    (collect,) = [ln for ln in calls.splitlines() if "msprof_perf_summary.py" in ln]
    assert collect.endswith("--no-search-json"), collect
    r, _ = make("-n", "status")
    assert r.returncode == 0 and "--waits ''" in r.stdout, r.stdout  # no edge
    r, calls = make("collect", "COLLECT_ARGS=--search-json grid_search.json")
    (collect,) = [ln for ln in calls.splitlines() if "msprof_perf_summary.py" in ln]
    assert r.returncode == 0 and collect.endswith("--search-json grid_search.json"), collect
    assert "--no-search-json" not in collect


def test_a_switch_set_to_0_is_off_and_a_value_that_is_no_switch_is_refused(tmp_path):
    """SEARCH=0 (no, false, off) is off - make reads every non-empty value as on, so the Makefile empties the off
    words before anything reads a switch; SEARCH=maybe is refused, naming the variable and the two values it takes.
    The same for FORCE and the ACCEPT_* switches."""
    work, _make = fake_work(tmp_path)

    def dry(*args, target="collect"):
        return subprocess.run([shutil.which("make"), "-C", ROOT, "-n", "OP=zoo/2_Softmax", f"WORK={work}",
                               f"PY={tmp_path / 'py'}", "BACKEND=cpu", *args, target], capture_output=True, text=True,
                              timeout=60)
    searched = lambda r: "max_shape_probe.py" in r.stdout or "mfu_grid_search.py" in r.stdout  # noqa: E731
    for off in ("SEARCH=0", "SEARCH=no", "SEARCH=off", "SEARCH=false", "SEARCH="):
        r = dry(off)
        assert r.returncode == 0 and not searched(r), (off, r.stdout + r.stderr)
    for on in ("SEARCH=1", "SEARCH=yes", "SEARCH=true"):
        r = dry(on)
        assert r.returncode == 0 and searched(r), (on, r.stdout + r.stderr)
    r = dry("SEARCH=maybe")
    assert r.returncode != 0 and "SEARCH=maybe: use SEARCH=1 to turn it on" in r.stderr
    assert "--unverified-ok" not in dry("ACCEPT_UNVERIFIED_CASES=0").stdout
    assert "--unverified-ok" in dry("ACCEPT_UNVERIFIED_CASES=1").stdout
    assert dry("FORCE=2").returncode != 0


def test_the_search_waits_for_the_flops_check_and_a_changed_flops_py_redoes_it(tmp_path):
    """A new user's report: with SEARCH=1 the search ran beside a failing FLOPs check and ranked the cases by the
    broken draft (a bmm searched as MBU), and a hand-fixed flops.py left the search as it was ("Nothing to be done",
    while the report called grid_search.json stale). The search ranks by flops.py: it runs after the check, and a
    changed flops.py redoes both."""
    import time
    work, make = fake_work(tmp_path)
    r, calls = make("collect", "SEARCH=1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert calls.index("check_flops.py") < calls.index("mfu_grid_search.py"), calls
    assert make("collect")[1] == ""
    time.sleep(1.1)  # a newer mtime than the stamps
    (work / "flops.py").write_text("# fixed by hand\n")
    r, calls = make("collect")
    assert r.returncode == 0, r.stdout + r.stderr
    assert calls.index("check_flops.py") < calls.index("mfu_grid_search.py") < calls.index("msprof_perf_summary.py")
    assert "max_shape_probe.py" not in calls
    assert make("collect", "SEARCH=1")[1] == ""  # nothing changed: nothing runs


def test_make_status_of_a_work_dir_prepared_by_hand_needs_no_op(tmp_path):
    """A new user's report: a failing step told `make status OP= WORK=work/x`, which stopped at "OP is not set"."""
    work, _make = fake_work(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "OP")}
    r = subprocess.run([shutil.which("make"), "-C", ROOT, f"WORK={work}", "status"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "its sources were not compared" in r.stdout and "verify" in r.stdout
    r = subprocess.run([shutil.which("make"), "-C", ROOT, "-n", f"WORK={work}", "VERIFY_ARGS=--fail-me", "verify"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert "make status OP=" not in r.stdout + r.stderr and "make status WORK=" in r.stdout + r.stderr


def test_a_search_1_run_stopped_by_the_flops_check_keeps_the_search_on_makes_path(tmp_path):
    """A new user's report: `make SEARCH=1 all` stopped at a failing FLOPs check (after the probe, before the
    search); after fixing flops.py, `make all` without SEARCH=1 collected the top-k cases and never searched, and
    make status said nothing of it. The probe's files keep the search on make's path too."""
    work, make = fake_work(tmp_path)
    r, calls = make("collect", "SEARCH=1", "FAIL_FLOPS=1")
    assert r.returncode != 0 and "max_shape_probe.py" in calls and "mfu_grid_search.py" not in calls, calls
    assert (work / ".state" / "probe.ok").exists() and not (work / ".state" / "search.started").exists()
    r, _ = make("-n", "status")
    assert r.returncode == 0 and "--waits 'flops:probe collect:search search:flops'" in r.stdout, r.stdout
    r, calls = make("collect")  # flops.py fixed; no SEARCH=1
    assert r.returncode == 0, r.stdout + r.stderr
    assert calls.index("check_flops.py") < calls.index("mfu_grid_search.py") < calls.index("msprof_perf_summary.py")
    assert "max_shape_probe.py" not in calls, calls
    (collect,) = [ln for ln in calls.splitlines() if "msprof_perf_summary.py" in ln]
    assert collect.endswith("--search-json grid_search.json"), collect


def test_a_step_that_refuses_its_settings_keeps_its_earlier_run_and_nothing_after_it_is_redone(tmp_path):
    """A new user's report: the probe refused a smaller --max-scale (its appended cases would stay), but make's step
    wrapper had removed the probe's stamp first, so the next make re-ran the earlier probe, the search and the
    collection. Exit status 4 (mfulib.core.errors.SettingsRefused: nothing changed) puts the earlier stamp back."""
    work, make = fake_work(tmp_path)
    r, calls = make("collect", "SEARCH=1")
    assert r.returncode == 0, r.stdout + r.stderr
    stamp = work / ".state" / "probe.ok"
    before = stamp.stat().st_mtime
    r, calls = make("collect", "SEARCH=1", "PROBE_ARGS=--refuse-me")
    assert r.returncode != 0 and "max_shape_probe.py" in calls and "mfu_grid_search.py" not in calls, calls
    assert "refused these settings before changing anything" in r.stderr, r.stderr
    assert stamp.exists() and stamp.stat().st_mtime == before and not (work / ".state" / "probe.failed").exists()
    assert not (work / ".state" / "probe.ok.prev").exists()
    assert "PROBE_ARGS=--refuse-me" not in (work / ".state" / "probe.settings").read_text()
    r, calls = make("collect", "SEARCH=1")  # the earlier run stands: nothing is redone
    assert r.returncode == 0 and calls == "", calls
    # a failure (not a refusal) still removes the stamp: the next make redoes the step
    r, calls = make("collect", "SEARCH=1", "PROBE_ARGS=--fail-me")
    assert r.returncode != 0 and not stamp.exists() and (work / ".state" / "probe.failed").exists()
    assert not (work / ".state" / "probe.ok.prev").exists()
