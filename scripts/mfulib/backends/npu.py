"""NPU backend: the case runs in a child process under ``msprof``; kernel rows come from its CSV exports.

Parent side: :func:`check_cann` first (``ASCEND_HOME_PATH`` set, i.e. ``set_env.sh`` sourced - a non-interactive
shell does not read ``~/.bashrc``; ``msprof`` on PATH *and* from that CANN, not an older install earlier on PATH;
CANN version), each failure with the exact fix. The child command becomes::

    msprof --output=<attempt>/msprof --task-time=on --ai-core=on --aic-metrics=<M> --ascendcl=on \\
           python3 runner.py --spec <spec.json>

msprof collects ONE ``--aic-metrics`` group per run (docs/sources.md#msprof-csv), so a list of groups (``--aic-metrics
PipeUtilization,ArithmeticUtilization,Memory``) runs the child once per group, one after the other in one
``sh -c`` chain (stopping at the first failure): the first group's run, under ``<attempt>/msprof``, gives the
kernel times; each further group's run, under ``<attempt>/msprof_<Group>``, adds its counters to the kernels of the
same name (mean over that run's measured launches, :func:`merge_group_counters`). Counters are renamed to the
canonical names of :mod:`mfulib.profiles.pmu` (``N/A`` stays None); ``pmu_source`` = ``msprof:<G1>+<G2>...``.

Rows: :func:`mfulib.profiles.msprof.load_kernel_rows` (op_summary, task_time fallback, slices, old layout, torch_npu
``kernel_details.csv``, marker rows filtered). msprof's CSVs carry no iteration ranges, so the child launches a tiny
Triton marker kernel (``mfu_harness_marker_kernel``: Triton-Ascend reports ``Op Name`` = the kernel function name,
docs/sources.md#msprof-csv) at the start of every iteration and once after the last; rows between two markers are one
iteration (:func:`mfulib.profiles.kernels.assign_by_markers`). Marker kernels work on every CANN version, which an mstx
range export does not (no public page pins its CSV format); mstx ranges are still emitted where torch_npu has them, for
people reading the timeline.

Device identity: torch_npu in the child (``get_device_name`` = SoC, ``get_device_properties`` = cube/vector
cores), ``npu-smi info`` in the parent as a fallback, and the runtime AI-core count and frequency from the PROF
directory's ``device_N/info.json.N`` (the numbers msprof-analyze uses for its peak).
"""
from __future__ import annotations

import contextlib
import glob
import os
import re
import shlex
import shutil
import subprocess

from mfulib.profiles import kernels as _kernels
from mfulib.profiles import msprof as _msprof
from mfulib.profiles import pmu as _pmu
from mfulib.core.device import cann_version
from mfulib.core.errors import UserError
from mfulib.backends.base import Backend, setting

# gate 5's bandwidth without a measured peak.json: a 1.3 TB/s working default for the 910B, not a published figure
# (docs/sources.md#npu-bandwidth)
DEFAULT_BANDWIDTH_GBPS = 1300.0
SET_ENV_CANDIDATES = ("/usr/local/Ascend/ascend-toolkit/set_env.sh", "/usr/local/Ascend/cann/set_env.sh",
                      "~/Ascend/ascend-toolkit/set_env.sh", "/usr/local/Ascend/latest/set_env.sh")
DEFAULT_AIC_METRICS = "PipeUtilization"
AIC_METRICS = ("PipeUtilization", "ArithmeticUtilization", "Memory", "MemoryL0", "MemoryUB", "ResourceConflictRatio",
               "L2Cache", "MemoryAccess")


def parse_groups(aic_metrics) -> tuple:
    """``"A,B"`` / ``["A", "B"]`` -> ("A", "B") of known msprof metric groups (duplicates dropped, order kept);
    UserError naming the unknown one and the choices."""
    items = aic_metrics.split(",") if isinstance(aic_metrics, str) else list(aic_metrics or ())
    groups = tuple(dict.fromkeys(g.strip() for g in items if g and g.strip()))
    if not groups:
        raise UserError(f"--aic-metrics {aic_metrics!r}: give one or more of {', '.join(AIC_METRICS)} (comma-separated)")
    bad = [g for g in groups if g not in AIC_METRICS]
    if bad:
        raise UserError(f"--aic-metrics {bad[0]!r}: choose from {', '.join(AIC_METRICS)} (a list is comma-separated, "
                        "e.g. PipeUtilization,ArithmeticUtilization,Memory)")
    return groups


def merge_group_counters(rows: list, extra_rows: list) -> int:
    """Add the counters of another metric group's run to ``rows`` (in place): per kernel name, the mean of each
    canonical counter over ``extra_rows`` inside iterations; a counter ``rows`` already has is kept. Returns the
    number of kernel names that got counters."""
    by_name = {}
    for r in extra_rows:
        if r.get("iteration") is None:
            continue
        for k, v in (r.get("pmu") or {}).items():
            if v is not None:
                by_name.setdefault(r.get("name"), {}).setdefault(k, []).append(float(v))
    means = {n: {k: sum(v) / len(v) for k, v in c.items()} for n, c in by_name.items()}
    for r in rows:
        if r.get("name") in means:
            r["pmu"] = _pmu.merge_counters(r.get("pmu"), means[r["name"]])
    return len(means)


def _under(path, root) -> bool:
    try:
        return os.path.commonpath([os.path.realpath(path), os.path.realpath(root)]) == os.path.realpath(root)
    except ValueError:
        return False


def check_cann(msprof_path=None) -> dict:
    """Check the CANN environment for msprof collection; returns facts, raises UserError with the exact fix."""
    home = os.environ.get("ASCEND_HOME_PATH")
    found = [p for p in (os.path.expanduser(c) for c in SET_ENV_CANDIDATES) if os.path.exists(p)]
    source_hint = (f"source {found[0]}" if found else "source <CANN install>/set_env.sh (e.g. "
                   "/usr/local/Ascend/ascend-toolkit/set_env.sh)")
    if not home:
        raise UserError(f"ASCEND_HOME_PATH is not set: CANN's set_env.sh was not sourced in this shell (a "
                        f"non-interactive shell, ssh command or Makefile recipe does not read ~/.bashrc) - run "
                        f"`{source_hint} && <this command>` in the same shell")
    if not os.path.isdir(home):
        raise UserError(f"ASCEND_HOME_PATH={home} does not exist - {source_hint} again, from the CANN you want")
    exe = msprof_path or shutil.which("msprof")
    if not exe:
        local = sorted(glob.glob(os.path.join(home, "tools", "profiler", "bin", "msprof")) +
                       glob.glob(os.path.join(home, "bin", "msprof")))
        where = f" (there is one at {local[0]}: put its folder on PATH or pass --msprof {local[0]})" if local else ""
        raise UserError(f"msprof is not on PATH although ASCEND_HOME_PATH={home}{where} - {source_hint} "
                        "(set_env.sh puts msprof on PATH)")
    exe = os.path.abspath(exe)
    parent = os.path.dirname(os.path.realpath(home))
    notes = []
    if msprof_path and not (_under(exe, home) or _under(exe, parent)):
        notes.append(f"--msprof {exe} is outside ASCEND_HOME_PATH={home} (used as given)")
    elif not (_under(exe, home) or _under(exe, parent)):
        raise UserError(f"msprof {exe} is not from ASCEND_HOME_PATH={home}: two CANN installs, and PATH picks the "
                        f"other one (the run would silently use an older CANN) - {source_hint} last, or pass "
                        f"--msprof {os.path.join(home, 'tools', 'profiler', 'bin', 'msprof')}")
    version = cann_version(home)
    header = None
    if version:
        major = re.match(r"(\d+)", version)
        header = ("Block Num/Mix Block Num (CANN 9.x)" if major and int(major.group(1)) >= 9
                  else "Block Dim/Mix Block Dim (CANN <= 8.x)")
    return {"ascend_home_path": home, "msprof": exe, "cann_version": version or "unknown (no version file found)",
            "expected_block_header": header, "notes": notes}


def npu_smi_devices(exe=None) -> list:
    """``[{"npu_id", "name", "soc_name"}]`` from ``npu-smi info`` (regex over the table: column widths vary by
    driver, names lack the ``Ascend`` prefix, docs/sources.md#npu-smi); [] when npu-smi is absent or fails."""
    exe = exe or shutil.which("npu-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    devs = []
    for m in re.finditer(r"(?m)^\|\s*(\d+)\s+([0-9][0-9A-Za-z\-]*)\s*\|\s*(OK|Warning|Alarm|Critical|\w+)\s*\|", out):
        devs.append({"npu_id": int(m.group(1)), "name": m.group(2), "soc_name": "Ascend" + m.group(2)})
    return devs


class NpuBackend(Backend):
    name = "npu"
    timing_method = "msprof.op_summary.Task_Duration"
    markers = True
    torch_namespace = "npu"
    reduced_fp32_matmul = "HF32"
    matrix_unit = "cube"
    native_noise = True  # CANN prints "tiling struct ... is conflict" while GEMM tilings are looked up
    visible_devices_var = "ASCEND_RT_VISIBLE_DEVICES"
    device_id_var = "ASCEND_DEVICE_ID"
    unavailable_fix = "source <CANN>/set_env.sh and install torch_npu, or use --backend cuda/cpu"
    pmu_in_profile = True  # msprof --aic-metrics writes the counters into the kernel table itself
    matrix_counter = "aic_cube_fops"  # what it counts (FLOPs or MACs, padded tiles) has no public definition
    checks_environment = True
    clock_tool = "npu-smi"
    fp8_note = ("fp8 is measured only on CUDA capability >= 8.9; the Ascend cube dtypes this tool measures are "
                "fp16/bf16, fp32 (HF32 off/on) and int8")

    def nominal_bandwidth(self, identity):
        return DEFAULT_BANDWIDTH_GBPS, ("default 1.3 TB/s (910B; docs/sources.md#npu-bandwidth); run peak_calib.py "
                                        "to measure")

    def complete_identity(self, device, env_facts, device_id):
        smi = (env_facts or {}).get("npu_smi") or []
        if smi and not device.get("soc_name"):
            pick = next((d for d in smi if d["npu_id"] == device_id), smi[0])
            device.setdefault("name", pick["soc_name"])
            device["soc_name"] = pick["soc_name"]
            device["identity_source"] = "npu-smi info"

    @classmethod
    def available(cls):
        """torch_npu importable, an NPU visible and ASCEND_HOME_PATH set (an ``msprof`` on PATH is not enough)."""
        if not os.environ.get("ASCEND_HOME_PATH"):
            return False, "ASCEND_HOME_PATH is not set (CANN's set_env.sh not sourced)"
        try:
            import torch_npu  # noqa: F401
            import torch
        except Exception as exc:  # torch_npu absent or CANN libraries missing
            return False, f"torch_npu does not import ({type(exc).__name__}: {exc})"
        if not torch.npu.is_available():
            return False, "torch_npu imports but no NPU is available"
        return True, "torch_npu imports, an NPU is available and ASCEND_HOME_PATH is set"

    @staticmethod
    def discover_devices():
        """The NPUs present as ``/dev/davinci<N>`` (the Ascend driver's device nodes)."""
        nodes = sorted(int(m.group(1)) for p in glob.glob("/dev/davinci*")
                       if (m := re.match(r"^/dev/davinci(\d+)$", p)))
        return [str(i) for i in nodes], "/dev/davinci<N>"

    def identity_fields(self, index: int) -> dict:
        import sys

        import torch
        from mfulib.core.device import ascend_home
        name = torch.npu.get_device_name(index)
        p = torch.npu.get_device_properties(index)
        return dict(name=name, soc_name=name, cube_core_num=getattr(p, "cube_core_num", None),
                    vector_core_num=getattr(p, "vector_core_num", None),
                    total_memory_bytes=getattr(p, "total_memory", None),
                    l2_cache_bytes=getattr(p, "L2_cache_size", None), cann=cann_version(ascend_home()),
                    torch_npu=getattr(sys.modules.get("torch_npu"), "__version__", None))

    def read_clocks(self, index: int = 0) -> dict:
        from mfulib.core.device import npu_smi_clocks
        return npu_smi_clocks(index)

    def int8_gemm_support(self):
        """``torch_npu.npu_quant_matmul`` (Ascend API reference: x1, x2 int8 ND, scale float32 [1], output_dtype
        bfloat16 on Atlas A2; not yet run on hardware by this tool)."""
        try:
            import torch_npu
        except Exception:  # absent, or CANN libraries missing
            torch_npu = None
        if torch_npu is None or not hasattr(torch_npu, "npu_quant_matmul"):
            return False, "not available: torch_npu.npu_quant_matmul is missing in this torch_npu"
        return True, "torch_npu.npu_quant_matmul (int8 x int8, scale 1.0, bf16 out) - untested on hardware"

    def int8_gemm(self, a, b):
        import torch
        import torch_npu
        scale = torch.ones(1, dtype=torch.float32, device=a.device)
        return lambda: torch_npu.npu_quant_matmul(a, b, scale, output_dtype=torch.bfloat16)

    def fp32_matmul_mode(self, allow: bool):
        """HF32 on/off through ``torch.npu.matmul.allow_hf32``; UserError where this torch_npu lacks it."""
        import torch
        obj = getattr(getattr(torch, "npu", None), "matmul", None)
        if obj is None or not hasattr(obj, "allow_hf32"):
            raise UserError("torch.npu.matmul.allow_hf32 is missing in this torch_npu - cannot measure the HF32 "
                            "mode")
        return setting(obj, "allow_hf32", allow, f"fp32 inputs, HF32 {'allowed' if allow else 'off'} "
                                                 f"(torch.npu.matmul.allow_hf32={allow})")

    def __init__(self, aic_metrics=DEFAULT_AIC_METRICS, msprof_path=None):
        self.groups = parse_groups(aic_metrics)
        self.aic_metrics = self.groups[0]
        self.msprof_path = msprof_path
        self.cann = None

    def check(self, args=None):
        self.cann = check_cann(self.msprof_path)
        return dict(self.cann, npu_smi=npu_smi_devices())

    def command(self, child_cmd, attempt_dir, opts):
        exe = (self.cann or {}).get("msprof") or self.msprof_path or "msprof"
        argvs = []
        for g in self.groups:
            out = self.prof_root(attempt_dir, g)
            os.makedirs(out, exist_ok=True)
            argvs.append([exe, f"--output={out}", "--task-time=on", "--ai-core=on", f"--aic-metrics={g}",
                          "--ascendcl=on"] + list(child_cmd))
        if len(argvs) == 1:
            return argvs[0]
        return ["sh", "-c", " && ".join(shlex.join(a) for a in argvs)]

    def prof_root(self, attempt_dir, group=None):
        """The PROF output root of the run of ``group`` (the first group's: ``<attempt>/msprof``)."""
        if group is None or group == self.groups[0]:
            return os.path.join(attempt_dir, "msprof")
        return os.path.join(attempt_dir, f"msprof_{group}")

    def _export(self, root):
        """Run ``msprof --export=on`` on PROF dirs that have raw data but no CSV export (once)."""
        exe = (self.cann or {}).get("msprof") or self.msprof_path or shutil.which("msprof")
        if not exe:
            return
        for prof in _msprof.prof_dirs(root):
            if not glob.glob(os.path.join(prof, "mindstudio_profiler_output", "*.csv")):
                subprocess.run([exe, "--export=on", f"--output={prof}"], capture_output=True, timeout=600)

    def _load(self, root):
        try:
            rows, meta = _msprof.load_kernel_rows(root)
        except UserError:
            if not _msprof.prof_dirs(root):
                raise
            self._export(root)
            rows, meta = _msprof.load_kernel_rows(root)
        for r in rows:
            r["pmu"] = _pmu.from_msprof(r.get("pmu"), r.get("block_dim"))
        return rows, meta

    def _tag(self, rows, n_iters):
        if any(r.get("name") == _kernels.MARKER_KERNEL for r in rows):
            return _kernels.assign_by_markers(rows, n_iters)
        tagged, info = _kernels.assign_by_period(rows, n_iters)
        info["flags"].append("no iteration marker kernel in the profile (marker launch failed?): "
                             "iterations delimited by periodicity")
        return tagged, info

    def launches(self, attempt_dir, report, n_iters):
        root = self.prof_root(attempt_dir)
        rows, meta = self._load(root)
        tagged, info = self._tag(rows, n_iters)
        for g in self.groups[1:]:
            try:
                extra, _meta = self._load(self.prof_root(attempt_dir, g))
                extra_tagged, _info = self._tag(extra, n_iters)
            except UserError as exc:
                info["flags"].append(f"msprof --aic-metrics={g} run gave no usable export ({exc}): its counters "
                                     "are missing")
                continue
            merge_group_counters(tagged, extra_tagged)
        info["pmu_source"] = "msprof:" + "+".join(self.groups)
        measured = [r for r in tagged if r.get("iteration") is not None and not _kernels.is_harness(r.get("name"))]
        if measured and not any(v is not None for r in measured for k, v in (r.get("pmu") or {}).items()
                                if k != "block_dim"):
            info["pmu_unavailable"] = "msprof: every PMU cell is N/A (no --ai-core data in this export)"
        info["lost_by_iter"] = {}
        info["prof"] = {k: meta[k] for k in ("kind", "files", "prof_dir", "ignored", "marker_rows_dropped",
                                             "reordered", "timing_column")}
        if meta["ignored"]:
            info["flags"].append(f"passed over {len(meta['ignored'])} stale/partial export(s): {meta['ignored'][0]}")
        if meta["reordered"]:
            info["flags"].append("kernel rows were not in start-time order in the export: sorted")
        info["runtime"] = _msprof.read_info_json(root)
        info["timing_method"] = {"op_summary": "msprof.op_summary.Task_Duration",
                                 "old_op_summary": "msprof.op_summary.Task_Duration",
                                 "task_time": "msprof.quick.Task_Duration",  # upstream quick mode label
                                 "kernel_details": "torch_npu.kernel_details.Duration"}[meta["kind"]]
        return tagged, info

    # child side
    def setup(self, spec):
        import torch
        import torch_npu  # noqa: F401  (registers torch.npu)
        from mfulib.run import compat
        torch.npu.set_device(spec["device"])
        compat.install(spec["device"])

    def identity(self, spec):
        import torch
        return self.device_identity(torch.device(spec["device"]).index or 0)

    @contextlib.contextmanager
    def iteration(self, index):
        from torch.profiler import record_function
        mstx, rid = None, None
        try:
            import torch_npu
            mstx = getattr(torch_npu.npu, "mstx", None)
            rid = mstx.range_start(f"mfu::iter::{index}") if mstx is not None else None
        except Exception:  # mstx is optional (older torch_npu): the marker kernels delimit iterations
            mstx = None
        with record_function(f"mfu::iter::{index}"):
            yield
        if mstx is not None and rid is not None:
            with contextlib.suppress(Exception):
                mstx.range_end(rid)
