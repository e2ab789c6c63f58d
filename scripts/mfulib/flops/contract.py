"""The flops.py contract (docs/ARCHITECTURE.md#work-directory and #flops): loading, calling, helpers for its authors.

A work directory's ``flops.py`` defines

* ``flops(case) -> float``: the operator's semantic FLOPs for one parsed case line (the dict with ``inputs``),
  2 FLOPs per multiply-accumulate of matrix work only (the MFU numerator); softmax, activations, norms and casts
  are not counted; an operator with no matrix work returns 0 (it has no MFU; MBU is its headline figure). Where the FLOPs depend on values that ``get_input_groups()`` draws at
  random (sequence lengths, top-k indices), define ``flops(case, args)``: it receives the forward arguments built
  for that case (seeded; the seed is recorded in flops_check.json). Large tensors in ``args`` may be meta tensors
  (shapes only); small ones (lengths, indices) carry their values.
* optional ``flops_parts(case[, args]) -> {part: flops}``: must sum to ``flops(case)``;
* optional ``vector_flops(case[, args]) -> float``: the vector arithmetic (elementwise, reductions, softmax, norms),
  checked against the tracer's per-op element costs (:mod:`mfulib.flops.vector_costs`) and shown as vector TFLOP/s;
* optional ``KERNEL_PARTS = {part: [fnmatch patterns]}``: the parts whose kernels the decomposition times; every
  key must be a key of ``flops_parts``; first matching part wins, unmatched kernels form "other";
* optional ``compute_dtype(case) -> str``: overrides "the dtype of the first floating tensor input".

A case the operator does not define raises ``ValueError("case rejected: <reason>")`` (the team convention, see
:func:`mfulib.core.errors.rejection_reason`), in flops.py as in the reference.

Helpers for flops.py authors (``from mfulib.flops.contract import shape, attr, ...``; scripts/ is on sys.path when
flops.py is loaded through :func:`load_flops`): :func:`shape`, :func:`attr`, :func:`dtype`, :func:`has` read a
case's tensors and attributes by name or position (built on :func:`mfulib.core.cases.case_value`);
:func:`matmul_flops` and :func:`attention_pairs` / :func:`attention_flops` are closed-form counts; :func:`op_formula`
registers a formula for an op the tracer cannot see (:mod:`mfulib.flops.user_formulas`). The tracer
(:mod:`mfulib.flops.tracer`) counts pairs its own way (per-row sums, or the reference's mask values), so a mistake in
one does not hide in the other. The checker that holds a flops.py against the tracer is :mod:`mfulib.flops.check`.
"""
from __future__ import annotations

import inspect
import math
import numbers
import os
import sys

from mfulib.core.paths import SCRIPTS_DIR
from mfulib.core import cases as _cases
from mfulib.core.definitions import canonical_dtype
from mfulib.core.errors import UserError, rejection_reason, short_repr
from mfulib.flops.kernel_parts import check_kernel_parts
from mfulib.flops.user_formulas import op_formula  # noqa: F401 - flops.py authors import it from here

REVIEW_MARK = "# REVIEW"
_REQUIRED = object()
UNLIMITED = 1 << 62


# ----------------------------------------------------------------------------------------------------------------
# Reading a case (by name or position)
# ----------------------------------------------------------------------------------------------------------------

def tensor(case: dict, key):
    """:class:`mfulib.core.cases.TensorInfo` of input ``key`` (name or 0-based position); KeyError if not a tensor."""
    v = _cases.case_value(case, key)
    if not isinstance(v, _cases.TensorInfo):
        raise KeyError(f"input {key!r} is an attribute, not a tensor")
    return v


def shape(case: dict, key) -> list:
    """Shape (list of ints) of tensor input ``key`` (name or position)."""
    return list(tensor(case, key).shape)


def dtype(case: dict, key) -> str:
    """Canonical dtype name ("float16", ...) of tensor input ``key``."""
    return tensor(case, key).dtype


def attr(case: dict, key, default=_REQUIRED):
    """Value of attribute ``key`` (name or position); ``default`` when absent (KeyError if no default)."""
    try:
        v = _cases.case_value(case, key)
    except KeyError:
        if default is _REQUIRED:
            raise
        return default
    if isinstance(v, _cases.TensorInfo):
        raise KeyError(f"input {key!r} is a tensor, not an attribute")
    return v


def has(case: dict, key) -> bool:
    """True when the case has an input named ``key`` (an optional tensor given as null counts as absent)."""
    try:
        return _cases.case_value(case, key) is not None
    except KeyError:
        return False


def numel(case: dict, key) -> int:
    return tensor(case, key).numel


# ----------------------------------------------------------------------------------------------------------------
# Closed-form counts
# ----------------------------------------------------------------------------------------------------------------

def matmul_flops(m: int, n: int, k: int, batch: int = 1) -> int:
    """2 * batch * m * n * k: [batch, m, k] @ [batch, k, n] (2 FLOPs per multiply-accumulate)."""
    return 2 * int(batch) * int(m) * int(n) * int(k)


def _sum_clipped_linear(a: int, b: int, slope: int, c: int) -> int:
    """sum over integers i in [a, b) of max(0, slope * i + c), slope in {-1, 0, 1}."""
    if b <= a:
        return 0
    if slope == 0:
        return (b - a) * max(0, c)
    if slope == 1:
        lo = max(a, -c)
        return 0 if lo >= b else (b - lo) * (lo + c + b - 1 + c) // 2
    hi = min(b, c + 1)  # slope -1: positive while i <= c
    return 0 if hi <= a else (hi - a) * (c - a + c - (hi - 1)) // 2


def attention_pairs(s_q: int, s_k: int, causal: bool = False, align: str = "top_left",
                    window_left: int | None = None, window_right: int | None = None) -> int:
    """Number of (query i, key j) pairs that take part in attention of one (batch, head).

    Query i sees key j iff ``lo(i) <= j <= hi(i)`` within [0, s_k), with ``off = 0`` for ``align="top_left"`` and
    ``off = s_k - s_q`` for ``align="bottom_right"`` (FlashAttention-2 / torch_npu sparse_mode 3: the last query
    sees every key), and

        hi(i) = i + off                      if causal, else i + off + window_right (unlimited when None/<0)
        lo(i) = i + off - window_left        (unlimited when None/<0)

    Closed form (arithmetic series over the pieces where lo/hi are clipped), so it is exact for any size. Rows
    with no visible key count 0: the result never exceeds s_q * s_k.
    """
    s_q, s_k = int(s_q), int(s_k)
    if s_q <= 0 or s_k <= 0:
        return 0
    if align not in ("top_left", "bottom_right"):
        raise ValueError(f"align must be 'top_left' or 'bottom_right', not {align!r}")
    off = 0 if align == "top_left" else s_k - s_q
    right = 0 if causal else (UNLIMITED if window_right is None or window_right < 0 else int(window_right))
    left = UNLIMITED if window_left is None or window_left < 0 else int(window_left)
    c_hi, c_lo = off + right, off - left  # hi(i) = min(s_k - 1, i + c_hi), lo(i) = max(0, i + c_lo)
    # breakpoints where a clip starts/stops acting
    cuts = sorted({0, s_q, min(max(s_k - 1 - c_hi, 0), s_q), min(max(-c_lo, 0), s_q)})
    total = 0
    for a, b in zip(cuts, cuts[1:]):
        hi_clipped = a >= s_k - 1 - c_hi       # hi = s_k - 1 on the whole piece
        lo_clipped = a < -c_lo                 # lo = 0 on the whole piece
        slope = (0 if hi_clipped else 1) - (0 if lo_clipped else 1)
        const = ((s_k - 1) if hi_clipped else c_hi) - (0 if lo_clipped else c_lo) + 1
        total += _sum_clipped_linear(a, b, slope, const)
    return total


def attention_flops(pairs: int, heads: int, d_qk: int, d_v: int | None = None, batch: int = 1) -> int:
    """QK^T plus PV over ``pairs`` (q, k) pairs per (batch, head): 2 * batch * heads * pairs * (d_qk + d_v)."""
    d_v = d_qk if d_v is None else d_v
    return 2 * int(batch) * int(heads) * int(pairs) * (int(d_qk) + int(d_v))


def _rows_clipped_sum(a: int, b: int, c: int, s_k: int) -> int:
    """sum over i in [a, b) of clip(i + c, 0, s_k) = max(0, i + c) - max(0, i + c - s_k)."""
    return _sum_clipped_linear(a, b, 1, c) - _sum_clipped_linear(a, b, 1, c - s_k)


def ffn_parts(x_shape, w1_shape, w2_shape, gated: bool, weights_as_linear: bool = False) -> dict:
    """{"up": FLOPs, "down": FLOPs} of y = act(x @ W1) @ W2, 2 FLOPs per MAC, activation not counted.

    x [..., k] (every leading dim is a GEMM row: m = prod); W1 [k, n1], W2 [h, n2] (``weights_as_linear``: the
    nn.Linear form [n1, k], [n2, h]); a gated (GLU) activation splits x @ W1 into halves, so h = n1 / 2, else
    h = n1. Raises ValueError("case rejected: ...") when the shapes do not chain.
    """
    x, w1, w2 = list(x_shape), list(w1_shape), list(w2_shape)
    if len(w1) != 2 or len(w2) != 2:
        raise ValueError(f"case rejected: weights must be 2-D, got {w1} and {w2}")
    m, k = math.prod(x[:-1]), x[-1]
    (n1, k1), (n2, k2) = (w1, w2) if weights_as_linear else ((w1[1], w1[0]), (w2[1], w2[0]))
    hidden = n1 // 2 if gated else n1
    if k1 != k or k2 != hidden or (gated and n1 % 2):
        raise ValueError(f"case rejected: x {x}, W1 {w1}, W2 {w2} do not chain ({'gated: ' if gated else ''}the "
                         f"second GEMM needs {hidden} input features, W2 gives {k2})")
    return {"up": matmul_flops(m, n1, k), "down": matmul_flops(m, n2, hidden)}


ATTENTION_LAYOUTS = ("BNSD", "BSND", "BSH", "SBH", "TND")


def attention_dims(case: dict, query="query", key="key", value="value", layout: str = "BNSD",
                   head_num: int | None = None) -> dict:
    """Attention sizes of a case from its q/k/v shapes in ``layout`` (the torch_npu names):

        BNSD [B, N, S, D]   BSND [B, S, N, D]   BSH [B, S, N*D]   SBH [S, B, N*D]   TND [T, N, D] (varlen tokens)

    Returns {"b", "hq", "hkv", "s_q", "s_k", "d", "d_v"} (b is None for TND). BSH/SBH need ``head_num`` (query
    heads; key heads follow from the key's hidden size / d). Raises ValueError("case rejected: ...") when the
    shapes do not pair (query heads not a multiple of key heads, head dims differ).
    """
    q, k, v = shape(case, query), shape(case, key), shape(case, value)
    lay = str(layout).upper().split("_")[0]
    if lay not in ATTENTION_LAYOUTS:
        raise ValueError(f"case rejected: layout {layout!r} is not one of {', '.join(ATTENTION_LAYOUTS)}")
    rank = 3 if lay in ("BSH", "SBH", "TND") else 4
    if not len(q) == len(k) == len(v) == rank:
        raise ValueError(f"case rejected: layout {lay} needs {rank}-D q/k/v, got {q}, {k}, {v}")
    if lay in ("BSH", "SBH"):
        if not head_num or q[2] % int(head_num):
            raise ValueError(f"case rejected: hidden {q[2]} is not divisible by head_num {head_num}")
        hq = int(head_num)
        d = q[2] // hq
        if k[2] % d or v[2] % d:
            raise ValueError(f"case rejected: key/value hidden {k[2]}/{v[2]} is not a multiple of head dim {d}")
        hkv = k[2] // d
        d_v = v[2] // hkv
        (b, s_q), s_k = ((q[0], q[1]), k[1]) if lay == "BSH" else ((q[1], q[0]), k[0])
    elif lay == "BSND":
        b, s_q, hq, d, s_k, hkv, d_v = q[0], q[1], q[2], q[3], k[1], k[2], v[3]
    elif lay == "BNSD":
        b, hq, s_q, d, hkv, s_k, d_v = q[0], q[1], q[2], q[3], k[1], k[2], v[3]
    else:
        b, s_q, hq, d, s_k, hkv, d_v = None, q[0], q[1], q[2], k[0], k[1], v[2]
    if hkv <= 0 or hq % hkv or k[-1] != q[-1] and lay not in ("BSH", "SBH"):
        raise ValueError(f"case rejected: query heads {hq} / key heads {hkv} / head dims {q[-1]}, {k[-1]} do not pair")
    return {"b": b, "hq": hq, "hkv": hkv, "s_q": s_q, "s_k": s_k, "d": d, "d_v": d_v}


NPU_SPARSE_MODES = {0: "defaultMask", 1: "allMask", 2: "leftUpCausal", 3: "rightDownCausal", 4: "band",
                    5: "prefix (non-compressed)", 6: "prefix (compressed)", 7: "varlen rightDownCausal",
                    8: "varlen leftUpCausal"}


def npu_sparse_pairs(sparse_mode: int, s_q: int, s_k: int, pre_tokens: int = 2147483647,
                     next_tokens: int = 2147483647, atten_mask: bool = False, prefix: int | None = None) -> int:
    """Pairs of one (batch, head) for torch_npu's ``sparse_mode`` (npu_fusion_attention / FlashAttentionScore):

    0 defaultMask: no atten_mask -> every pair (pre/next tokens are ignored without a mask); with a mask the
      band [i - pre_tokens, i + next_tokens] from the top-left corner;  2 leftUpCausal: j <= i;
    3 rightDownCausal: j <= i + s_k - s_q;  4 band: [i + off - pre_tokens, i + off + next_tokens], off = s_k - s_q;
    5/6 prefix: bottom-right causal plus the first ``prefix`` keys for every query;  7/8: per sequence as 3/2.
    1 allMask takes the pairs from the mask's values, which shapes do not give: ValueError("case rejected: ...").
    """
    mode = int(sparse_mode)
    if mode == 0:
        if not atten_mask:
            return int(s_q) * int(s_k)
        return attention_pairs(s_q, s_k, window_left=pre_tokens, window_right=next_tokens)
    if mode in (2, 8):
        return attention_pairs(s_q, s_k, causal=True)
    if mode in (3, 7):
        return attention_pairs(s_q, s_k, causal=True, align="bottom_right")
    if mode == 4:
        return attention_pairs(s_q, s_k, align="bottom_right", window_left=pre_tokens, window_right=next_tokens)
    if mode in (5, 6):
        if prefix is None:
            raise ValueError(f"case rejected: sparse_mode {mode} ({NPU_SPARSE_MODES[mode]}) needs prefix")
        off, p = int(s_k) - int(s_q), int(prefix)
        r = min(max(p - 1 - off, 0), int(s_q))  # rows whose causal span is shorter than the prefix
        return r * min(p, int(s_k)) + _rows_clipped_sum(r, int(s_q), off + 1, int(s_k))
    raise ValueError(f"case rejected: sparse_mode {mode} ({NPU_SPARSE_MODES.get(mode, 'unknown')}) takes its "
                     "pairs from atten_mask values: count them in flops(case, args)")


# ----------------------------------------------------------------------------------------------------------------
# Loading and calling flops.py
# ----------------------------------------------------------------------------------------------------------------

class FlopsFile:
    """A loaded flops.py. Raises UserError (naming the file and the fix) when it breaks the contract."""

    def __init__(self, path):
        from mfulib.core.opdir import import_file
        self.path = os.path.abspath(os.fspath(path))
        if not os.path.exists(self.path):
            raise UserError(f"{self.path}: no flops.py - write one (draft: flops_generator.py --model model.py "
                            "--cases <cases> -o flops.py) or copy a checked one")
        scripts_dir = SCRIPTS_DIR
        if scripts_dir not in sys.path:
            sys.path.insert(0, scripts_dir)
        try:
            self.module = import_file(self.path, "flops")
        except (Exception, SystemExit) as exc:  # sys.exit() at import time is a broken file, not our exit
            raise UserError(f"{self.path}: does not import ({type(exc).__name__}: {exc}) - fix the file") from None
        fn = getattr(self.module, "flops", None)
        if not callable(fn):
            raise UserError(f"{self.path}: defines no flops(case) function - add `def flops(case): ...`")
        self.takes_args = _n_positional(fn) >= 2
        parts_fn = getattr(self.module, "flops_parts", None)
        self.has_parts = callable(parts_fn)
        self.kernel_parts = self._kernel_parts()
        with open(self.path, encoding="utf-8") as f:
            self.source = f.read()

    def _kernel_parts(self):
        kp = getattr(self.module, "KERNEL_PARTS", None)
        if kp is None:
            return None
        return check_kernel_parts(kp, self.path)

    def review_lines(self) -> list:
        """[(line number, text)] of the lines with a ``# REVIEW`` comment (what a generator draft guessed)."""
        return [(i, ln.strip()) for i, ln in enumerate(self.source.splitlines(), 1) if REVIEW_MARK in ln]

    def _call(self, name: str, fn, *args):
        """Call flops.py's ``name``; a SystemExit from it (sys.exit() in user code) becomes a
        :class:`FlopsContractError` for that case instead of ending the process."""
        try:
            return fn(*args)
        except SystemExit as exc:
            raise FlopsContractError(f"{self.path}: {name}() called sys.exit({exc.code!r}) - return a value, or "
                                     "raise ValueError(\"case rejected: <reason>\") for a case it does not "
                                     "define") from None

    def _number(self, v, what: str, case_id) -> float:
        """``v`` as a float when it is a real number (int, float, numpy/torch 0-d number; not bool); else
        :class:`FlopsContractError` naming the file, the case and the fix. No str -> float conversion."""
        x = v
        if not isinstance(x, numbers.Real) and getattr(x, "ndim", None) == 0 and callable(getattr(x, "item", None)):
            x = x.item()  # numpy / torch 0-d scalar
        if isinstance(x, bool) or not isinstance(x, numbers.Real):
            where = f" for case {case_id}" if case_id is not None else ""
            raise FlopsContractError(f"{self.path}: {what} returned {type(v).__name__} {short_repr(v, 60)}{where}: return a "
                                     "float (FLOPs as a number, not a string/bool/None)")
        return float(x)

    def flops(self, case: dict, args=None, case_id=None) -> float:
        """FLOPs of ``case`` (exceptions from flops.py propagate: callers classify rejections). A non-number
        result or a sys.exit() raises :class:`FlopsContractError`."""
        fn = self.module.flops
        v = self._call("flops", fn, case, args) if self.takes_args else self._call("flops", fn, case)
        return self._number(v, "flops()", case_id)

    def parts(self, case: dict, args=None, case_id=None):
        """{part: FLOPs} or None when flops.py defines no flops_parts (values checked as in :meth:`flops`)."""
        if not self.has_parts:
            return None
        fn = self.module.flops_parts
        v = self._call("flops_parts", fn, case, args) if _n_positional(fn) >= 2 else self._call("flops_parts", fn,
                                                                                                 case)
        if not isinstance(v, dict):
            raise FlopsContractError(f"{self.path}: flops_parts() returned {type(v).__name__}"
                                     + (f" for case {case_id}" if case_id is not None else "")
                                     + ", not a dict {part: flops}")
        return {str(k): self._number(x, f"flops_parts()[{k!r}]", case_id) for k, x in v.items()}

    @property
    def has_vector(self) -> bool:
        """True when flops.py defines ``vector_flops``."""
        return callable(getattr(self.module, "vector_flops", None))

    def vector_flops(self, case: dict, args=None, case_id=None):
        """flops.py's vector_flops(case[, args]) as a float, or None when it defines none (checked as
        :meth:`flops`)."""
        fn = getattr(self.module, "vector_flops", None)
        if not callable(fn):
            return None
        v = self._call("vector_flops", fn, case, args) if _n_positional(fn) >= 2 else \
            self._call("vector_flops", fn, case)
        return self._number(v, "vector_flops()", case_id)

    def compute_dtype(self, case: dict, case_id: int = 0) -> str | None:
        """flops.py's compute_dtype(case) if defined, else the first floating tensor input's dtype.

        Raises :class:`FlopsContractError` when flops.py's answer is not a known dtype name (e.g. "fp8")."""
        fn = getattr(self.module, "compute_dtype", None)
        if callable(fn):
            v = self._call("compute_dtype", fn, case)
            if isinstance(v, str) or type(v).__name__ == "dtype":  # a name, or a torch.dtype ("torch.float16")
                try:
                    return canonical_dtype(str(v))
                except UserError as exc:
                    why = str(exc)
            else:
                why = f"not a dtype name ({type(v).__name__})"
            raise FlopsContractError(f"{self.path}: compute_dtype() returned {short_repr(v, 60)} for case {case_id}: {why} "
                                     "- return one of those names")
        return _cases.describe_case(case, case_id).compute_dtype

    def check_kernel_parts_keys(self, part_names) -> list:
        """Problems with KERNEL_PARTS against the parts flops_parts returns (empty list when fine)."""
        if not self.kernel_parts:
            return []
        if part_names is None:
            return [f"KERNEL_PARTS is defined but flops_parts is not: define flops_parts(case) with the keys "
                    f"{sorted(self.kernel_parts)}"]
        extra = sorted(set(self.kernel_parts) - set(part_names))
        problems = []
        if extra:
            problems.append(f"KERNEL_PARTS parts {extra} are not keys of flops_parts {sorted(part_names)}: rename "
                            "them so each timed part has its FLOPs")
        empty = sorted(k for k, v in self.kernel_parts.items() if not v)
        if empty:
            problems.append(f"KERNEL_PARTS parts {empty} have no patterns: their kernels would land in 'other'")
        return problems


class FlopsContractError(UserError):
    """flops.py broke the contract for one case (non-number FLOPs, unknown dtype, sys.exit()): recorded as that
    case's error by the checkers, never a process exit."""


def _n_positional(fn) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 1
    return sum(1 for p in sig.parameters.values()
               if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty)


def load_flops(path) -> FlopsFile:
    """Load a flops.py (raises UserError when missing, broken or without ``flops``)."""
    return FlopsFile(path)


def evaluate_case(ff: FlopsFile, case: dict, args=None, case_id=None) -> dict:
    """Call flops.py on one case: {"flops", "flops_parts", "vector_flops", "status": ok|rejected|error, "reason"}
    (vector_flops None when flops.py defines none; never raises:
    an exception, a sys.exit() or a non-number result from flops.py is that case's error)."""
    row = {"flops": None, "flops_parts": None, "vector_flops": None, "status": "ok", "reason": None}
    try:
        row["flops"] = ff.flops(case, args, case_id)
        row["flops_parts"] = ff.parts(case, args, case_id)
        row["vector_flops"] = ff.vector_flops(case, args, case_id)
    except FlopsContractError as exc:
        row.update(flops=None, flops_parts=None, vector_flops=None, status="error", reason=str(exc))
    except (Exception, SystemExit) as exc:
        reason = rejection_reason(exc)
        row.update(flops=None, flops_parts=None, vector_flops=None)
        if reason is not None:
            row.update(status="rejected", reason=reason)
        else:
            row.update(status="error", reason=f"{type(exc).__name__}: {exc}")
    return row
