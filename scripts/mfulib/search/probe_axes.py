"""Which axes the probe scales, printed with the evidence: the symbol analysis (:mod:`mfulib.core.symbols`), the
``--scale-dims`` choice resolved to a symbol set, and the weights that never scale.

The rule (SKILL.md step 2): sequence and batch scale, head_dim and heads stay; a batched matmul's m, k and n all
scale (a stated extension: all three set a GEMM's arithmetic intensity); weights never scale - operands named as
weights (:data:`mfulib.core.symbol_rules.WEIGHT_NAME`), and the module parameters and ``get_init_inputs()`` of
``class Model``, which are not case inputs at all (read from model.py's source here, so the output says so).

``--scale-dims`` is compared by the symbols it selects, not by its spelling (:func:`run_key_symbols`): giving the
documented default explicitly is the same run as leaving it out.
"""
from __future__ import annotations

import ast
import os

from mfulib.core import symbols
from mfulib.core.errors import UserError

# torch.nn constructors and calls that give a module parameters (weights)
PARAM_MAKERS = {"Parameter", "Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
                "Embedding", "LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d", "MultiheadAttention",
                "register_parameter"}


def model_weights(model_py: str) -> dict:
    """{module_parameters: ["nn.Linear (line 12)", ...], init_inputs: str} of ``class Model`` in ``model_py``, read
    from its source (nothing is imported or run); empty where the file cannot be parsed."""
    try:
        with open(model_py, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return {"module_parameters": [], "init_inputs": f"{os.path.basename(model_py)} not readable"}
    params, init = [], "model.py defines no get_init_inputs()"
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            params = sorted({f"{c.func.attr} (line {c.lineno})" for c in ast.walk(node) if isinstance(c, ast.Call)
                             and isinstance(c.func, ast.Attribute) and c.func.attr in PARAM_MAKERS})
        if isinstance(node, ast.FunctionDef) and node.name == "get_init_inputs":
            rets = [r.value for r in ast.walk(node) if isinstance(r, ast.Return)]
            empty = rets and all(isinstance(v, (ast.List, ast.Tuple)) and not v.elts for v in rets)
            init = ("get_init_inputs() returns []" if empty else f"get_init_inputs() (line {node.lineno}) gives "
                    "Model's constructor arguments")
    return {"module_parameters": params, "init_inputs": init}


def weights_evidence(groups: list, model_py: str) -> dict:
    """probe.json ``weights``: {operands [tensor names], output_biases [tensor names], module_parameters,
    init_inputs, why} - what never scales; ``output_biases`` are operands named like a bias that follow a data
    GEMM's column axis n instead (:attr:`mfulib.core.symbols.SymbolGroup.biases`)."""
    operands = sorted({t for g in groups for s in g.symbols if s.weight for t, _a in s.positions} |
                      {t for g in groups for t in g.weights})
    biases = {t: kind for g in groups for t, kind in g.biases.items()}
    out = dict(operands=operands, output_biases=sorted(biases), **model_weights(model_py))
    named = (f"operands {', '.join(operands)} are named as weights; " if operands else
             "no other case operand is named as a weight; " if biases else "no case operand is named as a weight; ")
    out["why"] = ("weights never scale: " + "".join(f"{t} is named like a bias but is added to a data GEMM's output: "
                                                    f"it follows {k}; " for t, k in sorted(biases.items())) + named +
                  (f"Model's module parameters ({', '.join(out['module_parameters'])}) and " if out["module_parameters"]
                   else "Model holds no module parameters; ") + f"{out['init_inputs']} - neither is a case input, "
                  "so the scaled cases leave them as they are")
    return out


def choose_symbols(od, infos, scale_dims_arg):
    """(groups, scale_dims, chosen, weights) of :mod:`mfulib.core.symbols`, printed with the evidence; UserError
    when nothing can scale."""
    groups = symbols.analyse(infos)
    symbols.unique_names(groups)
    scale_dims = [s.strip() for s in scale_dims_arg.split(",") if s.strip()] if scale_dims_arg else None
    chosen = symbols.choose(groups, scale_dims)
    if not chosen:
        names = sorted({s.name for g in groups for s in g.symbols})
        if not names:
            raise UserError(f"{od.cases_path}: no axis to scale - every tensor axis here is a last axis (excluded: "
                            "usually head_dim / hidden) or a 1-D tensor's only axis, so the case files give no batch "
                            "or sequence symbol; scale the cases by hand, or give the tensors a batch/sequence axis")
        raise UserError(f"--scale-dims {scale_dims_arg!r} selects no symbol (weight symbols never scale); symbols "
                        f"are {names}" if scale_dims_arg
                        else f"{od.cases_path}: no batch or sequence symbol among {names} - pick the ones to scale "
                             "with --scale-dims")
    weights = weights_evidence(groups, od.model_py)
    print("symbols (scaled marked *, weights w):")
    for g in groups:
        print(f"  group {g.key}: cases {g.cases[:10]}{'...' if len(g.cases) > 10 else ''}" +
              (f" - {'; '.join(g.notes)}" if g.notes else ""))
        for s in g.symbols:
            mark = "*" if s.scaled else "w" if s.weight else " "
            print(f"   {mark} {s.name:<22} {s.kind:<8} {s.positions} values "
                  f"{sorted(set(s.values))[:6]} - {s.evidence[0]}")
    lists = sorted({t.name for inf in infos for t in inf.tensors if t.shapes is not None})
    if lists:
        print(f"note: tensor_list input(s) {', '.join(lists)}: their shapes are not analysed and never scale - a "
              "scaled case whose list must match another input fails gate 2; choose symbols with --scale-dims")
    guessed = sorted({s.name for g in groups for s in g.symbols
                      if any("scaled_dot_product_attention layout" in e for e in s.evidence[:1])})
    if guessed:  # the names decided, not the shapes: say so where it cannot be missed
        print(f"note: {', '.join(guessed)} read by name in torch's SDPA layout [batch, heads, seq, head_dim] - no "
              "shape rule told heads from sequence. If these tensors are [batch, seq, heads, head_dim] (BSND), "
              "name the symbols to scale instead (e.g. --scale-dims batch,heads: here that axis is your sequence)")
    kinds = {s.kind for g in groups for s in g.symbols if s.scaled}
    stay = [k for k in ("head_dim", "heads") if k not in kinds]
    print("scaling: " + ", ".join(n for n, _w in chosen) + f" ({chosen[0][1]}"
          + (f"; {' and '.join(stay)} stay" if stay else "") + ")")
    print(weights["why"])
    return groups, scale_dims, chosen, weights


def run_key_symbols(groups: list, key: dict | None) -> dict | None:
    """``key`` (a probe.json ``run_key``) with its scaled symbols as a set of names, ``scale_symbols`` (sorted): an
    earlier probe.json's ``scale_dims`` spelling (None: the default) is resolved on ``groups`` first, so two spellings
    of one choice compare equal."""
    if not key or "scale_symbols" in key or "scale_dims" not in key:
        return key
    key = dict(key)
    dims = key.pop("scale_dims")
    key["scale_symbols"] = sorted(s.name for g in groups for s in g.symbols if symbols.selected(s, dims))
    return key
