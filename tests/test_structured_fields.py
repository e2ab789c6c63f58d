"""Values the code reads back come from structured fields or parameters, never from the wording of a message."""
from mfulib.report import decompose


def test_cpu_above_peak_is_demoted_by_a_parameter_not_by_matching_the_message():
    flags = []
    decompose.check_utilisation(1.5, "MFU@ach (fp16)", flags, "fix the peak")
    assert [f["level"] for f in flags] == ["error"]
    flags = []
    decompose.check_utilisation(1.5, "MFU@ach (fp16)", flags, "fix the peak", demoted_by="CPU numbers")
    assert [f["level"] for f in flags] == ["warning"] and flags[0]["message"].startswith("CPU numbers: ")
    flags = []
    decompose.check_utilisation(1.01, "MFU@ach (fp16)", flags, "fix the peak", demoted_by="CPU numbers")
    assert [f["level"] for f in flags] == ["warning"]  # within the noise band: the ordinary warning
    flags = []
    decompose.check_utilisation(0.5, "MFU@ach (fp16)", flags, "fix the peak", demoted_by="CPU numbers")
    assert flags == []


def test_step_5_is_measured_again_only_for_an_untrusted_accelerator_calibration(tmp_path):
    import json
    from mfulib.schemas.peak_json import measure_again_reason
    path = tmp_path / "peak.json"
    assert measure_again_reason(str(path)) is None  # no file: make's own rules decide
    from mfulib.schemas.peak_json import METHOD_VERSION
    doc = {"accelerator": True, "trust": {"trusted": False, "untrusted": ["float32: spread 40% > 30%"]},
           "method": {"method_version": METHOD_VERSION, "cache_flush": 'text that says "trusted": false'}}
    path.write_text(json.dumps(doc))
    assert measure_again_reason(str(path)) == "float32: spread 40% > 30%"
    doc["accelerator"] = False  # a CPU calibration is kept, noisy or not
    path.write_text(json.dumps(doc))
    assert measure_again_reason(str(path)) is None
    doc.update(accelerator=True, trust={"trusted": True})
    path.write_text(json.dumps(doc))
    assert measure_again_reason(str(path)) is None
    doc["trust"] = {"trusted": False, "untrusted": [{"mode": "fp16"}]}  # odd entries still give a reason
    path.write_text(json.dumps(doc))
    assert "fp16" in measure_again_reason(str(path))
    doc.update(accelerator=False, method={"method_version": METHOD_VERSION - 1})  # an older method, even on CPU
    path.write_text(json.dumps(doc))
    assert "method version" in measure_again_reason(str(path))


def test_the_peak_cache_regime_is_read_from_its_field_not_from_the_flush_sentence():
    from mfulib.report.reading import peak_flush_mib
    assert peak_flush_mib({"method": {"flush_cache_mib": 32, "cache_flush": "zero a 256 MiB buffer"}}) == 32.0
    assert peak_flush_mib({"method": {"flush_cache_mib": 0}}) == 0.0
    assert peak_flush_mib({"method": {"cache_flush": "zero a 256 MiB buffer before every timed iteration"}}) is None
    assert peak_flush_mib({"method": {"flush_cache_mib": -1}}) is None  # not a flush size
