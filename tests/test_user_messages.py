"""Messages a new user meets (unit tier): an unknown OP says how to point at one's own operator, make status shows a
case file's error instead of a bare "not run", counts read "1 case" / "2 cases"."""
import json

import pytest

from mfulib.core.errors import UserError
from mfulib.core.fmt import plural
from mfulib.pipeline import workdir_state
from mfulib.sources import examples


def test_an_unknown_bundled_name_lists_the_bundled_ones_and_how_to_give_ones_own():
    with pytest.raises(UserError) as exc:
        examples.resolve("no_such_op")
    msg = str(exc.value)
    assert "no bundled operator named 'no_such_op'; bundled: " in msg and "zoo/5_MHABlock" in msg
    for var in ("V=<", "BENCH=<", "GEN=<", "REF_ROOT=<", "IMPL_ROOT=<", "--src", "--ref-root"):
        assert var in msg, var


def test_status_shows_the_case_files_error(tmp_path):
    (tmp_path / "prepare.json").write_text(json.dumps({"request": {}}))
    good = {"inputs": [{"shape": [2, 3], "dtype": "float32"}]}
    (tmp_path / "Op_perf_cases.jsonl").write_text(json.dumps(good) + "\n" + '{"inputs": [\n')
    bad = workdir_state.case_file_problem(str(tmp_path))
    assert bad.startswith(f"{tmp_path / 'Op_perf_cases.jsonl'}:2 (case 1): not valid JSON"), bad
    table = workdir_state.status_table(str(tmp_path), ("ok", "unchanged"))
    assert f"\nerror: {bad}" in table
    (tmp_path / "Op_perf_cases.jsonl").write_text(json.dumps(good) + "\n")
    assert workdir_state.case_file_problem(str(tmp_path)) is None
    assert "error:" not in workdir_state.status_table(str(tmp_path), ("ok", "unchanged"))


def test_plural():
    assert [plural(n, "case") for n in (0, 1, 2)] == ["0 cases", "1 case", "2 cases"]
    assert plural(1, "launch", "launches") == "1 launch" and plural(3, "launch", "launches") == "3 launches"
