"""Traced FLOPs as a power law of a group's case symbols: a scaled candidate's FLOPs known before its trace.

The probe's gate 2 runs the reference on the candidate to count its FLOPs, which costs as much as the reference
itself at 2^k the work of its source (a host-side subprocess). When the traced FLOPs of
the original cases follow ``log F = c + sum_k e_k log v_k`` exactly (every case within :data:`EXACT_REL` of the fit,
with :data:`SPARE_CASES` more cases than unknowns, so the fit is tested and not merely solved, and every exponent
0, 1, 2 or 3 as in a monomial count), the candidate's FLOPs are F(source) x
prod_k s_k^e_k for its factors s_k, and the roofline floor (:func:`mfulib.search.probe_gates.gate4_floor`) can decide
gate 4 without running anything. Semantic FLOP counts of matrix operators are monomials in their dimensions (a GEMM
2mnk, attention 4 b h s_q s_k d), so this holds for them; data-dependent counts (masks, variable lengths), counts that
also depend on axes that are not symbols (the last axes), and symbols that never vary (their exponent is not identified)
give no law, and the candidate is traced as before.
"""
from __future__ import annotations

import math

import numpy as np

EXACT_REL = 0.01  # every original case within 1% of the fitted law, or no law
SPARE_CASES = 2  # cases beyond the unknowns: a law solved with one spare case fitted nonsense on a real operator
INTEGER_TOL = 0.02  # every exponent within this of 0, 1, 2 or 3: semantic FLOPs are monomials of the dimensions


def fit(symbols, traced: dict):
    """(law, why): ``law`` {exponents {symbol name: e}, n_cases, max_rel_residual} for the group of ``symbols``
    (:class:`mfulib.core.symbols.Symbol`, ``values`` aligned with ``cases``) from ``traced`` {case id: FLOPs}; or
    (None, the reason there is none). Symbols whose values never vary are left out of the fit (no exponent)."""
    if not symbols:
        return None, "no symbols"
    cases = [c for c in symbols[0].cases if isinstance(traced.get(c), (int, float)) and traced[c] > 0]
    cols, names = [], []
    for s in symbols:
        by_case = dict(zip(s.cases, s.values))
        vals = [by_case.get(c) for c in cases]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in vals):
            continue
        if len(set(vals)) > 1:
            cols.append([math.log(v) for v in vals])
            names.append(s.name)
    if not names:
        return None, "no symbol varies across the cases with traced FLOPs"
    x = np.column_stack([np.ones(len(cases))] + [np.array(c) for c in cols])
    if len(cases) < x.shape[1] + SPARE_CASES:
        return None, (f"{len(cases)} cases for {x.shape[1]} unknowns: the law would not be tested (needs "
                      f"{SPARE_CASES} spare cases)")
    if np.linalg.matrix_rank(x) < x.shape[1]:
        return None, "the symbols' values are collinear across the cases"
    y = np.log(np.array([float(traced[c]) for c in cases]))
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    rel = float(np.max(np.abs(np.exp(x @ coef - y) - 1.0)))
    if rel > EXACT_REL:
        return None, f"traced FLOPs are no power law of the symbols (a case is {rel:.1%} off the fit)"
    odd = {n: round(float(e), 3) for n, e in zip(names, coef[1:])
           if min(abs(e - k) for k in (0, 1, 2, 3)) > INTEGER_TOL}
    if odd:  # e.g. seq 1.65, heads -0.55 from 5 FusionAttention cases: an accident of the data, not the operator
        return None, f"exponents {odd} are not 0, 1, 2 or 3: a fit by accident, not the operator's FLOPs"
    return {"exponents": {n: round(float(e), 6) for n, e in zip(names, coef[1:])}, "n_cases": len(cases),
            "max_rel_residual": rel}, None


def predict(law, source_flops, factors: dict):
    """FLOPs of the source case scaled by ``factors`` {symbol: s} under ``law`` (None: a scaled symbol has no
    exponent, or no law)."""
    if not law or not source_flops:
        return None
    out = float(source_flops)
    for name, s in factors.items():
        if s == 1:
            continue
        e = law["exponents"].get(name)
        if e is None:
            return None
        out *= float(s) ** e
    return out
