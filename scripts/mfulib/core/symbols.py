"""Symbol analysis of a case file: which (tensor, axis) positions are one dimension, what each means, what scales.

Rule (SKILL.md step 2; kb/ops/triton/guides/tooling/mfu_max_shape_search.md section 1): positions whose values are equal
in **every** case of a group are one symbol. Each tensor's last axis is excluded from forming symbols (usually head_dim
or hidden, whose range is often wider than the sequence's); a last axis, an integer attribute or an element of a list
attribute whose values equal a symbol's in every case is a *follower*: it is scaled with the symbol so the case stays
consistent (the k of A[b, m, k] @ B[b, k, n], ``head_num`` = the N axis of BNSD, ``normalized_shape`` elements).

Groups: cases are grouped by their layout attribute (``input_layout``/``layout``: BSH, SBH, BSND, BNSD, TND, ...,
whose letters give each axis its meaning) and by the ranks of their tensors; symbols are formed per group.

Kinds (:data:`KINDS`), each with its evidence string:

* layout letters: B batch, S seq_q (on the first tensor, the query) / seq_k (key, value), N heads, D head_dim,
  H hidden (= heads x head_dim: it follows ``heads`` when that is scaled), T seq (packed tokens);
* matmul-like tensors (A's last axis equals B's axis -2 in every case, same rank or a 2-D data B shared by every
  batch of A; or, two data operands not named as attention operands, B transposed: the last axes equal, the axes -2
  not, :func:`mfulib.core.symbol_rules.matmul_roles`; operands named like masks, biases or scales never multiply,
  a leading axis of 1 broadcast against the other operand's batch stays, an axis shared by two products - x @ y @ z,
  x @ A and delta @ A - is one symbol, and an unproduct operand's axis equal to exactly one product axis in every
  case follows it: a scale [m, 1]): A's leading axes batch, A's axis
  -2 ``seq`` (the row axis m: scaling only the batch of a [b, 128, 256] batched matmul leaves it launch-bound);
  the contraction axis k ``hidden`` when B is a weight; with two data operands (a batched matmul) k is ``gemm_k``
  and B's last axis forms the symbol ``gemm_n``, so m, k and n all scale (the stated extension of the spec's
  sequence-and-batch rule: all three set a GEMM's arithmetic intensity);
* weights (operands named as weights: ``weight1``, ``w_q``, ``bias``, ``gate_proj``, ...; not the per-token
  mixing weights that are activations, ``topk_weights``, ``attn_weights``, nor attention biases, ``attn_bias``,
  ``pos_bias`` or any bias of rank >= 3) form symbols of their own, marked
  ``weight``, that never scale, and their last axes follow no data symbol: an FFN's weights stay as they are
  (module parameters and ``get_init_inputs()`` are not case inputs, so nothing here can scale them); a data
  tensor's last axis equal in every case to a weight symbol as well as to a data symbol belongs to the weight's
  symbol - a weight's last axis counts too (x [b, s, s] with a 1-D weight [s]; ``F.linear``'s weight [F, H]) -
  (x [T, H] @ weight1 [H, F] with T = H: only x's rows scale); a data tensor's leading axis that is the leading
  axis of a weight it multiplies (x [E, C, H] @ weight [E, H, F], one weight per expert) stays with the weight
  (:func:`mfulib.core.symbol_rules.weight_batch_ties`), and so do a channels-first convolution's input channels
  without a layout attribute (x [N, C, L] with weight [O, C, K]); the exception is a 1-D operand named like a
  bias whose size equals a data GEMM's n in every case (``torch.bmm(A, B) + bias``): an addend of that output, it
  follows n (``SymbolGroup.biases``; ``SymbolGroup.weights`` lists the weight operands that stay);
* without a layout attribute, a sequence-length list (``actual_seq_lengths``) names the axes of 4-D [B, S, N, D]
  tensors too: the axis equal to the list's length in every case is batch, the one the lengths fit (padded: the
  longest <= it, equal in some case; packed: their sum) is seq (:func:`mfulib.core.symbol_rules.seqlen_roles`);
  packed lengths name no batch axis, and a position rule's batch / seq on another axis of the first tensor gives
  way ([T, N, D]: axis 1 is no sequence); grouped-query attention names the heads axis of 4-D query/key tensors
  and elimination the other middle axis (:func:`mfulib.core.symbol_rules.attention_roles`); where neither tells
  them apart, 4-D tensors named q / k / v (query, key, value) take torch's SDPA layout [batch, heads, seq, head_dim]
  (:func:`mfulib.core.symbol_rules.by_names`);
* a 3-D query [B or T, N, D] beside 4-D keys or a paged ``*_cache`` with its head dim: axis 1 is the heads
  (:func:`mfulib.core.symbol_rules.decode_query_roles`), which stay; of keys [B, ?, ?, D] of its batch, the middle
  axis that is (or divides) those heads is heads and the other the key length ``seq_k``, which scales;
* axis 0 of a positional table (``cos`` / ``sin`` [S, D], ``freqs_cis``, ``pos_emb``) is the sequence: x [B, S, N, D]
  of a rotary embedding scales S with the tables' rows;
* an integer attribute named like ``head_num`` heads; otherwise by position on the first (activation) tensor: axis
  0 of rank >= 3 batch, axis 1 of rank 3 seq, axis 0 of rank 2 seq (rows); anything else ``other``. A position
  with no rule (``other``: a later tensor's axis) never outvotes a ruled position of the same symbol; in a constant
  symbol (or one whose tensor also has the ruled axis there), such a position on another axis of a tensor of the
  ruled one's rank is split off (k [1, 1, S, D] beside q [1, 8, S, D]: k's heads are no batch).

Constant values (equal in every case because they never vary) are weak evidence: they still form a symbol, but a
last axis or an integer attribute follows a constant symbol only where the layout letters agree (list-attribute
elements, which copy shapes, always follow).

Default scale dims (:data:`DEFAULT_SCALE_KINDS`): sequence and batch (and a batched matmul's k and n), never all
dims proportionally (a 4-D tensor scaled by 2 on every axis is 16x the memory); the rules themselves are
:mod:`mfulib.core.symbol_rules`. Sequence-length list attributes (``actual_seq_lengths``,
``actual_seq_qlen``/``kvlen``) follow a scaled sequence (each length x factor) and a scaled batch (tiled, when the
list has one length per batch); each list follows the sequence it fits or, fitting none, the axes that bound it
(``SymbolGroup.lengths``: cross attention's query lengths do not follow a scaled key axis; lengths no axis bounds
stay); a 1-D lengths tensor [B] follows the batch even when it never varies; a dependent that cannot follow makes
the scaled case carry a refusal, which the probe's gate 2 reports.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

from mfulib.core.symbol_rules import (BIAS_NAME, SEQLEN_ATTR, attention_roles, fit, int_attr_positions, is_int,
                                     kind_for, matmul_roles, seqlen_lists, seqlen_roles, split_strays,
                                     tensor_letters, weight_batch_ties, weight_names)

KINDS = ("batch", "seq_q", "seq_k", "seq", "gemm_k", "gemm_n", "heads", "head_dim", "hidden", "other")
DEFAULT_SCALE_KINDS = ("batch", "seq_q", "seq_k", "seq", "gemm_k", "gemm_n")
LAYOUT_ATTRS = ("input_layout", "layout")
HEADS_ATTR = re.compile(r"^(head_num|num_heads|n_heads|heads|num_head|headnum)$", re.I)


@dataclass
class Symbol:
    """One dimension of a group: ``positions`` [(tensor, axis)] that form it, ``followers`` [(input name, axis or
    list index or None)] scaled with it, ``values`` per case of the group (ids in ``cases``)."""
    name: str
    kind: str
    positions: list
    values: list
    cases: list
    group: str
    evidence: list = field(default_factory=list)
    followers: list = field(default_factory=list)
    scaled: bool = False
    weight: bool = False  # made of weight operands' axes: never scaled

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "group": self.group,
                "positions": [list(p) for p in self.positions], "followers": [list(p) for p in self.followers],
                "values": self.values, "cases": self.cases, "evidence": self.evidence, "scaled": self.scaled,
                "weight": self.weight}


@dataclass
class SymbolGroup:
    """Cases sharing a layout and tensor ranks; ``layout`` None when the operator has no layout attribute."""
    key: str
    layout: str | None
    cases: list
    symbols: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    # {sequence-length list name: [(Symbol, "padded" | "packed" | "bounded")]}: the axis symbols (not batch) it fits
    lengths: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)  # {operand named as a weight: evidence} that never scales
    biases: dict = field(default_factory=dict)  # {operand named like a bias: the gemm_n kind it follows}

    def symbol(self, name):
        return next(s for s in self.symbols if s.name == name)


def _layout(info):
    for a in LAYOUT_ATTRS:
        v = info.attrs.get(a)
        if isinstance(v, str) and v.isalpha():
            return a, v.upper()
    return None, None


def _signature(info):
    return tuple((t.name, len(t.shape)) for t in info.tensors if t.shapes is None)


def group_cases(infos: list) -> list:
    """[(key, layout, [CaseInfo])]: cases grouped by layout attribute value and tensor ranks, in first-seen order."""
    groups = {}
    for info in infos:
        _, lay = _layout(info)
        sig = _signature(info)
        key = (lay or "") + ("" if lay else "ranks " + ",".join(f"{n}:{r}" for n, r in sig))
        groups.setdefault((key, sig), (key, lay, []))[2].append(info)
    out, seen = [], {}
    for (key, _sig), (k, lay, members) in groups.items():
        seen[k] = seen.get(k, 0) + 1  # same layout, other ranks: a second group with its own key
        out.append((k if seen[k] == 1 else f"{k}#{seen[k]}", lay, members))
    return out



def analyse_group(key, lay, members) -> SymbolGroup:
    """Symbols of one group of cases (see the module docstring)."""
    grp = SymbolGroup(key=key, layout=lay, cases=[c.case_id for c in members])
    weights = weight_names(members)
    matmul = {} if lay else matmul_roles(members, weights)
    ties = weight_batch_ties(members, weights)
    tensors = [t for t in members[0].tensors if t.shapes is None]
    classes, lasts = {}, []
    for ti, t in enumerate(tensors):
        rank = len(t.shape)
        for ax in range(rank):
            vals = tuple(c.tensor(t.name).shape[ax] for c in members)
            _k, _w, tag, forms = matmul.get((t.name, ax)) or (None, None, None, False)
            if ax == rank - 1 and not forms:  # a batched matmul's n (B's last axis; A's k with B transposed) forms one
                lasts.append(((t.name, ax), vals, tensor_letters(lay, rank), tag))
                continue
            kind, why = kind_for(ti, t.name, ax, rank, lay, matmul)
            letters = tensor_letters(lay, rank)
            # with a layout, equal values never merge positions of different letters; a batched matmul's m, k, n
            # and a weight's axes never merge with other positions either (tag, "weight")
            ck = (vals, letters[ax] if letters else None) + ((tag or "weight",) if tag or t.name in weights else ())
            cls = classes.setdefault(ck, {"positions": [], "kinds": [], "evidence": [], "ranks": [], "matmul": False,
                                          "weight": t.name in weights})
            if t.name in weights:
                cls["evidence"].append(weights[t.name])
            if (t.name, ax) in ties:  # x [E, C, H] @ weight [E, H, F]: E is the weight's, it stays
                cls["weight"] = True
                cls["evidence"].append(f"axis {ax} of {t.name} is the leading axis of the weight {ties[(t.name, ax)]} "
                                       "it multiplies (one weight matrix per index): it stays as the weight does")
            cls["matmul"] = cls["matmul"] or (t.name, ax) in matmul
            cls["positions"].append((t.name, ax))
            cls["kinds"].append(kind)
            cls["evidence"].append(why)
            cls["ranks"].append(rank)
    _join_products(classes)
    attr_pos = int_attr_positions(members)
    by_lengths = {} if lay else seqlen_roles(members, [ck[0] for ck in classes])
    split_strays(classes, tensors[0].name if tensors else None, by_lengths)
    # a weight's axes, its last one included (a 1-D weight [H], F.linear's weight [F, H]): a data tensor's last axis
    # equal to one of them in every case is the weight's dimension, not a data symbol's
    weight_vals = {ck[0] for ck, cls in classes.items() if cls.get("weight")} | {
        lvals for pos, lvals, _l, _t in lasts if pos[0] in weights}
    voted = {}
    for ck, cls in classes.items():
        kinds = cls["kinds"]
        ruled = [k for k in kinds if k != "other"] or kinds  # a rule's kind is never outvoted by "no rule"
        kind = "seq_q" if "seq_q" in ruled else max(set(ruled), key=lambda k: (ruled.count(k), -KINDS.index(k)))
        if ck[0] in by_lengths and not cls.get("stray"):
            voted[ck] = (by_lengths[ck[0]][0], [by_lengths[ck[0]][1]])
        elif kind in ("batch", "seq") and not cls["matmul"] and any(
                k == kind and any(n == tensors[0].name for n, _a in (classes.get((v, None)) or {}).get("positions", []))
                for v, (k, _w) in by_lengths.items()):
            # the position rule on the first tensor vs the lengths on another axis of it ([T, N, D]: axis 1 no seq)
            voted[ck] = ("other", [f"a sequence-length list names another axis of {tensors[0].name} {kind}: the "
                                   f"position rule's {kind} is dropped"])
        else:
            voted[ck] = (kind, [])
    if not lay:
        attention_roles(members, tensors, classes, voted)
    names = {}
    for ck, cls in classes.items():
        vals, letter = ck[0], ck[1]
        kinds = cls["kinds"]
        kind, first_ev = voted[ck]
        ev = first_ev + list(dict.fromkeys(cls["evidence"]))
        if len(cls["positions"]) > 1:
            ev.append("equal in every case: " + ", ".join(f"{n}.{a}" for n, a in cls["positions"]))
            if kind == "seq_q" and "seq_k" in kinds:
                ev.append("seq_k equals seq_q in every case (self-attention): one symbol")
        if len(set(vals)) == 1:
            ev.append(f"constant {vals[0]} in every case: equality with other positions is weak evidence")
        followers = []
        for pos, lvals, lletters, ltag in ([] if cls.get("stray") else lasts):
            if _output_bias(pos, lvals, ck, weights):
                followers.append(pos)
                grp.biases[pos[0]] = kind
                ev.append(f"{pos[0]} [{kind}] is named like a bias and equals the column axis n of a data GEMM in "
                          "every case: added to its output, it follows n (weights that never scale are the weight "
                          "matrices of a module)")
                continue
            if (ltag is not None and ck[2:] != (ltag,)) or (pos[0] in weights and not cls["weight"]):
                continue  # A's last axis follows its k only; a weight's last axis follows no data symbol
            if ltag is None and not cls["weight"] and lvals in weight_vals:
                if lvals == vals:  # a tie with a weight symbol: the axis is the weight's (x [T, H] @ w [H, F], T = H)
                    ev.append(f"last axis {pos[0]}.{pos[1]} equals it but also a weight symbol in every case: it "
                              "belongs to the weight's symbol and stays")
                continue
            same_letter = lletters is None or letter is None or lletters[pos[1]] == letter
            per_batch = kind == "batch" and pos[1] == 0 and SEQLEN_ATTR.search(pos[0])  # lengths [B], B constant
            product = ltag is not None  # the k of one product (its tag matched above): strong evidence, even constant
            if lvals == vals and same_letter and (len(set(vals)) > 1 or letter is not None or per_batch or product):
                followers.append(pos)
                ev.append(f"last axis {pos[0]}.{pos[1]} equals it in every case: scaled with it")
        for name, idx, avals in attr_pos:
            if tuple(avals) != vals or cls.get("stray"):
                continue
            named_heads = HEADS_ATTR.match(name) and kind == "heads"
            if len(set(vals)) > 1 or named_heads or idx is not None:  # list elements copy shapes (normalized_shape)
                followers.append((name, idx))
                ev.append(f"{name}{'' if idx is None else f'[{idx}]'} equals it in every case: scaled with it")
        n = names.get(kind, 0)
        names[kind] = n + 1
        grp.symbols.append(Symbol(name=kind if n == 0 else f"{kind}{n + 1}", kind=kind, positions=cls["positions"],
                                  values=list(vals), cases=grp.cases, group=key, evidence=ev, followers=followers,
                                  weight=bool(cls.get("weight"))))
    # integer attributes such as head_num that no axis equals (BSH/SBH): a heads symbol of their own
    taken = {f[0] for s in grp.symbols for f in s.followers}
    for name, idx, avals in attr_pos:
        if idx is None and HEADS_ATTR.match(name) and name not in taken:
            ev = [f"attribute {name} (heads by name)"]
            fol = []
            if lay and "H" in lay:
                fol = [(t.name, lay.index("H")) for t in tensors if len(t.shape) == len(lay)]
                ev.append(f"input_layout={lay}: hidden H = heads x head_dim, so the H axes follow heads")
            grp.symbols.append(Symbol(name="heads" if "heads" not in names else "heads_attr", kind="heads",
                                      positions=[(name, None)], values=list(avals), cases=grp.cases, group=key,
                                      evidence=ev, followers=fol))
    for name, per_case in seqlen_lists(members).items():
        # every axis but the batch: one named heads by chance (S_q = 1 in a one-case file) still bounds the lengths
        axes = [sym for sym in grp.symbols if sym.kind != "batch" and sym.positions[0][1] is not None]
        fits = [(sym, fit(per_case, sym.values)) for sym in axes]
        grp.lengths[name] = [f for f in fits if f[1] in ("packed", "padded")] or [f for f in fits if f[1] == "bounded"]
    seqlen = [n for n in members[0].attrs if SEQLEN_ATTR.search(n) and isinstance(members[0].attrs[n], list)]
    if seqlen:
        grp.notes.append(f"sequence-length attributes {seqlen}: scaled with a scaled sequence (x factor) and tiled "
                         "with a scaled batch (one length per batch), otherwise the scaled case is refused")
    if lay:
        grp.notes.append(f"layout {lay}: axis meanings from the layout letters" + (
            " (a convolution's: N batch, C channels, spatial axes sequence-like)" if "C" in lay else ""))
    grp.weights = {n: why for n, why in weights.items() if n not in grp.biases}
    return grp


def _join_products(classes: dict) -> None:
    """Merge, in place, a class of positions no product holds (no tag, not a weight) into the one product axis
    (class with a matmul tag) whose values equal its own in every case, where exactly one does and the values
    vary across cases: a quantisation scale [m, 1] beside A [m, k] scales with m. Tags keep a product's m, k and n
    apart; they are no reason to keep a broadcast operand's axis from the axis it broadcasts against. Equal to two
    product axes (m = n in every case), or constant: left alone (weak evidence)."""
    tagged = {}
    for ck, cls in classes.items():
        if len(ck) > 2 and ck[2] != "weight":
            tagged.setdefault(ck[:2], []).append(ck)
    for ck in [c for c in classes if len(c) == 2]:
        cls = classes[ck]
        if cls.get("weight") or len(set(ck[0])) < 2 or len(tagged.get(ck, [])) != 1:
            continue
        dst = classes[tagged[ck][0]]
        for key in ("positions", "kinds", "evidence", "ranks"):
            dst[key] += cls[key]
        dst["evidence"].append(", ".join(f"{n}.{a}" for n, a in cls["positions"]) + " equal(s) this product axis "
                               "in every case (no product of its own): one dimension, scaled with it")
        del classes[ck]


def _output_bias(pos, lvals, ck, weights) -> bool:
    """Whether the last axis ``pos`` is a 1-D operand named like a bias (:data:`BIAS_NAME`) whose size equals, in
    every case, the column axis n of a product of two data operands (class key ``ck`` tagged ``:n``): ``A @ B +
    bias`` broadcasts it over n, so it follows n even where n never varies."""
    return (pos[1] == 0 and pos[0] in weights and bool(BIAS_NAME.search(pos[0])) and lvals == ck[0]
            and len(ck) > 2 and str(ck[2]).endswith(":n"))


def analyse(infos: list) -> list:
    """[SymbolGroup] of a case file described by :func:`mfulib.core.cases.describe_case` (``infos``: CaseInfo list)."""
    return [analyse_group(k, lay, members) for k, lay, members in group_cases(infos)]


def unique_names(groups: list) -> None:
    """With several groups, make symbol names unique across them: ``<name>@<group key>``."""
    if len(groups) > 1:
        for g in groups:
            for s in g.symbols:
                if "@" not in s.name:
                    s.name = f"{s.name}@{g.key}"


def selected(sym: Symbol, scale_dims=None) -> bool:
    """Whether ``sym`` scales under ``scale_dims`` (:func:`choose`); a weight symbol never does."""
    if sym.weight:
        return False
    if scale_dims is None:
        return sym.kind in DEFAULT_SCALE_KINDS and sym.positions[0][1] is not None
    return sym.kind in scale_dims or sym.name in scale_dims or sym.name.split("@")[0] in scale_dims


def choose(groups: list, scale_dims=None) -> list:
    """Mark the symbols that scale (``scaled``) and return [(symbol name, why)].

    ``scale_dims``: None for the default (kinds in :data:`DEFAULT_SCALE_KINDS`), else a list of kinds or symbol
    names (a name without ``@group`` matches that name in every group). A symbol made only of constant-1 axes is
    still chosen when it is batch (batch 1 -> b is the usual lever). Weight symbols never scale, whatever
    ``scale_dims`` names. Two spellings that select the same symbols are the same choice (:func:`selected`)."""
    chosen = []
    why = ("default: the sequence and batch kinds scale (and a batched matmul's k and n), never all dims "
           "proportionally" if scale_dims is None else "--scale-dims " + ",".join(scale_dims))
    for g in groups:
        for s in g.symbols:
            s.scaled = selected(s, scale_dims)
            if s.scaled:
                chosen.append((s.name, why))
    return chosen


def _seqlen_factor(name, group, factors, factors_by_kind):
    """Factor of the sequence-length list ``name``: that of the axes it fits (``group.lengths``), not of any scaled
    sequence (cross attention). Lengths that only sum to axes (packed) take their factor exactly; otherwise the
    smallest factor among the axes they fit (still <= each: a sum equal to one axis beside a longest equal to
    another is chance, [1, 1, 1, 1]); lengths no axis bounds (paged attention) stay. A list not of integers in every
    case takes the largest scaled sequence factor (and is refused where it holds a non-integer)."""
    fits = group.lengths.get(name)
    if fits and all(how == "packed" for _s, how in fits):  # (equal sums in every case: one class, one factor)
        return max(factors.get(s.name, 1) for s, _how in fits)
    if fits is not None:  # fitting no axis at all: they stay
        return min([factors.get(s.name, 1) for s, _how in fits] or [1])
    return max([f for k, f in factors_by_kind.items() if k.startswith("seq")] or [1])


def _scale_seqlens(case, info, group, factors, factors_by_kind, refusals):
    for ent in case["inputs"]:
        name = ent.get("name", "")
        if ent.get("type") != "attr" or not SEQLEN_ATTR.search(name) or not isinstance(ent.get("value"), list):
            continue
        vals = list(ent["value"])
        fseq = _seqlen_factor(name, group, factors, factors_by_kind)
        if fseq != 1:
            bad = [v for v in vals if not is_int(v)]
            refusals.extend(f"{name} holds {v!r}, not an integer length: it cannot follow a scaled sequence"
                            for v in bad[:1])
            vals = vals if bad else [v * fseq for v in vals]
        fb = factors_by_kind.get("batch", 1)
        if fb != 1:
            batch = [s for s in factors_by_kind.get("_batch_values", [])]
            if batch and len(vals) == batch[0]:
                vals = vals * fb
            else:
                refusals.append(f"{name} has {len(vals)} lengths, not one per batch ({batch[:1]}): it cannot "
                                "follow a scaled batch")
        ent["value"] = vals


def scale_case(case: dict, info, group: SymbolGroup, factors: dict) -> tuple:
    """The case line ``case`` with symbols scaled: ``factors`` {symbol name: int factor >= 1}.

    Returns (new case dict, refusals [str]): a refusal names a dependent that cannot follow (a tensor with exact
    ``data`` values, a sequence-length list that is not one length per batch); the probe's gate 2 refuses such a
    candidate. The input order, names, dtypes and every other field stay exactly as in ``case``."""
    new = copy.deepcopy(case)
    by_name = {e.get("name", f"input{i}"): e for i, e in enumerate(new["inputs"])}
    refusals, by_kind = [], {}
    for sname, f in factors.items():
        if f == 1:
            continue
        s = group.symbol(sname)
        by_kind[s.kind] = max(by_kind.get(s.kind, 1), f)
        if s.kind == "batch":
            by_kind["_batch_values"] = [s.values[group.cases.index(info.case_id)]]
        for name, ax in list(s.positions) + list(s.followers):
            ent = by_name[name]
            if ent.get("type", "tensor") == "attr":
                if ax is None:
                    ent["value"] = int(ent["value"]) * f
                else:
                    ent["value"] = list(ent["value"])
                    ent["value"][ax] = int(ent["value"][ax]) * f
                continue
            if "data" in ent:
                refusals.append(f"{name} carries exact data values: its axis {ax} cannot be scaled")
            ent["shape"] = list(ent["shape"])
            ent["shape"][ax] = int(ent["shape"][ax]) * f
    _scale_seqlens(new, info, group, factors, by_kind, refusals)
    return new, refusals


def factors_label(factors: dict, sep: str = " ") -> str:
    """``{symbol: factor}`` as every table shows it: ``batch x4,seq x2`` (``sep`` between a symbol and its factor:
    ``""`` for a cell that must stay one token, ``batchx4,seqx2``); ``x1`` for no factor (an original case)."""
    shown = [f"{k}{sep}x{v:g}" for k, v in (factors or {}).items() if v != 1]
    return ",".join(shown) or "x1"
