"""Nominal (datasheet / formula) dense peaks per device and dtype, each with the source of its number.

Public API (used by the collector, ``check_flops`` and ``peak_calib``):

* :func:`nominal_peak_tflops` ``(device_info, dtype) -> (tflops | None, source)``;
* :func:`nominal_for_identity` ``(ident) -> {"tflops": {mode: value}, "bandwidth_gbps": value|None, "source": str}``
  for the math modes of peak.json (``bfloat16 float16 float32 tf32 int8 float8_e4m3fn``; int8 in TOPS);
* :func:`dtype_nominal_tflops` ``(nominal_by_mode, dtype, tf32) -> value | None``: the dtype's own nominal figure
  (the threshold the >100% check of MFU@nom is judged against; MFU@nom itself keeps the fp16/bf16 figure).
* :func:`l2_from_facts` ``(device name) -> (L2 bytes | None, source)`` and :data:`NPU_L2_BY_FREQ`: the documented
  L2 sizes ``--from-prof``'s flush rule reads when a profile records none (one table of device facts).

``device_info`` / ``ident`` is a dict with ``backend`` (``npu|cuda|cpu``) and what is known of the device:

* npu: ``ai_core_num`` + ``aic_frequency_mhz`` (runtime values from ``PROF_*/device_N/info.json.N``, see
  :func:`mfulib.profiles.msprof.read_info_json`), else ``soc_name`` (``Ascend910B2``; torch_npu / npu-smi) for the platform
  ``.ini`` under ``$ASCEND_HOME_PATH`` or the ini table below, with ``cube_core_num`` from torch_npu if known;
* cuda: ``name`` (``torch.cuda.get_device_properties(i).name``), optionally ``multiprocessor_count``,
  ``capability`` and ``max_sm_clock_mhz`` for the SMs x clock fallback;
* cpu: nothing - there is no nominal peak (``None``: MFU@nom is absent, never 0).

NPU formula (msprof-analyze ``operator_mfu/chip_peak_flops.py``, docs/sources.md#ascend-cube-peak)::

    peak_flops = ai_core_num * aic_frequency_MHz * 1e6 * OPS_PER_CYCLE
    OPS_PER_CYCLE = 16*16*16*2 = 8192 (FLOAT16; msprof-analyze also uses it for BF16 and FLOAT), 16*32*16*2 = 16384 (INT8)

So on the NPU every floating dtype gets the fp16 cube figure (dtype-agnostic, as msprof-analyze does); the fp32
cube rate is not in any ini, so ``float32``/``tf32`` report the same number with that caveat in the source text.

CUDA numbers are the NVIDIA datasheets' **dense** figures (the headline tensor figures are "with sparsity": halved
here), and ``float32`` is the non-tensor FP32 rate, never the TF32 tensor figure (``tf32`` is its own key).
"""
from __future__ import annotations

import configparser
import glob
import os
import platform
import re

from mfulib.core.definitions import MATH_MODES, MIB, canonical_mode, finite_or_none, peak_key

NPU_OPS_PER_CYCLE = {"float16": 16 * 16 * 16 * 2, "int8": 16 * 32 * 16 * 2}  # msprof-analyze chip_peak_flops.py
# msprof-analyze DTYPE_MAP: FLOAT, FLOAT16, BF16 -> FLOAT16; INT8 -> INT8
NPU_DTYPE_CLASS = {"float16": "float16", "bfloat16": "float16", "float32": "float16", "tf32": "float16",
                   "int8": "int8"}

# Platform ini values (CANN 8.1.RC1 data/platform_config/<SoC>.ini, [SoCInfo] cube_core_cnt, [AICoreSpec]
# cube_freq MHz): docs/sources.md#nominal-peaks-910b. Used only when the ini itself is not readable.
# "Ascend910B" (no suffix) is the 2019 Ascend 910 (30 cores @ 900 MHz), so names are matched exactly, never by prefix.
ASCEND_INI_TABLE = {
    "Ascend910B1": (24, 1850), "Ascend910B2": (24, 1800), "Ascend910B2C": (24, 1800),
    "Ascend910B3": (20, 1800), "Ascend910B4": (20, 1500),
}
ASCEND_INI_TABLE_SOURCE = "CANN 8.1.RC1 platform_config/<SoC>.ini values (docs/sources.md#nominal-peaks-910b)"

# NVIDIA datasheets, dense TFLOP/s (sparse headline / 2 for tensor dtypes), and HBM/GDDR bandwidth in GB/s.
#   H200: https://www.nvidia.com/en-us/data-center/h200/ (SXM: FP32 67, TF32 989*, BF16/FP16 1979*, FP8 3958*,
#         INT8 3958*, 4.8 TB/s; NVL: FP32 60, TF32 835*, BF16/FP16 1671*, FP8 3341*, INT8 3341*, 4.8 TB/s;
#         * = with sparsity)
#   H100: https://www.nvidia.com/en-us/data-center/h100/ (SXM: FP32 67, TF32 989*, BF16 1979*, FP8 3958*, INT8 3958*,
#         3.35 TB/s; PCIe: FP32 51, TF32 756*, BF16 1513*, FP8 3026*, INT8 3026*, 2 TB/s; NVL: FP32 60, TF32 835*,
#         BF16 1671*, FP8 3341*, INT8 3341*, 3.9 TB/s)
#   A100: https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
#         (FP32 19.5, TF32 156, BF16/FP16 312, INT8 624 dense; 80GB SXM 2039 GB/s, 80GB PCIe 1935, 40GB 1555)
#   L40S: https://www.nvidia.com/en-us/data-center/l40s/ (FP32 91.6, TF32 183, BF16/FP16 362.05, FP8 733, INT8 733
#         dense; 864 GB/s). A100 (sm_80) has no fp8 tensor cores: no fp8 figure.
# Patterns are matched against torch's device name in order (the more specific first).
CUDA_SPEC_TABLE = [
    (r"H200.*NVL", {"bfloat16": 835.5, "float16": 835.5, "tf32": 417.5, "float32": 60.0, "int8": 1670.5,
      "float8_e4m3fn": 1670.5}, 4800.0, "NVIDIA H200 NVL datasheet (nvidia.com/en-us/data-center/h200), sparse tensor figures halved"),
    (r"H200", {"bfloat16": 989.5, "float16": 989.5, "tf32": 494.5, "float32": 67.0, "int8": 1979.0,
      "float8_e4m3fn": 1979.0}, 4800.0, "NVIDIA H200 SXM datasheet (nvidia.com/en-us/data-center/h200), sparse tensor figures halved"),
    (r"H100.*NVL", {"bfloat16": 835.5, "float16": 835.5, "tf32": 417.5, "float32": 60.0, "int8": 1670.5,
      "float8_e4m3fn": 1670.5}, 3900.0, "NVIDIA H100 NVL datasheet (nvidia.com/en-us/data-center/h100), sparse tensor figures halved"),
    (r"H100.*PCIe", {"bfloat16": 756.5, "float16": 756.5, "tf32": 378.0, "float32": 51.0, "int8": 1513.0,
      "float8_e4m3fn": 1513.0}, 2000.0, "NVIDIA H100 PCIe datasheet (nvidia.com/en-us/data-center/h100), sparse tensor figures halved"),
    (r"H100", {"bfloat16": 989.5, "float16": 989.5, "tf32": 494.5, "float32": 67.0, "int8": 1979.0,
      "float8_e4m3fn": 1979.0}, 3350.0, "NVIDIA H100 SXM datasheet (nvidia.com/en-us/data-center/h100), sparse tensor figures halved"),
    (r"A100.*80GB.*PCIe", {"bfloat16": 312.0, "float16": 312.0, "tf32": 156.0, "float32": 19.5, "int8": 624.0},
     1935.0, "NVIDIA A100 datasheet (80GB PCIe), dense figures"),
    (r"A100.*80GB", {"bfloat16": 312.0, "float16": 312.0, "tf32": 156.0, "float32": 19.5, "int8": 624.0},
     2039.0, "NVIDIA A100 datasheet (80GB SXM), dense figures"),
    (r"A100", {"bfloat16": 312.0, "float16": 312.0, "tf32": 156.0, "float32": 19.5, "int8": 624.0},
     1555.0, "NVIDIA A100 datasheet (40GB), dense figures"),
    (r"L40S", {"bfloat16": 362.05, "float16": 362.05, "tf32": 183.0, "float32": 91.6, "int8": 733.0,
      "float8_e4m3fn": 733.0}, 864.0, "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s), sparse tensor figures halved"),
]

# L2 sizes by device name (regex, bytes, source); (--from-prof's flush rule: used when neither --l2-mib nor the profile gives one)
L2_FACTS = [
    (r"H200", 60 * MIB, "torch L2_cache_size of an H200, 60 MiB (docs/sources.md#l2-sizes)"),
    (r"^Ascend910B4$", 100663296, "Ascend910B4.ini l2_size 96 MiB (docs/sources.md#l2-sizes)"),
    (r"^Ascend910B[123]C?$", 201326592, "Ascend910B1/B2/B2C/B3.ini l2_size 192 MiB (docs/sources.md#l2-sizes)"),
]
# runtime (ai_core_num, aic_frequency MHz) of info.json.N -> L2 of the 910B variant with that pair
# (docs/sources.md#l2-sizes: inferred from the ini table: only 910B4, 20 cores at 1500 MHz, has 96 MiB; 910B1/B2/B2C/B3
# run 20-25 cores at 1800/1850 MHz with 192 MiB)
NPU_L2_BY_FREQ = {1500.0: 100663296, 1800.0: 201326592, 1850.0: 201326592}

def l2_from_facts(name):
    """``(L2 bytes, source)`` of a device name by :data:`L2_FACTS`, or ``(None, None)``."""
    for pat, size, src in L2_FACTS:
        if name and re.search(pat, str(name)):
            return float(size), src
    return None, None


# SMs x clock fallback: dense fp16 tensor FLOP per clock per SM, derived from the datasheets above:
# A100 312e12 / (108 SMs * 1410 MHz) = 2048; H100 SXM 989.5e12 / (132 * 1830 MHz) = 4096; L40S 362e12 / (142 * 2520) ~ 1024.
CUDA_FP16_FLOP_PER_CLK_PER_SM = {"8.0": 2048, "8.9": 1024, "9.0": 4096}


# ---------------------------------------------------------------------------------------------------------- NPU


def read_platform_ini(soc_name: str, ascend_home: str | None = None):
    """(cube_cores, cube_freq_mhz, path) from ``$ASCEND_HOME_PATH/<arch>-linux/data/platform_config/<SoC>.ini``.

    ``[SoCInfo] cube_core_cnt`` (else ``ai_core_cnt``) and ``[AICoreSpec] cube_freq`` (MHz). Returns None when the
    file is absent or lacks the keys. The SoC name is matched exactly (``Ascend910B.ini`` is another chip).
    """
    home = ascend_home or os.environ.get("ASCEND_HOME_PATH")
    if not home or not soc_name:
        return None
    arch = platform.machine() or "*"
    pats = [os.path.join(home, f"{arch}-linux", "data", "platform_config", f"{soc_name}.ini"),
            os.path.join(home, "*-linux", "data", "platform_config", f"{soc_name}.ini"),
            os.path.join(home, "data", "platform_config", f"{soc_name}.ini")]
    for pat in pats:
        for path in sorted(glob.glob(pat)):
            cp = configparser.ConfigParser(strict=False, interpolation=None)
            try:
                cp.read(path, encoding="utf-8")
                cores = cp.get("SoCInfo", "cube_core_cnt", fallback=None) or cp.get("SoCInfo", "ai_core_cnt",
                                                                                     fallback=None)
                freq = cp.get("AICoreSpec", "cube_freq", fallback=None)
                if cores and freq:
                    return int(cores), float(freq), path
            except (configparser.Error, ValueError, OSError):
                continue
    return None


def _npu_peak(info: dict, dtype: str):
    cls = NPU_DTYPE_CLASS.get(canonical_mode(dtype))
    if cls is None:
        return None, f"no NPU cube rate for dtype {dtype!r} (msprof-analyze: 'Not supported data type')"
    ops = NPU_OPS_PER_CYCLE[cls]
    note = "" if canonical_mode(dtype) in ("float16", "bfloat16", "int8") else \
        f" (fp16 cube rate used for {canonical_mode(dtype)}, as msprof-analyze does; dtype-agnostic)"
    cores, mhz = info.get("ai_core_num"), info.get("aic_frequency_mhz")
    if cores and mhz:
        where = info.get("info_json_path") or "info.json.N"
        return (cores * mhz * 1e6 * ops / 1e12,
                f"{where}: ai_core_num={cores} x aic_frequency={mhz:g} MHz x {ops} FLOP/cycle "
                f"(msprof-analyze chip_peak_flops.py){note}")
    soc = info.get("soc_name") or info.get("name")
    ini = read_platform_ini(soc) if soc else None
    if ini:
        c, f, path = ini
        c = info.get("cube_core_num") or c
        return c * f * 1e6 * ops / 1e12, f"{path}: cube cores {c} x cube_freq {f:g} MHz x {ops} FLOP/cycle{note}"
    if soc in ASCEND_INI_TABLE:
        c, f = ASCEND_INI_TABLE[soc]
        c = info.get("cube_core_num") or c
        src = "torch_npu cube_core_num" if info.get("cube_core_num") else "ini cube_core_cnt"
        return (c * f * 1e6 * ops / 1e12,
                f"{soc}: {src} {c} x cube_freq {f:g} MHz ({ASCEND_INI_TABLE_SOURCE}) x {ops} FLOP/cycle{note}")
    return None, (f"no NPU peak: no info.json.N (ai_core_num, aic_frequency), no platform ini for SoC {soc!r} "
                  "under $ASCEND_HOME_PATH and not in the built-in 910B table - pass --mfu-peak TFLOPS")


# --------------------------------------------------------------------------------------------------------- CUDA


def cuda_spec(name: str):
    """(dense TFLOP/s per mode, bandwidth GB/s, source) for a CUDA device name, or None when not in the table."""
    for pat, tflops, bw, src in CUDA_SPEC_TABLE:
        if re.search(pat, name or "", re.I):
            return dict(tflops), bw, src
    return None


def _cuda_peak(info: dict, dtype: str):
    mode = canonical_mode(dtype)
    spec = cuda_spec(info.get("name", ""))
    if spec:
        tflops, _bw, src = spec
        if mode in tflops:
            what = "non-tensor FP32 (not the TF32 figure)" if mode == "float32" else "dense"
            return tflops[mode], f"{src}: {mode} {what}"
        return None, f"{src}: no figure for {mode}"
    sms, cc, mhz = info.get("multiprocessor_count"), info.get("capability"), info.get("max_sm_clock_mhz")
    per = CUDA_FP16_FLOP_PER_CLK_PER_SM.get(str(cc))
    if mode in ("float16", "bfloat16") and sms and per and mhz:
        return (sms * float(mhz) * 1e6 * per / 1e12,
                f"SMs x clock: {sms} SMs x {float(mhz):g} MHz (max SM clock) x {per} FLOP/clk/SM (sm_{cc} dense "
                "fp16 tensor rate derived from datasheets)")
    return None, (f"device {info.get('name')!r} is not in the CUDA spec table and the SMs x clock fallback "
                  f"does not cover {mode} on capability {cc} - pass --mfu-peak TFLOPS")


def _cuda_bandwidth(ident: dict):
    spec = cuda_spec(ident.get("name", ""))
    return spec[1] if spec else None


# backend name (the ``backend`` of a device identity) -> its datasheet / formula peak and bandwidth; a backend
# without an entry has no nominal figure (MFU@nom absent, never 0)
DATASHEET_PEAK = {"npu": _npu_peak, "cuda": _cuda_peak}
DATASHEET_BANDWIDTH = {"cuda": _cuda_bandwidth}

# --------------------------------------------------------------------------------------------------------- API


def nominal_peak_tflops(device_info: dict, dtype: str):
    """Nominal dense peak of ``dtype`` on the device, in TFLOP/s, with the source of the number.

    Returns ``(value, source)``; ``value`` is None where no honest figure exists (CPU always; unknown devices),
    and ``source`` then says why and what to do. Never raises for an unknown device.
    """
    backend = (device_info or {}).get("backend")
    peak = DATASHEET_PEAK.get(backend)
    if peak is None:
        return None, (f"{backend or 'cpu'}: no nominal peak (Triton interpreter / CPU numbers are not compared with "
                      "accelerators)")
    return peak(device_info, dtype)


def dtype_nominal_tflops(nominal_by_mode, dtype, tf32: bool = False):
    """The nominal peak of ``dtype``'s own math mode from a ``{mode: TFLOP/s (TOPS for int8)}`` table (the
    ``nominal_tflops`` of performance.json's peak block, or peak.json ``nominal.tflops``), or None.

    MFU@nom divides every dtype by the fp16/bf16 figure (docs/ARCHITECTURE.md#mfu-nom, after msprof-analyze
    operator_mfu); an int8 kernel is legitimately near 2x that (H200 int8 dense 1979 TOPS vs bf16 989.5 TFLOP/s).
    Whether a throughput is impossibly high is judged against this figure instead, where the table has one.
    """
    if not isinstance(nominal_by_mode, dict) or not dtype:
        return None
    key = peak_key(dtype, tf32)
    v = finite_or_none(nominal_by_mode.get(key))
    return v if v and v > 0 else None


def nominal_for_identity(ident: dict) -> dict:
    """Nominal peaks of every peak.json math mode plus nominal memory bandwidth for a device identity dict.

    Returns ``{"tflops": {mode: value}, "bandwidth_gbps": value|None, "source": str}``; modes with no figure are
    left out, and ``source`` joins the distinct sources.
    """
    out, sources = {}, []
    for mode in MATH_MODES:
        v, src = nominal_peak_tflops(ident, mode)
        if v is not None:
            out[mode] = v
        if src not in sources:
            sources.append(src)
    bandwidth = DATASHEET_BANDWIDTH.get(ident.get("backend"))
    bw = bandwidth(ident) if bandwidth else None
    # NPU HBM bandwidth has no official public figure (docs/sources.md#npu-bandwidth): measure it (peak_calib) instead.
    return {"tflops": out, "bandwidth_gbps": bw, "source": "; ".join(sources)}
