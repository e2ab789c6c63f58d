"""Templates of the non-attention flops.py drafts (:mod:`mfulib.flops.drafts`), as :class:`string.Template` text.

``HEADER`` opens every draft (the contract, the imports, ``KERNEL_PARTS``); the bodies are ``T_MATMUL`` (matmul /
bmm / linear with broadcast batch dims), ``T_FFN``, ``T_GROUPED`` (grouped matmul), ``T_CONV`` (N-d convolution,
PyTorch's output-size formula), ``T_RNN`` (LSTM gate GEMMs, PyTorch nn.LSTM equations), ``T_VECTOR`` /
``T_VECTOR_EXACT`` (no matrix work, vector arithmetic guessed / re-played from forward()), ``T_NOMATRIX``
(pooling, sort / top-k), ``T_UNKNOWN`` and ``T_SKELETON`` (a draft that could not be written: says why).
The attention templates are in :mod:`mfulib.flops.drafts.attention`.
"""

HEADER = '''"""flops.py DRAFT for $op, written by flops_generator.py - class "$cls" ($why).

Contract (docs/ARCHITECTURE.md#flops): flops(case) returns the operator's matrix FLOPs only, 2 per multiply-accumulate
(softmax, activations, norms, casts not counted; 0 for an operator without matrix work, which has no MFU and is
read through MBU); optional vector_flops(case) counts the vector arithmetic (checked against the tracer's per-op
element costs); flops_parts(case) splits flops(case) by part and must add up;
KERNEL_PARTS maps each part to fnmatch patterns of kernel names (first match wins, the rest is "other").
Lines marked REVIEW are guesses: check each against model.py, then delete the marker.
Check:  python3 $$SKILL_DIR/scripts/check_flops.py --op-dir <work dir>
"""
from mfulib.flops.contract import $imports

KERNEL_PARTS = $kernel_parts
$kernel_note
'''

T_MATMUL = '''

def flops_parts(case):
    a, b = shape(case, "$a"), shape(case, "$b")
    if $linear_first and len(b) == 2 and a[-1] == b[-1]:      # F.linear: x [..., k] @ W[n, k]^T
        m, k, n, batch = math.prod(a[:-1]), a[-1], b[0], 1
    elif len(a) >= 2 and len(b) >= 2 and a[-1] == b[-2]:      # a [..., m, k] @ b [..., k, n]
        m, k, n = a[-2], a[-1], b[-1]
        batch = math.prod(_broadcast(a[:-2], b[:-2]))
    elif len(a) >= 2 and len(b) >= 2 and a[-1] == b[-1]:      # a [..., m, k] @ b [..., n, k]^T (W of F.linear)
        m, k, n = a[-2], a[-1], b[-2]                         # (where both fit, k == n: the same count)
        batch = math.prod(_broadcast(a[:-2], b[:-2]))
    else:
        raise ValueError(f"case rejected: $a {a} and $b {b} do not chain as a matmul")
    return {"matmul": matmul_flops(m, n, k, batch)}


def _broadcast(x, y):
    x, y = [1] * (len(y) - len(x)) + list(x), [1] * (len(x) - len(y)) + list(y)
    if any(p != q and 1 not in (p, q) for p, q in zip(x, y)):
        raise ValueError(f"case rejected: batch dims {x} and {y} do not broadcast")
    return [max(p, q) for p, q in zip(x, y)]


def flops(case):
    return float(sum(flops_parts(case).values()))
'''

T_FFN = '''
GATED = $gated          # a GLU activation splits x @ W1 into two halves: the second GEMM takes n1 / 2 rows
WEIGHTS_AS_LINEAR = $linear   # False: x @ W1 with W1 [k, n1] (npu_ffn); True: nn.Linear weights [n1, k]


def flops_parts(case):
    act = str(attr(case, "$act", "")).lower()
    # up: [m, k] @ [k, n1]; down: [m, n1 or n1/2] @ [.., n2]; m = every leading dim of x; activation not counted
    return ffn_parts(shape(case, "$x"), shape(case, "$w1"), shape(case, "$w2"), act in GATED, WEIGHTS_AS_LINEAR)


def flops(case):
    return float(sum(flops_parts(case).values()))
'''

T_GROUPED = '''
# Grouped matmul: group g multiplies rows [end_(g-1), end_g) of x by its own weight. The group list holds END
# offsets (cumulative), as torch._grouped_mm's ``offs`` does (checked on torch 2.13: rows past the last offset are
# not computed) and as npu_grouped_matmul's group_list_type 0 does; group_list_type 1 gives per-group counts.
# Without a type attribute the values decide: a list that sums to the rows of x without ending there (or that is
# not non-decreasing, so no offsets) is per-group counts; where both readings fit they give the same rows.
# REVIEW: the reading of the group list (offsets or counts) against model.py
GROUP_LIST = $glist_expr
GROUP_LIST_TYPE = $gtype_expr


def _group_ends(case$args_param, m_all=None):
    vals = $glist_read
    if vals is None:
        return None
    vals = [int(v) for v in (vals.reshape(-1).tolist() if hasattr(vals, "reshape") else vals)]
    if GROUP_LIST_TYPE:
        counts = int(attr(case, GROUP_LIST_TYPE, 0)) == 1
    else:
        monotone = all(b >= a for a, b in zip([0] + vals[:-1], vals))
        counts = bool(vals) and (not monotone or (sum(vals) == m_all and vals[-1] != m_all))
    if counts:                                        # per-group counts -> end offsets
        vals = [sum(vals[:i + 1]) for i in range(len(vals))]
    if any(b < a for a, b in zip([0] + vals[:-1], vals)):
        raise ValueError(f"case rejected: group offsets {vals} are not non-decreasing end offsets")
    return vals


def flops_parts(case$args_param):
    x, w = shape(case, "$x"), shape(case, "$w")        # x [M, K] (rows of every group), w [G, K, N] or [K, N]
    m_all, k, n = math.prod(x[:-1]), x[-1], w[-1]
    if w[-2] != k:
        raise ValueError(f"case rejected: x {x} and weight {w} do not chain (K {k} vs {w[-2]})")
    ends = _group_ends(case$args_arg, m_all)
    m = ends[-1] if ends else m_all                   # only rows before the last end offset are multiplied
    if m > m_all:
        raise ValueError(f"case rejected: group offsets end at {m} but x has {m_all} rows")
    return {"matmul": matmul_flops(m, n, k)}


def flops(case$args_param):
    return float(sum(flops_parts(case$args_arg).values()))
'''

T_CONV = '''

def flops_parts(case):
    x = shape(case, "$x")                            # [N, C_in, *spatial]
    # REVIEW: attribute names and defaults of the convolution (out channels, kernel, stride, padding, dilation, groups)
    c_out, groups = int(attr(case, "$out_ch")), int(attr(case, "$groups", 1))
    spatial = x[2:]
    kernel = _tuple(attr(case, "$kernel"), len(spatial))
    stride, pad, dil = (_tuple(attr(case, n, dflt), len(spatial)) for n, dflt in
                        (("$stride", 1), ("$padding", 0), ("$dilation", 1)))
    out = [(l + 2 * p - d * (kk - 1) - 1) // s + 1 for l, kk, s, p, d in zip(spatial, kernel, stride, pad, dil)]
    # each output element: C_in / groups * prod(kernel) MACs
    return {"conv": 2 * x[0] * c_out * math.prod(out) * (x[1] // groups) * math.prod(kernel)}


def _tuple(v, n):
    return list(v) if isinstance(v, (list, tuple)) else [int(v)] * n


def flops(case):
    return float(sum(flops_parts(case).values()))
'''

T_VECTOR = '''
# No matrix work (docs/ARCHITECTURE.md#flops): flops(case) is 0 - no MFU, MBU is the headline figure. The vector
# arithmetic is vector_flops(case), checked against the tracer's per-op element costs (mfulib/flops/vector_costs.py).
OPS_PER_ELEMENT = $ops   # $ops_note


def flops_parts(case):
    return {"$part": 0.0}


def flops(case):
    return float(sum(flops_parts(case).values()))


def vector_flops(case):
$vector_body
'''

T_VECTOR_EXACT = '''
# No matrix work (docs/ARCHITECTURE.md#flops): flops(case) is 0 - no MFU, MBU is the headline figure.
# vector_flops(case) re-plays forward() of model.py op by op on the case's shapes; each op's FLOPs per element are
# the tracer's (mfulib/flops/vector_costs.py), so the count is derived from the code, not guessed.


def flops_parts(case):
    return {"$part": 0.0}


def flops(case):
    return float(sum(flops_parts(case).values()))


def vector_flops(case):
$vector_body
$helpers'''

T_RNN = '''
HIDDEN_FROM = $hidden_from   # (kind, name): where H comes from, read from the case file's names
# $module_note
MODULE = $module


def _hidden(case):
    for kind, name in HIDDEN_FROM:
        if kind == "attr" and has(case, name):
            return int(attr(case, name))
        if kind == "bias" and has(case, name):
            return shape(case, name)[0] // 4            # bias [4H] (gates i, f, g, o)
        if kind == "state" and has(case, name):
            return shape(case, name)[-1]                # h0 / c0 [layers * dirs, B, H]
        if kind == "w_hh" and has(case, name):
            return shape(case, name)[-1]                # weight_hh [4H, H]
    if MODULE.get("hidden_size"):
        return int(MODULE["hidden_size"])               # the nn.LSTM(...) of model.py
    raise ValueError("case rejected: no hidden size in this case (no hidden_size attribute, bias, h0 or weight_hh) "
                     "and none in model.py's nn.LSTM(...)")


def flops_parts(case):
    # LSTM (PyTorch nn.LSTM equations): per time step and direction, gates [i f g o] = W_ih x_t + W_hh h_(t-1):
    # 2 * T * B * 4H * (I_l + H), I_l = the input size for layer 0, H * directions above it.
    x = shape(case, "$x")
    batch_first = bool(attr(case, "$batch_first", MODULE.get("batch_first", False)))$bf_note
    if len(x) == 2:                                     # unbatched [T, I]
        t, b, i = x[0], 1, x[1]
    else:
        t, b, i = (x[1], x[0], x[2]) if batch_first else (x[0], x[1], x[2])
    if MODULE.get("input_size") and i != MODULE["input_size"]:
        raise ValueError(f"case rejected: $x {x} has input size {i}, model.py's nn.LSTM takes {MODULE['input_size']}")
    h = _hidden(case)
    dirs = 2 if bool(attr(case, "$bidir", MODULE.get("bidirectional", False))) else 1
    layers = int(attr(case, "$layers", 0)) or int(MODULE.get("num_layers", 0)) or $layers_fallback
    total = 0
    for layer in range(layers):
        i_l = i if layer == 0 else h * dirs
        total += dirs * matmul_flops(t * b, 4 * h, i_l + h)
    return {"lstm": total}


def flops(case):
    return float(sum(flops_parts(case).values()))
'''

T_SKELETON = '''

# REVIEW: $why
# REVIEW: read model.py's forward() and write flops(case) (2 FLOPs per multiply-accumulate of its matrix work);
# REVIEW: check_flops.py fails until you do.


def flops(case):
    raise RuntimeError("flops.py draft: not written ($short) - write flops(case) by hand")
'''

T_NOMATRIX = '''
# No matrix work ($what): flops(case) is 0 (docs/ARCHITECTURE.md#flops) - no MFU; this operator is read through MBU and
# its top cases are chosen by bytes moved. The tracer checks the 0 (it fails a draft whose reference does matrix work).


def flops_parts(case):
    return {"$part": 0.0 * numel(case, "$x")}


def flops(case):
    return float(sum(flops_parts(case).values()))
'''

T_UNKNOWN = '''

def flops(case):
    # REVIEW: the generator could not classify this reference ($why). Read model.py's forward and write the
    # FLOPs (2 per multiply-accumulate of its matrix work) here; check_flops.py fails until you do.
    raise RuntimeError("flops.py draft: unknown operator class - write flops(case) by hand")
'''
