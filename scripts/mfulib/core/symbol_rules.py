"""The rules that give a case file's (tensor, axis) positions their meaning, for :mod:`mfulib.core.symbols`.

Each rule reads the case descriptions of one group (:func:`mfulib.core.cases.describe_case`) and names positions
with a kind and an evidence string: layout letters (:func:`kind_for`), matrix products (:func:`matmul_roles`),
sequence-length lists (:func:`seqlen_roles`), grouped-query attention and elimination (:func:`attention_roles`),
chance equalities split off (:func:`split_strays`); and which operands are weights (:func:`weight_names`). The
module docstring of :mod:`mfulib.core.symbols` states the rules as a whole; this module holds their code.
"""
from __future__ import annotations

import re

LAYOUT_KIND = {"B": "batch", "S": "seq", "N": "heads", "D": "head_dim", "H": "hidden", "T": "seq"}
# a convolution's layout (NCHW, NHWC, NCL, NCDHW, ...: it has a channel letter C, attention's never does): N the
# batch, C the channels (like hidden: they stay), the spatial axes D/H/W/L sequence-like (they scale)
CONV_LAYOUT_KIND = {"N": "batch", "C": "hidden", "D": "seq", "H": "seq", "W": "seq", "L": "seq"}

# sequence lengths, and the per-group token counts of a grouped GEMM (MoE): lengths that sum to (or bound) a token
# axis, scaled with it
SEQLEN_ATTR = re.compile(r"seq.?len|seqlen|actual_seq|^(group_list|group_sizes|tokens_per_expert|expert_tokens|"
                         r"m_splits?|split_sizes)$", re.I)
# operands named as weights (weight, weight1, w, w1, wq, w_o, bias, gamma, beta, q_weight, fc1_bias, ...): the
# model's parameters passed as inputs; their axes never scale (scaling them changes the model, not the load)
WEIGHT_NAME = re.compile(r"^(w[qkvo]?|weights?|bias|gamma|beta)(\d+|_\w+)?$|_(weights?|w|bias)\d*$"
                         r"|^(gate|up|down|q|k|v|o|out|in|qkv|kv|fc\d*|dense)_proj\d*$", re.I)
# ... but not the per-token mixing weights that are activations (router top-k weights, attention probabilities):
# their axes are tokens and heads, data that scales
DATA_WEIGHT_NAME = re.compile(r"(^|_)(topk|top_k|attn|attention|routing|router|scores?|probs?|combine)_weights?$"
                              r"|(^|_)(attn|attention|pos|position|rel|rel_pos|relative|alibi|mask|causal)_bias$", re.I)
# operands added to or masking a product's output, or rescaling it (attention masks and biases, ALiBi slopes,
# quantisation scales): never an operand of a product, whatever their shapes (a mask [b, 1, s, s] beside a bias
# [1, h, s, s] would read as a batched matmul)
NOT_PRODUCT_NAME = re.compile(r"mask|bias|alibi|scale", re.I)
# the weight names that are a bias (bias, bias1, fc1_bias): a 1-D addend of a product's output columns
BIAS_NAME = re.compile(r"^bias(\d+|_\w+)?$|_bias\d*$", re.I)
# attention operands by name (also read by :mod:`mfulib.core.symbol_roles`); a *_cache is a paged KV cache
QUERY_NAME = re.compile(r"^(q|query|xq|queries|query_states|q_states)$", re.I)
KEY_NAME = re.compile(r"^(k|key|keys|xk|k_cache|key_cache|key_states|k_states)$", re.I)
VALUE_NAME = re.compile(r"^(v|value|values|xv|v_cache|value_cache|value_states|v_states)$", re.I)
# rotary / positional tables indexed by token position (cos [S, D], sin, freqs_cis, position embeddings): their axis 0
# is the sequence, whatever the activation's rank (x [B, S, N, D] has no position rule for its axis 1)
POSITION_TABLE_NAME = re.compile(r"^(cos|sin)(_\w+)?$|^(freqs?|freqs_cis|inv_freq|rope|rotary)(_\w+)?$"
                                 r"|^(pos|position)_(emb|embedding|embeddings|ids|table)s?$", re.I)


def layout_kind(lay: str, letter: str) -> str:
    """The kind of layout letter ``letter`` in the layout ``lay`` (attention's letters, or a convolution's when the
    layout has a channel letter C); "other" for a letter neither knows."""
    table = CONV_LAYOUT_KIND if "C" in lay and set(lay) <= set(CONV_LAYOUT_KIND) else LAYOUT_KIND
    return table.get(letter, "other")


def weight_names(members) -> dict:
    """{tensor name: evidence} of the weight operands of a group: tensors named as weights (:data:`WEIGHT_NAME`).
    Module parameters and ``get_init_inputs()`` (Model's constructor arguments) are not case inputs at all, so the
    case file cannot scale them (the probe states that evidence from model.py)."""
    return {t.name: f"{t.name} is named as a weight operand (a model parameter passed in): never scaled"
            for t in members[0].tensors if t.shapes is None and WEIGHT_NAME.search(t.name)
            and not DATA_WEIGHT_NAME.search(t.name)
            and not (BIAS_NAME.search(t.name) and len(t.shape) >= 3)}  # a bias [b, h, s, s] is an attention input


def weight_batch_ties(members, weights) -> dict:
    """{(data tensor, axis): weight name} for the leading (batch) axes a data operand shares with a weight it
    multiplies: x [E, C, H] @ weight [E, H, F] (per-expert weights), same rank >= 3, x's last axis equal to the
    weight's axis -2 in every case. The weight stays, so x's E cannot scale alone: the axis is tied to the weight.
    Without such a product, a convolution's input channels (x [N, C, L] with weight [O, C, K], no layout attribute:
    :func:`_conv_channels`) are tied the same way."""
    ties = {}
    tensors = [t for t in members[0].tensors if t.shapes is None and len(t.shape) >= 3]
    for a in tensors:
        for b in tensors:
            if a is b or a.name in weights or b.name not in weights or len(a.shape) != len(b.shape):
                continue
            if all(c.tensor(a.name).shape[-1] == c.tensor(b.name).shape[-2] for c in members):
                for ax in range(len(a.shape) - 2):
                    if all(c.tensor(a.name).shape[ax] == c.tensor(b.name).shape[ax] for c in members):
                        ties.setdefault((a.name, ax), b.name)
            elif _conv_channels(members, a.name, b.name):
                ties.setdefault((a.name, 1), b.name)
    return ties


def _conv_channels(members, x, w) -> bool:
    """Whether ``x`` [N, C, *spatial] and the weight ``w`` [O, C/groups, *kernel] of the same rank (>= 3) read as a
    channels-first convolution (``F.conv1d/2d/3d``'s layout) in every case: each kernel axis no longer than the
    input's spatial axis, and x's channels C equal to w's axis 1 (groups 1) or, with w's axis 1 equal to 1
    (depthwise), to w's axis 0. x's axis 1 is then the weight's input-channel dimension: it stays with the weight."""
    for c in members:
        xs, ws = c.tensor(x).shape, c.tensor(w).shape
        if any(k > n for k, n in zip(ws[2:], xs[2:])):
            return False
        if xs[1] != ws[1] and not (ws[1] == 1 and xs[1] == ws[0]):
            return False
    return True


def tensor_letters(lay, rank):
    return lay if lay and len(lay) == rank else None


def kind_for(tensor_index, name, axis, rank, lay, matmul):
    """(kind, evidence) of a symbol-forming position (``matmul``: :func:`matmul_roles`)."""
    letters = tensor_letters(lay, rank)
    if letters:
        letter = letters[axis]
        kind = layout_kind(lay, letter)
        if letter == "S":
            kind = "seq_q" if tensor_index == 0 else "seq_k"
        return kind, f"layout {lay}: axis {axis} of {name} is {letter}"
    if (name, axis) in matmul:
        return matmul[(name, axis)][:2]
    if tensor_index != 0 and axis == 0 and rank <= 3 and POSITION_TABLE_NAME.search(name):
        return "seq", f"axis 0 of {name}: a positional table (one row per token position) - the sequence"
    if tensor_index != 0:
        return "other", f"axis {axis} of {name}: no layout or matmul rule, and not the first (activation) tensor"
    if rank >= 3 and axis == 0:
        return "batch", f"axis 0 of the rank-{rank} tensor {name} (leading axis)"
    if rank == 3 and axis == 1:
        return "seq", f"axis 1 of the rank-3 tensor {name} ([batch, seq, hidden] position)"
    if rank == 2 and axis == 0:
        return "seq", f"axis 0 of the rank-2 tensor {name} (rows / tokens)"
    return "other", f"axis {axis} of {name}: no layout, matmul or position rule gives it a meaning"


def matmul_roles(members, weights=()):
    """{(tensor, axis): (kind, evidence, tag, forms)} for tensor pairs that multiply, found from the shapes alone:

    * ``A[..., m, k] @ B[..., k, n]``: A's last axis equals B's axis -2 in every case;
    * ``A[..., m, k] @ B[..., n, k]ᵀ`` (``a @ b.transpose(-1, -2)``, ``F.linear`` of two data operands): A's last
      axis equals B's last axis in every case, B's axis -2 is above 1 in every case and differs from A's axis -2
      in some case (equal shapes are as likely an elementwise op), both operands data, neither named as an attention
      operand (q @ kᵀ is attention's, :func:`attention_roles`), and their leading axes equal in every case;

    with the same rank, or both 2-D, or a 2-D B shared by every batch of A (``einsum("bmk,kn->bmn")``, B data);
    never two attention operands (q @ kᵀ and p @ v are attention's: a case with s = d would read as q @ k).
    A's leading axes are batch, A's axis -2 (the row axis m) ``seq``: scaling only the batch of a [b, 128, 256]
    batched matmul leaves it launch-bound. With a weight operand (``weights``: names, e.g. x @ weight1 of an FFN),
    B's axis -2 is the contraction k of kind ``hidden`` and B stays as it is. With two data operands (a batched
    matmul) m, k and n all scale - the stated extension of the sequence-and-batch rule, since all three set a GEMM's
    arithmetic intensity: k is ``gemm_k`` and n ``gemm_n``. ``tag`` ("<A>@<B>:m" / ":k" / ":n", None elsewhere)
    keeps those three apart even where their values happen to be equal in every case; tags join where products
    share a dimension: one axis in two products (x @ y @ z: y's n is z's k), the n's of the products of one A
    (attention written as ``softmax(a @ bᵀ) @ c``: one n, the keys, on b and c) and the m's of the products of one B
    (x @ A and delta @ A: one token axis) - equal values in every case then make one symbol. Operands named like
    masks, biases or scales (:data:`NOT_PRODUCT_NAME`) and a contraction of 1 in every case form no product;
    ``forms``: a last axis that forms its symbol (n of B[..., k, n]; k of A in the transposed form, where B's last
    axis follows it), whereas other last axes only follow."""
    roles, parent = {}, {}

    def find(tag):
        while parent.get(tag, tag) != tag:
            tag = parent[tag]
        return tag

    def union(a, b):
        if a and b and find(a) != find(b):
            parent[find(b)] = find(a)

    def put(pos, kind, why, tag, forms=False):
        if pos in roles:  # a second product holds this axis too: one dimension (x @ y @ z: y's n is z's k)
            union(roles[pos][2], tag)
            return
        roles[pos] = (kind, why, tag, forms)

    tensors = [t for t in members[0].tensors if t.shapes is None and len(t.shape) >= 2
               and not NOT_PRODUCT_NAME.search(t.name)]
    attention = (QUERY_NAME, KEY_NAME, VALUE_NAME)
    by_a, by_b = {}, {}  # the products of one A (their n's), of one B (their m's): equal values merge
    for ia, a in enumerate(tensors):
        for b in tensors[ia + 1:]:
            ra, rb = len(a.shape), len(b.shape)
            data = a.name not in weights and b.name not in weights
            shared = rb == 2 and ra > 2 and data  # one B for every batch of A
            if (ra != rb and not shared) or all(any(r.match(t.name) for r in attention) for t in (a, b)):
                continue  # q, k, v multiply as attention does (q @ kᵀ, p @ v): attention_roles reads them
            shape = lambda c, t: c.tensor(t.name).shape  # noqa: E731
            if all(shape(c, a)[-1] == 1 for c in members):
                continue  # a contraction of 1 in every case is a broadcast (scales [m, 1] x [1, n]), no product
            if all(shape(c, a)[-1] == shape(c, b)[-2] for c in members):
                trans = False
            elif (data and not shared and not any(r.match(t.name) for r in attention for t in (a, b))
                  and all(shape(c, a)[-1] == shape(c, b)[-1] and shape(c, b)[-2] > 1 for c in members)
                  and any(shape(c, a)[-2] != shape(c, b)[-2] for c in members)
                  and all(shape(c, a)[:-2] == shape(c, b)[:-2] for c in members)):
                trans = True
            else:
                continue
            if trans:
                why = (f"{a.name}[..., m, k] @ {b.name}[..., n, k]ᵀ: the last axes of {a.name} and {b.name} are "
                       f"equal in every case, their axes -2 are not (a product with {b.name} transposed)")
            else:
                why = (f"{a.name}[..., m, k] @ {b.name}[..., k, n]: {a.name}'s last axis equals {b.name}'s axis -2 "
                       "in every case" + (f" ({b.name} one matrix for every batch of {a.name})" if shared else ""))
            tag = f"{a.name}@{b.name}:" if data else None
            put((a.name, ra - 2), "seq", f"row axis m of {why} (sequence-like: it scales)", tag and tag + "m")
            if data:
                both = "two data operands (a batched matmul): m, k and n set its arithmetic intensity, so it scales"
                k_b, n_b = (rb - 1, rb - 2) if trans else (rb - 2, rb - 1)
                put((b.name, k_b), "gemm_k", f"contraction axis k of {why}; {both}", tag + "k")
                put((b.name, n_b), "gemm_n", f"column axis n of {why}; {both}", tag + "n", not trans)
                put((a.name, ra - 1), "gemm_k", f"contraction axis k of {why}", tag + "k", trans)
                for n_tag in by_a.setdefault(a.name, []):
                    union(n_tag, tag + "n")
                by_a[a.name].append(tag + "n")
                for m_tag in by_b.setdefault(b.name, []):
                    union(m_tag, tag + "m")
                by_b[b.name].append(tag + "m")
            else:
                put((b.name, rb - 2), "hidden", f"contraction axis k of {why}", None)
            for t, other in ((a, b), (b, a)):
                for ax in range(len(t.shape) - 2):
                    ones = lambda u: all(shape(c, u)[ax] == 1 for c in members)  # noqa: E731
                    if len(t.shape) == len(other.shape) and ones(t) and not ones(other):
                        put((t.name, ax), "other", f"leading axis {ax} of {t.name} is 1 in every case, broadcast "
                                                   f"against {other.name}'s batch ({why}): it stays", None)
                    else:
                        put((t.name, ax), "batch", f"leading axis {ax} of {why}", None)
    return {pos: (kind, why, tag and find(tag), forms) for pos, (kind, why, tag, forms) in roles.items()}


def int_attr_positions(members):
    """[(name, index or None, values)] of integer attributes and of the elements of fixed-length int lists."""
    out = []
    first = members[0]
    for name, v in first.attrs.items():
        vals = [c.attrs.get(name) for c in members]
        if all(isinstance(x, int) and not isinstance(x, bool) for x in vals):
            out.append((name, None, vals))
        elif all(isinstance(x, list) and len(x) == len(v) and all(isinstance(e, int) and not isinstance(e, bool)
                                                                   for e in x) for x in vals) and isinstance(v, list):
            if SEQLEN_ATTR.search(name):
                continue  # per-batch lengths: handled by the sequence rule, not by equality
            for j in range(len(v)):
                out.append((name, j, [x[j] for x in vals]))
    return out


def is_int(e):
    return isinstance(e, int) and not isinstance(e, bool)


def seqlen_lists(members):
    """{name: [list per case]} of the sequence-length list attributes holding integers in every case."""
    vals = {name: [c.attrs.get(name) for c in members] for name in members[0].attrs if SEQLEN_ATTR.search(name)}
    return {n: v for n, v in vals.items() if all(isinstance(x, list) and x and all(map(is_int, x)) for x in v)}


def padded_fit(per_case, values):
    return all(max(v) <= x for v, x in zip(per_case, values)) and any(max(v) == x for v, x in zip(per_case, values))


def fit(per_case, values):
    """How lengths fit an axis over the cases: "packed" (their sum equals it in every case), "padded" (the longest
    <= it in every case, equal in some), "bounded" (the longest <= it), else None."""
    if all(sum(v) == x for v, x in zip(per_case, values)):
        return "packed"
    if all(max(v) <= x for v, x in zip(per_case, values)):
        return "padded" if padded_fit(per_case, values) else "bounded"
    return None


def seqlen_roles(members, class_values):
    """{values: (kind, evidence)} from sequence-length list attributes (``actual_seq_lengths`` ...) in a group
    without a layout attribute, whose axes have no letters: the one position class whose value equals the list's
    length in every case is ``batch`` (one length per batch); the one whose value bounds the lengths in every case
    and equals the longest in some (padded [B, S, ...]), or equals their sum in every case (packed tokens), is
    ``seq``. Ambiguous (several classes match, e.g. values that never vary) -> no role from that rule."""
    roles = {}
    for name, per_case in seqlen_lists(members).items():
        n = [len(v) for v in per_case]
        batch = [cv for cv in class_values if list(cv) == n]
        seq = [cv for cv in class_values if cv not in batch and fit(per_case, cv) in ("packed", "padded")]
        if len(seq) == 1 and not padded_fit(per_case, seq[0]):
            batch = []  # packed tokens [T, ...]: no axis holds the batch, an axis equal to the count is chance
        if len(batch) == 1:
            roles.setdefault(batch[0], ("batch", f"len({name}) equals it in every case: one length per batch"))
        if len(seq) == 1:
            roles.setdefault(seq[0], ("seq", f"{name} fits it in every case (longest length <= it, equal in some, "
                                             "or their sum equals it): the sequence axis"))
    return roles


def split_strays(classes, first, named):
    """Split off, in place, the positions that only chance puts beside a ruled one: a position with no rule on a
    tensor of the rank of a ruled position, on another axis (q [1, 8, S, D] with k [1, 1, S, D] in every case: k's
    heads axis is no batch, so it must not scale with q's batch) - in a constant class, or where its tensor also
    has the ruled axis in the class (k [B, S, Nkv, D] with Nkv = B in every case: one tensor has one batch axis).
    A constant class with no ruled position and no role from the lengths (values in ``named``) takes the axes of
    the ``first`` tensor as ruled (decode q [B, 1, N, D], k [B, S, 1, D]: S_q = 1 = N_kv in every case). Strays
    form a class of their own (key with a third element ``"stray"``), kind ``other``, without followers."""
    for ck, cls in list(classes.items()):
        rows = list(zip(cls["positions"], cls["kinds"], cls["evidence"], cls["ranks"]))
        ruled_at = {(r, pos[1]) for pos, k, _e, r in rows if k != "other"} or {
            (r, pos[1]) for pos, _k, _e, r in rows if pos[0] == first and len(set(ck[0])) == 1 and ck[0] not in named}
        anchored = {pos[0] for pos, _k, _e, r in rows if (r, pos[1]) in ruled_at}
        stray = [row for row in rows if row[1] == "other" and row[3] in {r for r, _a in ruled_at}
                 and (row[3], row[0][1]) not in ruled_at and (len(set(ck[0])) == 1 or row[0][0] in anchored)]
        if stray:
            new = classes[(ck[0], ck[1], "stray")] = {"matmul": False, "stray": True}
            for cl, part in ((cls, [row for row in rows if row not in stray]), (new, stray)):
                cl.update({k: [r[i] for r in part] for i, k in enumerate(("positions", "kinds", "evidence", "ranks"))})
            ruled = ", ".join(f"axis {a} of rank {r}" for r, a in sorted(ruled_at))
            new["evidence"].insert(0, f"equal to the ruled {ruled} only by chance (another axis, same rank)")


def attention_roles(members, tensors, classes, voted):
    """Heads and sequence axes of 4-D query/key tensors without a layout attribute ([B, N, S, D] or [B, S, N, D]:
    the case files do not say which), updating ``voted`` {class key: (kind, evidence)} in place.

    The query is the first tensor when it has rank 4 and its axis 0 is batch; the key the next rank-4 tensor with
    the same last axis (head dim) in every case. Grouped-query attention names the heads axis: the one middle axis
    where query and key differ in some case and the key's value divides the query's in every case (the other axis
    would need every query length to be a multiple of every key length). Elimination then names the remaining
    middle axis of each tensor: of [B, ?, ?, D] with one axis heads the other is the sequence, and with one axis the
    sequence (a sequence-length list, :func:`seqlen_roles`) the other is heads. No rule fires when both middle
    axes qualify or neither does."""
    if len(tensors) >= 2 and len(tensors[0].shape) == 3:
        decode_query_roles(members, tensors, classes, voted)
    if len(tensors) < 2 or len(tensors[0].shape) != 4:
        return
    q = tensors[0]
    cls_of = {pos: ck for ck, cls in classes.items() for pos in cls["positions"]}

    def vals(name, ax):
        return [c.tensor(name).shape[ax] for c in members]

    if voted.get(cls_of.get((q.name, 0)), ("",))[0] != "batch":
        return
    keys = [t for t in tensors[1:] if len(t.shape) == 4 and vals(t.name, 3) == vals(q.name, 3)]
    if not keys:
        return
    k = keys[0]
    def divides(a):  # the key's value divides the query's in every case
        return all(kv > 0 and qv % kv == 0 for qv, kv in zip(vals(q.name, a), vals(k.name, a)))
    gqa = [a for a in (1, 2) if cls_of[(q.name, a)] != cls_of[(k.name, a)] and divides(a)]
    # the other axis must be proven no heads axis (query and key differ there, not as multiples): a cross
    # attention with q [B, N, 128, D], k [B, N, 64, D] would otherwise make its sequence axis "heads"
    if len(gqa) == 1 and divides(3 - gqa[0]):
        gqa = []
    for t in (q, k):
        mids = {a: voted[cls_of[(t.name, a)]][0] for a in (1, 2)}
        if len(gqa) == 1:
            a = gqa[0]
            if mids[a] == "other":
                voted[cls_of[(t.name, a)]] = ("heads", [f"{q.name}.{a} is a multiple of {k.name}.{a} in every case "
                                                        "and differs from it in some: grouped-query heads"])
                mids[a] = "heads"
        for a, b in ((1, 2), (2, 1)):
            if mids[b] == "other" and mids[a] in ("heads", "seq", "seq_q", "seq_k"):
                kind = ("seq_q" if t is q else "seq_k") if mids[a] == "heads" else "heads"
                voted[cls_of[(t.name, b)]] = (kind, [f"{t.name} is [batch, ?, ?, head_dim] and axis {a} is "
                                                     f"{mids[a]}: axis {b} is the other middle axis ({kind})"])
                mids[b] = kind
    if not seqlen_lists(members):  # lengths lists come with [B, S, N, D] files (varlen): no torch layout assumed
        by_names(q, tensors, cls_of, voted)


def by_names(q, tensors, cls_of, voted):
    """Where no shape rule told the middle axes of a 4-D query / key / value apart (grouped-query heads beside a
    sequence equal in query and key read the same as a cross attention whose query length is a multiple of the
    key's), their names decide, by the layout of torch's ``scaled_dot_product_attention`` ([batch, heads, seq,
    head_dim]: https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html):
    axis 1 heads, axis 2 ``seq_q`` (query) / ``seq_k`` (key, value). Only tensors named as a query (the first
    tensor), key or value (:data:`QUERY_NAME`, :data:`KEY_NAME`, :data:`VALUE_NAME`; not a paged ``*_cache``)
    whose two middle axes both still have no rule, in a group without sequence-length lists (those come with
    [B, S, N, D] varlen files); ``voted`` is updated in place."""
    if not QUERY_NAME.match(q.name):
        return
    named = [t for t in tensors if len(t.shape) == 4 and "cache" not in t.name.lower()
             and (t is q or KEY_NAME.match(t.name) or VALUE_NAME.match(t.name))]
    open_ = [t for t in named if all(voted[cls_of[(t.name, a)]][0] == "other" for a in (1, 2))]
    for t in open_:
        for a, kind in ((1, "heads"), (2, "seq_q" if t is q else "seq_k")):
            ck = cls_of[(t.name, a)]
            if voted[ck][0] == "other":
                voted[ck] = (kind, [f"{t.name} is named as an attention operand and no shape rule tells its middle "
                                    "axes apart: torch's scaled_dot_product_attention layout [batch, heads, seq, "
                                    f"head_dim] makes axis {a} {kind} (an input_layout attribute says otherwise)"])



def decode_query_roles(members, tensors, classes, voted):
    """A 3-D query beside 4-D keys: a decode step's query [B, N, D] (one token per sequence) or a packed one [T, N,
    D] next to a paged cache [blocks, block_size, N_kv, D] or keys [B, S, N_kv, D] - its axis 1 is the heads, not the
    [batch, seq, hidden] position rule's sequence. The first tensor must be named as a query (:data:`QUERY_NAME`)
    and a tensor named as a key or value (``*_cache`` included) of rank 4 must share its last axis (head dim) in
    every case; ``voted`` is updated in place."""
    q = tensors[0]
    if not QUERY_NAME.match(q.name):
        return
    def last(t):
        return [c.tensor(t.name).shape[-1] for c in members]
    if not any(len(t.shape) == 4 and (KEY_NAME.match(t.name) or VALUE_NAME.match(t.name)) and last(t) == last(q)
               for t in tensors[1:]):
        return
    cls_of = {pos: ck for ck, cls in classes.items() for pos in cls["positions"]}
    ck = cls_of.get((q.name, 1))
    if ck is not None and voted[ck][0] in ("seq", "other"):
        voted[ck] = ("heads", [f"{q.name} is a 3-D query [tokens, heads, head_dim] beside 4-D keys with its head "
                               "dim: axis 1 is the heads (a decode or packed query), which stay"])
    # keys [B, S, N, D] or [B, N, S, D] of the query's batch: one middle axis heads, the other the key length seq_k
    for t in tensors[1:]:
        if not (KEY_NAME.match(t.name) or VALUE_NAME.match(t.name)):
            continue
        s_ax = decode_key_axis(members, q.name, t.name)
        if s_ax is None:
            continue
        h_ax = 3 - s_ax
        for a, kind, why in ((h_ax, "heads", f"{t.name}.{h_ax} is the query's heads (or divides them)"),
                             (s_ax, "seq_k", f"{t.name} is [batch, ?, ?, head_dim] beside the 3-D query and axis "
                                             f"{h_ax} is heads: axis {s_ax} is the key length")):
            k2 = cls_of.get((t.name, a))
            if k2 is not None and k2 != ck and voted[k2][0] in ("other", "seq"):
                voted[k2] = (kind, [why])


def decode_key_axis(members, q: str, k: str):
    """The key-length axis (1 or 2) of a 4-D key ``k`` beside a 3-D decode query ``q`` [B, Hq, D] in every case of
    ``members`` (case descriptions): k [B, ?, ?, D] with the query's batch and head dim, whose one middle axis is the
    query's heads (equal in every case; else the one that divides them in every case while the other does not:
    grouped-query heads) - the other middle axis is the key length, the axis a decode step's cost grows with. None
    when the cases do not say (a paged cache, whose axis 0 is its blocks; both or neither axis fitting). Read by the
    symbol analysis (:func:`decode_query_roles`) and the FLOPs draft of a decode attention alike."""
    equal, divides = {1: True, 2: True}, {1: True, 2: True}
    for c in members:
        names = {t.name for t in c.tensors}
        if q not in names or k not in names:
            return None
        qs, ks = c.tensor(q).shape, c.tensor(k).shape
        if len(qs) != 3 or len(ks) != 4 or qs[0] != ks[0] or qs[-1] != ks[-1]:
            return None
        for a in (1, 2):
            equal[a] = equal[a] and ks[a] == qs[1]
            divides[a] = divides[a] and ks[a] > 0 and qs[1] % ks[a] == 0
    heads = [a for a in (1, 2) if equal[a]]
    heads = heads if len(heads) == 1 else [a for a in (1, 2) if divides[a]]
    return 3 - heads[0] if len(heads) == 1 else None
