"""Attention masks known from how they were built, at any size, without materialising their s^2 values.

The tracer (:mod:`mfulib.flops.dispatch`) keeps real values ("shadows") only for small tensors; a causal mask of
an 8192-token layer has 67M entries and would otherwise be unknown, counted dense (2.199e12 instead of 1.649e12
FLOPs for a FlashAttention-V2 layer [1, 8192, 4096], 32 heads). A :class:`BandMask` describes such a tensor by its
construction: over its last two dims (rows r, columns c) every entry is ``inside`` where
``lo <= (c + c0) - (r + r0) <= hi`` and ``outside`` elsewhere, the same for every leading index (broadcast).
That covers what references write:

* ``torch.ones/zeros/full(s, s)`` (a constant: the band is empty), ``fill_``;
* ``torch.triu(x, k)`` / ``torch.tril(x, k)`` of a constant or of a band with ``outside`` 0 (window bands);
* comparisons of index vectors ``arange(a, b)[:, None] <op> arange(c, d)[None, :]`` (any of > >= < <= == !=) and
  of a mask with a scalar (``keep == 0``);
* ``~`` / ``logical_not``, casts (``.bool()``, ``.float()``, ``.to``), scalar arithmetic (``mask * -1e9``,
  ``1 - mask``), ``masked_fill`` / ``where`` of a constant with a band mask (additive ``-inf`` biases);
* views that keep the last two dims, ``unsqueeze``, ``expand``, slices of any dim (rows/columns shift the origin).

Counting uses :func:`mfulib.flops.formulas.band_pairs` (a per-row sum, O(rows)). Anything else built from a big
tensor stays unknown, and the tracer says "needs values" rather than counting dense. The class answers the few
tensor methods the mask consumers call (``dtype``, ``shape``, ``is_floating_point``, ``bool``, ``~``, comparisons
with scalars, ``all``, ``count_nonzero``), so formulas receive it through ``values(tensor)`` like a shadow.

The tracer describes masks from :data:`mfulib.flops.dispatch.DESCRIBE_MIN_NUMEL` (2^16) entries on, below the
size up to which it keeps values: a reference that masks per chunk of query rows builds thousands of mid-size
masks, and describing them costs O(rows) where computing, inverting and counting their values cost O(rows x
cols) each. When an op outside the constructions above needs such a mask's values, :meth:`BandMask.materialize`
builds them (once; ``TraceState.real_value_of``), so nothing counts differently from the value path.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, replace

from mfulib.flops.formulas import BIG_TOKENS, band_pairs

_CMP = {"gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le, "eq": operator.eq,
        "ne": operator.ne}
_FLIP = {"gt": "lt", "ge": "le", "lt": "gt", "le": "ge", "eq": "eq", "ne": "ne"}
_CASTS = {"_to_copy", "to", "clone", "contiguous", "alias", "detach", "lift_fresh", "lift_fresh_copy", "type_as"}
_VIEWS = {"view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "unsqueeze", "squeeze", "flatten",
          "expand_as", "view_as"}


@dataclass(frozen=True, eq=False)
class BandMask:
    """A tensor of ``shape``/``dtype`` whose entries are ``inside`` on the band ``lo <= (c + c0) - (r + r0) <= hi``
    of its last two dims and ``outside`` elsewhere (see the module docstring). ``lo``/``hi`` may be
    +-:data:`BIG_TOKENS` (unbounded)."""
    shape: tuple
    dtype: object
    lo: int
    hi: int
    inside: object
    outside: object
    r0: int = 0
    c0: int = 0

    # -- the tensor-like surface the mask consumers use --------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return int(math.prod(self.shape))

    def is_floating_point(self) -> bool:
        return bool(self.dtype.is_floating_point)

    def _map(self, fn, dtype=None):
        return replace(self, inside=fn(self.inside), outside=fn(self.outside), dtype=dtype or self.dtype)

    def cast(self, dtype):
        """The mask converted to ``dtype`` (bool / float / int values as torch converts them)."""
        conv = bool if str(dtype) == "torch.bool" else float if dtype.is_floating_point else int
        return self._map(conv, dtype)

    def bool(self):
        import torch
        return self.cast(torch.bool)

    def __invert__(self):
        import torch
        return self._map(lambda v: not v, torch.bool)

    def compare(self, op: str, scalar):
        import torch
        fn = _CMP[op]
        return self._map(lambda v: bool(fn(v, scalar)), torch.bool)

    def __gt__(self, x):
        return self.compare("gt", x)

    def __ge__(self, x):
        return self.compare("ge", x)

    def __lt__(self, x):
        return self.compare("lt", x)

    def __le__(self, x):
        return self.compare("le", x)

    def __eq__(self, x):  # noqa: D105 - elementwise, as a tensor's
        return self.compare("eq", x)

    def __ne__(self, x):
        return self.compare("ne", x)

    __hash__ = object.__hash__

    def _matrix(self) -> tuple:
        """(rows, cols) of the band's matrix: the last two dims (a 1-D mask is one row, a 0-D one entry)."""
        return (self.shape[-2], self.shape[-1]) if self.ndim >= 2 else (1, self.shape[-1] if self.shape else 1)

    def materialize(self):
        """The CPU tensor of ``shape``/``dtype`` this mask describes (every leading index the same matrix)."""
        import torch
        rows, cols = self._matrix()
        d = (torch.arange(cols, dtype=torch.int64)[None, :] + self.c0) - \
            (torch.arange(rows, dtype=torch.int64)[:, None] + self.r0)
        on = (d >= max(self.lo, -BIG_TOKENS)) & (d <= min(self.hi, BIG_TOKENS))
        mat = torch.where(on, torch.tensor(self.inside, dtype=self.dtype), torch.tensor(self.outside, dtype=self.dtype))
        return mat.reshape(tuple(self.shape[-2:]) if self.ndim >= 2 else tuple(self.shape)) \
            .expand(tuple(self.shape)).contiguous()

    def band_entries(self) -> int:
        """Entries of one [rows, cols] matrix on the band."""
        rows, cols = self._matrix()
        off = self.c0 - self.r0
        lo = self.lo - off if self.lo > -BIG_TOKENS else -BIG_TOKENS
        hi = self.hi - off if self.hi < BIG_TOKENS else BIG_TOKENS
        return band_pairs(int(rows), int(cols), lo, hi) if lo <= hi else 0

    def count_nonzero(self) -> int:
        """Non-zero entries of the whole tensor, exactly, in O(rows)."""
        rows, cols = self._matrix()
        lead = math.prod(self.shape[:-2]) if self.ndim >= 2 else 1
        band = self.band_entries()
        per = (band if self.inside else 0) + ((rows * cols - band) if self.outside else 0)
        return int(per * lead)

    def all(self) -> bool:
        band = self.band_entries()
        total = self.numel() // max(1, math.prod(self.shape[:-2]) if self.ndim >= 2 else 1)
        return bool((self.inside or band == 0) and (self.outside or band == total))

    def any(self) -> bool:
        return self.count_nonzero() > 0

    def logical_and(self, other):
        """Intersection with another bool band mask (True on the band, False off it), as a band mask; None when
        either is not of that form."""
        if not isinstance(other, BandMask) or not all(m.inside is True and m.outside is False for m in (self, other)):
            return None
        shift = (self.c0 - self.r0) - (other.c0 - other.r0)  # other's d + shift = self's d
        lo2 = other.lo + shift if other.lo > -BIG_TOKENS else -BIG_TOKENS
        hi2 = other.hi + shift if other.hi < BIG_TOKENS else BIG_TOKENS
        return replace(self, lo=max(self.lo, lo2), hi=min(self.hi, hi2), shape=_broadcast(self.shape, other.shape))


def _broadcast(a, b):
    import torch
    return tuple(torch.broadcast_shapes(tuple(a), tuple(b)))


def constant(shape, dtype, value) -> BandMask:
    """A constant tensor as a band mask (empty band)."""
    m = BandMask(tuple(int(d) for d in shape), dtype, 0, -1, value, value)
    return m.cast(dtype)


def index_vector(vals):
    """(axis, start) when CPU tensor ``vals`` is ``start + arange(n)`` laid along its last (-1) or second-to-last
    (-2) dim with every other dim 1; else None."""
    import torch
    if not isinstance(vals, torch.Tensor) or vals.dtype == torch.bool or vals.ndim == 0:
        return None
    shape = list(vals.shape)
    long_axes = [i for i, d in enumerate(shape) if d != 1]
    if len(long_axes) > 1:
        return None
    axis = long_axes[0] - len(shape) if long_axes else -1
    if axis not in (-1, -2):
        return None
    flat = vals.reshape(-1)
    start = flat[0].item()
    if int(start) != start:
        return None
    n = flat.numel()
    if n > 1 and not bool(torch.equal(flat, torch.arange(n, dtype=flat.dtype) + flat[0])):
        return None
    return axis, int(start)


def _scalar(x, values):
    """A Python number from ``x`` (number, or a tensor with one known value), else None."""
    import torch
    if isinstance(x, bool):
        return x
    if isinstance(x, (int, float)):
        return x
    if isinstance(x, torch.Tensor) and x.numel() == 1:
        v = values(x)
        if isinstance(v, torch.Tensor):
            return v.reshape(-1)[0].item()
    return None


def _band_from_compare(op, a, b, out_shape):
    """``a <op> b`` for index vectors a, b (values) laid along different axes, as a bool band mask."""
    import torch
    ia, ib = index_vector(a), index_vector(b)
    if ia is None or ib is None or ia[0] == ib[0]:
        return None
    if ia[0] == -2:  # a = row index, b = column index: a op b  <=>  b flip(op) a
        op, (ia, ib) = _FLIP[op], (ib, ia)
    (_, c0), (_, r0) = ia, ib  # now "col <op> row" with col = c + c0, row = r + r0; d = col - row
    lo, hi = {"gt": (1, BIG_TOKENS), "ge": (0, BIG_TOKENS), "lt": (-BIG_TOKENS, -1), "le": (-BIG_TOKENS, 0),
              "eq": (0, 0), "ne": (0, 0)}[op]
    inside, outside = (False, True) if op == "ne" else (True, False)
    return BandMask(tuple(int(d) for d in out_shape), torch.bool, lo, hi, inside, outside, r0=r0, c0=c0)


def propagate(func, args, kwargs, out, desc_of, values):
    """The :class:`BandMask` of ``out`` = ``func(*args, **kwargs)`` when it follows from the inputs' descriptions
    (``desc_of(tensor)`` -> BandMask or None) and known small values (``values(tensor)``), else None."""
    import torch
    if not isinstance(out, torch.Tensor) or out.ndim < 2:
        return None
    name = func._overloadpacket.__name__
    base = name[:-1] if name.endswith("_") and name not in ("fill_",) else name
    shape, dtype = tuple(int(d) for d in out.shape), out.dtype
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    first = desc_of(args[0]) if args and isinstance(args[0], torch.Tensor) else None
    if base in ("ones", "ones_like", "new_ones"):
        return constant(shape, dtype, 1)
    if base in ("zeros", "zeros_like", "new_zeros"):
        return constant(shape, dtype, 0)
    if base in ("full", "full_like", "new_full", "fill", "fill_"):
        v = _scalar(args[1] if len(args) > 1 else kwargs.get("fill_value", kwargs.get("value")), values)
        return None if v is None else constant(shape, dtype, v)
    if base in ("triu", "tril"):
        if first is None or not (first.inside == first.outside or not first.outside):
            return None
        k = int(args[1] if len(args) > 1 else kwargs.get("diagonal", 0))
        src = first if first.inside != first.outside else replace(first, lo=-BIG_TOKENS, hi=BIG_TOKENS)
        at = k + (first.c0 - first.r0)  # local col - row >= k  <=>  d >= k + (c0 - r0)
        lo, hi = (max(src.lo, at), src.hi) if base == "triu" else (src.lo, min(src.hi, at))
        return replace(src, shape=shape, lo=lo, hi=hi, outside=0).cast(dtype)
    if base in ("logical_not", "bitwise_not"):
        return ~first if first is not None else None
    if base in _CASTS:
        ok = first is not None and len(first.shape) >= 2 and first.shape[-2:] == shape[-2:]
        return replace(first.cast(dtype), shape=shape) if ok else None
    if base in _VIEWS:
        if first is not None and len(first.shape) >= 2 and first.shape[-2:] == shape[-2:]:
            return replace(first, shape=shape)
        return None
    if base in ("slice", "narrow"):
        if first is None:
            return None
        dim = int(args[1] if len(args) > 1 else kwargs.get("dim", 0)) % len(first.shape)
        start = args[2] if len(args) > 2 else kwargs.get("start", 0)
        step = args[4] if len(args) > 4 else kwargs.get("step", 1)
        if step != 1:
            return None
        start = 0 if start is None else int(start)
        if start < 0:
            start += first.shape[dim]
        start = max(0, min(start, first.shape[dim]))
        nd = len(first.shape)
        if dim == nd - 2:
            return replace(first, shape=shape, r0=first.r0 + start)
        if dim == nd - 1:
            return replace(first, shape=shape, c0=first.c0 + start)
        return replace(first, shape=shape)
    if base == "select":
        if first is None or len(shape) < 2:
            return None
        dim = int(args[1]) % len(first.shape)
        return replace(first, shape=shape) if dim < len(first.shape) - 2 else None
    if base in _CMP:
        other = args[1] if len(args) > 1 else None
        if first is not None:
            v = _scalar(other, values)
            if v is not None:
                return replace(first.compare(base, v), shape=shape)
            return None
        if isinstance(other, torch.Tensor) and len(tensors) == 2:
            return _band_from_compare(base, values(args[0]), values(other), shape)
        return None
    if base in ("masked_fill", "where"):
        if base == "masked_fill":
            src, mask, fill = args[0], args[1], args[2]
            cond = desc_of(mask) if isinstance(mask, torch.Tensor) else None
            a_v, b_v = _scalar(fill, values), _const_value(src, desc_of, values)
        else:
            if len(args) < 3:
                return None
            cond = desc_of(args[0]) if isinstance(args[0], torch.Tensor) else None
            a_v, b_v = _const_value(args[1], desc_of, values), _const_value(args[2], desc_of, values)
        if cond is None or a_v is None or b_v is None or cond.dtype != torch.bool:
            return None
        conv = (lambda x: x) if dtype.is_floating_point else (bool if dtype == torch.bool else int)
        return replace(cond, shape=shape, dtype=dtype, inside=conv(a_v if cond.inside else b_v),
                       outside=conv(a_v if cond.outside else b_v))
    if base in ("mul", "add", "sub", "rsub", "div") and first is not None:
        v = _scalar(args[1] if len(args) > 1 else None, values)
        alpha = kwargs.get("alpha", 1)
        if v is None:
            return None
        fn = {"mul": lambda x: x * v, "add": lambda x: x + alpha * v, "sub": lambda x: x - alpha * v,
              "rsub": lambda x: v - alpha * x, "div": lambda x: x / v}[base]
        return replace(first._map(fn, dtype), shape=shape)
    return None


def _const_value(x, desc_of, values):
    """A Python number for a scalar or a constant tensor (known value or constant description), else None."""
    import torch
    if not isinstance(x, torch.Tensor):
        return _scalar(x, values)
    d = desc_of(x)
    if d is not None and (d.inside == d.outside or d.band_entries() == 0):
        return d.outside
    return _scalar(x, values)
