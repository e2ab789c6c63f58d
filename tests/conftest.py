"""Shared test set-up: scripts/ on sys.path, the Triton interpreter for CPU runs, the two tiers' markers, per-test
temp and device-lock directories, and fixtures for shared data.

Tiers (``make test-fast`` / ``make test-e2e``; ``make test`` runs both):

* unit (no marker): in-process checks, no pipeline of subprocesses, no sleeps;
* ``e2e``: whole pipelines in subprocesses or through make; the pipelines several tests read are built once per
  session by :mod:`pipelines` (tests/pipelines.py) and copied.

Every test runs with its own ``TMPDIR`` (so the Makefile's ``DEVICE_LOCK``, which defaults to
``$TMPDIR/triton-mfu-analyzer-device<N>.lock``, and every temp file of a child process are the test's own) and the
session's peak cache (``MFU_PEAK_CACHE_DIR``: one CPU calibration per session, never the user's ``~/.cache``); Ray
gets a short ``RAY_TMPDIR`` (socket paths). Both hold under pytest-xdist: each worker has its own base temp
directory.
"""
import os
import shutil
import sys
import tempfile

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

TESTS = os.path.join(REPO_ROOT, "tests")
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
import pipelines  # noqa: E402

SHARED_DIR = os.environ.get("MFU_SHARED_DIR", os.path.join(os.path.dirname(REPO_ROOT), "shared"))


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: a whole pipeline in subprocesses or through make (make test-e2e runs "
                                       "these; make test-fast the rest)")


@pytest.fixture(scope="session", autouse=True)
def _session_temp_and_peak_cache(tmp_path_factory):
    """For the session (and the session/module fixtures that build pipelines): a TMPDIR and a peak cache of its
    own, shared by every xdist worker (the cache's own flock serialises calibrations), never the user's."""
    root = pipelines.shared_root(tmp_path_factory)
    cache, session_tmp = os.path.join(root, "peak-cache"), str(tmp_path_factory.mktemp("session-tmp"))
    os.makedirs(cache, exist_ok=True)
    # Ray puts its AF_UNIX sockets under $RAY_TMPDIR, else $TMPDIR: a path below pytest's temp tree is longer than
    # the 107 bytes a socket path may have, so Ray gets a short directory of its own
    ray_tmp = tempfile.mkdtemp(prefix="mfu-ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MFU_PEAK_CACHE_DIR", cache)
        mp.setenv("TMPDIR", session_tmp)
        mp.setenv("RAY_TMPDIR", ray_tmp)
        mp.setattr(tempfile, "tempdir", session_tmp)
        yield
    shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture(autouse=True)
def _own_temp_and_lock_dir(tmp_path_factory, monkeypatch):
    """Each test: its own TMPDIR (its temp files, and make's device lock: no two tests share one)."""
    own = str(tmp_path_factory.mktemp("tmp"))
    monkeypatch.setenv("TMPDIR", own)
    monkeypatch.setattr(tempfile, "tempdir", own)
    return own


@pytest.fixture(scope="session")
def mha_all_checkout(tmp_path_factory):
    """A stand-in checkout whose work/5_MHABlock went through `make all` (built once; copy, never write)."""
    return pipelines.mha_all(tmp_path_factory)


@pytest.fixture(scope="session")
def gemm_work(tmp_path_factory):
    """A one-GEMM work directory through the five step scripts (built once; copy, never write)."""
    return pipelines.gemm_steps(tmp_path_factory)


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
