"""Fill a flops.py draft (:mod:`mfulib.flops.drafts`): the template of the reference's class, with its input names.

:func:`render` picks the template of a class (:mod:`mfulib.flops.drafts.templates`, attention ones from
:mod:`mfulib.flops.drafts.attention`, exact vector counts from :mod:`mfulib.flops.drafts.vector`), fills it with the
case file's input and attribute names, guesses what the case file does not say (layout, causal alignment, window)
with a REVIEW marker, and adds ``KERNEL_PARTS`` (:mod:`mfulib.flops.drafts.parts`) and REVIEW reminders pointing at
the model.py lines the count may depend on. :func:`generate` runs the whole chain for one reference and case file.
"""
from __future__ import annotations

import os
import re
import string
import textwrap

from mfulib.core.definitions import FLOAT_DTYPES
from mfulib.core.symbol_rules import decode_key_axis
from mfulib.flops.contract import REVIEW_MARK
from mfulib.flops.drafts.attention import (BODY_DENSE, BODY_PAGED, BODY_SPARSE, BODY_TOPK_BLOCKS, BODY_VARLEN,
                                           T_ATTENTION, T_DECODE, T_MHA, T_NPU_FA, render_npu_attention)
from mfulib.flops.drafts.classes import ORDER_CALLS, classify
from mfulib.flops.drafts.evidence import (CaseView, ModelFeatures, analyze_model, forward_params, launched_kernels,
                                         lstm_construction, read_case_view)
from mfulib.flops.drafts.parts import format_parts, kernel_parts_for
from mfulib.flops.drafts.templates import (HEADER, T_CONV, T_FFN, T_GROUPED, T_MATMUL, T_NOMATRIX, T_RNN, T_SKELETON,
                                           T_UNKNOWN, T_VECTOR, T_VECTOR_EXACT)
from mfulib.flops.drafts.vector import HELPERS, tensor_ops, vector_program

GATED_ACTIVATIONS = ("swiglu", "geglu", "reglu", "glu")
_LIBRARY_ROW_OPS = ("layer_norm", "LayerNorm", "group_norm", "GroupNorm", "native_group_norm", "native_layer_norm",
                    "batch_norm", "BatchNorm1d", "BatchNorm2d", "rms_norm", "RMSNorm", "instance_norm", "softmax",
                    "log_softmax", "_softmax")


class CannotDraft(ValueError):
    """A class drafter cannot write the count from what model.py and the case file show; the message says why and
    what to read. :func:`generate` turns it into a skeleton draft (REVIEW lines, a flops() that raises)."""


def _padded_index_inputs(cv: CaseView) -> list:
    """Integer tensor inputs drawn with negative values in some case (``"range": [-1, n]``): -1-padded indices?"""
    out = []
    for case in cv.cases:
        for spec in case.get("inputs", []):
            rng = spec.get("range") if isinstance(spec, dict) else None
            if spec.get("type") == "tensor" and str(spec.get("dtype", "")).startswith(("int", "uint")) and \
                    isinstance(rng, (list, tuple)) and rng and rng[0] < 0 and spec["name"] not in out:
                out.append(spec["name"])
    return out


def _three_d_without_layout(cv: CaseView, q: str, cls: str) -> None:
    """Raise :class:`CannotDraft` when q is 3-D in some case and no layout attribute says how to read it: TND
    [T, N, D] and BSH [B, S, N*D] both fit, and BSH needs the head count; a 4-D guess would reject every case."""
    ranks = {len(info.tensor(q).shape) for info in cv.all_infos if q in {t.name for t in info.tensors}}
    if 3 not in ranks:
        return
    why = (f"{q} is 3-D in the cases and no input_layout / layout attribute says TND [T, N, D] or BSH [B, S, N*D] "
           f"(heads?) - read forward() for the layout, then count with attention_dims(case, ..., layout, heads)")
    padded = _padded_index_inputs(cv)
    if padded:
        why += (f"; {', '.join(padded)}: integer input drawn with negatives (a -1-padded key index?) - count only "
                f"its valid entries (def flops(case, args) reads the seeded draw), not every slot")
    raise CannotDraft(f"{cls}: {why}")


def _qkv(cv: CaseView, tensors: list) -> tuple:
    """(query, key, value) input names of an attention: by name, else the first three tensors (None past the end)."""
    pick = [cv.tensor(r"q|query|xq"), cv.tensor(r"k|key|xk"), cv.tensor(r"v|value|xv")]
    return tuple(n or (tensors[i] if len(tensors) > i else None) for i, n in enumerate(pick))


def _decode(cv: CaseView, tensors: list):
    """{q, k, v, l_axis} of a decode attention without a layout attribute (a 3-D query beside 4-D keys: the key
    length axis as the search's symbol analysis reads it, :func:`mfulib.core.symbol_rules.decode_key_axis`), else
    None."""
    q, k, v = _qkv(cv, tensors)
    if None in (q, k, v) or cv.attr(r"input_layout|^layout$"):
        return None
    axis = decode_key_axis(cv.all_infos, q, k)
    return None if axis is None else {"q": q, "k": k, "v": v, "l_axis": axis}


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


def render(cls: str, why: list, f: ModelFeatures, cv: CaseView, op: str, kernels: list, recorded=None) -> str:
    """The draft's source text for class ``cls``; ``recorded``: the seeded draw's per-case counts a data-dependent
    draft records (sparse attention's selected keys), or why there are none. Exceptions propagate (see
    :func:`generate`, which turns them into a skeleton)."""
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
                       f'        raise ValueError(f"case rejected: hidden {{hidden}} not divisible by {heads} '
                       f'{{heads}}")\n'
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
            q=q, k=k, v=v, mode=cv.attr(r"sparse_mode") or "sparse_mode",
            layout=cv.attr(r"input_layout") or "input_layout",
            heads=cv.attr(r"head_num|num_heads") or "head_num", pre=cv.attr(r"pre_tock|pre_tok") or "pre_tockens",
            next=cv.attr(r"next_tock|next_tok") or "next_tockens",
            has_mask=str(bool(cv.tensor(r"atten_mask|attn_mask|mask", floating=False))))
        imports += ["attention_dims", "attention_flops", "npu_sparse_pairs"]
        part_names = ["attn"]
        extra_import = ""
    elif cls in ("npu_fused_infer_attention", "sparse_flash_attention", "lightning_indexer"):
        body, imports, part_names = render_npu_attention(cls, f, cv, tensors, recorded)
        extra_import = "import math\n" if cls == "sparse_flash_attention" else ""
    elif cls in ("attention", "gqa_attention") and (dec := _decode(cv, tensors)) is not None:
        body = string.Template(T_DECODE).substitute(dec)  # a decode query [B, Hq, D] beside keys [B, ?, ?, D]
        imports += ["attention_flops"]
        part_names = ["attn"]
        extra_import = ""
    elif cls in ("attention", "gqa_attention", "window_attention", "sparse_attention", "paged_attention"):
        q, k, v = _qkv(cv, tensors)
        if None in (q, k, v):
            raise CannotDraft(f"{cls}: fewer than three tensor inputs and no query / key / value by name")
        layout_attr = cv.attr(r"input_layout|^layout$")
        if layout_attr:
            layout, layout_note, layout_expr = "BNSD", "", f'attr(case, "{layout_attr}")'
        else:
            _three_d_without_layout(cv, q, cls)
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
        window_line = (f'    window_left = attr(case, "{window}", -1)   '
                       f'# REVIEW: keys i - window_left .. i; -1 = unlimited\n'
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
        glist_t = cv.tensor(r"group_list|offs|offsets|group_offsets|expert_tokens", floating=False)
        glist_a = cv.attr(r"^group_list$|^offs$|offsets|group_list_data|expert_tokens")
        gtype = cv.attr(r"group_list_type|group_type")
        pos = {n: (forward_params(f.source).index(n) if n in forward_params(f.source) else i)
               for i, n in enumerate(cv.info.order)}
        if glist_t:     # a tensor of the seeded draw: flops(case, args) reads its values
            read = f"args[{pos[glist_t]}] if args is not None and len(args) > {pos[glist_t]} else None"
        else:
            read = f'attr(case, GROUP_LIST, None)' if glist_a else "None"
        body = string.Template(T_GROUPED).substitute(
            x=x, w=w, glist_expr=repr(glist_t or glist_a), gtype_expr=repr(gtype), glist_read=read,
            args_param=", args" if glist_t else "", args_arg=", args" if glist_t else "")
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
        h0 = cv.tensor(r"h0|h_0|hx|h|init_h|hidden_state|h_state")
        sources = [("attr", hidden)] if hidden else []
        sources += [(kind, name) for kind, name in (
            ("bias", cv.tensor(r"bias|b|b_ih|bias_ih\w*")), ("state", h0),
            ("state", cv.tensor(r"c0|c_0|cx|c|init_c")), ("w_hh", cv.tensor(r"w_hh|weight_hh\w*"))) if name]
        layers = cv.attr(r"num_layers|n_layers|layers")
        module, line, not_literal = lstm_construction(f.source)
        module = {k: v for k, v in module.items() if k in ("input_size", "hidden_size", "num_layers", "batch_first",
                                                          "bidirectional")}
        module_note = (f"model.py line {line}: nn.LSTM's literal arguments, used where the case gives none"
                       if line else "no nn.LSTM(...) in model.py")
        covered = {"hidden_size": sources, "num_layers": layers, "batch_first": bf,
                   "bidirectional": cv.attr(r"bidirectional")}          # the case gives these; input_size is x's
        not_literal = [n for n in not_literal if n in covered and not covered[n]]
        if not_literal:
            module_note += f"\n# REVIEW: nn.LSTM's {', '.join(not_literal)} (line {line}) not literal: give them here"
        proj = lstm_construction(f.source)[0].get("proj_size", 0)
        if proj:
            module_note += f"\n# REVIEW: proj_size={proj}: W_hh is [4H, P] and h_t is projected - adjust the count"
        body = string.Template(T_RNN).substitute(
            module=repr(module), module_note=module_note,
            x=x, hidden_from=repr(sources), layers=layers or "num_layers",
            layers_fallback=(f'max(1, shape(case, "{h0}")[0] // dirs) if has(case, "{h0}") and '
                             f'len(shape(case, "{h0}")) == 3 else 1') if h0 else "1",
            bidir=cv.attr(r"bidirectional") or "bidirectional", batch_first=bf or "batch_first",
            bf_note="" if bf or "batch_first" in module else
            "  # REVIEW: layout [T, B, I] assumed (batch_first=False, nn.LSTM's default)")
        heads = f.lines(*("Linear", "linear", "matmul", "bmm", "mm", "@"))
        if heads:
            body += (f"\n# REVIEW: model.py line(s) {', '.join(map(str, heads[:8]))} also multiply matrices (a head "
                     "Linear?): add them as a part\n")
        imports = ["shape", "attr", "has", "matmul_flops"]
        part_names = ["lstm"]
        extra_import = ""
    elif cls in ("elementwise", "reduction") and exact[0] is not None:
        body = string.Template(T_VECTOR_EXACT).substitute(part=cls, vector_body="\n".join(exact[0]),
                                                          helpers=exact[1])
        imports = ["shape", "attr"]
        part_names = [cls]
        extra_import = "import math\n"
    elif cls == "pooling" or (cls == "reduction" and f.called(*ORDER_CALLS)):
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
            rms = f.called("rms_norm", "RMSNorm", "rsqrt") and \
                not f.called("layer_norm", "LayerNorm", "var", "mean_var")
            if rms:
                ops, note = 4, "x^2, mean, * 1/rms, * weight per element; + eps, rsqrt per row: RMSNorm convention"
                vbody = (f'    x = shape(case, "{x}")\n'
                         f'    return float(OPS_PER_ELEMENT * numel(case, "{x}") + 2 * math.prod(x[:-1]))')
                imports += ["shape"]
                extra_vector_import = "import math\n"
            else:
                ops, note = 5, "sum (mean), centre, square, sum (var), normalise per element: LayerNorm convention"
                affine = [t for t in cv.floats() if re.fullmatch(r"weight|bias|gamma|beta", t, re.I)] or \
                    [t for t in ("weight", "bias") if f.has_token(t)]
                vbody = ('    # + 1 per element for each affine tensor the case gives (weight, bias: optional per '
                         'case)\n'
                         f'    extra = {" + ".join(f"has(case, {t!r})" for t in affine) or "0"}\n'
                         f'    return float((OPS_PER_ELEMENT + extra) * numel(case, "{x}"))')
                imports += ["has"]
        elif cls == "softmax":
            ops, note = 5, "max, subtract, exp, sum, divide per element: softmax convention"
        else:
            ops, note = 0, ""
        # the other element-wise ops of forward(), never dropped (softcap, swish, a residual add); a norm written
        # out op by op is already the convention's count, so only a library norm / softmax call gets them added
        extra = tensor_ops(f.source, _tensor_params(f, cv)) if cls not in ("norm", "softmax") or \
            f.called(*_LIBRARY_ROW_OPS) else []
        if extra:   # every element-wise op of forward() by the table - never dropped (softcap, swish, residual)
            listed = ", ".join(f"{a} {c} (line {ln})" for a, c, ln, _ in extra)
            ops += sum(c for _, c, _, _ in extra)
            note = (note + "; + " if note else "") + f"forward()'s element-wise ops by the table: {listed}"
            residual = []
        if cls in ("elementwise", "reduction"):
            ops = max(ops, 1)
            note = f"REVIEW: guessed, forward() not re-played exactly ({exact[1]}); " + (note or "one op per element")
            floats = [t.name for t in cv.info.tensors if t.dtype in FLOAT_DTYPES]
            vbody = ("    # element-wise ops count at the OUTPUT shape: the broadcast of the inputs' shapes, or - where\n"
                     "    # forward() indexes or reshapes an input first (cos[None, :, None, :]) so that the raw shapes do\n"
                     "    # not broadcast - the largest input's size (REVIEW)\n"
                     f"    shapes = [shape(case, n) for n in {floats!r} if has(case, n)]\n"
                     "    try:\n"
                     "        out = math.prod(_broadcast(*shapes))\n"
                     "    except ValueError:\n"
                     "        out = max(math.prod(s) for s in shapes)\n"
                     "    return float(OPS_PER_ELEMENT * out)\n" + HELPERS["broadcast"])
            imports = ["shape", "has"]
            extra_vector_import = "import math\n"
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
        fill["kernel_parts"] = format_parts(parts)
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
              (r"actual_seq|cu_seqlens|seq_lens|varlen",
               "variable lengths: count the real lengths, not the padded one")]
    if cls in ("matmul", "ffn", "norm", "softmax", "elementwise", "conv", "unknown"):
        checks = checks[3:] if cls == "unknown" else []
    if masks_handled:
        checks = checks[1:]
    for rx, what in checks:
        hits = f.token_lines(rx)
        if hits:
            lines.append(f"# REVIEW: model.py line(s) {', '.join(map(str, hits[:8]))}: {what}")
    return ("\n" + "\n".join(lines) + "\n") if lines else ""


def _tensor_params(f: ModelFeatures, cv: CaseView) -> set:
    """forward()'s parameters that receive a tensor in the cases (by name, else by the case file's order)."""
    names = forward_params(f.source)
    tensor_names = {t.name for t in cv.info.tensors}
    out = {n for n in names if n in tensor_names}
    out |= {names[i] for i, n in enumerate(cv.info.order) if i < len(names) and n in tensor_names}
    return out


def record_selected_keys(opdir, f: ModelFeatures, cv: CaseView, seed: int = 0):
    """{case id: valid sparse_indices entries} in the seeded draw of each case (the inputs verify and collect
    use, built as the checker builds them: :func:`mfulib.flops.tracer.build_reference_args`), or a string saying
    why they could not be counted. An entry is valid up to the first -1 of its row (padding)."""
    import torch
    from mfulib.flops.tracer import build_reference_args
    idx = cv.tensor(r"sparse_indices|\w*indices|topk\w*", floating=False) or "sparse_indices"
    names = forward_params(f.source)
    pos = names.index(idx) if idx in names else cv.info.order.index(idx) if idx in cv.info.order else None
    if pos is None:
        return f"no input named {idx} in the case file"
    counts = {}
    try:
        for cid in range(len(cv.cases)):
            arg = torch.as_tensor(build_reference_args(opdir, cid, seed)[pos])
            counts[cid] = int(torch.cumprod((arg >= 0).to(torch.int64), dim=-1).sum().item())
    except Exception as exc:  # the reference's own files failed: the draft still counts at check time
        return f"case {cid}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
    return counts


def skeleton(cls: str, op: str, why: list, exc: BaseException) -> str:
    """The draft written when the class drafter raised: the header, REVIEW lines naming the exception, and a
    flops() that raises until a human writes it."""
    short = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
    why_text = str(exc) if isinstance(exc, CannotDraft) else f"the {cls} drafter raised {short}"
    fill = {"op": op, "cls": cls, "why": "; ".join(why), "imports": "shape, attr", "kernel_parts": "{}",
            "kernel_note": "# REVIEW: define the parts once flops() is written"}
    return string.Template(HEADER).substitute(fill) + string.Template(T_SKELETON).substitute(
        why="\n# REVIEW: ".join(textwrap.wrap("the generator could not write this draft: " + why_text, 108)),
        short=short.replace('"', "'").replace("\\", "/"))


def generate(model_py: str, cases_path: str, impl_py: str | None = None, op: str | None = None,
             opdir=None) -> dict:
    """Classify ``model_py`` with ``cases_path`` and return {"class", "reasons", "source", "review_lines",
    "kernels", "recorded"}; ``review_lines`` = [(line, text)] of the draft's REVIEW markers. ``opdir``
    (:class:`mfulib.core.opdir.OpDir`, optional): where the seeded inputs can be drawn, for the per-case counts a
    data-dependent draft records (``recorded``: {case id: count}, a reason string, or None). A class drafter that
    raises gives a skeleton draft naming the exception (``"skeleton": True``), never a crash. SyntaxError of the
    reference propagates (the CLI says to fix it)."""
    feats = analyze_model(model_py)
    cv = read_case_view(cases_path)
    cls, why = classify(feats, cv)
    kernels = launched_kernels(impl_py)
    op = op or os.path.splitext(os.path.basename(cases_path))[0].replace("_perf_cases", "")
    recorded = None
    if cls == "sparse_flash_attention":
        recorded = record_selected_keys(opdir, feats, cv) if opdir is not None else \
            "no work directory given (flops_generator.py --op-dir records them)"
    try:
        src = render(cls, why, feats, cv, op, kernels, recorded)
        compile(src, "flops.py", "exec")  # a draft must at least be valid Python
        is_skeleton = False
    except Exception as exc:  # a drafter bug or a case layout it does not know: say so in the draft
        src, is_skeleton = skeleton(cls, op, why, exc), True
    review = [(i, ln.strip()) for i, ln in enumerate(src.splitlines(), 1) if REVIEW_MARK in ln]
    return {"class": cls, "reasons": why, "source": src, "review_lines": review, "kernels": kernels,
            "recorded": recorded, "skeleton": is_skeleton}
