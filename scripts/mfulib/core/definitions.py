"""The measurement definitions, in one place: TFLOP/s, MFU, MBU, the noise margin, dtype names and peak keys.

Every module that computes a throughput, a utilisation or a peak key imports it from here; none writes its own
(``tests/test_structure.py`` greps for a second spelling). Definitions (docs/ARCHITECTURE.md#definitions, after
msprof-analyze ``operator_mfu``: docs/sources.md#operator-mfu):

* ``actual_tflops = flops / kernel_time_ns / 1e3`` (= FLOPs / (ns * 1e-9) / 1e12): FLOPs counted 2 per
  multiply-accumulate, kernel time in ns;
* ``mfu = actual_tflops / peak_tflops`` (a ratio, not %); ``mbu = bytes / time_ns / bandwidth_gbps`` (GB/s =
  1e9 bytes/s = bytes per ns);
* above 100% of a peak by more than :data:`NOISE_MARGIN` is an error in the inputs, 100-103% a warning
  (docs/ARCHITECTURE.md#noise-band);
* dtype spellings of case files (docs/sources.md#benchmark-formats: older files write ``fp16``,
  ``half``, ``bf16``...) map to torch dtype names (:func:`canonical_dtype`), and the peak.json math modes
  (``bfloat16 float16 float32 tf32 int8 float8_e4m3fn``, :data:`MATH_MODES`) are those names plus ``tf32`` (fp32 inputs with
  TF32 on CUDA / HF32 on the NPU allowed; :func:`peak_key`).
"""
from __future__ import annotations

import math

from mfulib.core.errors import UserError

MIB = 1 << 20  # bytes in a MiB (sizes of caches and flush buffers)
NOISE_MARGIN = 0.03  # docs/ARCHITECTURE.md#noise-band: > 103% of a peak is an error in the inputs, 100-103% a warning

# dtype spellings seen in case files -> canonical torch dtype name (docs/sources.md#benchmark-formats: older files use
# fp16/...; fp8 names as torch spells them: torch.float8_e4m3fn, torch.float8_e5m2)
DTYPE_CANON = {
    "float16": "float16", "fp16": "float16", "half": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16", "dt_bf16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32",
    "float64": "float64", "fp64": "float64", "double": "float64",
    "float8_e4m3fn": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "fp8_e4m3fn": "float8_e4m3fn",
    "e4m3": "float8_e4m3fn", "float8_e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2", "e5m2": "float8_e5m2",
    "int8": "int8", "uint8": "uint8", "int16": "int16", "int32": "int32", "int": "int32",
    "int64": "int64", "long": "int64", "bool": "bool",
    "complex64": "complex64",
}
DTYPE_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1,
                  "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8, "bool": 1, "complex64": 8}
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
HALF_DTYPES = ("float16", "bfloat16")  # the dtypes of the nominal dense peak MFU@nom divides by

# peak.json math modes; ``tf32`` also names HF32 (the NPU's TF32-like fp32 matmul mode); ``float8_e4m3fn`` = fp8
# e4m3 inputs (torch._scaled_mm, CUDA capability >= 8.9)
MATH_MODES = ("bfloat16", "float16", "float32", "tf32", "int8", "float8_e4m3fn")
MODE_ALIASES = {"tf32": "tf32", "hf32": "tf32", "fp8": "float8_e4m3fn"}
# modes whose throughput is integer operations: reported in TOPS (peak.json ``peak_tops``), same 2*m*n*k count
OPS_MODES = ("int8",)
# modes whose dense nominal peak is above the fp16/bf16 figure (~2x on Hopper/Ada; int8 2x on the Ascend cube)
LOW_PRECISION_MODES = ("int8", "float8_e4m3fn")


def _key(name) -> str:
    return str(name).strip().lower().replace("torch.", "")


def canonical_dtype(name: str) -> str:
    """Canonical torch dtype name of a case-file spelling (``"fp16"`` -> ``"float16"``).

    Raises UserError for an unknown spelling, listing the known ones."""
    key = _key(name)
    if key not in DTYPE_CANON:
        raise UserError(f"unknown dtype {name!r}; known spellings: {', '.join(sorted(DTYPE_CANON))}")
    return DTYPE_CANON[key]


def canonical_mode(dtype: str) -> str:
    """peak.json math-mode key of a dtype spelling (``fp16`` -> ``float16``, ``hf32`` -> ``tf32``).

    Never raises: an unknown name is returned lower-cased (callers report "no peak for <key>")."""
    key = _key(dtype)
    return MODE_ALIASES.get(key) or DTYPE_CANON.get(key, key)


def peak_key(dtype: str, tf32: bool = False) -> str:
    """The peak.json key for a case's compute dtype: ``float32`` with TF32/HF32 in use -> ``tf32``, else
    :func:`canonical_mode` (unknown dtypes are their own key, for which no peak is measured)."""
    d = canonical_mode(dtype)
    return "tf32" if d == "float32" and tf32 else d


def measured_peak_tflops(peak_tflops: dict, dtype: str, tf32: bool = False):
    """(TFLOP/s, key): the measured peak for ``dtype`` in peak.json's ``peak_tflops`` {mode: TFLOP/s}; the value is
    None when that mode was not measured."""
    key = peak_key(dtype, tf32)
    return (peak_tflops or {}).get(key), key


def is_number(x) -> bool:
    """An int or float that is not a bool (JSON numbers as read by :mod:`json`)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def finite_or_none(x):
    """``float(x)`` for a finite number, else None (missing, NaN, inf, bool, string)."""
    return float(x) if is_number(x) and math.isfinite(x) else None


def is_positive(x) -> bool:
    """A finite number > 0 (a peak, a time, a bandwidth)."""
    v = finite_or_none(x)
    return v is not None and v > 0


def actual_tflops(flops: float, time_ns: float) -> float:
    """Achieved TFLOP/s: ``flops / time_ns / 1e3`` (FLOPs per ns = 1e9 FLOP/s; / 1e3 -> 1e12 FLOP/s).

    ``time_ns`` must be > 0 (callers check; a missing time gives no throughput, never 0 or inf)."""
    return flops / time_ns / 1e3


def time_ns_at(flops: float, tflops: float) -> float:
    """Kernel time in ns that ``flops`` take at ``tflops`` TFLOP/s (the inverse of :func:`actual_tflops`): the time
    at 100% MFU when ``tflops`` is the peak."""
    return flops / (tflops * 1e3)


def mfu(tflops, peak_tflops):
    """Model FLOPs utilisation ``tflops / peak_tflops`` (ratio); None when either is missing or the peak is 0."""
    return tflops / peak_tflops if tflops is not None and peak_tflops else None


def mbu(nbytes, time_ns, bandwidth_gbps):
    """Memory-bandwidth utilisation ``nbytes / time_ns / bandwidth_gbps`` (GB/s = bytes per ns); None when an input
    is missing or 0."""
    return nbytes / time_ns / bandwidth_gbps if nbytes and time_ns and bandwidth_gbps else None


def above_peak(value) -> str | None:
    """``"error"`` for a utilisation above ``1 + NOISE_MARGIN``, ``"warning"`` for 1..1+margin, else None."""
    if value is None or value <= 1.0:
        return None
    return "warning" if value <= 1.0 + NOISE_MARGIN else "error"
