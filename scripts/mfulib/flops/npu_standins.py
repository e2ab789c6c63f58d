"""Stand-ins for the torch_npu fused ops while tracing on a host without torch_npu.

Installed as ``torch_npu.<op>`` by :func:`npu_standins` only where no real torch_npu is importable; each returns
zero tensors of the output shapes the torch_npu docs give (npu_fusion_attention, npu_fused_infer_attention_score,
npu_ffn, npu_sparse_flash_attention, npu_lstm) or the documented result computed in plain torch where a reference
needs the values to go on (npu_lightning_indexer's top-k indices, npu_rms_norm, npu_rotary_mul, npu_swiglu,
npu_group_norm_swish: :mod:`mfulib.flops.npu_formulas`), and the tracer wraps it so that its formula
(:mod:`mfulib.flops.formulas`) is counted. NPU-only references thus trace on a CPU.
"""
from __future__ import annotations

import contextlib
import sys
import types

from mfulib.flops.formulas import fa_dims, shape_of
from mfulib.flops.npu_formulas import STANDINS as MORE_STANDINS


def _fa_out_shape(layout, query, value, n_q, d_v):
    q = shape_of(query)
    lay = str(layout).upper().split("_")[0]
    if lay in ("BSH", "SBH"):
        return q[:2] + [n_q * d_v]
    return q[:-1] + [d_v]


def _standin_npu_fusion_attention(query, key, value, head_num, input_layout, *args, **kwargs):
    import torch
    b, n_q, _, s_q, _, _, d_v = fa_dims(input_layout, query, key, value, int(head_num))
    out = torch.zeros(_fa_out_shape(input_layout, query, value, n_q, d_v), dtype=query.dtype, device=query.device)
    stat_shape = [s_q, n_q, 8] if b is None else [b, n_q, s_q, 8]
    smax = torch.zeros(stat_shape, dtype=torch.float32, device=query.device)
    return out, smax, smax.clone(), torch.zeros(0, dtype=query.dtype, device=query.device), 0, 0, 0


def _standin_npu_fused_infer_attention_score(query, key, value, *args, num_heads=1, num_key_value_heads=0,
                                             input_layout="BSH", block_table=None, softmax_lse_flag=False,
                                             **kwargs):
    """(attention_out, softmax_lse) zeros of the documented shapes: the query's layout with D replaced by D_v
    (BSH: N_q * D_v); softmax_lse [B, N, S, 1] float32 when softmax_lse_flag, else a 1-element tensor
    (torch_npu.npu_fused_infer_attention_score docs, hiascend.com PyTorch 7.0.0 API list)."""
    import torch
    if isinstance(value, (list, tuple)):
        value = value[0]
    q, v = shape_of(query), shape_of(value)
    n_kv = int(num_key_value_heads) or int(num_heads)
    lay = str(input_layout).upper().split("_")[0]
    if lay in ("BSH", "SBH") or (block_table is not None and len(v) == 3):
        d_v = v[-1] // n_kv
    else:
        d_v = v[-1]
    out_shape = q[:2] + [int(num_heads) * d_v] if lay in ("BSH", "SBH") else q[:-1] + [d_v]
    out = torch.zeros(out_shape, dtype=query.dtype, device=query.device)
    if softmax_lse_flag and lay in ("BSH", "BSND", "BNSD"):
        b, s = (q[0], q[2]) if lay == "BNSD" else (q[0], q[1])
        return out, torch.zeros(b, int(num_heads), s, 1, dtype=torch.float32, device=query.device)
    return out, torch.zeros(1, dtype=torch.float32, device=query.device)


_FFN_ACTS = {"relu": "relu", "gelu": "gelu", "fastgelu": "fastgelu", "silu": "silu", "geglu": "gelu",
             "swiglu": "silu", "reglu": "relu"}


def _standin_npu_ffn(x, weight1, weight2, activation, *args, expert_tokens=None, expert_tokens_index=None,
                     bias1=None, bias2=None, **kwargs):
    """y = act(x @ W1 + b1) @ W2 + b2 in plain torch (FLOPs: flop_formulas.npu_ffn_flops); with [E, K, N] weights
    the rows of x go to the experts in order, expert e taking counts[e] rows (flop_formulas.ffn_expert_counts:
    counts or cumulative index, checked as the op checks them). GLU activations: act(a) * b, (a, b) = the halves
    of x @ W1 (as npu_swiglu). fastgelu = x * sigmoid(1.702 x). Meta inputs give a meta output of that shape."""
    import torch
    import torch.nn.functional as F
    from mfulib.flops.formulas import ffn_expert_counts
    act = str(activation).lower()
    if act not in _FFN_ACTS:
        raise ValueError(f"npu_ffn: activation {activation!r} not one of {sorted(_FFN_ACTS)}")
    xs, w1 = shape_of(x), shape_of(weight1)
    m = 1
    for d in xs[:-1]:
        m *= d
    counts = ffn_expert_counts(m, w1[0] if len(w1) == 3 else None, expert_tokens, expert_tokens_index)
    out_shape = xs[:-1] + [shape_of(weight2)[-1]]
    if x.device.type == "meta":
        return torch.empty(out_shape, dtype=x.dtype, device="meta")

    def one(rows, w1_e, w2_e, b1_e, b2_e):
        h = rows @ w1_e + (b1_e if b1_e is not None else 0)
        fn = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu,
              "fastgelu": lambda t: t * torch.sigmoid(1.702 * t)}[_FFN_ACTS[act]]
        if act in ("geglu", "swiglu", "reglu"):
            a, b = h.chunk(2, dim=-1)
            h = fn(a) * b
        else:
            h = fn(h)
        return h @ w2_e + (b2_e if b2_e is not None else 0)
    flat = x.reshape(m, xs[-1])
    if counts is None:
        return one(flat, weight1, weight2, bias1, bias2).reshape(out_shape)
    outs, start = [], 0
    for e, c in enumerate(counts):
        outs.append(one(flat[start:start + c], weight1[e], weight2[e], None if bias1 is None else bias1[e],
                        None if bias2 is None else bias2[e]))
        start += c
    return torch.cat(outs).reshape(out_shape)


STANDINS = {
    "torch_npu.npu_fusion_attention": _standin_npu_fusion_attention,
    "torch_npu.npu_fused_infer_attention_score": _standin_npu_fused_infer_attention_score,
    "torch_npu.npu_ffn": _standin_npu_ffn,
    **MORE_STANDINS,  # sparse attention, lightning indexer, LSTM, RMSNorm, rotary, SwiGLU, GroupNorm+Swish
}


def real_torch_npu():
    """The real torch_npu module if importable with its ops, else None (the compat stand-in does not count)."""
    mod = sys.modules.get("torch_npu")
    if mod is not None and not getattr(mod, "__mfu_standin__", False) and not getattr(mod, "__mfu_trace__", False):
        return mod
    if mod is None:
        import importlib.util
        if importlib.util.find_spec("torch_npu") is None:
            return None
        try:
            import torch_npu  # noqa: F401
            return sys.modules["torch_npu"]
        except Exception:
            return None
    return None


@contextlib.contextmanager
def npu_standins(wrap, extra=None):
    """While active, ``import torch_npu`` gives a module whose fused ops are stand-ins wrapped by ``wrap(path,
    impl)`` (the tracer's counting wrapper); only where no real torch_npu is importable (the compat layer's stand-in,
    if installed, gets the ops added and removed). ``extra``: more {"torch_npu.<op>": impl} (stand-ins a flops.py
    registered with its formulas, :mod:`mfulib.flops.user_formulas`). Yields whether stand-ins were installed."""
    if real_torch_npu() is not None:
        yield False
        return
    old = sys.modules.get("torch_npu")
    mod = old if old is not None else types.ModuleType("torch_npu")
    added = []
    if old is None:
        mod.__mfu_trace__ = True
        mod.__doc__ = "mfulib.flops.npu_standins: torch_npu fused ops that count FLOPs and return zeros"
        sys.modules["torch_npu"] = mod
    every = {**STANDINS, **(extra or {})}
    for path in every:
        attr = path.split(".", 1)[1]
        if not hasattr(mod, attr):
            setattr(mod, attr, wrap(path, every[path]))
            added.append(attr)
    try:
        yield True
    finally:
        for attr in added:
            try:
                delattr(mod, attr)
            except AttributeError:
                pass
        if old is None:
            sys.modules.pop("torch_npu", None)
