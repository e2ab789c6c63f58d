"""The meta build mode: a case's inputs built with big floating tensors on meta and the random stream kept as timed.

Above the tracer's real-draw cap (:data:`mfulib.flops.tracer.REAL_DRAW_MAX_BYTES`) the reference's
``get_input_groups()`` / ``Model()`` run under :func:`build_mode_class`'s dispatch mode: floating tensors of at
least :data:`META_BUILD_MIN_NUMEL` elements (integer/bool ones of :data:`META_BUILD_INT_MIN_NUMEL`) are created on
meta, so nothing big is allocated. A random draw sent to meta would not advance the CPU generator, and every later
draw (random sequence lengths, masks, routing) would differ from the timed child's - the 2.1x MFU error of issue
11. Floating draws the timed child keeps off the host stream (:func:`mfulib.core.input_draw.off_host_stream`: big, no
explicit generator - drawn on the device or from a private generator) need nothing; every other draw sent to meta
is queued and replayed on the CPU in chunks of :data:`REPLAY_CHUNK_NUMEL` elements (values
dropped) before the next draw that stays on the CPU; the chunked replay consumes the generator exactly as one draw
(:func:`_chunk_sizes`; tests/test_flops_timed_inputs.py checks randn/rand/randint/normal_/uniform_/bernoulli_ in
several dtypes). Limits (each puts a reason in the mode's ``lost``, and the draw is then recorded as "meta"): an
integer/bool tensor left without values on meta, a random op on a meta view or with meta parameters. Not seen by
the mode: ``torch.get_rng_state()`` read by the reference between a big draw and a small one (the queue is not
replayed for it).
"""
from __future__ import annotations

import functools
import math

from mfulib.core.input_draw import DEVICE_DRAW_MIN_NUMEL, off_host_stream

META_BUILD_MIN_NUMEL = DEVICE_DRAW_MIN_NUMEL  # floating tensors this big are created on meta (the timed draw's split)
META_BUILD_INT_MIN_NUMEL = 1 << 24  # integer/bool tensors stay real (indices, lengths) unless this big

_RNG_FACTORIES = {"randn", "rand", "randint", "normal"}   # random draws with a ``size`` argument
_RNG_OPS = _RNG_FACTORIES | {"normal_", "uniform_", "random_", "bernoulli", "bernoulli_", "exponential_",
                              "cauchy_", "log_normal_", "geometric_", "randperm", "multinomial", "rand_like",
                              "randn_like", "randint_like", "native_dropout", "poisson", "_standard_gamma"}
REPLAY_CHUNK_NUMEL = 1 << 22  # elements per replayed draw (a multiple of 16; 16 MiB of float32 at most)


def _chunk_sizes(numel: int, chunk: int) -> list:
    """Sizes that add up to ``numel``, each at most ``chunk`` and, but for a lone ``numel < 16``, at least 16: the
    CPU kernels draw 16-element blocks and redo a ragged tail, so such a split consumes the generator exactly as
    one draw of ``numel`` does (tests/test_flops_timed_inputs.py checks it op by op)."""
    out, left = [], int(numel)
    while left > chunk:
        k = chunk if left - chunk >= 16 else chunk - 16
        out.append(k)
        left -= k
    return out + ([left] if left else [])


def _make_build_mode_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class _MetaBuildMode(TorchDispatchMode):
        """While get_input_groups()/Model() run: big floating tensors are created on meta, and moving a meta
        tensor to the CPU keeps it on meta, so building a huge case allocates nothing. A random draw sent to meta
        (or a random op on a meta tensor) is queued and, before the next random draw that stays on the CPU,
        replayed there in bounded chunks whose values are dropped - so the CPU generator advances exactly as in the
        timed child's draw and later integer/bool draws (lengths, masks, routing) get the timed values; draws no
        CPU draw follows are never replayed (no cost), and a queue the generator was re-seeded over is dropped.
        ``lost`` lists what breaks this (an integer/bool tensor on meta, a random op it cannot replay); empty means
        the data-dependent inputs are the timed ones."""

        def __init__(self):
            super().__init__()
            self.lost, self.pending, self.state = [], [], None

        def _replay(self, func, args, kwargs, numel, dtype, size_at=None):
            try:
                for k in _chunk_sizes(numel, REPLAY_CHUNK_NUMEL):
                    if size_at is None:   # a random op on a tensor: the same op on a CPU chunk of its dtype
                        func(torch.empty(k, dtype=dtype), *args[1:], **kwargs)
                        continue
                    a, kw = list(args), dict(kwargs, device=torch.device("cpu"))
                    if size_at < len(a):
                        a[size_at] = [k]
                    else:
                        kw["size"] = [k]
                    func(*a, **kw)
            except Exception as exc:  # e.g. a meta tensor among the other arguments
                self.lost.append(f"{func._overloadpacket.__name__}: not replayable ({type(exc).__name__})")

        def _queue(self, entry):
            now = torch.get_rng_state()
            if self.state is not None and not torch.equal(now, self.state):
                self.pending = []          # re-seeded since: the queued draws no longer matter
            if entry[2].get("generator") is not None:
                self._replay(*entry)       # a generator of its own: replay now
            else:
                self.pending.append(entry)
            self.state = torch.get_rng_state()

        def _flush(self):
            if self.pending and torch.equal(torch.get_rng_state(), self.state):
                for entry in self.pending:
                    self._replay(*entry)
            self.pending, self.state = [], None

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            names = [a.name for a in func._schema.arguments]
            op = func._overloadpacket.__name__
            queued = False
            if "size" in names and "device" in names:
                i = names.index("size")
                size = args[i] if i < len(args) else kwargs.get("size")
                dtype = kwargs.get("dtype")
                if dtype is None and "dtype" in names and names.index("dtype") < len(args):
                    dtype = args[names.index("dtype")]
                is_float = dtype is None and op not in ("randint", "full") \
                    or (dtype is not None and dtype.is_floating_point)
                try:
                    numel = math.prod(int(s) for s in size)
                except TypeError:
                    numel = 0
                if numel >= (META_BUILD_MIN_NUMEL if is_float else META_BUILD_INT_MIN_NUMEL):
                    kwargs["device"] = torch.device("meta")
                    kwargs.pop("pin_memory", None)
                    if op in _RNG_FACTORIES:
                        if not (is_float and off_host_stream(numel, kwargs.get("generator"))):
                            self._queue((func, args, {k: v for k, v in kwargs.items() if k != "device"}, numel,
                                         None, i))
                        queued = True
            if (op in _RNG_OPS or "generator" in names) and not queued:
                first = args[0] if args and isinstance(args[0], torch.Tensor) else None
                if any(isinstance(a, torch.Tensor) and a.device.type == "meta" for a in args) or \
                        kwargs.get("device") == torch.device("meta"):
                    if first is not None and first.device.type == "meta" and first.is_floating_point() \
                            and off_host_stream(first.numel(), kwargs.get("generator")):
                        pass               # the timed draw fills it from a private stream: nothing to replay
                    elif first is not None and first.device.type == "meta" and first.is_contiguous():
                        self._queue((func, args, kwargs, first.numel(), first.dtype, None))
                    else:
                        self.lost.append(f"{op}: a random draw on meta tensors it cannot replay")
                else:
                    self._flush()          # a draw whose values are kept: the stream must be the timed one
            if op == "_to_copy" and args and isinstance(args[0], torch.Tensor) \
                    and args[0].device.type == "meta" and kwargs.get("device") is not None:
                kwargs["device"] = torch.device("meta")
            if op == "copy_" and len(args) >= 2 and args[1].device.type == "meta" \
                    and args[0].device.type != "meta":
                return args[0]  # values are not needed; the destination keeps its (CPU) storage
            out = func(*args, **kwargs)
            for t in (out if isinstance(out, (tuple, list)) else [out]):
                if isinstance(t, torch.Tensor) and t.device.type == "meta" and not t.is_floating_point() \
                        and not t.is_complex():
                    self.lost.append(f"{op}: an integer/bool tensor {list(t.shape)} without values (meta)")
                    break
            return out

    return _MetaBuildMode


@functools.lru_cache(maxsize=1)
def build_mode_class():
    """The dispatch-mode class (built once; torch imported lazily): ``with build_mode_class()() as mode: ...``,
    then ``mode.lost`` ([] = the data-dependent inputs are the timed ones)."""
    return _make_build_mode_class()
