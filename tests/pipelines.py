"""Whole CPU pipelines the end-to-end tier reads, each built once per test session and copied by the tests.

A pipeline is built into a directory of the session's base temp tree (under pytest-xdist: the tree every worker
shares, behind an ``fcntl.flock``, so the second worker waits for the first one's build and copies it). Tests never
write into a built pipeline: :func:`copy_work` gives each its own copy with the stamps' mtimes kept
(``shutil.copy2``), so make sees the same up-to-date directory. A work directory is relocatable: no step reads the
absolute ``work_dir`` prepare.json records (its sources are the checkout's own files).

* :func:`mha_all` - ``make OP=5_MHABlock all`` run in a stand-in checkout (a ``Makefile`` including the real one,
  symlinks to the checkout's other entries; ``work/5_MHABlock``), as the README's quick start runs it;
* :func:`gemm_steps` - the five step scripts (verify_op, check_flops, the collector, peak_calib, mfu_decompose)
  called directly on a one-GEMM work directory (bench/bench_gemm_mfu.py's builder, [1, 64, 32] x [1, 32, 128] fp32).
"""
import contextlib
import fcntl
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "scripts")
MHA_OP = "5_MHABlock"
# the one-GEMM operator: C[1, M, N] = A[1, M, K] @ B[1, K, N], 2*M*N*K FLOPs
GEMM_M, GEMM_N, GEMM_K = 64, 32, 128
GEMM_FLOPS = 2 * GEMM_M * GEMM_N * GEMM_K


def shared_root(tmp_path_factory) -> str:
    """The directory every xdist worker of this session sees (the base temp dir without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return str(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)


@contextlib.contextmanager
def _locked(path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def build_once(tmp_path_factory, name: str, build) -> str:
    """``build(dest)`` run once per session (across xdist workers) into ``<shared root>/pipeline-<name>``; returns
    that directory. A build that fails leaves no ``.done`` marker, so the next test that asks builds again."""
    root = shared_root(tmp_path_factory)
    dest = os.path.join(root, f"pipeline-{name}")
    with _locked(os.path.join(root, f"pipeline-{name}.lock")):
        if not os.path.exists(os.path.join(dest, ".done")):
            shutil.rmtree(dest, ignore_errors=True)
            os.makedirs(dest)
            build(dest)
            open(os.path.join(dest, ".done"), "w").close()
    return dest


def copy_work(src: str, dst) -> str:
    """A copy of work directory ``src`` at ``dst`` (symlinks kept, mtimes kept: make finds it up to date)."""
    shutil.copytree(src, dst, symlinks=True, copy_function=shutil.copy2)
    return str(dst)


def checkout_stand_in(d):
    """A directory standing for the checkout: a Makefile including the real one, symlinks to the rest."""
    d = str(d)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "Makefile"), "w", encoding="utf-8") as f:
        f.write(f"include {ROOT}/Makefile\n")
    shared = os.path.join(os.path.dirname(ROOT), "shared")
    beside = os.path.join(os.path.dirname(d), "shared")
    if os.path.isdir(shared) and not os.path.lexists(beside):
        os.symlink(shared, beside)  # ../shared beside the checkout, as the docs assume
    for name in os.listdir(ROOT):
        if name in ("Makefile", "work", ".git") or name.startswith("."):
            continue
        os.symlink(os.path.join(ROOT, name), os.path.join(d, name))


def pipeline_env(**extra) -> dict:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **extra)
    env.pop("MFU_WORKER", None)
    return env


def _run(cmd, cwd, env, what):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"{what}: {r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def mha_all(tmp_path_factory) -> str:
    """The stand-in checkout (see the module docstring) whose ``work/5_MHABlock`` went through ``make all``."""
    def build(dest):
        checkout = os.path.join(dest, "checkout")
        checkout_stand_in(checkout)
        _run(["make", f"OP={MHA_OP}", "all"], checkout, pipeline_env(), f"make OP={MHA_OP} all")
    return os.path.join(build_once(tmp_path_factory, "mha-all", build), "checkout")


def gemm_steps(tmp_path_factory) -> str:
    """A one-GEMM work directory through the five step scripts (module docstring); returns the work directory."""
    def build(dest):
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        import bench_gemm_mfu
        work = bench_gemm_mfu.build_gemm_workdir(os.path.join(dest, "work"), GEMM_M, GEMM_N, GEMM_K,
                                                 dtype="float32")
        steps = [[os.path.join(SCRIPTS, "verify_op.py"), "--op-dir", ".", "--backend", "cpu"],
                 [os.path.join(SCRIPTS, "check_flops.py"), "--op-dir", ".", "--backend", "cpu", "--quiet"],
                 [os.path.join(SCRIPTS, "ops_profiling", "msprof_perf_summary.py"), "--quick", "--mfu", "--impl",
                  "asc", "--output-dir", ".", "--backend", "cpu", "--quiet"],
                 [os.path.join(SCRIPTS, "peak_calib.py"), "-o", "peak.json", "--backend", "cpu", "--dtypes", "fp32",
                  "--budget-s", "1", "--cache", "off", "-q"],  # its own fp32 calibration: a session cache that
                 # another test filled holds int8 too (peak_tops keys), and the golden key sets pin fp32's
                 [os.path.join(SCRIPTS, "mfu_decompose.py"), "--op-dir", "."]]
        for cmd in steps:
            _run([sys.executable] + cmd, work, pipeline_env(), os.path.basename(cmd[0]))
    return os.path.join(build_once(tmp_path_factory, "gemm-steps", build), "work")
