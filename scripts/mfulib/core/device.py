"""Facts of the machine a backend reads: the vendor tools' clocks, the CANN version, the host CPU's name.

These are the readers; the backends (:mod:`mfulib.backends`) decide which apply: device identity
(:func:`mfulib.backends.device_identity`) uses :func:`slug`, :func:`cpu_model`, :func:`nvidia_smi_query` and
:func:`cann_version` (the one reader of the CANN toolkit version); clocks come from :func:`nvidia_smi_clocks` or
:func:`npu_smi_clocks`, sampled under load by :class:`ClockSampler`.
"""
from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import statistics
import subprocess
import threading
import time


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


def cpu_model() -> str:
    """The host CPU's model name (/proc/cpuinfo, else the platform's processor or machine name)."""
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


def nvidia_smi_query(index: int, fields: str) -> dict:
    """{field: value} of ``nvidia-smi --query-gpu=<fields>`` for GPU ``index`` (unsupported fields left out); {}
    without nvidia-smi or when it fails."""
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


def nvidia_smi_clocks(index: int = 0) -> dict:
    """Clocks and power of GPU ``index`` as nvidia-smi reports them (strings, units in the keys):
    ``clocks_*_mhz``, ``power_*_w``, ``temperature_gpu_c``, ``clocks_throttle_reasons_active`` (the raw hex mask of
    clocks_event_reasons.active / clocks_throttle_reasons.active) and ``throttle_reasons`` (its decoded names);
    {} where nvidia-smi does not answer."""
    field = _reason_field.get(index)
    tries = [field] if field is not None else list(_SMI_REASON_FIELDS) + [""]
    got = {}
    for f in tries:
        got = nvidia_smi_query(index, ",".join(_SMI_FIELDS + ((f,) if f else ())))
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


def npu_smi_clocks(index: int = 0) -> dict:
    """npu-smi's ``Key : Value`` lines for NPU ``index`` that mention a frequency, power or temperature; {} where
    npu-smi does not answer."""
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


class ClockSampler:
    """Samples ``reader()`` (a backend's :meth:`~mfulib.backends.base.Backend.read_clocks` of one device) every
    ``interval_s`` in a thread while active (``with ClockSampler(...) as s``).

    Why: one reading before and one after a calibration miss the clocks under load; the H200 drops its SM clock
    ~15% at its 700 W cap (throttle reason sw_power_cap). :meth:`summary` gives the SM clock range and every
    throttle reason seen. ``reader`` None (a device without a vendor clock tool): nothing is sampled; never raises.
    """

    def __init__(self, reader=None, interval_s: float = 0.5):
        self.reader, self.interval_s = reader, interval_s
        self.samples = []
        self._stop = threading.Event()
        self._thread = None
        self._t0 = None

    def __enter__(self):
        self._t0 = time.monotonic()
        if self.reader is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            try:
                got = self.reader()
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

