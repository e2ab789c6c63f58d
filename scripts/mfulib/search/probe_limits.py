"""What the probe's gates compare a candidate with: free host and device memory, the L2 size and the bandwidth and
peak of peak.json (gates 1, 4 and 5 of :mod:`mfulib.search.probe`).

Sources: MemAvailable of Linux ``/proc/meminfo`` (proc(5)) and the RLIMIT_AS soft limit (getrlimit(2)) minus this
process's VmSize (``/proc/self/status``); free device memory from ``torch.cuda.mem_get_info`` / ``torch.npu``'s; the CPU
L2 from sysfs ``/sys/devices/system/cpu/cpu0/cache/index*/{level,size}``; the memory bandwidth measured in peak.json
(``peak_calib.py``), else the backend's datasheet figure (:meth:`mfulib.backends.base.Backend.nominal_bandwidth`: the
CUDA datasheet table, a 1.3 TB/s default on NPU: docs/sources.md#npu-bandwidth).
"""
from __future__ import annotations

import os

from mfulib.core.definitions import is_positive


def host_free_bytes() -> tuple:
    """(bytes, source) the host can still give: min(MemAvailable, RLIMIT_AS soft limit - this process's VmSize)."""
    import resource
    out, src = None, []
    try:
        with open("/proc/meminfo") as f:
            mem = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in f if ln.split()[1:2]}
        out, src = mem["MemAvailable"], ["MemAvailable (/proc/meminfo)"]
    except (OSError, KeyError, ValueError):
        pass
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        vm = 0
        try:
            with open("/proc/self/status") as f:
                vm = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:"))
        except (OSError, StopIteration):
            pass
        head = max(0, soft - vm)
        if out is None or head < out:
            out = head
        src.append(f"RLIMIT_AS {soft} B - VmSize {vm} B")
    return out, "; ".join(src) or "unknown"


def device_free_bytes(backend: str, index: int):
    """Free memory of the accelerator in bytes (None on a host backend, where the host check covers it)."""
    from mfulib.backends import get_backend
    return get_backend(backend).memory_free_bytes(index)


def cpu_l2_bytes():
    """L2 size of cpu0 from Linux sysfs (/sys/devices/system/cpu/cpu0/cache/index*/{level,size}), or None."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for idx in sorted(os.listdir(base)):
            with open(os.path.join(base, idx, "level")) as f:
                if f.read().strip() != "2":
                    continue
            with open(os.path.join(base, idx, "size")) as f:
                text = f.read().strip().upper()
            mult = {"K": 1024, "M": 1024 ** 2}.get(text[-1:], 1)
            return int(text.rstrip("KM")) * mult
    except (OSError, ValueError):
        return None
    return None


def bandwidth_limit(op_dir: str, backend: str, index: int, peak_json_path=None) -> dict:
    """{bandwidth_gbps, source, l2_bytes, peak_tflops_max}: the memory bandwidth gate 5 compares against, the L2
    exemption, and the highest peak of peak.json over every dtype, measured or nominal (TFLOP/s; int8 TOPS count as
    the same operations) for gate 4's roofline floor (:func:`mfulib.search.probe_gates.gate4_floor`; None without
    peak.json). The nominal (datasheet) figures count because a calibration of some dtypes only (``peak_calib.py
    --dtypes fp32``) would otherwise put an fp16 or TF32 operator's floor 8-15x too high and fail candidates that run
    well within --max-ms."""
    from mfulib.schemas import peak_json
    path = peak_json_path or os.path.join(op_dir, peak_json.FILE_NAME)
    bw, src, l2, top = None, None, None, None
    if os.path.exists(path):
        peak = peak_json.read_peak_json(path)
        bw, src = peak.get("bandwidth_gbps"), f"{path} bandwidth_gbps (measured)"
        nominal = (peak.get("nominal") or {}).get("tflops") if isinstance(peak.get("nominal"), dict) else None
        vals = [v for d in (peak.get("peak_tflops"), peak.get("peak_tops"), nominal) if isinstance(d, dict)
                for v in d.values() if is_positive(v)]
        top = max(vals) if vals else None
        l2 = (peak.get("device") or {}).get("l2_cache_bytes") if isinstance(peak.get("device"), dict) else None
    from mfulib.backends import backend_class, device_identity, get_backend
    if backend_class(backend).torch_namespace is not None:  # a device with its own memory and L2
        ident = device_identity(backend, index)
        l2 = l2 or ident.get("l2_cache_bytes")
        if bw is None:
            bw, src = get_backend(backend).nominal_bandwidth(ident)
    else:
        l2 = l2 or cpu_l2_bytes()
    return {"bandwidth_gbps": bw, "source": src or "none: no peak.json with bandwidth_gbps", "l2_bytes": l2,
            "peak_tflops_max": top}

