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
