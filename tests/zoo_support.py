"""Helpers shared by the bundled-operator tests (tests/test_zoo_*.py, tests/gpu/test_zoo_*_cuda.py).

Each bundled operator is checked through the pipeline's own path: prepare_explicit -> OpDir ->
mfulib.verify.correctness.verify_case (tolerances by dtype live there). Paths of operator files are relative to examples/ops.
"""
import os

import pytest

from mfulib.run import compat
from mfulib.verify import correctness as verify
from mfulib.core.opdir import OpDir
from mfulib.sources.prepare import prepare_explicit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = os.path.join(REPO, "examples", "ops")


def install_compat_or_skip(device):
    """mfulib.run.compat for ``device`` (Triton-Ascend style ModelNew files need it); skip if another module of this
    pytest process already installed it for a different device (it is process-global)."""
    try:
        return compat.install(device)
    except RuntimeError as exc:
        pytest.skip(f"mfulib.run.compat already installed for another device: {exc}")


def work_dir(root, op, ref, impl, case_path):
    """A prepared work directory ``root/op`` for reference and implementation paths relative to examples/ops."""
    dst = os.path.join(str(root), op.replace("/", "__"))
    prepare_explicit(os.path.join(OPS, ref), str(case_path), os.path.join(OPS, impl), dst)
    return OpDir(dst)


def verify_cases(op_dir, case_ids, device):
    """{case id: mfulib.verify.correctness row} for ``case_ids``, emptying the CUDA cache between cases."""
    rows = {}
    for case_id in case_ids:
        rows[case_id] = verify.verify_case(op_dir, case_id, device=device)
        if device == "cuda":
            import torch
            torch.cuda.empty_cache()
    return rows
