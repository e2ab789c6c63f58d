"""What a report was made from (mfulib.schemas.provenance) and the one staleness judgement: fast, in-process tests on
hand-made work directories (the digests are compared with hashlib's, not the code under test)."""
import hashlib
import json
import os

from mfulib.core.jsonio import versions
from mfulib.schemas import provenance as made


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _report(work, name, inputs, **extra):
    doc = {"versions": versions(), made.KEY: made.made_from(str(work), inputs, {"seed": 0}), **extra}
    _write(os.path.join(work, name), json.dumps(doc))
    return doc


def test_the_record_holds_each_input_digest_and_the_settings(tmp_path):
    _write(tmp_path / "model_new.py", "class ModelNew: pass\n")
    rec = made.made_from(str(tmp_path), [str(tmp_path / "model_new.py"), "absent.py"], {"seed": 3, "dims": (1, 2)})
    assert rec["files"] == {"model_new.py": hashlib.sha256(b"class ModelNew: pass\n").hexdigest(), "absent.py": None}
    assert rec["settings"] == {"seed": 3, "dims": [1, 2]}
    assert rec["by_make"] is False and len(rec["tool"]["content_sha256"]) == 64


def test_by_make_only_when_make_names_this_step(tmp_path, monkeypatch):
    monkeypatch.setenv(made.MAKE_ENV, "collect")
    assert made.made_from(str(tmp_path), [], {}, step="collect")["by_make"] is True
    assert made.made_from(str(tmp_path), [], {}, step="verify")["by_make"] is False


def test_an_unchanged_input_is_current_and_an_edit_makes_the_report_stale(tmp_path):
    _write(tmp_path / "model_new.py", "v1\n")
    doc = _report(tmp_path, "performance.json", ["model_new.py"])
    assert made.judge(doc, str(tmp_path)) == []
    os.utime(tmp_path / "model_new.py")  # a touch changes nothing
    assert made.judge(doc, str(tmp_path)) == []
    _write(tmp_path / "model_new.py", "v2\n")
    assert made.stale_reasons(made.judge(doc, str(tmp_path))) == ["model_new.py changed since this report was made"]


def test_a_gone_or_appeared_input_is_stale(tmp_path):
    _write(tmp_path / "a.py", "a\n")
    doc = _report(tmp_path, "r.json", ["a.py", "b.py"])
    os.unlink(tmp_path / "a.py")
    _write(tmp_path / "b.py", "b\n")
    assert sorted(made.stale_reasons(made.judge(doc, str(tmp_path)))) == [
        "a.py is gone since this report was made", "b.py appeared since this report was made"]


def test_a_changed_input_that_is_a_failed_report_refuses_and_others_only_mark(tmp_path):
    _write(tmp_path / "verify.json", json.dumps({"cases": [{"status": "pass"}]}))
    _write(tmp_path / "model_new.py", "v1\n")
    doc = _report(tmp_path, "performance.json", ["verify.json", "model_new.py"])
    _write(tmp_path / "verify.json", json.dumps({"cases": [{"status": "fail"}]}))
    _write(tmp_path / "model_new.py", "v2\n")
    failed = lambda p: "case 0 fail" if os.path.basename(p) == "verify.json" else None  # noqa: E731
    issues = made.judge(doc, str(tmp_path), failed=failed)
    assert made.refusals(issues) == ["verify.json changed since this report was made and now records a failed step "
                                     "(case 0 fail)"]
    assert len(issues) == 2 and made.refusals(made.judge(doc, str(tmp_path))) == []  # no failed(): nothing refused


def test_a_report_is_stale_through_the_report_it_read(tmp_path):
    _write(tmp_path / "model_new.py", "v1\n")
    _report(tmp_path, "performance.json", ["model_new.py"])
    dec = _report(tmp_path, "mfu_decompose.json", ["performance.json"])
    _write(tmp_path / "model_new.py", "v2\n")
    assert made.stale_reasons(made.judge(dec, str(tmp_path))) == [
        "performance.json is stale: model_new.py changed since this report was made"]


def test_one_changed_file_reached_through_two_reports_is_one_reason_by_its_shortest_chain(tmp_path):
    # report.html reads mfu_decompose.json (which read performance.json) and performance.json itself
    _write(tmp_path / "grid_search.json", "v1\n")
    _report(tmp_path, "performance.json", ["grid_search.json"])
    _report(tmp_path, "mfu_decompose.json", ["performance.json"])
    html = made.made_from(str(tmp_path), ["mfu_decompose.json", "performance.json"], {})
    _write(tmp_path / "grid_search.json", "v2\n")
    issues = made.judge({made.KEY: json.loads(json.dumps(html))}, str(tmp_path))
    assert len(issues) == 2  # both paths are found ...
    assert made.stale_reasons(issues) == [  # ... and told once
        "performance.json is stale: grid_search.json changed since this report was made"]


def test_another_torch_version_makes_a_report_stale_and_an_old_report_without_a_record_is_current(tmp_path):
    now = versions()
    doc = {"versions": dict(now, torch="0.0.1-old"), made.KEY: {"files": {}, "settings": {}}}
    if now.get("torch"):
        assert made.stale_reasons(made.judge(doc, str(tmp_path))) == [f"made under torch 0.0.1-old, now {now['torch']}"]
    assert made.judge({"versions": now}, str(tmp_path)) == []


def test_the_html_record_reads_back(tmp_path):
    from mfulib.report.html import write_html
    _write(tmp_path / "mfu_decompose.json", "{}")
    rec = made.made_from(str(tmp_path), ["mfu_decompose.json"], {})
    path = str(tmp_path / "report.html")
    write_html({"reports": [], "stale": ["x.json: y changed since this report was made"]}, path, made_from=rec)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert "STALE: x.json: y changed" in text
    assert made.html_record(path) == {made.KEY: json.loads(json.dumps(rec))}
    assert made.judge(made.html_record(path), str(tmp_path)) == []
    _write(tmp_path / "mfu_decompose.json", "{\"new\": 1}")
    assert made.stale_reasons(made.judge(made.html_record(path), str(tmp_path))) == [
        "mfu_decompose.json changed since this report was made"]


def test_a_hand_run_counts_as_makes_only_with_makes_settings(tmp_path, monkeypatch):
    from mfulib.pipeline import workdir_state as ws
    os.makedirs(tmp_path / ".state")
    _write(tmp_path / "model_new.py", "v1\n")
    monkeypatch.setenv(made.MAKE_ENV, "collect")
    ws.record_run(str(tmp_path), "collect", made.made_from(str(tmp_path), ["model_new.py"],
                                                           {"measured": [3, 15, 14]}, step="collect"))
    _write(tmp_path / ".state" / "collect.ok", "")
    monkeypatch.delenv(made.MAKE_ENV)
    said = []
    same = made.made_from(str(tmp_path), ["model_new.py"], {"measured": [3, 15, 14]}, step="collect")
    ws.record_run(str(tmp_path), "collect", same, said.append)
    assert os.path.exists(tmp_path / ".state" / "collect.ok") and "counts as make's" in said[-1]
    other = made.made_from(str(tmp_path), ["model_new.py"], {"measured": [2, 1, 19]}, step="collect")
    assert ws.hand_run_differences(str(tmp_path), "collect", other) == ["measured [3, 15, 14] -> [2, 1, 19]"]
    ws.record_run(str(tmp_path), "collect", other, said.append)
    assert not os.path.exists(tmp_path / ".state" / "collect.ok") and "make redoes it" in said[-1]
