"""Case files: JSON Lines, one case per line, ``{"inputs": [...]}`` (NPUKernelBench convention).

Each entry of ``inputs`` is a tensor ``{"name", "type": "tensor", "dtype", "shape", "required"[, "data"|"range"]}``,
a ``tensor_list`` (``"shapes"``), or an attribute ``{"name", "type": "attr", "dtype", "value"}``
(docs/sources.md#benchmark-formats). Case ids are 0-based indices of the non-empty lines; the work
directory's case file has no blank lines, so ids equal line numbers there (docs/ARCHITECTURE.md#case-ids).

Everything here works on the parsed JSON only: :func:`describe_case` sizes a case (shapes, dtypes, bytes) before
any tensor is allocated, so later steps can gate cases by memory first.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from mfulib.core.definitions import DTYPE_ITEMSIZE, FLOAT_DTYPES, canonical_dtype
from mfulib.core.errors import UserError


def parse_dtype(name: str):
    """torch dtype for a case-file spelling (``fp16``, ``float16``, ``bf16``, ...)."""
    import torch
    return getattr(torch, canonical_dtype(name))


@dataclass
class TensorInfo:
    """One tensor input of a case, described without allocating it.

    ``shape`` is a list of ints; ``nbytes`` = prod(shape) * itemsize (sum over shapes for a tensor_list).
    """
    name: str
    shape: list
    dtype: str
    nbytes: int
    required: bool = True
    index: int = 0
    shapes: list | None = None  # tensor_list only

    @property
    def numel(self) -> int:
        return int(math.prod(self.shape)) if self.shapes is None else sum(int(math.prod(s)) for s in self.shapes)


@dataclass
class CaseInfo:
    """A case described from its JSON: tensors (in input order), attributes by name, total input bytes."""
    case_id: int
    tensors: list = field(default_factory=list)
    attrs: dict = field(default_factory=dict)
    order: list = field(default_factory=list)  # names in input order, tensors and attrs together

    @property
    def input_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def compute_dtype(self) -> str | None:
        """dtype of the first floating-point tensor input (docs/ARCHITECTURE.md#compute-dtype), or None."""
        for t in self.tensors:
            if t.dtype in FLOAT_DTYPES:
                return t.dtype
        return None

    @property
    def shape_str(self) -> str:
        """Shapes as the upstream performance.json writes them: ``"[2, 64];[64, 8]"``."""
        return ";".join(str(list(t.shape)) for t in self.tensors)

    @property
    def dtype_str(self) -> str:
        return ";".join(t.dtype for t in self.tensors)

    def tensor(self, key) -> TensorInfo:
        """The tensor named ``key`` (str) or at input position ``key`` (int)."""
        v = case_value_info(self, key)
        if not isinstance(v, TensorInfo):
            raise KeyError(f"case {self.case_id}: input {key!r} is not a tensor")
        return v

    def to_dict(self) -> dict:
        return {"case": self.case_id, "input_bytes": self.input_bytes, "compute_dtype": self.compute_dtype,
                "tensors": [{"name": t.name, "shape": t.shape, "dtype": t.dtype, "bytes": t.nbytes,
                             "required": t.required} for t in self.tensors],
                "attrs": self.attrs}


def _where(path, line_no):
    return f"{path}:{line_no}" if path else f"line {line_no}"


def _is_shape(shape) -> bool:
    return isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)


def validate_case(case: Any, path=None, line_no=None) -> None:
    """Check one parsed case line; raises UserError naming file and line and the fix."""
    where = _where(path, line_no)
    if not isinstance(case, dict) or not isinstance(case.get("inputs"), list):
        raise UserError(f"{where}: a case line must be a JSON object with an \"inputs\" list "
                        f"(got {type(case).__name__}{'' if not isinstance(case, dict) else ' with keys ' + str(sorted(case))})"
                        " - fix the line or remove it")
    for i, ent in enumerate(case["inputs"]):
        if not isinstance(ent, dict):
            raise UserError(f"{where}: inputs[{i}] is not an object - each input needs name/type/dtype")
        kind = ent.get("type", "tensor")
        if kind == "tensor":
            shape = ent.get("shape")
            if ent.get("required", True) is False and shape is None:
                continue
            if "shape" not in ent:
                raise UserError(f"{where}: inputs[{i}] ({ent.get('name')!r}) has no \"shape\" key (its keys: "
                                f"{', '.join(sorted(map(str, ent)))}); a tensor needs \"shape\": a list of "
                                "non-negative ints")
            if not _is_shape(shape):
                raise UserError(f"{where}: inputs[{i}] ({ent.get('name')!r}) has shape {shape!r}; "
                                "a tensor needs \"shape\": a list of non-negative ints")
            canonical_dtype_where(ent.get("dtype", "float32"), where, i)
        elif kind == "tensor_list":
            shapes = ent.get("shapes")
            if not isinstance(shapes, list) or not all(_is_shape(s) for s in shapes):
                raise UserError(f"{where}: inputs[{i}] ({ent.get('name')!r}) is a tensor_list without "
                                "\"shapes\": a list of shapes")
            canonical_dtype_where(ent.get("dtype", "float32"), where, i)
        elif kind == "attr":
            if "value" not in ent and ent.get("required", True):
                raise UserError(f"{where}: inputs[{i}] ({ent.get('name')!r}) is a required attr with no \"value\"")
        else:
            raise UserError(f"{where}: inputs[{i}] has type {kind!r}; expected tensor, tensor_list or attr")


def canonical_dtype_where(name, where, i):
    try:
        return canonical_dtype(name)
    except UserError as exc:
        raise UserError(f"{where}: inputs[{i}]: {exc}") from None


def _lines(text: str):
    """Split JSON Lines text on newlines only (str.splitlines would also split inside strings at U+2028 etc.);
    every leading BOM is dropped."""
    return text.lstrip("\ufeff").replace("\r\n", "\n").split("\n")


def case_line_texts(path) -> list:
    """The non-empty lines of a case file, as text (prepare copies them verbatim)."""
    with open(path, encoding="utf-8-sig") as f:
        return [ln.rstrip("\r") for ln in _lines(f.read()) if ln.strip()]


def parse_case_lines(text: str, path=None) -> list:
    """Parse JSON Lines text into a list of case dicts; blank lines are skipped, everything else validated."""
    cases = []
    for line_no, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        try:
            case = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{_where(path, line_no)} (case {len(cases)}): not valid JSON ({exc.msg}: column "
                            f"{exc.colno}) - each line must be one JSON object {{\"inputs\": [...]}}") from None
        validate_case(case, path, line_no)
        cases.append(case)
    return cases


def read_case_file(path) -> list:
    """Read a JSON Lines case file (UTF-8, BOM tolerated). Raises UserError on a missing/empty/malformed file."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
    except FileNotFoundError:
        raise UserError(f"{path}: case file not found") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the case file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text ({exc}) - is this really a case file?") from None
    cases = parse_case_lines(text, path)
    if not cases:
        raise UserError(f"{path}: no case lines - a case file has one JSON object with \"inputs\" per line")
    return cases


def case_file_verdict(path):
    """Content test used by discovery: (is_case_file, why_not).

    A file is a case file when its first non-empty line is a JSON object with an ``inputs`` list; the remaining
    lines are validated when the file is used, so a typo on line 40 is reported as such (file:line), not as
    "no case file found".
    """
    try:
        with open(path, encoding="utf-8-sig") as f:
            for line_no, line in enumerate(f, start=1):
                line = line.lstrip("\ufeff")
                if line.strip():
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as exc:
                        return False, f"line {line_no} is not JSON ({exc.msg})"
                    if isinstance(obj, dict) and isinstance(obj.get("inputs"), list):
                        return True, None
                    return False, f"line {line_no} is not an object with an \"inputs\" list"
        return False, "empty file"
    except (OSError, UnicodeDecodeError) as exc:
        return False, f"unreadable ({exc})"


def looks_like_case_file(path) -> bool:
    return case_file_verdict(path)[0]


def describe_case(case: dict, case_id: int = 0) -> CaseInfo:
    """Describe a case without building it: tensors (name, shape, dtype, bytes) and attributes."""
    info = CaseInfo(case_id=case_id)
    for i, ent in enumerate(case["inputs"]):
        name = ent.get("name", f"input{i}")
        kind = ent.get("type", "tensor")
        info.order.append(name)
        if kind == "attr":
            info.attrs[name] = ent.get("value")
            continue
        dtype = canonical_dtype(ent.get("dtype", "float32"))
        if kind == "tensor_list":
            shapes = [list(s) for s in ent["shapes"]]
            nbytes = sum(int(math.prod(s)) for s in shapes) * DTYPE_ITEMSIZE[dtype]
            info.tensors.append(TensorInfo(name, shapes[0] if shapes else [], dtype, nbytes,
                                           ent.get("required", True), i, shapes))
            continue
        shape = ent.get("shape")
        if shape is None:  # optional tensor absent
            info.attrs[name] = None
            continue
        nbytes = int(math.prod(shape)) * DTYPE_ITEMSIZE[dtype]
        info.tensors.append(TensorInfo(name, list(shape), dtype, nbytes, ent.get("required", True), i))
    return info


def case_value_info(info: CaseInfo, key):
    """Look an input up by name (str) or input position (int): TensorInfo for tensors, the value for attrs."""
    if isinstance(key, int):
        if not 0 <= key < len(info.order):
            raise KeyError(f"case {info.case_id}: no input at position {key} (it has {len(info.order)})")
        key = info.order[key]
    for t in info.tensors:
        if t.name == key:
            return t
    if key in info.attrs:
        return info.attrs[key]
    raise KeyError(f"case {info.case_id}: no input named {key!r}; inputs are {info.order}")


def case_value(case: dict, key, case_id: int = 0):
    """Input ``key`` (name or position) of a parsed case line: TensorInfo for a tensor, the value for an attr."""
    return case_value_info(describe_case(case, case_id), key)


def dump_case_lines(cases: list) -> str:
    """Serialise cases back to JSON Lines (one compact object per line, no blank lines)."""
    return "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases)
