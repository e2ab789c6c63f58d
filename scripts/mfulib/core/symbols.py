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
* matmul-like tensors (A's last axis equals B's axis -2 in every case, same rank): A's leading axes batch, A's axis
  -2 ``seq`` (the row axis m: scaling only the batch of a [b, 128, 256] batched matmul leaves it launch-bound);
  the contraction axis k hidden;
* without a layout attribute, a sequence-length list (``actual_seq_lengths``) names the axes of 4-D [B, S, N, D]
  tensors too: the axis equal to the list's length in every case is batch, the one the lengths fit (padded: the
  longest <= it, equal in some case; packed: their sum) is seq (:func:`_seqlen_roles`); packed lengths name no
  batch axis, and a position rule's batch / seq on another axis of the first tensor gives way ([T, N, D]: axis 1
  is no sequence); grouped-query attention names the heads axis of 4-D query/key tensors and elimination the
  other middle axis (:func:`_attention_roles`);
* an integer attribute named like ``head_num`` heads; otherwise by position on the first (activation) tensor: axis
  0 of rank >= 3 batch, axis 1 of rank 3 seq, axis 0 of rank 2 seq (rows); anything else ``other``. A position
  with no rule (``other``: a later tensor's axis) never outvotes a ruled position of the same symbol; in a constant
  symbol (or one whose tensor also has the ruled axis there), such a position on another axis of a tensor of the
  ruled one's rank is split off (k [1, 1, S, D] beside q [1, 8, S, D]: k's heads are no batch).

Constant values (equal in every case because they never vary) are weak evidence: they still form a symbol, but a
last axis or an integer attribute follows a constant symbol only where the layout letters agree (list-attribute
elements, which copy shapes, always follow).

Default scale dims (:data:`DEFAULT_SCALE_KINDS`): sequence and batch, never all dims proportionally (a 4-D tensor
scaled by 2 on every axis is 16x the memory). Sequence-length list attributes (``actual_seq_lengths``,
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

KINDS = ("batch", "seq_q", "seq_k", "seq", "heads", "head_dim", "hidden", "other")
DEFAULT_SCALE_KINDS = ("batch", "seq_q", "seq_k", "seq")
LAYOUT_ATTRS = ("input_layout", "layout")
LAYOUT_KIND = {"B": "batch", "S": "seq", "N": "heads", "D": "head_dim", "H": "hidden", "T": "seq"}
HEADS_ATTR = re.compile(r"^(head_num|num_heads|n_heads|heads|num_head|headnum)$", re.I)
SEQLEN_ATTR = re.compile(r"seq.?len|seqlen|actual_seq", re.I)


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

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "group": self.group,
                "positions": [list(p) for p in self.positions], "followers": [list(p) for p in self.followers],
                "values": self.values, "cases": self.cases, "evidence": self.evidence, "scaled": self.scaled}


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


def _tensor_letters(lay, rank):
    return lay if lay and len(lay) == rank else None


def _kind_for(tensor_index, name, axis, rank, lay, matmul):
    """(kind, evidence) of a symbol-forming position."""
    letters = _tensor_letters(lay, rank)
    if letters:
        letter = letters[axis]
        kind = LAYOUT_KIND.get(letter, "other")
        if letter == "S":
            kind = "seq_q" if tensor_index == 0 else "seq_k"
        return kind, f"input_layout={lay}: axis {axis} of {name} is {letter}"
    if (name, axis) in matmul:
        return matmul[(name, axis)]
    if tensor_index != 0:
        return "other", f"axis {axis} of {name}: no layout or matmul rule, and not the first (activation) tensor"
    if rank >= 3 and axis == 0:
        return "batch", f"axis 0 of the rank-{rank} tensor {name} (leading axis)"
    if rank == 3 and axis == 1:
        return "seq", f"axis 1 of the rank-3 tensor {name} ([batch, seq, hidden] position)"
    if rank == 2 and axis == 0:
        return "seq", f"axis 0 of the rank-2 tensor {name} (rows / tokens)"
    return "other", f"axis {axis} of {name}: no layout, matmul or position rule gives it a meaning"


def _matmul_roles(members):
    """{(tensor, axis): (kind, evidence)} for tensor pairs that multiply (A's last == B's axis -2 everywhere)."""
    roles = {}
    tensors = [t for t in members[0].tensors if t.shapes is None and len(t.shape) >= 2]
    for ia, a in enumerate(tensors):
        for b in tensors[ia + 1:]:
            ra, rb = len(a.shape), len(b.shape)
            if ra != rb and not (ra == 2 and rb == 2):
                continue
            if not all(c.tensor(a.name).shape[-1] == c.tensor(b.name).shape[-2] for c in members):
                continue
            why = f"{a.name}[..., m, k] @ {b.name}[..., k, n]: {a.name}'s last axis equals {b.name}'s axis -2 in every case"
            roles.setdefault((a.name, ra - 2), ("seq", f"row axis m of {why} (sequence-like: it scales)"))
            roles.setdefault((b.name, rb - 2), ("hidden", f"contraction axis k of {why}"))
            for ax in range(ra - 2):
                roles.setdefault((a.name, ax), ("batch", f"leading axis {ax} of {why}"))
                roles.setdefault((b.name, ax), ("batch", f"leading axis {ax} of {why}"))
    return roles


def _int_attr_positions(members):
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


def _is_int(e):
    return isinstance(e, int) and not isinstance(e, bool)


def _seqlen_lists(members):
    """{name: [list per case]} of the sequence-length list attributes holding integers in every case."""
    vals = {name: [c.attrs.get(name) for c in members] for name in members[0].attrs if SEQLEN_ATTR.search(name)}
    return {n: v for n, v in vals.items() if all(isinstance(x, list) and x and all(map(_is_int, x)) for x in v)}


def _padded_fit(per_case, values):
    return all(max(v) <= x for v, x in zip(per_case, values)) and any(max(v) == x for v, x in zip(per_case, values))


def _fit(per_case, values):
    """How lengths fit an axis over the cases: "packed" (their sum equals it in every case), "padded" (the longest
    <= it in every case, equal in some), "bounded" (the longest <= it), else None."""
    if all(sum(v) == x for v, x in zip(per_case, values)):
        return "packed"
    if all(max(v) <= x for v, x in zip(per_case, values)):
        return "padded" if _padded_fit(per_case, values) else "bounded"
    return None


def _seqlen_roles(members, class_values):
    """{values: (kind, evidence)} from sequence-length list attributes (``actual_seq_lengths`` ...) in a group
    without a layout attribute, whose axes have no letters: the one position class whose value equals the list's
    length in every case is ``batch`` (one length per batch); the one whose value bounds the lengths in every case
    and equals the longest in some (padded [B, S, ...]), or equals their sum in every case (packed tokens), is
    ``seq``. Ambiguous (several classes match, e.g. values that never vary) -> no role from that rule."""
    roles = {}
    for name, per_case in _seqlen_lists(members).items():
        n = [len(v) for v in per_case]
        batch = [cv for cv in class_values if list(cv) == n]
        seq = [cv for cv in class_values if cv not in batch and _fit(per_case, cv) in ("packed", "padded")]
        if len(seq) == 1 and not _padded_fit(per_case, seq[0]):
            batch = []  # packed tokens [T, ...]: no axis holds the batch, an axis equal to the count is chance
        if len(batch) == 1:
            roles.setdefault(batch[0], ("batch", f"len({name}) equals it in every case: one length per batch"))
        if len(seq) == 1:
            roles.setdefault(seq[0], ("seq", f"{name} fits it in every case (longest length <= it, equal in some, "
                                             "or their sum equals it): the sequence axis"))
    return roles


def _split_strays(classes, first, named):
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


def _attention_roles(members, tensors, classes, voted):
    """Heads and sequence axes of 4-D query/key tensors without a layout attribute ([B, N, S, D] or [B, S, N, D]:
    the case files do not say which), updating ``voted`` {class key: (kind, evidence)} in place.

    The query is the first tensor when it has rank 4 and its axis 0 is batch; the key the next rank-4 tensor with
    the same last axis (head dim) in every case. Grouped-query attention names the heads axis: the one middle axis
    where query and key differ in some case and the key's value divides the query's in every case (the other axis
    would need every query length to be a multiple of every key length). Elimination then names the remaining
    middle axis of each tensor: of [B, ?, ?, D] with one axis heads the other is the sequence, and with one axis the
    sequence (a sequence-length list, :func:`_seqlen_roles`) the other is heads. No rule fires when both middle
    axes qualify or neither does."""
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


def analyse_group(key, lay, members) -> SymbolGroup:
    """Symbols of one group of cases (see the module docstring)."""
    grp = SymbolGroup(key=key, layout=lay, cases=[c.case_id for c in members])
    matmul = {} if lay else _matmul_roles(members)
    tensors = [t for t in members[0].tensors if t.shapes is None]
    classes, lasts = {}, []
    for ti, t in enumerate(tensors):
        rank = len(t.shape)
        for ax in range(rank):
            vals = tuple(c.tensor(t.name).shape[ax] for c in members)
            if ax == rank - 1:
                lasts.append(((t.name, ax), vals, _tensor_letters(lay, rank)))
                continue
            kind, why = _kind_for(ti, t.name, ax, rank, lay, matmul)
            letters = _tensor_letters(lay, rank)
            # with a layout, equal values never merge positions of different letters
            ck = (vals, letters[ax] if letters else None)
            cls = classes.setdefault(ck, {"positions": [], "kinds": [], "evidence": [], "ranks": [], "matmul": False})
            cls["matmul"] = cls["matmul"] or (t.name, ax) in matmul
            cls["positions"].append((t.name, ax))
            cls["kinds"].append(kind)
            cls["evidence"].append(why)
            cls["ranks"].append(rank)
    attr_pos = _int_attr_positions(members)
    by_lengths = {} if lay else _seqlen_roles(members, [vals for vals, _ in classes])
    _split_strays(classes, tensors[0].name if tensors else None, by_lengths)
    voted = {}
    for ck, cls in classes.items():
        kinds = cls["kinds"]
        ruled = [k for k in kinds if k != "other"] or kinds  # a rule's kind is never outvoted by "no rule"
        kind = "seq_q" if "seq_q" in ruled else max(set(ruled), key=lambda k: (ruled.count(k), -KINDS.index(k)))
        if ck[0] in by_lengths and not cls.get("stray"):
            voted[ck] = (by_lengths[ck[0]][0], [by_lengths[ck[0]][1]])
        elif kind in ("batch", "seq") and not cls["matmul"] and any(
                k == kind and any(n == tensors[0].name for n, _a in classes[(v, None)]["positions"])
                for v, (k, _w) in by_lengths.items()):
            # the position rule on the first tensor vs the lengths on another axis of it ([T, N, D]: axis 1 no seq)
            voted[ck] = ("other", [f"a sequence-length list names another axis of {tensors[0].name} {kind}: the "
                                   f"position rule's {kind} is dropped"])
        else:
            voted[ck] = (kind, [])
    if not lay:
        _attention_roles(members, tensors, classes, voted)
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
        for pos, lvals, lletters in ([] if cls.get("stray") else lasts):
            same_letter = lletters is None or letter is None or lletters[pos[1]] == letter
            per_batch = kind == "batch" and pos[1] == 0 and SEQLEN_ATTR.search(pos[0])  # lengths [B], B constant
            if lvals == vals and same_letter and (len(set(vals)) > 1 or letter is not None or per_batch):
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
                                  values=list(vals), cases=grp.cases, group=key, evidence=ev, followers=followers))
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
    for name, per_case in _seqlen_lists(members).items():
        # every axis but the batch: one named heads by chance (S_q = 1 in a one-case file) still bounds the lengths
        axes = [sym for sym in grp.symbols if sym.kind != "batch" and sym.positions[0][1] is not None]
        fits = [(sym, _fit(per_case, sym.values)) for sym in axes]
        grp.lengths[name] = [f for f in fits if f[1] in ("packed", "padded")] or [f for f in fits if f[1] == "bounded"]
    seqlen = [n for n in members[0].attrs if SEQLEN_ATTR.search(n) and isinstance(members[0].attrs[n], list)]
    if seqlen:
        grp.notes.append(f"sequence-length attributes {seqlen}: scaled with a scaled sequence (x factor) and tiled "
                         "with a scaled batch (one length per batch), otherwise the scaled case is refused")
    if lay:
        grp.notes.append(f"input_layout={lay}: axis meanings from the layout letters")
    return grp


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


def choose(groups: list, scale_dims=None) -> list:
    """Mark the symbols that scale (``scaled``) and return [(symbol name, why)].

    ``scale_dims``: None for the default (kinds in :data:`DEFAULT_SCALE_KINDS`), else a list of kinds or symbol
    names (a name without ``@group`` matches that name in every group). A symbol made only of constant-1 axes is
    still chosen when it is batch (batch 1 -> b is the usual lever)."""
    chosen = []
    for g in groups:
        for s in g.symbols:
            base = s.name.split("@")[0]
            if scale_dims is None:
                s.scaled = s.kind in DEFAULT_SCALE_KINDS and s.positions[0][1] is not None
                why = "default: the sequence and batch kinds scale, never all dims proportionally"
            else:
                s.scaled = s.kind in scale_dims or s.name in scale_dims or base in scale_dims
                why = "--scale-dims " + ",".join(scale_dims)
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
            bad = [v for v in vals if not _is_int(v)]
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
