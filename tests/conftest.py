"""Shared test set-up: scripts/ on sys.path, the Triton interpreter for CPU runs, fixtures for shared data."""
import os
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(REPO_ROOT, "scripts")
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)

# CPU machines (CI) run Triton kernels in the interpreter; must be set before any kernel is decorated.
try:
    import torch
    _HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    _HAS_CUDA = False
if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

SHARED_DIR = os.environ.get("MFU_SHARED_DIR", os.path.join(os.path.dirname(REPO_ROOT), "shared"))


@pytest.fixture
def repo_root():
    return REPO_ROOT


@pytest.fixture
def shared_dir():
    """../shared beside the checkout (reference material and real case data); skipped where absent."""
    if not os.path.isdir(os.path.join(SHARED_DIR, "data")):
        pytest.skip(f"../shared is absent ({SHARED_DIR}): the real case files live there, not in the project")
    return SHARED_DIR


@pytest.fixture
def device():
    return "cuda" if _HAS_CUDA else "cpu"
