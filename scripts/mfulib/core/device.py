"""The device this process runs on: backend selection, device identity, clocks and the CANN version.

Backend selection (``--backend auto|npu|cuda|cpu``) as DESIGN.md "Device backends" defines it: ``auto`` picks npu
only when torch_npu imports and CANN is set up (``ASCEND_HOME_PATH``), not merely because an ``msprof`` is on PATH;
then cuda when torch sees a GPU; else cpu (Triton interpreter). The reason is recorded.

Identity (:func:`device_identity`: name, key, core counts, memory, driver/CANN versions) names the per-device peak
cache and is recorded in peak.json and performance.json; :func:`read_clocks` reads clocks/power from nvidia-smi or
npu-smi; :func:`cann_version` is the one reader of the CANN toolkit version.
"""
from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

from mfulib.core.errors import UserError

BACKENDS = ("auto", "npu", "cuda", "cpu")


def npu_ready():
    """(ok, why): torch_npu importable, an NPU visible and ASCEND_HOME_PATH set."""
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


def resolve_backend(name: str = "auto"):
    """Return (backend, reason). Raises UserError when an explicit backend cannot run here, with the fix."""
    if name not in BACKENDS:
        raise UserError(f"--backend {name!r}: choose one of {', '.join(BACKENDS)}")
    if name == "cpu":  # nothing to probe: no torch import in the parent (2-3 s per step)
        return "cpu", "--backend cpu"
    import torch
    if name == "npu":
        ok, why = npu_ready()
        if not ok:
            raise UserError(f"--backend npu: {why} - source <CANN>/set_env.sh and install torch_npu, "
                            "or use --backend cuda/cpu")
        return "npu", why
    if name == "cuda":
        if not torch.cuda.is_available():
            raise UserError("--backend cuda: torch sees no CUDA device - use --backend cpu (Triton interpreter)")
        return "cuda", "--backend cuda"
    ok, why = npu_ready()
    if ok:
        return "npu", "auto: " + why
    if torch.cuda.is_available():
        return "cuda", f"auto: no NPU ({why}); torch sees {torch.cuda.get_device_name(0)}"
    return "cpu", f"auto: no NPU ({why}) and no CUDA device: Triton interpreter on CPU"


def device_string(backend: str, device_id: int = 0) -> str:
    """torch device string for a backend and device index (``npu:0``, ``cuda:0``, ``cpu``)."""
    return "cpu" if backend == "cpu" else f"{backend}:{device_id}"


def prepare_process(backend: str) -> None:
    """Process set-up that must precede any Triton kernel definition: the interpreter on cpu."""
    if backend == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"


# --------------------------------------------------------------------------------------------------------------
# identity, clocks, CANN version


def ascend_home():
    """The CANN toolkit directory: ``$ASCEND_HOME_PATH``, else ``$ASCEND_TOOLKIT_HOME``, else None."""
    return os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME") or None


def cann_version(home):
    """CANN version string read from the toolkit's install info / version files under ``home``, else None."""
    if not home:
        return None
    arch = platform.machine()
    pats = [os.path.join(home, f"{arch}-linux", "ascend_toolkit_install.info"),
            os.path.join(home, "*-linux", "ascend_toolkit_install.info"), os.path.join(home, "version.cfg"),
            os.path.join(home, "compiler", "version.info"), os.path.join(home, "runtime", "version.info"),
            os.path.join(home, "version.info")]
    for pat in pats:
        for path in sorted(glob.glob(pat)):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            m = re.search(r"(?im)^\s*\w*version\s*=\s*\[?(?:[\d.]+:)?([0-9][\w.]*)", text)
            if m:
                return m.group(1)
    return None


def slug(text: str) -> str:
    """``"NVIDIA H200"`` -> ``"nvidia-h200"`` (file-name safe)."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "unknown"


def device_identity(backend: str, index: int = 0) -> dict:
    """Identity of device ``index`` of ``backend``: name, key (``<backend>-<slug(name)>``), cores, memory, versions.

    ``key`` names the cache file; two devices of the same model share a calibration.
    """
    import torch
    ident = {"backend": backend, "index": index, "accelerator": backend != "cpu"}
    if backend == "cuda":
        p = torch.cuda.get_device_properties(index)
        ident.update(name=p.name, capability=f"{p.major}.{p.minor}", multiprocessor_count=p.multi_processor_count,
                     total_memory_bytes=int(p.total_memory),
                     l2_cache_bytes=getattr(p, "L2_cache_size", None),
                     uuid=str(getattr(p, "uuid", "")) or None,
                     cuda_runtime=torch.version.cuda)
        smi = _nvidia_smi_query(index, "driver_version,clocks.max.sm")
        ident["driver"] = smi.get("driver_version")
        if smi.get("clocks.max.sm"):
            ident["max_sm_clock_mhz"] = float(smi["clocks.max.sm"])
    elif backend == "npu":
        name = torch.npu.get_device_name(index)
        p = torch.npu.get_device_properties(index)
        ident.update(name=name, soc_name=name, cube_core_num=getattr(p, "cube_core_num", None),
                     vector_core_num=getattr(p, "vector_core_num", None),
                     total_memory_bytes=getattr(p, "total_memory", None),
                     l2_cache_bytes=getattr(p, "L2_cache_size", None),
                     cann=cann_version(ascend_home()), torch_npu=getattr(sys.modules.get("torch_npu"), "__version__", None))
    else:
        ident.update(name=_cpu_model(), threads=torch.get_num_threads(), logical_cpus=os.cpu_count(),
                     note="CPU numbers (torch CPU GEMM), not an accelerator; never compare them with NPU/GPU numbers")
    ident["key"] = f"{backend}-{slug(ident['name'])}"
    return ident


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


_SMI_FIELDS = ("clocks.sm", "clocks.max.sm", "clocks.mem", "power.draw", "power.limit", "temperature.gpu")
# the active clock-limit reasons bitmask: "clocks_event_reasons.active" on newer drivers, the older name
# "clocks_throttle_reasons.active" before (nvidia-smi --help-query-gpu); tried in this order
_SMI_REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
# NVML nvmlClocksEventReasons / nvmlClocksThrottleReasons bits (nvml.h; nvidia-smi -q "Clocks Event Reasons")
THROTTLE_REASON_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                        0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                        0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
_reason_field = {}  # index -> the reasons field this driver accepts ("" = none)


def _nvidia_smi_query(index: int, fields: str) -> dict:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = subprocess.run([exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", str(index)],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    vals = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    names = fields.split(",")
    return {n: v for n, v in zip(names, vals) if v and "not supported" not in v.lower()}


def decode_throttle_reasons(mask) -> list:
    """Names of the set bits of an nvidia-smi clocks event/throttle reasons mask (``"0x0000000000000004"`` ->
    ``["sw_power_cap"]``; 0 -> ``[]``; unknown bits -> ``"bit_0x..."``). Raises ValueError for a non-hex text."""
    value = int(str(mask).strip(), 16) if isinstance(mask, str) else int(mask)
    names = [name for bit, name in THROTTLE_REASON_BITS.items() if value & bit]
    rest = value & ~sum(THROTTLE_REASON_BITS)
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"bit_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return names


def _cuda_clocks(index: int) -> dict:
    field = _reason_field.get(index)
    tries = [field] if field is not None else list(_SMI_REASON_FIELDS) + [""]
    got = {}
    for f in tries:
        got = _nvidia_smi_query(index, ",".join(_SMI_FIELDS + ((f,) if f else ())))
        if got:  # older drivers reject an unknown field for the whole query: fall back to the next name
            _reason_field[index] = f
            break
    out = {}
    for k, v in got.items():
        if k in _SMI_REASON_FIELDS:
            out["clocks_throttle_reasons_active"] = v
            try:
                out["throttle_reasons"] = decode_throttle_reasons(v)
            except ValueError:
                pass
            continue
        out[k.replace(".", "_") + ("_mhz" if k.startswith("clocks.") else "_w" if k.startswith("power")
                                    else "_c" if k.startswith("temp") else "")] = v
    return out


def read_clocks(backend: str, index: int = 0) -> dict:
    """Clocks and power as the vendor tool reports them (strings, units in the keys): nvidia-smi ``clocks_*_mhz``,
    ``power_*_w``, ``temperature_gpu_c``, ``clocks_throttle_reasons_active`` (the raw hex mask of
    clocks_event_reasons.active / clocks_throttle_reasons.active) and ``throttle_reasons`` (its decoded names);
    npu-smi ``Key : Value`` lines that mention a frequency or power. Returns {} where no tool answers."""
    if backend == "cuda":
        return _cuda_clocks(index)
    if backend == "npu":
        exe = shutil.which("npu-smi")
        if not exe:
            return {}
        try:
            out = subprocess.run([exe, "info", "-t", "common", "-i", str(index)], capture_output=True, text=True,
                                 timeout=10)
        except (OSError, subprocess.SubprocessError):
            return {}
        res = {}
        for line in out.stdout.splitlines():
            if ":" in line:
                k, v = (s.strip() for s in line.split(":", 1))
                if re.search(r"freq|power|temp", k, re.I):
                    res[k] = v
        return res
    return {}


class ClockSampler:
    """Samples :func:`read_clocks` every ``interval_s`` in a thread while active (``with ClockSampler(...) as s``).

    Why: one reading before and one after a calibration miss the clocks under load; the H200 drops its SM clock
    ~15% at its 700 W cap (throttle reason sw_power_cap). :meth:`summary` gives the SM clock range and every
    throttle reason seen. On CPU nothing is sampled (no vendor tool); never raises.
    """

    def __init__(self, backend: str, index: int = 0, interval_s: float = 0.5, reader=None):
        self.backend, self.index, self.interval_s = backend, index, interval_s
        self.reader = reader or read_clocks
        self.samples = []
        self._stop = threading.Event()
        self._thread = None
        self._t0 = None

    def __enter__(self):
        self._t0 = time.monotonic()
        if self.backend != "cpu":
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            try:
                got = self.reader(self.backend, self.index)
            except Exception:  # a sampler must never break the measurement
                got = {}
            if got:
                self.samples.append({"t_s": round(time.monotonic() - self._t0, 3), **got})
            self._stop.wait(self.interval_s)

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        return False

    def summary(self) -> dict:
        """``{n_samples, interval_s, sm_clock_mhz: {min, median, max}, throttle_reasons_seen: {name: n_samples},
        samples: [...]}`` (clock values as numbers; sm_clock_mhz None when no sample had one)."""
        sm = []
        for s in self.samples:
            try:
                sm.append(float(s["clocks_sm_mhz"]))
            except (KeyError, TypeError, ValueError):
                continue
        seen = {}
        for s in self.samples:
            for r in s.get("throttle_reasons") or []:
                seen[r] = seen.get(r, 0) + 1
        return {"n_samples": len(self.samples), "interval_s": self.interval_s,
                "sm_clock_mhz": ({"min": min(sm), "median": statistics.median(sm), "max": max(sm)} if sm else None),
                "throttle_reasons_seen": seen, "samples": self.samples}

