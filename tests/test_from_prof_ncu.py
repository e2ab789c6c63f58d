"""--from-prof of ncu CSVs: both pages give kernel times (``gpu__time_duration.sum``, else the details page's
SpeedOfLight ``Duration``), flagged as ncu replay times in performance.json (``ncu_replay``), the collector's table
and the decomposition's; a file with no duration at all is refused with the metric to record.

Inputs are the H200 recordings of tests/fixtures/profiles/cuda/ (bench/record_profile_fixtures.py, real ncu output),
edited here where a test needs another shape of the same page (rows removed, units rescaled). Expected times are
read from the CSV with the csv module, independently of mfulib.profiles.ncu."""
import csv
import os
import statistics

import pytest

from mfulib.collect import from_prof as profiles
from mfulib.collect.console import print_table
from mfulib.core.errors import UserError
from mfulib.report.tables import decompose_table

FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "profiles", "cuda")
DETAILS = os.path.join(FIX, "ncu_details.csv")
RAW = os.path.join(FIX, "ncu_raw.csv")
TRACE = os.path.join(FIX, "tool_ranges.json.gz")
WARMUP, REPEATS = 2, 4  # the recording's (manifest.json): prime call + 2 warm-up + 4 measured launches of one kernel
pytestmark = pytest.mark.skipif(not os.path.exists(DETAILS), reason="no H200 ncu recordings in " + FIX)


def table_rows(path):
    lines = open(path, encoding="utf-8").read().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID",'))
    return list(csv.DictReader([ln for ln in lines[start:] if ln.startswith('"')]))


def sol_durations_ns(path, kernel="bmm_tile_kernel"):
    """The SpeedOfLight 'Duration' of each launch of ``kernel`` in ID order (ns; the recording prints ns)."""
    out = {}
    for r in table_rows(path):
        if r["Kernel Name"] == kernel and r["Section Name"] == "GPU Speed Of Light Throughput" and \
                r["Metric Name"] == "Duration":
            assert r["Metric Unit"] == "ns"
            out[int(r["ID"])] = float(r["Metric Value"].replace(",", ""))
    return [out[k] for k in sorted(out)]


def planted(tmp_path, name, keep=lambda ln: True, edit=lambda ln: ln):
    dst = tmp_path / name
    with open(DETAILS, encoding="utf-8") as f:
        dst.write_text("".join(edit(ln) for ln in f if keep(ln)))
    return dst


def reparse(tmp_path, path, **kw):
    out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
    opts = profiles.FromProfOptions(paths=[str(path)], output_dir=str(out), warmup=WARMUP, repeats=REPEATS, **kw)
    return profiles.from_prof(opts)


def test_details_page_without_the_metric_gets_its_time_from_the_speed_of_light_duration(tmp_path):
    durations = sol_durations_ns(DETAILS)
    assert len(durations) == 1 + WARMUP + REPEATS
    expected = statistics.median(durations[-REPEATS:])  # one launch per iteration; the prime call left out
    full = reparse(tmp_path, DETAILS)
    bare = reparse(tmp_path, planted(tmp_path, "sol_only.csv", keep=lambda ln: "gpu__time_duration" not in ln))
    for rep, method in ((full, "ncu.gpu__time_duration.sum"), (bare, "ncu.details.SpeedOfLight.Duration")):
        (c,) = rep["per_case"]
        assert c["asc_error"] is None, c["flags"]
        assert c["kernel_time_ns"] == pytest.approx(expected) and rep["timing_method"] == method
        assert c["ncu_replay"]["serialized"] is True and c["ncu_replay"]["clock_control"] == "none"
        assert any(f.startswith("ncu replay times") for f in c["flags"])


def test_details_page_in_microseconds_is_converted(tmp_path):
    def to_us(ln):  # the same rows as ncu prints them without --print-units base: usecond, 3 decimals
        if '"Duration","ns",' not in ln:
            return ln
        cells = next(csv.reader([ln]))
        i = cells.index("Duration")
        cells[i + 1], cells[i + 2] = "usecond", f"{float(cells[i + 2].replace(',', '')) / 1e3:.3f}"
        return ",".join(f'"{c}"' for c in cells) + "\n"
    path = planted(tmp_path, "sol_us.csv", keep=lambda ln: "gpu__time_duration" not in ln, edit=to_us)
    expected = statistics.median(sol_durations_ns(DETAILS)[-REPEATS:])
    (c,) = reparse(tmp_path, path)["per_case"]
    assert c["kernel_time_ns"] == pytest.approx(expected, abs=1.0)  # 3 decimals of us: 1 ns


def test_an_ncu_file_without_any_duration_is_refused_with_the_metric_to_record(tmp_path):
    path = planted(tmp_path, "no_time.csv", keep=lambda ln: "gpu__time_duration" not in ln and '"Duration"' not in ln)
    with pytest.raises(UserError) as exc:
        reparse(tmp_path, path)
    msg = str(exc.value)
    assert "no_time.csv" in msg and "--metrics gpu__time_duration.sum" in msg and "incomplete" not in msg


def test_raw_page_is_flagged_and_a_trace_is_not(tmp_path):
    (c,) = reparse(tmp_path, RAW)["per_case"]
    assert c["asc_error"] is None and c["ncu_replay"]["serialized"] is True
    (t,) = reparse(tmp_path, TRACE)["per_case"]
    assert t["asc_error"] is None and t["ncu_replay"] is None
    assert not any(f.startswith("ncu replay times") for f in t["flags"])


def test_the_tables_mark_ncu_replay_times(tmp_path, capsys):
    rep = reparse(tmp_path, RAW)
    print_table(rep)
    out = capsys.readouterr().out
    kt = rep["per_case"][0]["kernel_time_ns"] / 1e3
    assert f"{kt:.2f} [ncu]" in out and "note: kernel us [ncu]: ncu replay times" in out
    row = {"case": 0, "status": "ok", "shape": "[4, 4]", "dtype": "float16", "kernel_time_us": kt,
           "actual_tflops": 1.0, "mfu_nom": 0.1, "mfu_ach": 0.2, "mbu": 0.3, "matrix_work": True,
           "ncu_replay": rep["per_case"][0]["ncu_replay"]}
    text = decompose_table({"reports": [{"label": "x", "rows": [row]}], "peak_label": "p", "peak_json": "peak.json"})
    assert f"{kt:.1f} [ncu]" in text and "case 0: total us [ncu]: ncu replay times" in text
    text = decompose_table({"reports": [{"label": "x", "rows": [dict(row, ncu_replay=None)]}], "peak_label": "p",
                            "peak_json": "peak.json"})
    assert "[ncu]" not in text


def test_nsight_systems_exports_are_refused_by_name(tmp_path):
    import sqlite3
    db = tmp_path / "report1.db"  # any SQLite file, as `nsys export --type sqlite` writes one (not read: --help)
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.commit()
    con.close()
    rep = tmp_path / "report1.nsys-rep"
    rep.write_bytes(b"\x00binary")
    for path in (db, rep):
        with pytest.raises(UserError) as exc:
            reparse(tmp_path, path)
        assert path.name in str(exc.value) and "Nsight Systems" in str(exc.value)
