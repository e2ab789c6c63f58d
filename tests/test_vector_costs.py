"""The one element-wise cost table (mfulib/flops/vector_costs.py): its stated rule gives the hand values below, the
tracer applies it at the output (broadcast) shape, and the kb guide's copy equals the code's table.

Hand values follow the rule of the table's docstring (one FLOP per arithmetic operation and per elementary function,
per output element) applied to each op's formula in the PyTorch documentation: GELU erf form 0.5 x (1 + erf(x /
sqrt 2)) = div, erf, add, mul, mul = 5; tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) = 2 muls for x^3,
mul, add, mul, tanh, add, mul, mul = 9; SiLU x * sigmoid(x) = 2; Softplus log(1 + exp(x)) = 3 (beta 2: + the
multiply and the divide = 5); logaddexp log(exp(a) + exp(b)) = 4; Mish x * tanh(softplus(x)) = 5.
"""
import os
import sys

import pytest
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from mfulib.flops.tracer import trace_callable  # noqa: E402
from mfulib.flops.vector_costs import ROWS, element_cost  # noqa: E402

X = torch.randn(4, 6)   # 24 elements


@pytest.mark.parametrize("fn, per_element", [
    (lambda x: F.gelu(x), 5),
    (lambda x: F.gelu(x, approximate="tanh"), 9),
    (lambda x: F.silu(x), 2),
    (lambda x: F.softplus(x), 3),
    (lambda x: F.softplus(x, beta=2.0), 5),
    (lambda x: F.mish(x), 5),
    (lambda x: torch.clamp(x, min=0.0), 1),
    (lambda x: torch.clamp(x, -1.0, 1.0), 2),
    (lambda x: F.hardswish(x), 5),
])
def test_the_tracer_costs_activations_by_the_stated_rule(fn, per_element):
    res = trace_callable(fn, [X])
    assert res.vector_flops == per_element * 24
    assert res.vector_uncosted == {}


def test_element_wise_ops_count_at_the_broadcast_output_shape():
    """logaddexp of [64, 1] and [1, 45]: 64 * 45 = 2880 output elements x 4 = 11520 (not 4 x 64 or 4 x 45)."""
    res = trace_callable(lambda a, b: torch.logaddexp(a, b), [torch.randn(64, 1), torch.randn(1, 45)])
    assert res.vector_flops == 4 * 64 * 45


def test_no_element_wise_op_is_costed_as_a_reduction():
    """Every op of the first rows (element-wise by their formula) is costed per OUTPUT element."""
    elementwise = [op for ops, _, basis, _ in ROWS if basis == "out" for op in ops]
    assert {"gelu", "silu", "logaddexp", "hypot", "sigmoid", "add"} <= set(elementwise)
    assert all(element_cost(op)[1] == "out" for op in elementwise)
    assert element_cost("sum") == (1, "in")


def test_the_kb_guide_carries_the_codes_table():
    """kb/ops/triton/guides/tooling/mfu_flops_guide.md holds the table scripts/render_cost_table.py renders from
    ROWS; a stale copy fails here (run the script)."""
    import render_cost_table
    with open(render_cost_table.GUIDE, encoding="utf-8") as f:
        text = f.read()
    assert render_cost_table.render(text) == text
    for ops, _, _, formula in ROWS:
        assert formula in text and f"`{ops[0]}`" in text
