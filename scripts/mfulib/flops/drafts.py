"""Drafts of flops.py (flops_generator.py): classify a reference by its AST, fill a template per class.

Classes, tried in this order (the first whose evidence is present wins; :func:`classify` returns the reasons):

    npu_fused_infer_attention  torch_npu.npu_fused_infer_attention_score (inference FA: layouts, GQA, actual lengths)
    sparse_flash_attention torch_npu.npu_sparse_flash_attention (+ npu_lightning_indexer): REVIEW-marked draft
    lightning_indexer      torch_npu.npu_lightning_indexer alone: REVIEW-marked draft
    npu_fusion_attention   torch_npu.npu_fusion_attention, or q/k/v + input_layout + sparse_mode inputs
    paged_attention        block_table / kv cache / paged names beside attention
    sparse_attention       top-k / indices / actual_seq_lengths / cu_seqlens (variable length) beside attention
    window_attention       window / sliding / local beside attention
    gqa_attention          key heads != query heads in the cases, or repeat_interleave / num_key_value_heads
    attention_proj         attention computed from one input x with projection weights (an MHA block)
    attention              softmax(q k^T) v or F.scaled_dot_product_attention on q/k/v inputs
    ffn                    npu_ffn, or two weights + an activation
    grouped_matmul         grouped_mm / npu_grouped_matmul / group_list
    matmul                 matmul / bmm / mm / linear / einsum / @
    conv                   conv1d/2d/3d / nn.ConvNd
    rnn                    LSTM / npu_lstm: the gate GEMMs of every time step, layer and direction
    pooling                avg / max / adaptive pooling, 1-3D: 0 matrix FLOPs
    reduction              sort / top-k / arg-reductions, or value reductions (sum, mean, amax, var ...) over axes
    norm                   layer_norm / rms / group_norm / batch_norm (optional weight / bias per case, residual add)
    softmax                softmax / log_softmax without matrix work
    elementwise            pointwise ops only (Python operators a + b, binary math torch.logaddexp / hypot ...)
    unknown                none of the above: the draft's flops() raises until a human writes it

Each draft reads inputs by the names of the case file, defines ``flops_parts`` and ``KERNEL_PARTS`` (patterns from
the Triton kernels ``model_new.py`` launches, when it is there) and marks with ``REVIEW`` every line whose
semantics the generator guessed (causal alignment, masks, variable lengths, rope, dropout, layouts).
check_flops.py lists the remaining REVIEW lines; matmul, FFN and MHA-block drafts need none. The attention
templates (and the torch_npu inference/sparse attention drafts) live in :mod:`mfulib.flops.drafts_attention`.
"""
from __future__ import annotations

import ast
import os
import re
import string
from dataclasses import dataclass, field

from mfulib.core import cases as _cases
from mfulib.core.definitions import FLOAT_DTYPES
from mfulib.flops.contract import REVIEW_MARK
from mfulib.flops.drafts_vector import vector_program
from mfulib.flops.drafts_attention import (BODY_DENSE, BODY_PAGED, BODY_SPARSE, BODY_TOPK_BLOCKS, BODY_VARLEN,
                                        T_ATTENTION, T_MHA, T_NPU_FA, render_npu_attention)

CLASSES = ("npu_fused_infer_attention", "sparse_flash_attention", "lightning_indexer", "npu_fusion_attention", "paged_attention", "sparse_attention", "window_attention", "gqa_attention",
           "attention_proj", "attention", "ffn", "grouped_matmul", "matmul", "conv", "norm", "softmax",
           "elementwise", "unknown")
GATED_ACTIVATIONS = ("swiglu", "geglu", "reglu", "glu")


# ----------------------------------------------------------------------------------------------------------------
# Evidence
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class ModelFeatures:
    """What the reference's source shows: called names, @ count, identifiers/strings, lines of interest."""
    calls: dict = field(default_factory=dict)       # last attribute / function name -> [line numbers]
    matmul_ops: int = 0                              # "@" operators
    tokens: set = field(default_factory=set)         # identifiers, attribute names, string constants (lower case)
    source: str = ""
    doc_lines: set = field(default_factory=set)      # lines inside docstrings

    def called(self, *names) -> bool:
        return any(n in self.calls for n in names)

    def lines(self, *names) -> list:
        return sorted({ln for n in names for ln in self.calls.get(n, [])})

    def has_token(self, pattern: str) -> bool:
        rx = re.compile(pattern)
        return any(rx.search(t) for t in self.tokens)

    def token_lines(self, pattern: str) -> list:
        """Code lines (not comments, not docstrings) matching ``pattern``."""
        rx = re.compile(pattern, re.I)
        return [i for i, ln in enumerate(self.source.splitlines(), 1)
                if rx.search(ln) and not ln.strip().startswith("#") and i not in self.doc_lines]


def analyze_model(path: str) -> ModelFeatures:
    """Parse the reference; raises SyntaxError/OSError to the caller."""
    with open(path, encoding="utf-8-sig") as f:
        src = f.read()
    tree = ast.parse(src, filename=path)
    feats = ModelFeatures(source=src)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
            if name:
                feats.calls.setdefault(name, []).append(node.lineno)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            feats.matmul_ops += 1
            feats.calls.setdefault("@", []).append(node.lineno)
        if isinstance(node, ast.Name):
            feats.tokens.add(node.id.lower())
        elif isinstance(node, ast.Attribute):
            feats.tokens.add(node.attr.lower())
        elif isinstance(node, ast.arg):
            feats.tokens.add(node.arg.lower())
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 40:
            feats.tokens.add(node.value.lower())
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            feats.doc_lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    # elementwise work written with Python operators (a + b, x * y, x ** 2) inside forward()
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "forward"):
        for node in ast.walk(fn):
            op = _BINOP_NAMES.get(type(getattr(node, "op", None))) if isinstance(node, (ast.BinOp, ast.AugAssign)) \
                else None
            if op:
                feats.calls.setdefault(op, []).append(node.lineno)
    return feats


_BINOP_NAMES = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow",
                ast.FloorDiv: "div", ast.Mod: "remainder"}


def launched_kernels(impl_path: str | None) -> list:
    """Triton kernels ``model_new.py`` launches (``@triton.jit`` functions called as ``kernel[grid](...)``), in
    source order; [] when there is no such file."""
    if not impl_path or not os.path.exists(impl_path):
        return []
    with open(impl_path, encoding="utf-8-sig") as f:
        tree = ast.parse(f.read(), filename=impl_path)
    jit = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                d = dec.func if isinstance(dec, ast.Call) else dec
                if (isinstance(d, ast.Attribute) and d.attr in ("jit", "autotune", "heuristics")) or \
                        (isinstance(d, ast.Name) and d.id in ("jit",)):
                    jit.add(node.name)
    launched = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id in jit:
            launched.append((node.lineno, node.func.value.id))
    out = []
    for _, name in sorted(launched):
        if name not in out:
            out.append(name)
    return out


@dataclass
class CaseView:
    """Names and shapes of the case file (first case as the template; all cases for variations)."""
    info: object
    all_infos: list
    cases: list

    def tensor(self, *patterns, floating=True, exclude=()):
        for pat in patterns:
            rx = re.compile(pat, re.I)
            for t in self.info.tensors:
                if rx.fullmatch(t.name) and t.name not in exclude and (t.dtype in FLOAT_DTYPES or not floating):
                    return t.name
        return None

    def floats(self):
        return [t.name for t in self.info.tensors if t.dtype in FLOAT_DTYPES]

    def attr(self, *patterns):
        for pat in patterns:
            rx = re.compile(pat, re.I)
            for name in self.info.attrs:
                if rx.search(name):
                    return name
        return None


def read_case_view(path: str) -> CaseView:
    cases = _cases.read_case_file(path)
    infos = [_cases.describe_case(c, i) for i, c in enumerate(cases)]
    return CaseView(infos[0], infos, cases)


# ----------------------------------------------------------------------------------------------------------------
# Classification
# ----------------------------------------------------------------------------------------------------------------

_ATTN_CALLS = ("scaled_dot_product_attention", "npu_fusion_attention", "npu_fused_infer_attention_score",
               "npu_prompt_flash_attention", "npu_incre_flash_attention", "flash_attn_func",
               "flash_attn_varlen_func")
_MATMUL_CALLS = ("matmul", "bmm", "mm", "linear", "Linear", "einsum", "addmm", "baddbmm", "tensordot")
_NORM_CALLS = ("layer_norm", "LayerNorm", "rms_norm", "RMSNorm", "group_norm", "GroupNorm", "batch_norm",
               "BatchNorm1d", "BatchNorm2d", "instance_norm", "rsqrt")
_POOL_CALLS = tuple(f"{k}_pool{n}d" for k in ("avg", "max", "adaptive_avg", "adaptive_max", "lp") for n in (1, 2, 3)) + \
    tuple(f"{k}Pool{n}d" for k in ("Avg", "Max", "AdaptiveAvg", "AdaptiveMax", "LP") for n in (1, 2, 3))
_ORDER_CALLS = ("topk", "sort", "argsort", "argmax", "argmin", "kthvalue", "msort")
_CONV_CALLS = ("conv1d", "conv2d", "conv3d", "Conv1d", "Conv2d", "Conv3d", "conv_transpose2d", "ConvTranspose2d")


def _n_matmuls(f: ModelFeatures) -> int:
    return f.matmul_ops + sum(len(f.calls.get(n, [])) for n in _MATMUL_CALLS)


def _gqa_in_cases(cv: CaseView, q, k) -> bool:
    """True when some case's 4-D q and k differ on axis 1 or 2 with equal batch and head dim (heads or lengths)."""
    for info in cv.all_infos:
        try:
            qs, ks = info.tensor(q).shape, info.tensor(k).shape
        except KeyError:
            return False
        if len(qs) == 4 and len(ks) == 4 and qs[0] == ks[0] and qs[3] == ks[3] and qs[1:3] != ks[1:3]:
            return True
    return False


def classify(f: ModelFeatures, cv: CaseView) -> tuple:
    """(class, [reasons]) for a reference and its cases."""
    q = cv.tensor(r"q|query|xq|queries")
    k = cv.tensor(r"k|key|keys|xk")
    v = cv.tensor(r"v|value|values|xv")
    attn_call = [n for n in _ATTN_CALLS if f.called(n)]
    qkv = bool(q and k and v)
    softmax_mm = f.called("softmax", "_softmax") and _n_matmuls(f) >= 2
    attention = bool(attn_call) or (qkv and (softmax_mm or f.called("softmax"))) or \
        (softmax_mm and f.has_token(r"^(q|k|v|query|key|value|scores?|attn\w*)$"))
    if f.called("npu_fused_infer_attention_score"):
        return "npu_fused_infer_attention", ["npu_fused_infer_attention_score call"]
    if f.called("npu_sparse_flash_attention"):
        return "sparse_flash_attention", ["npu_sparse_flash_attention call (keys chosen by sparse_indices)"]
    if f.called("npu_lightning_indexer"):
        return "lightning_indexer", ["npu_lightning_indexer call (scores and top-k key selection)"]
    if f.called("npu_fusion_attention") or (qkv and cv.attr(r"input_layout") and cv.attr(r"sparse_mode")):
        return "npu_fusion_attention", ["npu_fusion_attention call" if f.called("npu_fusion_attention") else
                                        "q/k/v with input_layout and sparse_mode inputs"]
    if attention:
        why = [f"attention: {', '.join(attn_call) or 'softmax between matmuls'}"]
        topk = f.has_token(r"topk|top_k|sparse_ind|indices") or f.called("topk")
        if f.has_token(r"block_table|kv_cache|paged|page_table") or cv.attr(r"block_table") or \
                (f.has_token(r"block_size") and not topk):
            return "paged_attention", why + ["block table / paged KV names"]
        if f.has_token(r"topk|top_k|sparse_ind|indices|actual_seq|cu_seqlens|seq_lens|varlen") or \
                cv.attr(r"actual_seq|seq_len|cu_seq") or cv.tensor(r".*(indices|topk).*", floating=False):
            return "sparse_attention", why + ["sparse indices / variable lengths"]
        if f.has_token(r"window|sliding|local_attn") or cv.attr(r"window"):
            return "window_attention", why + ["window / sliding names"]
        if qkv and (_gqa_in_cases(cv, q, k) or f.has_token(r"repeat_interleave|num_key_value_heads|n_kv|gqa|kv_heads")):
            return "gqa_attention", why + ["key heads differ from query heads"]
        if not qkv:
            return "attention_proj", why + ["one input, projections inside the reference"]
        return "attention", why
    if f.called("npu_ffn") or (cv.attr(r"activation|act") and len(cv.floats()) >= 3) or \
            (cv.tensor(r"w1|weight1|fc1.*") and cv.tensor(r"w2|weight2|fc2.*")):
        return "ffn", ["npu_ffn / two weights and an activation"]
    if f.called("grouped_mm", "_grouped_mm", "npu_grouped_matmul") or f.has_token(r"group_list"):
        return "grouped_matmul", ["grouped matmul"]
    if _n_matmuls(f):
        return "matmul", [f"{_n_matmuls(f)} matmul call(s)"]
    if f.called(*_CONV_CALLS):
        return "conv", ["convolution call"]
    if f.called("LSTM", "lstm", "npu_lstm"):
        return "rnn", ["LSTM: four gate GEMMs per time step"]
    if f.called(*_POOL_CALLS):
        return "pooling", ["pooling (no matrix work)"]
    if f.called(*_ORDER_CALLS):
        return "reduction", ["sort / top-k / arg-reduction (comparisons, no matrix work)"]
    if f.called(*_NORM_CALLS) or f.has_token(r"(^|_)(layer|rms|group|batch|instance)_?norm|^rms"):
        return "norm", ["normalisation"]
    if f.called("softmax", "log_softmax", "_softmax"):
        return "softmax", ["softmax without matrix work"]
    value_reductions = [n for n in _VALUE_REDUCTIONS if f.called(n)]
    if value_reductions:
        return "reduction", [f"value reduction(s) {', '.join(value_reductions)} (no matrix work)"]
    elementwise = [n for n in f.calls if n in _POINTWISE]
    if elementwise:
        return "elementwise", [f"pointwise/reduction ops: {', '.join(sorted(elementwise)[:6])}"]
    return "unknown", ["no recognised compute call in the reference"]


_VALUE_REDUCTIONS = ("sum", "mean", "amax", "amin", "var", "std", "prod", "nansum", "logsumexp")
_POINTWISE = {"add", "sub", "mul", "div", "exp", "log", "sigmoid", "tanh", "relu", "gelu", "silu", "sum", "mean",
              "max", "min", "pow", "sqrt", "abs", "clamp", "where", "neg", "cumsum", "prod", "amax", "argmax",
              "erf", "sin", "cos", "square", "reciprocal", "norm", "var", "std", "logsumexp", "logaddexp",
              "logaddexp2", "hypot", "atan2", "maximum", "minimum", "remainder", "fmod", "rsqrt", "log1p", "expm1"}


# ----------------------------------------------------------------------------------------------------------------
# Templates
# ----------------------------------------------------------------------------------------------------------------

HEADER = '''"""flops.py DRAFT for $op, written by flops_generator.py - class "$cls" ($why).

Contract (DESIGN.md "FLOPs"): flops(case) returns the operator's matrix FLOPs only, 2 per multiply-accumulate
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
    elif len(b) == 2 and a[-1] == b[-1]:                      # x [..., k] @ W[n, k]^T
        m, k, n, batch = math.prod(a[:-1]), a[-1], b[0], 1
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

def flops_parts(case):
    x, w = shape(case, "$x"), shape(case, "$w")        # x [M, K] (rows of every group), w [G, K, N]
    # REVIEW: grouped matmul - each row of x goes through exactly one group's weight (group_list splits M)
    m, k, n = math.prod(x[:-1]), x[-1], w[-1]
    if w[-2] != k:
        raise ValueError(f"case rejected: x {x} and weight {w} do not chain (K {k} vs {w[-2]})")
    return {"matmul": matmul_flops(m, n, k)}


def flops(case):
    return float(sum(flops_parts(case).values()))
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
# No matrix work (DESIGN.md "FLOPs"): flops(case) is 0 - no MFU, MBU is the headline figure. The vector arithmetic
# is vector_flops(case), checked against the tracer's per-op element costs (mfulib/flops/vector_costs.py).
OPS_PER_ELEMENT = $ops   # $ops_note


def flops_parts(case):
    return {"$part": 0.0}


def flops(case):
    return float(sum(flops_parts(case).values()))


def vector_flops(case):
$vector_body
'''

T_VECTOR_EXACT = '''
# No matrix work (DESIGN.md "FLOPs"): flops(case) is 0 - no MFU, MBU is the headline figure. vector_flops(case)
# re-plays forward() of model.py op by op on the case's shapes; each op's FLOPs per element are the tracer's
# (mfulib/flops/vector_costs.py), so the count is derived from the code, not guessed.


def flops_parts(case):
    return {"$part": 0.0}


def flops(case):
    return float(sum(flops_parts(case).values()))


def vector_flops(case):
$vector_body
$helpers'''

T_RNN = '''

def flops_parts(case):
    # LSTM (PyTorch nn.LSTM equations): per time step and direction, gates [i f g o] = W_ih x_t + W_hh h_(t-1):
    # 2 * T * B * 4H * (I_l + H), I_l = the input size for layer 0, H * directions above it.
    x = shape(case, "$x")
    t, b, i = (x[1], x[0], x[2]) if bool(attr(case, "$batch_first", False)) else (x[0], x[1], x[2])$bf_note
    h = int(attr(case, "$hidden"))$h_note
    layers = int(attr(case, "$layers", 1))
    dirs = 2 if bool(attr(case, "$bidir", False)) else 1
    total = 0
    for layer in range(layers):
        i_l = i if layer == 0 else h * dirs
        total += dirs * matmul_flops(t * b, 4 * h, i_l + h)
    return {"lstm": total}


def flops(case):
    return float(sum(flops_parts(case).values()))
'''

T_NOMATRIX = '''
# No matrix work ($what): flops(case) is 0 (DESIGN.md "FLOPs") - no MFU; this operator is read through MBU and its
# top cases are chosen by bytes moved. The tracer checks the 0 (it fails a draft whose reference does matrix work).


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


# ----------------------------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------------------------

_ATTN_KERNEL = r"attn|attention|flash|sdpa|softmax|fa_|_fa"
_PART_KEYWORDS = {
    "attention_proj": [("attn", r"attn|attention|flash|sdpa|softmax"), ("proj", r"matmul|gemm|linear|proj|mm")],
    "ffn": [("up", r"up|ffn1|fc1|w1|gate|act|first"), ("down", r"down|ffn2|fc2|w2|second|out")],
}


def kernel_parts_for(cls: str, part_names: list, kernels: list) -> tuple:
    """({part: [patterns]}, note): patterns from the launched kernel names, matched to parts by keyword."""
    if not kernels:
        generic = {"attn": ["*attn*", "*attention*", "*flash*"], "proj": ["*matmul*", "*gemm*", "*linear*"],
                   "up": ["*up*", "*ffn1*", "*fc1*"], "down": ["*down*", "*ffn2*", "*fc2*"]}
        parts = {p: generic.get(p, [f"*{p}*"]) for p in part_names}
        return parts, "# REVIEW: no Triton kernel launch found (no model_new.py?) - generic patterns: match them to kernel names"
    note = f"# kernels launched by model_new.py: {', '.join(kernels)}"
    if len(part_names) == 1:
        mine = [k for k in kernels if re.search(_ATTN_KERNEL, k, re.I)] if "attention" in cls else []
        if not mine:
            return {part_names[0]: [f"*{k}*" for k in kernels]}, note
        left = [k for k in kernels if k not in mine]
        if left:
            note += f"\n# REVIEW: {', '.join(left)} left to 'other' (no FLOPs of their own: rope, copies?)"
        return {part_names[0]: [f"*{k}*" for k in mine]}, note
    parts = {p: [] for p in part_names}
    left = []
    for kname in kernels:
        for part, rx in _PART_KEYWORDS.get(cls, []):
            if part in parts and re.search(rx, kname, re.I):
                parts[part].append(f"*{kname}*")
                break
        else:
            left.append(kname)
    if cls == "ffn" and left and not any(parts.values()) and len(kernels) == 2:
        parts = {"up": [f"*{kernels[0]}*"], "down": [f"*{kernels[1]}*"]}  # launch order: up first
        left = []
    if left or not all(parts.values()):
        note += f"\n# REVIEW: kernels not assigned to a part ({', '.join(left) or 'none'}); parts without a pattern " \
                f"({', '.join(p for p, v in parts.items() if not v) or 'none'})"
    return parts, note


def _fmt_parts(parts: dict) -> str:
    inner = ",\n".join(f"    {k!r}: {v!r}" for k, v in parts.items())
    return "{\n" + inner + ",\n}"


def _name_or_pos(name, cv: CaseView, default_pos: int):
    return name if name is not None else cv.info.order[default_pos]


def _layout_guess(f: ModelFeatures, cv: CaseView, q: str) -> tuple:
    src = f.source
    if re.search(r"\[\s*b\w*\s*,\s*(h|n)\w*\s*,\s*s\w*", src, re.I):
        return "BNSD", ""
    if re.search(r"\[\s*b\w*\s*,\s*s\w*\s*,\s*(h|n)\w*", src, re.I):
        return "BSND", ""
    return "BNSD", "  # REVIEW: layout guessed (no [b, h, s, d] / [b, s, h, d] in model.py); BSND if seq is axis 1"


def _seq_lengths_differ(cv: CaseView, q: str, k: str, layout_attr, layout: str) -> bool:
    """True when some case has s_q != s_k (the causal alignment matters there)."""
    from mfulib.flops.contract import attention_dims
    for info, case in zip(cv.all_infos, cv.cases):
        lay = info.attrs.get(layout_attr, layout) if layout_attr else layout
        try:
            dims = attention_dims(case, q, k, k, lay, info.attrs.get("head_num"))
        except (ValueError, KeyError, TypeError):
            continue
        if dims["s_q"] != dims["s_k"]:
            return True
    return False


def render(cls: str, why: list, f: ModelFeatures, cv: CaseView, op: str, kernels: list) -> str:
    """The draft's source text for class ``cls``."""
    fill = {"op": op, "cls": cls, "why": "; ".join(why)}
    imports = ["shape", "attr"]
    tensors = [t.name for t in cv.info.tensors]
    exact = vector_program(f.source, cv) if cls in ("elementwise", "reduction") else (None, "")
    linear = f.called("linear", "Linear") and not (f.matmul_ops or f.called("matmul", "bmm", "mm"))
    if cls == "matmul" and len(tensors) >= 2:
        body = string.Template(T_MATMUL).substitute(a=tensors[0], b=tensors[1], linear_first=str(linear))
        imports += ["matmul_flops"]
        part_names = ["matmul"]
        extra_import = "import math\n"
    elif cls == "ffn":
        x = cv.tensor(r"x|input|hidden\w*|inp") or tensors[0]
        w1 = cv.tensor(r"w1|weight1|fc1\w*|w_up|up\w*", exclude=(x,)) or tensors[1]
        w2 = cv.tensor(r"w2|weight2|fc2\w*|w_down|down\w*", exclude=(x, w1)) or tensors[2]
        act = cv.attr(r"^activation$|^act") or "activation"
        body = string.Template(T_FFN).substitute(x=x, w1=w1, w2=w2, act=act, gated=repr(GATED_ACTIVATIONS),
                                                 linear=str(linear))
        imports += ["ffn_parts"]
        part_names = ["up", "down"]
        extra_import = ""
    elif cls == "attention_proj":
        x = next((t.name for t in cv.info.tensors if len(t.shape) == 3 and t.dtype in FLOAT_DTYPES),
                 tensors[0] if tensors else "x")
        heads = cv.attr(r"head_num|num_heads|n_heads|^heads$")
        causal = cv.attr(r"causal")
        heads_check = (f'    heads = int(attr(case, "{heads}"))\n    if heads <= 0 or hidden % heads:\n'
                       f'        raise ValueError(f"case rejected: hidden {{hidden}} not divisible by {heads} {{heads}}")\n'
                       if heads else "")
        causal_expr = f'bool(attr(case, "{causal}", False))' if causal else \
            ("True  # REVIEW: model.py masks scores but the cases name no causal flag" if
             f.called("masked_fill", "tril", "triu") else "False")
        body = string.Template(T_MHA).substitute(x=x, heads_check=heads_check, causal_expr=causal_expr, n_proj=4)
        imports += ["matmul_flops", "attention_pairs", "attention_flops"]
        part_names = ["proj", "attn"]
        extra_import = ""
    elif cls == "npu_fusion_attention":
        q = cv.tensor(r"q|query") or tensors[0]
        k = cv.tensor(r"k|key") or tensors[1]
        v = cv.tensor(r"v|value") or tensors[2]
        body = string.Template(T_NPU_FA).substitute(
            q=q, k=k, v=v, mode=cv.attr(r"sparse_mode") or "sparse_mode", layout=cv.attr(r"input_layout") or "input_layout",
            heads=cv.attr(r"head_num|num_heads") or "head_num", pre=cv.attr(r"pre_tock|pre_tok") or "pre_tockens",
            next=cv.attr(r"next_tock|next_tok") or "next_tockens",
            has_mask=str(bool(cv.tensor(r"atten_mask|attn_mask|mask", floating=False))))
        imports += ["attention_dims", "attention_flops", "npu_sparse_pairs"]
        part_names = ["attn"]
        extra_import = ""
    elif cls in ("npu_fused_infer_attention", "sparse_flash_attention", "lightning_indexer"):
        body, imports, part_names = render_npu_attention(cls, f, cv, tensors)
        extra_import = "import math\n" if cls == "sparse_flash_attention" else ""
    elif cls in ("attention", "gqa_attention", "window_attention", "sparse_attention", "paged_attention"):
        q = cv.tensor(r"q|query|xq") or tensors[0]
        k = cv.tensor(r"k|key|xk") or tensors[1]
        v = cv.tensor(r"v|value|xv") or tensors[2]
        layout_attr = cv.attr(r"input_layout|^layout$")
        if layout_attr:
            layout, layout_note, layout_expr = "BNSD", "", f'attr(case, "{layout_attr}")'
        else:
            layout, layout_note = _layout_guess(f, cv, q)
            layout_expr = "LAYOUT"
        heads = cv.attr(r"head_num|num_heads|n_heads")
        head_arg = f', int(attr(case, "{heads}"))' if heads and layout_attr else ""
        causal = cv.attr(r"causal")
        causal_expr = f'bool(attr(case, "{causal}", False))' if causal else \
            ("True  # REVIEW: model.py masks scores but the cases name no causal flag"
             if f.called("masked_fill", "tril", "triu") else "False")
        s_differs = _seq_lengths_differ(cv, q, k, layout_attr, layout)
        bottom = bool(re.search(r"s_?kv?\w*\s*-\s*s_?q|bottom", f.source, re.I))
        align = "bottom_right" if bottom else "top_left"
        align_note = "" if not (causal and s_differs) else \
            "  # REVIEW: s_q != s_k in some cases - top_left (torch SDPA) or bottom_right (FlashAttention-2)?"
        window = cv.attr(r"window")
        window_line = (f'    window_left = attr(case, "{window}", -1)   # REVIEW: keys i - window_left .. i; -1 = unlimited\n'
                       if window else "    window_left = None\n")
        lengths = cv.attr(r"actual_seq|seq_len|seqlen")
        topk_attr, block_attr = cv.attr(r"^topk$|^top_k$|n_select|num_selected"), cv.attr(r"block_size|blk")
        if cls == "sparse_attention" and lengths:
            body_t = string.Template(BODY_VARLEN).substitute(lengths=lengths)
        elif cls == "sparse_attention" and topk_attr:
            body_t = string.Template(BODY_TOPK_BLOCKS).substitute(
                topk=topk_attr, block=f'int(attr(case, "{block_attr}", 1))' if block_attr else "1")
        else:
            body_t = {"sparse_attention": BODY_SPARSE, "paged_attention": BODY_PAGED}.get(cls, BODY_DENSE)
        body = string.Template(T_ATTENTION).substitute(
            layout=layout, layout_note=layout_note, align=align, align_note=align_note, causal_expr=causal_expr,
            window_line=window_line, q=q, k=k, v=v, layout_expr=layout_expr, head_arg=head_arg, body=body_t)
        imports += ["attention_dims", "attention_pairs", "attention_flops"]
        part_names = ["attn"]
        extra_import = ""
    elif cls == "grouped_matmul" and len(tensors) >= 2:
        x = cv.tensor(r"x|input|a|mat_a") or tensors[0]
        w = cv.tensor(r"w|weight|b|mat_b|weights", exclude=(x,)) or tensors[1]
        body = string.Template(T_GROUPED).substitute(x=x, w=w)
        imports += ["matmul_flops"]
        part_names = ["matmul"]
        extra_import = "import math\n"
    elif cls == "conv":
        x = tensors[0] if tensors else "x"
        names = {key: cv.attr(rx) or dflt for key, rx, dflt in (
            ("out_ch", r"out_channels|out_ch|c_out", "out_channels"), ("kernel", r"kernel", "kernel_size"),
            ("stride", r"stride", "stride"), ("padding", r"padding|pad", "padding"),
            ("dilation", r"dilation", "dilation"), ("groups", r"groups", "groups"))}
        body = string.Template(T_CONV).substitute(x=x, **names)
        part_names = ["conv"]
        extra_import = "import math\n"
    elif cls == "rnn":
        x = next((t.name for t in cv.info.tensors if t.dtype in FLOAT_DTYPES), tensors[0] if tensors else "x")
        hidden = cv.attr(r"hidden_size|hidden|n_hidden|h_size")
        bf = cv.attr(r"batch_first")
        body = string.Template(T_RNN).substitute(
            x=x, hidden=hidden or "hidden_size", layers=cv.attr(r"num_layers|n_layers|layers") or "num_layers",
            bidir=cv.attr(r"bidirectional") or "bidirectional", batch_first=bf or "batch_first",
            h_note="" if hidden else "  # REVIEW: no hidden-size attribute in the cases: where does H come from?",
            bf_note="" if bf else "  # REVIEW: layout [T, B, I] assumed (batch_first=False, nn.LSTM's default)")
        imports = ["shape", "attr", "matmul_flops"]
        part_names = ["lstm"]
        extra_import = ""
    elif cls in ("elementwise", "reduction") and exact[0] is not None:
        body = string.Template(T_VECTOR_EXACT).substitute(part=cls, vector_body="\n".join(exact[0]),
                                                          helpers=exact[1])
        imports = ["shape", "attr"]
        part_names = [cls]
        extra_import = "import math\n"
    elif cls == "pooling" or (cls == "reduction" and f.called(*_ORDER_CALLS)):
        x = next((t.name for t in cv.info.tensors if t.dtype in FLOAT_DTYPES), tensors[0] if tensors else "x")
        what = "pooling: sums/maxima over windows" if cls == "pooling" else "comparisons and selection"
        body = string.Template(T_NOMATRIX).substitute(what=what, part=cls, x=x)
        imports = ["numel"]
        part_names = [cls]
        extra_import = ""
    elif cls in ("norm", "softmax", "elementwise", "reduction"):
        extra_vector_import = ""
        x = next((t.name for t in cv.info.tensors if t.dtype in FLOAT_DTYPES), tensors[0] if tensors else "x")
        vbody = f'    return float(OPS_PER_ELEMENT * numel(case, "{x}"))'
        imports = ["numel"]
        x_shape = next((list(t.shape) for t in cv.info.tensors if t.name == x), None)
        residual = [t.name for t in cv.info.tensors if t.dtype in FLOAT_DTYPES and t.name != x
                    and list(t.shape) == x_shape] if cls == "norm" else []
        if cls == "norm":
            rms = f.called("rms_norm", "RMSNorm", "rsqrt") and not f.called("layer_norm", "LayerNorm", "var", "mean_var")
            if rms:
                ops, note = 4, "x^2, mean, * 1/rms, * weight per element; + eps, rsqrt per row: RMSNorm convention"
                vbody = (f'    x = shape(case, "{x}")\n'
                         f'    return float(OPS_PER_ELEMENT * numel(case, "{x}") + 2 * math.prod(x[:-1]))')
                imports += ["shape"]
                extra_vector_import = "import math\n"
            else:
                ops, note = 5, "sum (mean), centre, square, sum (var), normalise per element: LayerNorm convention"
                affine = [t for t in ("weight", "bias") if cv.tensor(t) or f.has_token(t)]
                vbody = (f'    # + 1 per element for each affine tensor the case gives (weight, bias: optional per case)\n'
                         f'    extra = {" + ".join(f"has(case, {t!r})" for t in affine) or "0"}\n'
                         f'    return float((OPS_PER_ELEMENT + extra) * numel(case, "{x}"))')
                imports += ["has"]
        elif cls == "softmax":
            ops, note = 5, "max, subtract, exp, sum, divide per element: softmax convention"
        else:
            n = sum(len(f.calls.get(p, [])) for p in _POINTWISE)
            ops, note = max(n, 1), ("REVIEW: one FLOP per pointwise op per element; count the ops of forward() "
                                    f"(not derived: {exact[1]})")
        if residual:  # fused residual + norm: x + residual is one more add per element (vector work)
            ops, note = ops + 1, note + f"; + 1 for the residual add ({x} + {residual[0]})"
        body = string.Template(T_VECTOR).substitute(ops=ops, ops_note=note, part=cls, x=x, vector_body=vbody)
        part_names = [cls]
        extra_import = extra_vector_import
    else:
        body = string.Template(T_UNKNOWN).substitute(why="; ".join(why))
        imports = ["shape", "attr"]
        part_names = []
        extra_import = ""
    if part_names:
        parts, kernel_note = kernel_parts_for(cls, part_names, kernels)
        fill["kernel_parts"] = _fmt_parts(parts)
    else:
        fill["kernel_parts"], kernel_note = "{}", "# REVIEW: define the parts once flops() is written"
    fill["kernel_note"] = kernel_note
    fill["imports"] = ", ".join(dict.fromkeys(imports))
    head = string.Template(HEADER).substitute(fill)
    if extra_import:
        head = head.replace("from mfulib.flops.contract", extra_import + "\nfrom mfulib.flops.contract", 1)
    if cls == "npu_fused_infer_attention":  # the draft reads sparse_mode, the mask flag, actual_seq_lengths[_kv]
        reminders = ""                      # and query_rope; the op has no dropout
    else:
        reminders = review_reminders(cls, f, masks_handled=cls != "npu_fusion_attention" and bool(cv.attr(r"causal")))
    return head + reminders + body


def review_reminders(cls: str, f: ModelFeatures, masks_handled: bool = False) -> str:
    """REVIEW comments pointing at model.py lines the FLOPs may depend on (masks, rope, dropout, varlen);
    ``masks_handled``: the draft reads a causal flag, so a mask in model.py is accounted for."""
    lines = []
    checks = [(r"masked_fill|tril|triu|attn_mask|atten_mask", "a mask: does flops.py keep only its unmasked pairs?"),
              (r"rope|rotary|\.cos\(|\.sin\(", "rope: elementwise, not counted"),
              (r"dropout|keep_prob", "dropout: changes no FLOPs"),
              (r"actual_seq|cu_seqlens|seq_lens|varlen", "variable lengths: count the real lengths, not the padded one")]
    if cls in ("matmul", "ffn", "norm", "softmax", "elementwise", "conv", "unknown"):
        checks = checks[3:] if cls == "unknown" else []
    if masks_handled:
        checks = checks[1:]
    for rx, what in checks:
        hits = f.token_lines(rx)
        if hits:
            lines.append(f"# REVIEW: model.py line(s) {', '.join(map(str, hits[:8]))}: {what}")
    return ("\n" + "\n".join(lines) + "\n") if lines else ""


def generate(model_py: str, cases_path: str, impl_py: str | None = None, op: str | None = None) -> dict:
    """Classify ``model_py`` with ``cases_path`` and return {"class", "reasons", "source", "review_lines",
    "kernels"}; ``review_lines`` = [(line, text)] of the draft's REVIEW markers."""
    feats = analyze_model(model_py)
    cv = read_case_view(cases_path)
    cls, why = classify(feats, cv)
    kernels = launched_kernels(impl_py)
    op = op or os.path.splitext(os.path.basename(cases_path))[0].replace("_perf_cases", "")
    src = render(cls, why, feats, cv, op, kernels)
    compile(src, "flops.py", "exec")  # a draft must at least be valid Python
    review = [(i, ln.strip()) for i, ln in enumerate(src.splitlines(), 1) if REVIEW_MARK in ln]
    return {"class": cls, "reasons": why, "source": src, "review_lines": review, "kernels": kernels}
