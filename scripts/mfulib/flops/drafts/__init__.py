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
    rnn                    LSTM / npu_lstm: the gate GEMMs of every time step, layer and direction
    matmul                 matmul / bmm / mm / linear / einsum / @
    conv                   conv1d/2d/3d / nn.ConvNd
    pooling                avg / max / adaptive pooling, 1-3D: 0 matrix FLOPs
    reduction              sort / top-k / arg-reductions, or value reductions (sum, mean, amax, var ...) over axes
    norm                   layer_norm / rms / group_norm / batch_norm (optional weight / bias per case, residual add)
    softmax                softmax / log_softmax without matrix work
    elementwise            pointwise ops only (Python operators a + b, binary math torch.logaddexp / hypot ...)
    unknown                none of the above: the draft's flops() raises until a human writes it

Each draft reads inputs by the names of the case file, defines ``flops_parts`` and ``KERNEL_PARTS`` (patterns from
the Triton kernels ``model_new.py`` launches, when it is there) and marks with ``REVIEW`` every line whose
semantics the generator guessed (causal alignment, masks, variable lengths, rope, dropout, layouts).
check_flops.py lists the remaining REVIEW lines; matmul, FFN and MHA-block drafts need none.

One concept a module: :mod:`.evidence` (what the reference's AST and the case file show), :mod:`.classes` (the
class), :mod:`.templates` (the non-attention templates), :mod:`.attention` (the attention and torch_npu attention
templates), :mod:`.vector` (exact vector_flops re-played from forward()), :mod:`.parts` (KERNEL_PARTS from the
launched kernels), :mod:`.fill` (filling a template; :func:`generate`, the whole chain).
"""

from mfulib.flops.drafts.classes import CLASSES, classify
from mfulib.flops.drafts.evidence import CaseView, ModelFeatures, analyze_model, launched_kernels, read_case_view
from mfulib.flops.drafts.parts import kernel_parts_for
from mfulib.flops.drafts.fill import GATED_ACTIVATIONS, generate, render, review_reminders

__all__ = ["CLASSES", "GATED_ACTIVATIONS", "CaseView", "ModelFeatures", "analyze_model", "classify", "generate",
           "kernel_parts_for", "launched_kernels", "read_case_view", "render", "review_reminders"]
