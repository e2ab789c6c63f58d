"""bench/RESULTS.md is generated from the packed validation results, never typed in (issue 18).

* the committed RESULTS.md is exactly what bench/make_results.py regenerates from the committed pack directory;
* each section renders the numbers of its stage (checked on a synthetic pack: TEST DATA, not hardware output);
* the validation driver skips packed stages and records absent scripts, so calls resume where the last one ended.
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import make_results  # noqa: E402
import validate_h200  # noqa: E402


def test_committed_results_md_is_regenerated_from_the_committed_pack():
    pack = make_results.DEFAULT_PACK
    if not os.path.isdir(pack) or not os.listdir(pack):
        pytest.skip("no packed validation results committed yet (bench/validation/h200)")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "make_results.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _write(pack, stage, doc):
    with open(os.path.join(pack, f"{stage}.json"), "w") as f:
        json.dump(doc, f)


def test_sections_render_their_stage_numbers(tmp_path):
    """Synthetic packs (test data): the rendered text carries the packed figures, and missing stages are listed."""
    base = {"created_at": "2026-12-01T10:00:00Z", "git_commit": "abc1234", "wall_s": 12.0, "rc": 0}
    _write(tmp_path, "ncu", {**base, "stage": "ncu", "result": {
        "rows": [{"op": "zoo/5_MHABlock", "case": 7, "position": 0, "kernel": "matmul_kernel",
                  "collector_median_us": 3387.9, "ncu_median_us": 3383.33, "diff": 0.00135, "eligible": True,
                  "within_tolerance": True}],
        "notes": [], "eligible": 1, "within": 1, "tolerance": 0.03, "min_us": 50.0, "cache_control": "none"}})
    _write(tmp_path, "makeall", {**base, "stage": "makeall", "result": {"target_s": 60, "method": "m", "runs": [
        {"op": "zoo/5_MHABlock", "mode": "warm", "rc": 0, "wall_s": 48.5,
         "maxima": {"mfu_ach": {"value": 0.5640, "case": 11}},
         "cases": [{"case": 11, "dtype": "float16", "flops": 2.0e12, "flops_tracer": 2.0e12, "numerator": "checked"}]},
        {"op": "zoo/1_BatchMatmul", "mode": "warm", "rc": 0, "wall_s": 71.0, "maxima": {}, "cases": []}]}})
    text = make_results.render(str(tmp_path))
    assert "3,387.90" in text and "+0.14%" in text and "**1/1**" in text
    assert "| zoo/5_MHABlock | warm | 0 | 48.5 | yes | 56.4% |" in text
    assert "| zoo/1_BatchMatmul | warm | 0 | 71.0 | no |" in text  # over the 60 s target: said so
    assert "| zoo/5_MHABlock | 11 | float16 | 2e+12 | 2e+12 | 1.0000 | checked |" in text
    assert "## Not run yet" in text and "`peaks`" in text and "`ncu`" not in text.split("## Not run yet")[1]


def test_check_mode_fails_on_a_hand_edited_file(tmp_path):
    pack = tmp_path / "pack"
    pack.mkdir()
    _write(str(pack), "gemm", {"created_at": "t", "git_commit": "c", "wall_s": 1, "rc": 0, "result": {}})
    out = tmp_path / "RESULTS.md"
    assert make_results.main(["--pack-dir", str(pack), "--out", str(out)]) == 0
    assert make_results.main(["--pack-dir", str(pack), "--out", str(out), "--check"]) == 0
    out.write_text(out.read_text() + "\n| typed in | 99% |\n")
    assert make_results.main(["--pack-dir", str(pack), "--out", str(out), "--check"]) == 1


def test_driver_skips_packed_stages_and_records_absent_scripts(tmp_path, monkeypatch, capsys):
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "env.json").write_text("{}")
    monkeypatch.setitem(validate_h200.LIMITS, "search", ("bench/does_not_exist.py", 10))
    rc = validate_h200.main(["--pack-dir", str(pack), "--stages", "env,search", "--out", str(tmp_path / "out")])
    text = capsys.readouterr().out
    assert rc == 0
    assert "env        packed already" in text
    assert "search     absent: bench/does_not_exist.py not in this checkout" in text
    assert not (tmp_path / "out" / "pack.tgz").exists()  # nothing ran, nothing packed
