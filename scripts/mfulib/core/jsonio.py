"""Atomic JSON writes and the provenance block every result file carries (docs/ARCHITECTURE.md#work-directory)."""
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import shlex
import sys
import tempfile

from mfulib import __version__
from mfulib.core.errors import UserError


def sha256(path) -> str:
    """The sha256 hex digest of a file's bytes (read in 1 MiB chunks): how a result file records what it was made
    from."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _default(obj):
    # numpy scalars / arrays, paths, torch dtypes: written as plain JSON values
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 0) == 0:
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


def _nan_to_none(obj):
    """Replace NaN/inf by None so the file stays strict JSON (readable by every tool)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nan_to_none(v) for v in obj]
    return obj


def current_umask() -> int:
    """The process umask (read by setting and restoring it: os has no getter)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _publish(fd: int, mode: int = 0o666) -> None:
    """Give a mkstemp file (created 0600) the mode a plain open() would: ``mode`` less the umask."""
    os.fchmod(fd, mode & ~current_umask())


def write_json_atomic(path, obj, indent=2):
    """Write ``obj`` as JSON to ``path`` through a temp file + rename, so a reader never sees half a file."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=d)
    try:
        _publish(fd)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(_nan_to_none(obj), f, indent=indent, default=_default, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(path, text):
    """Write text to ``path`` through a temp file + rename."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        _publish(fd)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_json(path):
    """Read a JSON file (BOM tolerated)."""
    with open(path, encoding="utf-8-sig") as f:
        return json.load(f)


def versions():
    """Versions of the packages that change results.

    A package the process has imported reports its ``__version__``; one it has not is read from the installed
    distribution's metadata (importlib.metadata) instead of being imported: importing torch only to name its
    version cost 2-3 s in every step that writes a result file (prepare, decompose; measured with pyinstrument).
    Only when no distribution metadata is found is the package imported."""
    import importlib.metadata as md
    import importlib.util
    out = {"python": platform.python_version()}
    # distribution names a module may be installed under (triton-ascend / pytorch-triton ship the module triton)
    dists = {"torch": ("torch",), "triton": ("triton", "triton-ascend", "pytorch-triton", "pytorch-triton-rocm"),
             "torch_npu": ("torch-npu", "torch_npu"), "numpy": ("numpy",), "pandas": ("pandas",)}
    for name, candidates in dists.items():
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = getattr(mod, "__version__", "unknown")
            continue
        try:
            if importlib.util.find_spec(name) is None:
                continue
        except (ImportError, ValueError):  # pragma: no cover - a broken install
            continue
        for dist in candidates:
            try:
                out[name] = md.version(dist)
                break
            except md.PackageNotFoundError:
                continue
        else:
            try:
                out[name] = getattr(__import__(name), "__version__", "unknown")
            except Exception:  # pragma: no cover - depends on the machine
                pass
    return out


def provenance(tool: str, schema: int, device=None) -> dict:
    """The header of every result JSON: schema version, tool and version, command line, time, host, versions.

    ``device`` is the backend's device description (dict) when the tool ran on one.
    """
    env = {k: v for k, v in os.environ.items()
           if k in ("TRITON_INTERPRET", "TRITON_F32_DEFAULT", "CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES",
                    "ASCEND_HOME_PATH", "ASCEND_DEVICE_ID")}
    return {
        "schema": schema,
        "tool": tool,
        "tool_version": __version__,
        "command_line": " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv),
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "versions": versions(),
        "env": env,
        "device": device,
    }


def ensure_writable_dir(folder: str, what: str) -> str:
    """Create ``folder`` when missing and check it is writable; UserError (naming ``what``, e.g. "--output-dir
    x") when it is below a file, is a file or cannot be written. Returns the absolute path. Shared by the CLIs that
    must refuse a bad output path before measuring."""
    folder = os.path.abspath(folder)
    existing = folder
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserError(f"{what}: {existing} is a file, not a directory - give a directory (created when missing) "
                        "that is not a file or below one")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{what}: cannot create the folder {folder} ({exc.strerror or exc}) - give a directory "
                        "that is not below a file") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"{what}: folder {folder} is not writable - give a path you may write")
    return folder
