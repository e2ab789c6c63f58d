"""Which kind of operator a reference is (:mod:`mfulib.flops.drafts`): its class, read from evidence in its AST.

:func:`classify` tries the classes of :data:`CLASSES` in that order and returns the first whose evidence is
present, with the reasons (see the package docstring for what each class needs). The call-name tables here are
also what the renderer uses to pick between templates of one class (:data:`ORDER_CALLS`, :data:`POINTWISE_CALLS`).
"""
from __future__ import annotations

from mfulib.flops.drafts.evidence import CaseView, ModelFeatures

CLASSES = ("npu_fused_infer_attention", "sparse_flash_attention", "lightning_indexer", "npu_fusion_attention",
           "paged_attention", "sparse_attention", "window_attention", "gqa_attention", "attention_proj", "attention",
           "ffn", "grouped_matmul", "rnn", "matmul", "conv", "pooling", "reduction", "norm", "softmax",
           "elementwise", "unknown")

_ATTN_CALLS = ("scaled_dot_product_attention", "npu_fusion_attention", "npu_fused_infer_attention_score",
               "npu_prompt_flash_attention", "npu_incre_flash_attention", "flash_attn_func",
               "flash_attn_varlen_func")
_MATMUL_CALLS = ("matmul", "bmm", "mm", "linear", "Linear", "einsum", "addmm", "baddbmm", "tensordot")
_NORM_CALLS = ("layer_norm", "LayerNorm", "rms_norm", "RMSNorm", "group_norm", "GroupNorm", "batch_norm",
               "BatchNorm1d", "BatchNorm2d", "instance_norm", "rsqrt")
_POOL_CALLS = tuple(f"{k}_pool{n}d" for k in ("avg", "max", "adaptive_avg", "adaptive_max", "lp")
                    for n in (1, 2, 3)) + \
    tuple(f"{k}Pool{n}d" for k in ("Avg", "Max", "AdaptiveAvg", "AdaptiveMax", "LP") for n in (1, 2, 3))
ORDER_CALLS = ("topk", "sort", "argsort", "argmax", "argmin", "kthvalue", "msort")
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
    if f.called("LSTM", "lstm", "npu_lstm"):   # before matmul: an LSTM's gate GEMMs dominate a head Linear's
        return "rnn", ["LSTM: four gate GEMMs per time step"]
    if _n_matmuls(f):
        return "matmul", [f"{_n_matmuls(f)} matmul call(s)"]
    if f.called(*_CONV_CALLS):
        return "conv", ["convolution call"]
    if f.called(*_POOL_CALLS):
        return "pooling", ["pooling (no matrix work)"]
    if f.called(*ORDER_CALLS):
        return "reduction", ["sort / top-k / arg-reduction (comparisons, no matrix work)"]
    if f.called(*_NORM_CALLS) or f.has_token(r"(^|_)(layer|rms|group|batch|instance)_?norm|^rms"):
        return "norm", ["normalisation"]
    if f.called("softmax", "log_softmax", "_softmax"):
        return "softmax", ["softmax without matrix work"]
    value_reductions = [n for n in _VALUE_REDUCTIONS if f.called(n)]
    if value_reductions:
        return "reduction", [f"value reduction(s) {', '.join(value_reductions)} (no matrix work)"]
    elementwise = [n for n in f.calls if n in POINTWISE_CALLS]
    if elementwise:
        return "elementwise", [f"pointwise/reduction ops: {', '.join(sorted(elementwise)[:6])}"]
    return "unknown", ["no recognised compute call in the reference"]


_VALUE_REDUCTIONS = ("sum", "mean", "amax", "amin", "var", "std", "prod", "nansum", "logsumexp")
POINTWISE_CALLS = {"add", "sub", "mul", "div", "exp", "log", "sigmoid", "tanh", "relu", "gelu", "silu", "sum", "mean",
              "max", "min", "pow", "sqrt", "abs", "clamp", "where", "neg", "cumsum", "prod", "amax", "argmax",
              "erf", "sin", "cos", "square", "reciprocal", "norm", "var", "std", "logsumexp", "logaddexp",
              "logaddexp2", "hypot", "atan2", "maximum", "minimum", "remainder", "fmod", "rsqrt", "log1p", "expm1"}
