"""peak.json: the measured per-dtype peaks of a device (step 5), its reader/validator and the per-device cache.

Written by :func:`mfulib.peaks.calib.run_calibration` (provenance + ``backend``, ``device``, ``label``, ``method``,
``measured`` {mode: {peak_tflops, unit, best_shape, confirm, sweep_tflops, spread, sweep_drift, b_layout,
layout_probe, math_mode, n_shapes, elapsed_s, busy_s, duty_cycle, shapes, shape_errors; int8 also peak_tops}},
``peak_tflops`` {mode: 2*m*n*k / time / 1e12 - TFLOP/s, for int8 tera-operations/s under the same key so every
reader keeps one lookup}, ``peak_tops`` {int8: TOPS} (the same int8 figure under a name for its unit),
``errors`` {mode: text, e.g. "not available: ..."}, ``bandwidth`` / ``bandwidth_gbps``, ``nominal`` {tflops
(int8 in TOPS), bandwidth_gbps, source}, ``regime`` {kind burst|sustained, requested, duty_cycle_max, duty_cycle_measured,
busy_s, why}, ``clocks`` {n_samples, interval_s, sm_clock_mhz {min, median, max}, throttle_reasons_seen, samples}
with ``clocks_before`` / ``clocks_after``, ``trust`` {trusted, untrusted, max_spread, max_drift, spreads, drifts,
...}, ``software``, ``noise_filtered``, ``cache`` {hit, path, reason, stored, not_stored_why, measured_at,
measured_by (a hit: when and by which command the cached calibration was measured; null when this run measured
it)}, ``interrupted``...).
peak.json is a per-device fact any step may read (docs/ARCHITECTURE.md#layers); every reader goes through
:func:`read_peak_json`. Cached per device as ``peak-<device key>.json`` under :func:`default_cache_dir`; a cached
result is reused only when the device key, software versions, method version, regime and dtype set match, it was
trustworthy (``trust.trusted``: small confirm spread and sweep drift) and it is younger than ``max_age_days``
(:func:`load_cached`). Devices of the same model share one entry (the key is ``<backend>-<model>``); workers of a
batch calibrating at once take :func:`cache_lock` (an ``fcntl.flock`` on the cache directory) around the whole
read - measure - write, so the second waits and then reuses the first one's result.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os

from mfulib.core.definitions import HALF_DTYPES, finite_or_none, is_positive
from mfulib.core.cli import script_command
from mfulib.core.errors import UserError
from mfulib.core.jsonio import read_json, versions, write_json_atomic
from mfulib.schemas.common import read_work_json, wrong_type

SCHEMA = 1
TOOL = "peak_calib"
# bump when the measurement changes meaning (invalidates caches). 2: int8 B layout probed (column-major fast path),
# fp8, regime/clocks/trust recorded; 3: method.flush_cache_mib recorded (the decomposition's cache regime reads it)
METHOD_VERSION = 3
FILE_NAME = "peak.json"


def default_cache_dir() -> str:
    """``$MFU_PEAK_CACHE_DIR``, else ``$XDG_CACHE_HOME/triton-mfu-analyzer``, else ``~/.cache/triton-mfu-analyzer``."""
    if os.environ.get("MFU_PEAK_CACHE_DIR"):
        return os.environ["MFU_PEAK_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "triton-mfu-analyzer")


def cache_path(cache_dir: str, ident: dict) -> str:
    return os.path.join(cache_dir, f"peak-{ident['key']}.json")


@contextlib.contextmanager
def cache_lock(path: str, enabled: bool = True):
    """Hold an exclusive ``fcntl.flock`` on the cache directory of ``path`` (blocking) while the block runs: one
    calibration at a time per cache dir, so a second batch worker waits and then reuses the first one's result. The
    lock is released when the block ends or the process dies (closing the descriptor); no lock file is left. A
    cache dir that cannot be created or opened (or a platform without fcntl) runs unlocked."""
    fd = None
    if enabled:
        try:
            import fcntl
            folder = os.path.dirname(os.path.abspath(path))
            os.makedirs(folder, exist_ok=True)
            fd = os.open(folder, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except (ImportError, OSError):
            if fd is not None:
                os.close(fd)
            fd = None
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)


def software(ident: dict) -> dict:
    """What must match for a cached calibration to be reused (device key + software + method)."""
    v = versions()
    return {"key": ident.get("key"), "torch": v.get("torch"), "cuda_runtime": ident.get("cuda_runtime"),
            "driver": ident.get("driver"), "cann": ident.get("cann"), "torch_npu": ident.get("torch_npu"),
            "threads": ident.get("threads"), "method_version": METHOD_VERSION}


def load_cached(path: str, ident: dict, modes, bandwidth: bool, max_age_days: float, regime: str = "burst"):
    """(cached peak.json body, reason) if the cache at ``path`` is still valid for ``ident``/``modes``/``regime``
    and was trustworthy, else (None, reason)."""
    if not os.path.exists(path):
        return None, "no cached calibration"
    try:
        cached = read_json(path)
    except (OSError, ValueError) as exc:
        return None, f"unreadable cache ({exc})"
    try:
        check_peak(cached, path)
    except UserError as exc:  # valid JSON of the wrong structure: measure again (the run overwrites it)
        return None, f"cache ignored: {exc}"
    measured = cached.get("measured", {})
    if not isinstance(measured, dict) or not isinstance(cached.get("errors", {}), dict) or not all(
            isinstance(m, dict) and is_positive(m.get("peak_tflops")) for m in measured.values()):
        return None, f"cache ignored: {path}: measured/errors are not objects {{mode: {{peak_tflops, ...}}}}"
    if cached.get("schema") != SCHEMA or cached.get("interrupted"):
        return None, "cache from another schema or an interrupted run"
    if cached.get("software") != software(ident):
        return None, "device/software/method changed since the cached calibration"
    trust = cached.get("trust")
    if not isinstance(trust, dict) or trust.get("trusted") is not True:
        why = "; ".join(trust.get("untrusted") or []) if isinstance(trust, dict) else "no trust record"
        return None, f"cached calibration is not trustworthy ({why or 'untrusted'}): measuring again"
    cached_regime = cached["regime"].get("requested") if isinstance(cached.get("regime"), dict) else None
    if cached_regime != regime:
        return None, f"cached calibration is of the {cached_regime!r} regime, {regime!r} asked"
    missing = [m for m in modes if m not in cached.get("measured", {}) and m not in cached.get("errors", {})]
    if missing or (bandwidth and "bandwidth_gbps" not in cached and "bandwidth" not in cached.get("errors", {})):
        return None, f"cache lacks {missing or ['bandwidth']}"
    try:
        created = _dt.datetime.fromisoformat(cached["created_at"])
        age_days = (_dt.datetime.now(_dt.timezone.utc) - created).total_seconds() / 86400
    except (KeyError, ValueError, TypeError):
        return None, "cache has no creation time"
    if age_days > max_age_days:
        return None, f"cache is {age_days:.1f} days old (> {max_age_days:g})"
    return cached, f"cached calibration from {cached['created_at']} ({age_days:.1f} days old)"


def write_cache(path: str, doc: dict) -> None:
    """Store ``doc`` (a peak.json body without its ``cache`` block) as the cached calibration at ``path``."""
    write_json_atomic(path, {k: v for k, v in doc.items() if k != "cache"})


def measure_again_reason(path: str):
    """Why make should run step 5 again over the peak.json at ``path``, or None: one measured by another
    :data:`METHOD_VERSION` (its fields differ, e.g. no ``method.flush_cache_mib``) is measured again, and so is an
    accelerator calibration that came out noisy (``trust.trusted`` false: kept as evidence, never cached); a noisy
    CPU one is kept (a shared CPU is noisy every time; its numbers only validate the pipeline). A missing or unreadable file: None
    (make's own rules decide then). Read from the file's fields, never from its text."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    method = doc.get("method") if isinstance(doc.get("method"), dict) else {}
    if method.get("method_version") != METHOD_VERSION:
        return (f"measured by method version {method.get('method_version')!r}, this tool measures version "
                f"{METHOD_VERSION}")
    from mfulib.schemas.provenance import judge  # torch / Triton changed since it was measured
    changed = [i["why"] for i in judge(doc, os.path.dirname(os.path.abspath(path))) if i["file"] is None]
    if changed:
        return "; ".join(changed)
    if doc.get("accelerator") is False:
        return None
    trust = doc.get("trust")
    if isinstance(trust, dict) and trust.get("trusted") is False:
        why = trust.get("untrusted")
        return "; ".join(map(str, why)) if isinstance(why, list) and why else "untrusted"
    return None


def read_peak_json(path: str) -> dict:
    """Read and check a peak.json; raises UserError naming the file, the field and the fix.

    Checked: a JSON object from peak_calib (``tool``, ``peak_tflops``); ``peak_tflops`` {mode: TFLOP/s > 0 or
    null}; ``bandwidth_gbps`` > 0 or null; ``nominal`` {tflops: {mode: number or null}, ...} where given."""
    peak = read_work_json(path, f"run `{script_command('peak_calib.py')} -o {path}` on this device first "
                          "(or `make OP=<op> peak`)",
                          "re-run peak_calib.py")
    check_peak(peak, path)
    return peak


def check_peak(peak, path: str) -> None:
    """The checks of :func:`read_peak_json` on an already-read document (UserError naming ``path`` and field)."""
    if not isinstance(peak, dict):
        raise wrong_type(path, "the document", peak, "a JSON object written by peak_calib.py",
                         "pass the file peak_calib.py -o wrote")
    if peak.get("tool") != TOOL or "peak_tflops" not in peak:
        raise UserError(f"{path}: not a peak_calib.py result (no tool=peak_calib / peak_tflops) - "
                        "pass the file peak_calib.py -o wrote")
    schema = peak.get("schema", 0)
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise UserError(f"{path}: schema is {schema!r}, not an integer - re-run peak_calib.py")
    if schema > SCHEMA:
        raise UserError(f"{path}: schema {peak.get('schema')} is newer than this tool ({SCHEMA}) - update the tool")
    fix = "re-run peak_calib.py (or fix the file)"
    pt = peak["peak_tflops"]
    if not isinstance(pt, dict):
        raise wrong_type(path, "peak_tflops", pt, "an object {mode: TFLOP/s}", fix)
    fields = {f"peak_tflops.{k}": v for k, v in pt.items()}
    tops = peak.get("peak_tops", {})
    if not isinstance(tops, dict):
        raise wrong_type(path, "peak_tops", tops, "an object {mode: TOPS}", fix)
    fields.update({f"peak_tops.{k}": v for k, v in tops.items()})
    fields["bandwidth_gbps"] = peak.get("bandwidth_gbps")
    for field, v in fields.items():
        if v is not None and not is_positive(v):
            raise wrong_type(path, field, v, "a measured peak > 0 (or null: not measured)", fix)
    nominal = peak.get("nominal")
    if nominal is not None:
        ntf = nominal.get("tflops") if isinstance(nominal, dict) else None
        if not isinstance(nominal, dict) or not (ntf is None or isinstance(ntf, dict)):
            raise wrong_type(path, "nominal", nominal, "an object {tflops: {mode: TFLOP/s}, source}", fix)
        for k, v in (ntf or {}).items():
            if v is not None and not is_positive(v):
                raise wrong_type(path, f"nominal.tflops.{k}", v, "a nominal peak > 0 (or null)", fix)


def nominal_half_tflops(peak: dict):
    """(TFLOP/s, source) of the nominal fp16/bf16 dense peak recorded in a peak.json's ``nominal`` block (the figure
    MFU@nom divides by), or (None, None) when it records none."""
    nominal = peak.get("nominal") or {}
    tflops = nominal.get("tflops") or {}
    for d in HALF_DTYPES:
        v = finite_or_none(tflops.get(d))
        if v:
            return v, f"peak.json nominal ({nominal.get('source')})"
    return None, None
