"""The HTML report (mfulib/report/html.py, mfu_decompose.py --html, make report) on a HAND-MADE decomposition:
content checks on the file, then headless Chromium opens it - a screenshot that is not blank and no console error.

Chromium: /usr/bin/chromium (Debian's package; .ci/run installs it). Without it the browser tests skip, except
under CI=true, where a missing Chromium fails them (the report must be seen rendering in CI).
HAND-MADE FIXTURES, NOT MEASUREMENTS: an H200-like peak.json (bf16 800, fp32 50 TFLOP/s, 4000 GB/s) and a
performance.json with one case of a GEMM part and an attention part, and ncu-style counters per kernel.
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from mfulib.report import decompose
from mfulib.report.html import DASH, render_html, roofline_points, write_html

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "mfu_decompose.py")

PEAK = {"schema": 1, "tool": "peak_calib", "backend": "cuda", "label": "NVIDIA H200 (cuda:0) [hand-made fixture]",
        "device": {"backend": "cuda", "name": "NVIDIA H200"},
        "nominal": {"tflops": {"float16": 989.5, "bfloat16": 989.5}, "source": "fixture"},
        "peak_tflops": {"bfloat16": 800.0, "float16": 780.0, "float32": 50.0}, "bandwidth_gbps": 4000.0}


def _k(name, t_ns):
    return {"name": name, "launches_per_iter": 1, "mean_ns": t_ns, "median_ns": t_ns, "min_ns": t_ns, "max_ns": t_ns,
            "std_ns": 0.0, "time_per_iter_ns": t_ns}


PERF = {"schema": 1, "tool": "msprof_perf_summary", "backend": "cuda", "device": {"name": "NVIDIA H200"},
        "warmup": 5, "repeats": 5, "timing_method": "torch.profiler.cupti.kernel_duration",
        "peak": {"nominal_tflops": {"bfloat16": 989.5}, "source": "fixture"}, "flush_cache_mib": 0.0,
        "pmu_collection": {"requested": "auto", "tool": "ncu", "available": True, "reason": None,
                           "ncu_version": "fixture", "cache_control": "none", "clock_control": "none"},
        "per_case": [
            {"case": 0, "shape": "[8, 1024, 1024]", "compute_dtype": "bfloat16", "tf32": False, "flops": 70e9,
             "flops_parts": {"proj": 68e9, "attn": 2e9}, "input_bytes": 40e6, "output_bytes": 16e6,
             "numerator": "checked", "kernels": [_k("matmul_kernel", 200000), _k("_attn_fwd", 300000)],
             "kernel_time_ns": 500000, "span_ns": 510000, "pmu_source": "ncu", "pmu_unavailable": None,
             "pmu": {"matmul_kernel": {"tensor_pipe_pct": 71.5, "dram_throughput_pct": 12.0, "launches": 2},
                     "_attn_fwd": {"tensor_pipe_pct": 4.2, "dram_throughput_pct": 81.0, "launches": 2}}},
            {"case": 1, "shape": "[8, 1024]", "compute_dtype": "bfloat16", "tf32": False, "flops": 0,
             "flops_parts": {}, "input_bytes": 16e6, "output_bytes": 16e6, "numerator": "unchecked",
             "kernels": [_k("layernorm_kernel", 10000)], "kernel_time_ns": 10000, "pmu": None,
             "pmu_source": None, "pmu_unavailable": "ncu: ERR_NVGPUCTRPERM - fixture"},
            {"case": 2, "shape": "[8, 64]", "dtype": "bfloat16", "skipped": "fixture: not selected"},
        ]}
FLOPS_PY = 'KERNEL_PARTS = {"attn": ["*attn*"], "proj": ["*matmul*"]}\n\ndef flops(case):\n    return 0.0\n'


def _doc(tmp_path, with_bounds=True):
    d = tmp_path / "op"
    d.mkdir(exist_ok=True)
    (d / "performance.json").write_text(json.dumps(PERF))
    (d / "peak.json").write_text(json.dumps(PEAK))
    (d / "flops.py").write_text(FLOPS_PY)
    doc = decompose.decompose(str(d), str(d / "peak.json"))
    doc.update(tool="mfu_decompose", created_at="2026-12-01T00:00:00Z", versions={"torch": "fixture"})
    if with_bounds:  # the decomposition's bound/roofline fields (mfulib/schemas/decompose_json.py), hand-made here
        row = doc["reports"][0]["rows"][0]
        row["bound"] = {"label": "memory-bound", "source": "pmu:ncu", "evidence": {"dram_throughput_pct": 81.0}}
        row["roofline"] = {"ai_flop_per_byte": 1250.0, "headroom": 1.9}
        for p in row["parts"]:
            gemm = p["part"] == "proj"
            p["bound"] = {"label": "tensor-bound" if gemm else "memory-bound", "source": "pmu:ncu",
                          "evidence": {"tensor_pipe_pct": 71.5} if gemm else {"dram_throughput_pct": 81.0},
                          "note": None}
            p["roofline"] = {"ai_flop_per_byte": 2000.0 if gemm else 60.0, "headroom": 2.3 if gemm else 1.2,
                             "mfu_if_fixed": 0.45 if gemm else 0.70}
        doc["regime"] = {"flush_cache_mib_collect": 0.0, "flush_cache_mib_peak": 256.0, "note": "fixture"}
    else:  # a decomposition written before the bound/roofline fields existed: strip what decompose now adds
        doc.pop("regime", None)
        for rep in doc["reports"]:
            for row in rep["rows"]:
                for key in ("bound", "roofline", "kernel_bounds", "pmu_view", "payoff_order"):
                    row.pop(key, None)
                for p in row.get("parts") or []:
                    p.pop("bound", None)
                    p.pop("roofline", None)
    return d, doc


def test_report_holds_tables_plots_bounds_and_provenance_and_nothing_external(tmp_path):
    d, doc = _doc(tmp_path)
    text = render_html(doc, perf_docs={doc["reports"][0]["label"]: PERF}, peak_doc=PEAK)
    assert text.count('src="data:image/png;base64,') == 2  # roofline + part shares, embedded
    assert not re.search(r"(src|href)=\"(?!data:)", text) and "<script" not in text and "http" not in text
    assert "tensor-bound" in text and "tensor_pipe_pct=71.5" in text and "memory-bound" in text
    assert "MBU " in text  # case 1 has no matrix work: its headline is MBU
    assert "ERR_NVGPUCTRPERM" in text  # why case 1 has no counters
    # a case that was not measured is no table row, only a line under the table with its reason
    assert "not measured (no row above)" in text and "fixture: not selected" in text
    assert "<td class=\"l\">2</td>" not in text
    assert "NVIDIA H200" in text and "bfloat16" in text and "flush before iterations" in text
    # payoff ranks the parts: attn (70% if fixed) before proj (45%)
    assert text.index("<code>_attn_fwd</code>") < text.index("<code>matmul_kernel</code>")
    kinds = {(k, round(ai)) for _, k, ai, _, _ in roofline_points(doc)}
    assert kinds == {("case", 1250), ("part", 2000), ("part", 60)}


def test_missing_bound_and_roofline_fields_show_a_dash(tmp_path):
    _, doc = _doc(tmp_path, with_bounds=False)
    text = render_html(doc)
    assert "tensor-bound" not in text and f"<td>{DASH}</td>" in text and "regime</td><td class=\"l\">" \
        f"{DASH}" in text
    # the case's point still comes from FLOPs / (input + output bytes): 70e9 / 56e6 = 1250 FLOP/byte
    assert [round(p[2]) for p in roofline_points(doc) if p[1] == "case"] == [1250]



@pytest.mark.parametrize("x, nd, want", [(0.1234, 1, "12.3%"), (0.1234, 2, "12.34%"), (0.61406, 0, "61%"),
                                         (1, 2, "100.00%"), (0.0, 1, "0.0%"), (None, 1, "-"),
                                         (float("nan"), 2, "-"), (float("inf"), 1, "-"), (True, 1, "-")])
def test_the_one_percent_formatter_keeps_the_callers_decimals_and_dashes_a_missing_figure(x, nd, want):
    from mfulib.core.fmt import pct
    assert pct(x, nd) == want
    assert pct(x, nd, DASH) == (DASH if want == "-" else want)                 # the HTML report's dash
    if isinstance(x, float) and want != "-":
        assert pct(x, nd) == f"{x:.{nd}%}"                                  # Python's own % rounding

def test_mfu_decompose_writes_the_html(tmp_path):
    d, _ = _doc(tmp_path)
    out = tmp_path / "r.html"
    r = subprocess.run([sys.executable, SCRIPT, "--op-dir", str(d), "--peak-json", str(d / "peak.json"), "--html",
                        str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert f"wrote {out}" in r.stdout and text.startswith("<!DOCTYPE html>") and "_attn_fwd" in text


# ------------------------------------------------------------------------------------------------ Chromium

CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium", shutil.which("chromium-browser"))
                 if p and os.path.exists(p)), None)


@pytest.fixture
def chromium():
    if CHROMIUM is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but no Chromium: .ci/run installs it (apt-get install -y chromium)")
        pytest.skip("Chromium not installed (apt-get install chromium)")
    return CHROMIUM


def open_in_chromium(binary, html_path, shot):
    """(console error lines, PNG path, DOM text) of ``html_path`` in headless Chromium."""
    base = [binary, "--headless", "--disable-gpu", "--no-sandbox", "--window-size=1280,2000"]
    url = "file://" + os.path.abspath(html_path)
    r = subprocess.run(base + [f"--screenshot={shot}", "--enable-logging=stderr", "--v=0", url],
                       capture_output=True, text=True, timeout=120)
    errors = [ln for ln in (r.stderr + r.stdout).splitlines()
              if ":CONSOLE" in ln and ("Uncaught" in ln or "ERROR:CONSOLE" in ln or "Failed to load" in ln)]
    dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    return errors, shot, dom


@pytest.mark.e2e
def test_chromium_console_check_catches_a_broken_page(tmp_path, chromium):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><p>x</p><script>undefined_function()</script></body></html>")
    errors, _, _ = open_in_chromium(chromium, bad, str(tmp_path / "bad.png"))
    assert errors and "Uncaught" in errors[0]  # the detector is live: a real console error is seen


@pytest.mark.e2e
def test_report_renders_in_headless_chromium(tmp_path, chromium):
    import matplotlib.image
    import numpy as np
    _, doc = _doc(tmp_path)
    path = write_html(doc, str(tmp_path / "report.html"), perf_docs=[copy.deepcopy(PERF)], peak_doc=PEAK)
    errors, shot, dom = open_in_chromium(chromium, path, str(tmp_path / "shot.png"))
    assert errors == []
    assert os.path.getsize(shot) > 20000
    img = matplotlib.image.imread(shot)
    assert img.shape[0] >= 1000 and img.shape[1] == 1280
    rgb = img[..., :3]
    assert (rgb < 0.9).mean() > 0.01  # ink: text, tables and the embedded plots, not a blank page
    assert rgb.std() > 0.05
    assert "Roofline" in dom and "tensor-bound" in dom and "Provenance" in dom


def test_from_json_renders_the_report_without_recomputing_or_rewriting_the_decomposition(tmp_path):
    """`make report` (mfu_decompose.py --from-json --html): mfu_decompose.json is read, not written again; without
    --html it is refused with the fix."""
    import subprocess
    import sys
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "mfu_decompose.py")
    r = subprocess.run([sys.executable, script, "--op-dir", str(tmp_path), "--from-json"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "give --html PATH too" in r.stderr
    r = subprocess.run([sys.executable, script, "--op-dir", str(tmp_path), "--from-json", "--html",
                        str(tmp_path / "r.html")], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "mfu_decompose.json" in r.stderr  # nothing to render: the file is named
    d, _ = _doc(tmp_path)
    r = subprocess.run([sys.executable, SCRIPT, "--op-dir", str(d), "--peak-json", str(d / "peak.json")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    before = (d / "mfu_decompose.json").read_bytes()
    out = tmp_path / "from_json.html"
    r = subprocess.run([sys.executable, script, "--op-dir", str(d), "--from-json", "--html", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (d / "mfu_decompose.json").read_bytes() == before and "_attn_fwd" in out.read_text()
    assert "how to read it" not in r.stdout  # the table is printed by the decompose step, once


def _case_table(text):
    """(header cells, body rows as cell lists) of the report's first table (the case table), tags stripped."""
    table = text[text.index("<table>"):text.index("</table>")]
    rows = [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", table)]
    clean = [[re.sub(r"<[^>]+>", " ", c).replace("&#x27;", "'").strip() for c in r] for r in rows]
    return clean[0], clean[1:], rows[1:]


def test_the_case_table_names_its_figures_formats_each_column_alike_and_carries_the_spread_flag(tmp_path):
    """Hand values: case 0 (bf16) 70e9 FLOPs in 500,000 ns = 140 TFLOP/s, MFU@ach 140 / 800 = 17.5%, MFU@nom 140 /
    989.5 = 14.15%; case 1 (no matrix work) MBU 32e6 B / 10,000 ns / 4000 GB/s = 80.0%. Case 0's repeat spread 51.5%
    is above the collector's 5%: flagged in its cell, explained under the table, in the reading aid and the warnings.
    Headroom 21881.29 reads 21,881x here and on screen."""
    from mfulib.report import tables
    perf = copy.deepcopy(PERF)
    perf["per_case"][0].update(repeat_spread=0.515, flags=["repeat_spread 51.5% > 5%: per-iteration kernel time "
                                                           "varies (fixture)"])
    perf["per_case"][1]["repeat_spread"] = 0.012
    d = tmp_path / "op"
    d.mkdir()
    (d / "performance.json").write_text(json.dumps(perf))
    (d / "peak.json").write_text(json.dumps(PEAK))
    (d / "flops.py").write_text(FLOPS_PY)
    doc = decompose.decompose(str(d), str(d / "peak.json"))
    doc["reports"][0]["rows"][0]["roofline"]["headroom"] = 21881.29
    text = render_html(doc)
    head, rows, raw = _case_table(text)
    assert head == ["case", "shape", "dtype", "kernel time (us)", "repeat spread", "TFLOP/s", "MFU@nom",
                    "headline (MFU@ach or MBU, named)", "numerator", "bound", "headroom"]
    col = {h: [r[i] for r in rows] for i, h in enumerate(head)}
    assert col["headline (MFU@ach or MBU, named)"] == ["MFU@ach 17.5%", "MBU 80.0%"]  # each row says which
    assert col["TFLOP/s"] == ["140", DASH] and col["MFU@nom"] == ["14.15%", DASH]
    assert col["kernel time (us)"] == ["500.0", "10.00"]  # four significant digits, fixed point, in both rows
    assert col["headroom"][0] == "21,881x"
    assert col["repeat spread"] == ["51.5% [spread]", "1.2%"]
    assert 'class="warn"' in raw[0][4] and "warn" not in raw[1][4]  # only the flagged cell is marked
    assert not re.search(r"\de[+-]\d", " ".join(" ".join(r) for r in rows))  # no exponent anywhere in the table
    assert "[spread] the collector flagged the repeat spread" in text and "case 0 51.5%" in text
    assert any("noisy timing: case 0 repeat spread 51.5% &gt; 5%" in ln for ln in text.split("<li>"))
    assert any("case 0" in w and "repeat_spread 51.5%" in w for w in doc["warnings"])
    assert doc["reports"][0]["rows"][0]["spread_flagged"] is True
    assert doc["reports"][0]["rows"][1]["spread_flagged"] is False
    screen = tables.decompose_table(dict(doc, peak_json="peak.json"))
    row0 = next(ln for ln in screen.splitlines() if ln.split()[:1] == ["0"])
    assert "500.0 [spread]" in row0 and "21,881x" in row0  # the same formats and flag on screen
