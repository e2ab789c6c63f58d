"""Every CLI answers --help on any machine (no device touched before arguments are parsed)."""
import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIS = sorted(p for p in glob.glob(os.path.join(ROOT, "scripts", "*.py")) + glob.glob(os.path.join(ROOT, "scripts", "*", "*.py"))
              if "mfulib" not in p and not os.path.basename(p).startswith("_"))


@pytest.mark.parametrize("script", CLIS, ids=[os.path.relpath(p, ROOT) for p in CLIS])
def test_cli_help_exits_zero_from_another_directory(script, tmp_path):
    r = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout and len(r.stdout.splitlines()) > 5
