"""flops_generator: classify references by their AST and write drafts that check_flops accepts or points at.

Drafts for matmul, FFN and the MHA block must pass check_flops.py unedited; the attention variants must pass and
list the lines a human has to review; an unknown operator's draft must fail until it is written by hand.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from mfulib.flops import check as fchk
from mfulib.flops import contract as fcon
from mfulib.flops import drafts as ft
from mfulib.core.opdir import OpDir
from mfulib.sources.prepare import prepare_explicit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "examples", "ops", "bench")
GEN = os.path.join(ROOT, "examples", "ops", "gen")
GENERATOR = os.path.join(ROOT, "scripts", "flops_generator.py")

EXPECTED_CLASS = {
    "zoo/1_BatchMatmul": "matmul", "zoo/2_Softmax": "softmax", "zoo/3_RMSNorm": "norm", "zoo/4_FFN": "ffn",
    "zoo/5_MHABlock": "attention_proj", "zoo/6_GQAAttention": "gqa_attention", "zoo/20_FlashAttentionV2": "attention_proj",
    "zoo/7_SparseVarlenAttention": "sparse_attention", "npukernelbench/level1/10_LayerNorm": "norm",
    "npukernelbench/level4/2_FFN": "ffn", "npukernelbench/level4/3_FusionAttention": "npu_fusion_attention",
}


def zoo_workdir(tmp_path, op, case_ids):
    """A work dir for zoo operator ``op`` holding only the listed (small) cases of its case file."""
    src = tmp_path / "src"
    src.mkdir()
    with open(os.path.join(BENCH, "zoo", op + ".json")) as f:
        lines = [ln for ln in f if ln.strip()]
    (src / f"{op}.json").write_text("".join(lines[i] for i in case_ids))
    impl = [p for p in os.listdir(os.path.join(GEN, "zoo")) if p.startswith(op + "_")][0]
    dst = tmp_path / "work"
    prepare_explicit(os.path.join(BENCH, "zoo", op + ".py"), str(src / f"{op}.json"),
                     os.path.join(GEN, "zoo", impl), str(dst))
    return OpDir(dst)


def generate_into(od):
    r = subprocess.run([sys.executable, GENERATOR, "--model", od.model_py, "--cases", od.cases_path, "-o",
                        od.flops_py], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def check_all(od):
    ff = fcon.load_flops(od.flops_py)
    rows = [fchk.check_case(ff, od, i) for i in range(len(od.read_cases()))]
    return ff, rows, fchk.file_checks(ff, rows)


@pytest.mark.parametrize("op", sorted(EXPECTED_CLASS))
def test_each_bundled_reference_is_classified_as_expected(op):
    feats = ft.analyze_model(os.path.join(BENCH, op + ".py"))
    set_dir, name = op.rsplit("/", 1)
    cases = os.path.join(BENCH, op + ".json")
    if not os.path.exists(cases):  # real case files stay in ../shared
        cases = os.path.join(ROOT, "..", "shared", "data", set_dir, name + ".json")
        if not os.path.exists(cases):
            pytest.skip(f"{cases} absent: the real case files live in ../shared")
    cls, why = ft.classify(feats, ft.read_case_view(cases))
    assert cls == EXPECTED_CLASS[op], why


def test_the_class_table_lists_every_class_classify_returns_in_the_order_it_tries_them():
    """CLASSES (the table the docs list) against the class names of classify's return statements, in source order."""
    import ast
    import inspect
    tree = ast.parse(inspect.getsource(ft.classify))
    returns = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)
                      and isinstance(n.value.elts[0], ast.Constant)), key=lambda n: n.lineno)
    assert list(dict.fromkeys(n.value.elts[0].value for n in returns)) == list(ft.CLASSES)


@pytest.mark.parametrize("op, case_ids", [("1_BatchMatmul", [0, 2, 3]), ("4_FFN", [0, 1, 2, 11]),
                                          ("5_MHABlock", [0, 1, 2])])
def test_matmul_ffn_and_mha_drafts_pass_check_flops_unedited(tmp_path, op, case_ids):
    od = zoo_workdir(tmp_path, op, case_ids)
    out = generate_into(od)
    assert "no line needs review" in out
    ff, rows, file_level = check_all(od)
    want = ["rejected" if r["flops_status"] == "rejected" else "pass" for r in rows]  # 4_FFN case 11: both reject
    assert [r["status"] for r in rows] == want, [r["diagnosis"] for r in rows]
    assert want.count("rejected") == (1 if op == "4_FFN" else 0)
    assert all(c["status"] not in ("fail", "unverified") for c in file_level)
    assert ff.kernel_parts and all(ff.kernel_parts.values())  # parts matched to the implementation's kernels


def test_the_ffn_draft_rejects_the_gated_case_the_reference_rejects(tmp_path):
    od = zoo_workdir(tmp_path, "4_FFN", [11])  # swiglu with weight2 rows = n1, not n1 / 2
    generate_into(od)
    _, rows, _ = check_all(od)
    assert rows[0]["flops_status"] == "rejected" and rows[0]["tracer"]["status"] == "rejected"


@pytest.mark.parametrize("op, case_ids, must_review", [
    ("6_GQAAttention", [0, 1, 2], ["ALIGN"]),
    ("7_SparseVarlenAttention", [0, 1, 2], ["actual_seq_lengths", "window_left", "rope"]),
    # always causal, no flag in the cases: the draft guesses causal from the mask and asks for a review
    ("20_FlashAttentionV2", [0, 1, 2], ["a mask", "no causal flag"]),
])
def test_attention_variant_drafts_pass_and_point_at_the_lines_to_review(tmp_path, op, case_ids, must_review):
    od = zoo_workdir(tmp_path, op, case_ids)
    out = generate_into(od)
    assert "review these lines" in out
    for word in must_review:
        assert any(word in ln and "# REVIEW" in ln for ln in out.splitlines()), (word, out)
    ff, rows, file_level = check_all(od)
    assert [r["status"] for r in rows] == ["pass"] * len(case_ids), [r["diagnosis"] for r in rows]
    marks = next(c for c in file_level if c["name"] == "review_markers")
    assert marks["status"] == "unverified" and "review each" in marks["detail"]  # a draft is unverified until reviewed
    assert fchk.summarize(rows, file_level)["verdict"] == "unverified"


def test_a_norm_draft_passes_with_the_tracers_zero_named_as_expected(tmp_path):
    od = zoo_workdir(tmp_path, "3_RMSNorm", [0, 1])
    generate_into(od)
    _, rows, _ = check_all(od)
    assert [r["status"] for r in rows] == ["pass", "pass"]
    assert all("no matrix work on either side" in r["diagnosis"] for r in rows)
    # the draft's vector_flops (4 per element + 2 per row) equals the tracer's element costs: x [4, 64] ->
    # 4 * 256 + 2 * 4 = 1032
    assert rows[0]["vector_flops"] == rows[0]["tracer"]["vector_flops"] == 1032
    assert all(c["status"] == "pass" for r in rows for c in r["checks"] if c["name"] == "vector_flops")


def test_an_unknown_operator_gets_a_draft_that_fails_until_written(tmp_path):
    from test_flops_tracer import LOADER, write_workdir
    ref = LOADER + textwrap.dedent('''
    class Model(nn.Module):
        def forward(self, x):
            return torch.linalg.svdvals(x)
    ''')
    od = write_workdir(tmp_path, ref, [{"inputs": [{"name": "x", "type": "tensor", "required": True,
                                                    "dtype": "float32", "shape": [8, 16]}]}])
    generate_into(od)
    draft = ft.generate(od.model_py, od.cases_path)
    assert draft["class"] == "unknown" and draft["review_lines"]
    _, rows, _ = check_all(od)
    assert rows[0]["status"] == "fail" and "unknown operator class" in rows[0]["diagnosis"]
    assert "flops(case) by hand" in rows[0]["diagnosis"]  # the fix


def test_launched_kernels_are_read_from_the_implementation_in_launch_order():
    impl = os.path.join(GEN, "zoo", "5_MHABlock_triton_optimized.py")
    assert ft.launched_kernels(impl) == ["matmul_kernel", "flash_attn_fwd_kernel"]
    parts, _ = ft.kernel_parts_for("attention_proj", ["proj", "attn"], ["matmul_kernel", "flash_attn_fwd_kernel"])
    assert parts == {"proj": ["*matmul_kernel*"], "attn": ["*flash_attn_fwd_kernel*"]}


def test_the_generator_refuses_to_overwrite_without_force(tmp_path):
    od = zoo_workdir(tmp_path, "1_BatchMatmul", [0])
    generate_into(od)
    r = subprocess.run([sys.executable, GENERATOR, "--model", od.model_py, "--cases", od.cases_path, "-o",
                        od.flops_py], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--force" in r.stderr
    json.loads(open(od.cases_path).readline())  # the work dir is untouched


CONV_REF = '''
class Model(nn.Module):
    def forward(self, x, in_channels, out_channels, kernel_size, stride, padding):
        torch.manual_seed(0)
        return nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding).to(x.device)(x)
'''
COUNTS_REF = '''
class Model(nn.Module):
    def forward(self, x, weight, group_list):
        outs, start = [], 0
        for g, c in enumerate(group_list):        # per-group counts: rows start..start+c go through group g
            outs.append(x[start:start + c] @ weight[g])
            start += c
        return torch.cat(outs)
'''
BMM_T_REF = '''
class Model(nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b.transpose(1, 2))
'''
GROUPED_REF = '''
class Model(nn.Module):
    def forward(self, x, weight, group_list):
        outs, start = [], 0
        for g, end in enumerate(group_list):      # rows start..end go through group g
            outs.append(x[start:end] @ weight[g])
            start = end
        return torch.cat(outs)
'''


@pytest.mark.parametrize("ref, inputs, cls, want", [
    # conv: out 16 x 16 x 16 per image, each output 3 * 3 * 3 MACs: 2 * 2 * 16 * 256 * 27
    (CONV_REF, [("x", [2, 3, 32, 32]), ("in_channels", 3), ("out_channels", 16), ("kernel_size", 3), ("stride", 2),
                ("padding", 1)], "conv", 2 * 2 * 16 * 256 * 27),
    # grouped matmul: 96 rows of K=32 through [32, 16] weights: 2 * 96 * 32 * 16
    (GROUPED_REF, [("x", [96, 32]), ("weight", [3, 32, 16]), ("group_list", [10, 50, 96])], "grouped_matmul",
     2 * 96 * 32 * 16),
    # a new user's grouped matmul read per-group counts (they sum to the rows): all 96 rows, not the first 32
    (COUNTS_REF, [("x", [96, 32]), ("weight", [3, 32, 16]), ("group_list", [32, 32, 32])], "grouped_matmul",
     2 * 96 * 32 * 16),
    # torch.bmm(a, b.transpose(1, 2)): a [2, 24, 16], b [2, 40, 16] - 2 * 2 * 24 * 40 * 16, no case rejected
    (BMM_T_REF, [("a", [2, 24, 16]), ("b", [2, 40, 16])], "matmul", 2 * 2 * 24 * 40 * 16),
])
def test_conv_and_grouped_matmul_drafts_pass_and_count_by_hand(tmp_path, ref, inputs, cls, want):
    from test_flops_tracer import LOADER, write_workdir
    ents = [{"name": n, "type": "tensor", "required": True, "dtype": "float32", "shape": v} if isinstance(v, list)
            and n in ("x", "weight", "a", "b") else {"name": n, "type": "attr", "required": True, "dtype": "int", "value": v}
            for n, v in inputs]
    od = write_workdir(tmp_path, LOADER + textwrap.dedent(ref), [{"inputs": ents}])
    generate_into(od)
    assert ft.generate(od.model_py, od.cases_path)["class"] == cls
    _, rows, _ = check_all(od)
    assert rows[0]["status"] == "pass" and rows[0]["flops"] == want, rows[0]["diagnosis"]


NO_MATRIX_REFS = {
    "pooling1d": ("return F.avg_pool1d(x, 2)", [4, 8, 16]),
    "pooling2d": ("return F.max_pool2d(x, 2)", [2, 4, 8, 8]),
    "pooling3d": ("return F.avg_pool3d(x, 2)", [1, 2, 4, 4, 4]),
    "topk": ("return torch.topk(x, 3, dim=-1).values", [8, 16]),
    "sort": ("return torch.sort(x, dim=-1).values", [8, 16]),
}


@pytest.mark.parametrize("name", sorted(NO_MATRIX_REFS))
def test_pooling_and_top_k_drafts_equal_the_hand_value_zero_and_pass(tmp_path, name):
    """Pooling (avg/max, 1-3D) and sort/top-k do no matrix work: the hand value of flops(case) is 0
    (docs/ARCHITECTURE.md#flops); the draft says 0 with no REVIEW line, and the tracer (0 matrix FLOPs, vector ops only)
    agrees."""
    from test_flops_tracer import LOADER, write_workdir
    body, shp = NO_MATRIX_REFS[name]
    ref = LOADER + textwrap.dedent(f'''
    class Model(nn.Module):
        def forward(self, x):
            {body}
    ''')
    od = write_workdir(tmp_path, ref, [{"inputs": [{"name": "x", "type": "tensor", "required": True,
                                                    "dtype": "float32", "shape": shp}]}])
    generate_into(od)
    draft = ft.generate(od.model_py, od.cases_path)
    assert draft["class"] == ("pooling" if name.startswith("pooling") else "reduction")
    # the only REVIEW line is the kernel-name one (this work dir has no Triton implementation), none on the FLOPs
    assert [t for _, t in draft["review_lines"] if "kernel" not in t.lower()] == []
    ff, rows, file_level = check_all(od)
    assert rows[0]["flops"] == 0.0 and rows[0]["tracer"]["total_flops"] == 0.0
    assert rows[0]["status"] == "pass", rows[0]["diagnosis"]


def test_a_layernorm_draft_counts_the_optional_weight_and_bias_each_case_gives(tmp_path):
    """A LayerNorm reference whose weight and bias are optional per case (the benchmark format: a case line lists
    only the inputs it gives). Hand values, x [2, 8, 16] = 256 elements: flops 0 (no matrix work) and
    vector_flops = (5 + has weight + has bias) * 256 = 1280 / 1536 / 1792 for none / weight / weight + bias - the
    draft's count equals the tracer's aten::native_layer_norm cost on each."""
    from test_flops_tracer import LOADER, attr_, tensor, write_workdir
    ref = LOADER + textwrap.dedent('''
    class Model(nn.Module):
        def forward(self, x, normalized_shape, weight=None, bias=None):
            return F.layer_norm(x, list(normalized_shape), weight, bias)
    ''')
    x, norm = tensor("x", [2, 8, 16]), attr_("normalized_shape", [16], "list")
    cases = [{"inputs": [x, norm]}, {"inputs": [x, norm, tensor("weight", [16])]},
             {"inputs": [x, norm, tensor("weight", [16]), tensor("bias", [16])]}]
    od = write_workdir(tmp_path, ref, cases)
    generate_into(od)
    assert ft.generate(od.model_py, od.cases_path)["class"] == "norm"
    ff, rows, _ = check_all(od)
    assert [r["status"] for r in rows] == ["pass"] * 3, [r["diagnosis"] for r in rows]
    assert [r["flops"] for r in rows] == [0.0] * 3
    assert [r["vector_flops"] for r in rows] == [r["tracer"]["vector_flops"] for r in rows] == [1280, 1536, 1792]


def test_a_fused_residual_plus_rmsnorm_draft_counts_the_add(tmp_path):
    """y = rmsnorm(x + residual) * weight on x [4, 64]: flops 0 (no matrix work); vector_flops per element
    residual add 1 + square 1 + mean 1 + * 1/rms 1 + * weight 1 = 5, per row + eps and rsqrt = 2:
    5 * 256 + 2 * 4 = 1288 - the draft equals the tracer's element costs (without the add it would say 1032)."""
    from test_flops_tracer import LOADER, attr_, tensor, write_workdir
    ref = LOADER + textwrap.dedent('''
    class Model(nn.Module):
        def forward(self, x, residual, weight, eps):
            h = x + residual
            return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight
    ''')
    case = {"inputs": [tensor("x", [4, 64]), tensor("residual", [4, 64]), tensor("weight", [64]),
                       attr_("eps", 1e-6, "float")]}
    od = write_workdir(tmp_path, ref, [case])
    generate_into(od)
    ff, rows, _ = check_all(od)
    assert rows[0]["flops"] == 0.0 and rows[0]["vector_flops"] == rows[0]["tracer"]["vector_flops"] == 1288
    assert rows[0]["status"] == "pass", rows[0]["diagnosis"]


def test_an_lstm_draft_counts_the_gate_gemms_of_every_step_and_layer(tmp_path):
    """nn.LSTM(16, 32, num_layers=2, batch_first=True) on x [3, 10, 16] (B 3, T 10, I 16, H 32), 2 FLOPs per MAC:
    layer 0: 2 * 10 * 3 * 128 * (16 + 32) = 368640; layer 1 (input H = 32): 2 * 10 * 3 * 128 * (32 + 32) = 491520;
    total 860160 - the draft (no REVIEW on its FLOPs) and the tracer (aten::mkldnn_rnn_layer formula) agree;
    bidirectional doubles each direction and widens layer 1's input to 64: 2211840."""
    from test_flops_tracer import LOADER, attr_, tensor, write_workdir
    ref = LOADER + textwrap.dedent('''
    class Model(nn.Module):
        def forward(self, x, hidden_size, num_layers, bidirectional, batch_first):
            torch.manual_seed(0)
            lstm = nn.LSTM(x.shape[-1], hidden_size, num_layers=num_layers, bidirectional=bidirectional,
                           batch_first=batch_first).to(device=x.device, dtype=x.dtype)
            return lstm(x)[0]
    ''')
    cases = [{"inputs": [tensor("x", [3, 10, 16]), attr_("hidden_size", 32), attr_("num_layers", 2),
                         attr_("bidirectional", bi, "bool"), attr_("batch_first", True, "bool")]} for bi in (False, True)]
    od = write_workdir(tmp_path, ref, cases)
    generate_into(od)
    draft = ft.generate(od.model_py, od.cases_path)
    assert draft["class"] == "rnn"
    assert [t for _, t in draft["review_lines"] if "kernel" not in t.lower()] == []
    ff, rows, _ = check_all(od)
    assert [r["flops"] for r in rows] == [860160.0, 2211840.0]
    assert [r["status"] for r in rows] == ["pass", "pass"], [r["diagnosis"] for r in rows]


TRITON_IMPL = '''
import torch, triton, triton.language as tl


@triton.jit
def vec_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(torch.nn.Module):
    def forward(self, x, *rest):
        y = torch.empty_like(x)
        vec_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
        return y
'''


def vector_workdir(tmp_path, args, body, inputs, name="Op"):
    """A work dir whose reference is ``forward(self, <args>): <body>`` and whose model_new.py launches one Triton
    kernel (so KERNEL_PARTS needs no review either)."""
    from test_flops_tracer import LOADER, write_workdir
    ref = LOADER + "\nclass Model(nn.Module):\n    def forward(self, " + args + "):\n" + \
        textwrap.indent(textwrap.dedent(body).strip(), " " * 8) + "\n"
    od = write_workdir(tmp_path, ref, [{"inputs": ins} for ins in inputs], name=name)
    with open(os.path.join(od.path, "model_new.py"), "w") as f:
        f.write(TRITON_IMPL)
    return od


def assert_checked(od, cls, want_vector):
    """The draft of ``od`` has class ``cls``, no REVIEW line, flops 0 and vector_flops == ``want_vector`` (per
    case), the tracer agrees and check_flops' verdict is passed with the vector count checked."""
    out = generate_into(od)
    draft = ft.generate(od.model_py, od.cases_path, os.path.join(od.path, "model_new.py"))
    assert draft["class"] == cls, draft["reasons"]
    assert draft["review_lines"] == [] and "no line needs review" in out, draft["review_lines"]
    ff, rows, file_level = check_all(od)
    assert [r["flops"] for r in rows] == [0.0] * len(rows)
    assert [r["vector_flops"] for r in rows] == want_vector
    assert [r["tracer"]["vector_flops"] for r in rows] == want_vector
    assert all("vector_flops checked" in r["diagnosis"] for r in rows), [r["diagnosis"] for r in rows]
    assert fchk.summarize(rows, file_level)["verdict"] == "passed", [r["diagnosis"] for r in rows]


@pytest.mark.parametrize("body, shapes, want", [
    # a, b [8, 16]: one add per element -> 128
    ("return a + b", ([8, 16], [8, 16]), 128),
    # a [8, 16] * b [16] broadcasts to [8, 16] (128 muls), + b again (128 adds) -> 256
    ("return a * b + b", ([8, 16], [16]), 256),
    # logaddexp = max-shifted exp of both, add, log: 4 per element (vector_costs table) on [8, 16] -> 512
    ("return torch.logaddexp(a, b)", ([8, 16], [8, 16]), 512),
    # hypot = sqrt(a*a + b*b), 4 per element on the broadcast [8, 16] (512) + the Python "- 1.0" (sub, 128) -> 640
    ("return torch.hypot(a, b) - 1.0", ([8, 16], [1, 16]), 640),
    # gelu(a) (erf form 0.5 a (1 + erf(a / sqrt 2)): 5) 640 + sigmoid(b) 128 + their product 128; y += a 128;
    # -y 128; a > 0 and where cost 0 -> 1152
    ("y = F.gelu(a) * torch.sigmoid(b)\ny += a\nreturn torch.where(a > 0, y, -y)", ([8, 16], [8, 16]), 1152),
])
def test_elementwise_and_binary_math_drafts_derive_the_vector_count_exactly(tmp_path, body, shapes, want):
    """Elementwise written with Python operators (a + b, a * b + b) and binary math (torch.logaddexp, hypot):
    matrix FLOPs 0 by hand (no matrix work); vector FLOPs by hand per the tracer's per-op table
    (mfulib/flops/vector_costs.py: add/sub/mul/neg/sigmoid 1, gelu 5, hypot 4, logaddexp 4 per output element, compare and
    where 0), worked per case in the parameter comments. The draft re-plays forward() on the case's shapes (with
    broadcasting), carries no REVIEW marker and check_flops passes it with the vector count checked."""
    od = vector_workdir(tmp_path, "a, b", body, [[tensor_(n, s) for n, s in zip("ab", shapes)]])
    assert_checked(od, "elementwise", [want])


@pytest.mark.parametrize("body, extra, want", [
    # x [4, 8, 16] = 512 elements; sum over axis 1: 1 per input element -> 512
    ("return x.sum(dim)", [("dim", 1)], 512),
    # mean over the last axis, kept: 512; then * 2 on the [4, 8, 1] result: 32 -> 544
    ("return torch.mean(x, -1, keepdim=True) * 2", [], 544),
    # amax over axes (0, 2): 1 per input element -> 512
    ("return torch.amax(x, dim=(0, 2))", [], 512),
    # var over the last axis: mean, centre, square, sum = 4 per input element -> 2048
    ("return torch.var(x, dim=-1, unbiased=False)", [], 2048),
    # x - mean over axis 1 (kept [4, 1, 16]): mean 512 + sub on the broadcast [4, 8, 16] 512 -> 1024
    ("return x - x.mean(1, keepdim=keepdim)", [("keepdim", True)], 1024),
])
def test_reduction_drafts_equal_the_hand_value_with_zero_matrix_flops(tmp_path, body, extra, want):
    """Reductions (sum / mean / amax / var over an axis) of x [4, 8, 16] (512 elements): matrix FLOPs 0 by hand;
    vector FLOPs per the tracer's table (sum, mean, amax 1 and var 4 per input element; a following elementwise
    op 1 per output element), worked in the parameter comments. The draft (class "reduction") has no REVIEW
    marker and check_flops passes it with the vector count checked; the axis may come from the case."""
    from test_flops_tracer import attr_
    args = ", ".join(["x"] + [n for n, _ in extra])
    ins = [tensor_("x", [4, 8, 16])] + [attr_(n, v, "bool" if isinstance(v, bool) else "int") for n, v in extra]
    od = vector_workdir(tmp_path, args, body, [ins])
    assert_checked(od, "reduction", [want])


def test_an_elementwise_reference_the_generator_cannot_follow_keeps_its_review_marker(tmp_path):
    """forward() with a branch (if a.shape[0] > 4) is not straight-line code, so the count is not derived: the
    draft keeps a guess - every element-wise op written in forward() by the table, once per element of the broadcast
    output: 3 ops (*, +, +) * 128 = 384 - marked REVIEW with the reason. The tracer runs the branch taken on a [8, 16]:
    a * b + a = 2 * 128 = 256, so check_flops fails the guess; it never passes unreviewed."""
    od = vector_workdir(tmp_path, "a, b", "if a.shape[0] > 4:\n    return a * b + a\nreturn a + b",
                        [[tensor_("a", [8, 16]), tensor_("b", [8, 16])]])
    generate_into(od)
    draft = ft.generate(od.model_py, od.cases_path, os.path.join(od.path, "model_new.py"))
    assert draft["class"] == "elementwise"
    texts = [t for _, t in draft["review_lines"]]
    assert any("guessed, forward() not re-played exactly" in t and "If statement" in t for t in texts), texts
    ff, rows, file_level = check_all(od)
    assert rows[0]["flops"] == 0.0 and rows[0]["vector_flops"] == 384 and rows[0]["tracer"]["vector_flops"] == 256
    assert status_vector(rows[0]) == "fail"
    assert fchk.summarize(rows, file_level)["verdict"] == "failed"
    assert next(c for c in file_level if c["name"] == "review_markers")["status"] == "unverified"


def tensor_(name, shape, dtype="float32"):
    return {"name": name, "type": "tensor", "required": True, "dtype": dtype, "shape": shape}


def status_vector(row):
    return next(c for c in row["checks"] if c["name"] == "vector_flops")["status"]


FIA_REF = '''
class Model(nn.Module):
    def forward(self, query, key, value, num_heads, num_key_value_heads, input_layout, sparse_mode,
                actual_seq_lengths=None, actual_seq_lengths_kv=None):
        import torch_npu
        mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1) if sparse_mode in (2, 3) else None
        return torch_npu.npu_fused_infer_attention_score(
            query, key, value, atten_mask=mask, actual_seq_lengths=actual_seq_lengths,
            actual_seq_lengths_kv=actual_seq_lengths_kv, num_heads=num_heads,
            num_key_value_heads=num_key_value_heads, input_layout=input_layout, sparse_mode=sparse_mode)[0]
'''


@pytest.mark.skipif(__import__("mfulib.flops.npu_standins").flops.npu_standins.real_torch_npu() is not None,
                    reason="a real torch_npu is installed: its ops run instead of the stand-ins")
def test_a_fused_infer_attention_draft_equals_the_hand_values_on_bnsd_bsh_and_bsnd(tmp_path):
    """npu_fused_infer_attention_score, FLOPs 2 * N_q * (D + D_v) per unmasked (query, key) pair (Ascend docs):
    1. BNSD, GQA 8 query / 2 KV heads, D = D_v = 16, sparse_mode 0, actual_seq_lengths [4, 2], _kv [20, 32]:
       pairs 4 * 20 + 2 * 32 = 144 -> 2 * 8 * 32 * 144 = 73728 (the padded shapes, 4 x 32 per batch, would say
       2 * 8 * 32 * 256 = 131072);
    2. BSH [1, 8, 4 * 16], one KV head (k, v [1, 8, 16]), sparse_mode 3, S_q = S_kv = 8: pairs 8 * 9 / 2 = 36 ->
       2 * 4 * 32 * 36 = 9216;
    3. BSND decode q [2, 1, 4, 16], k/v [2, 32, 2, 16], sparse_mode 0, actual_seq_lengths [1, 1],
       actual_seq_lengths_kv [10, 32]: pairs 10 + 32 = 42 -> 2 * 4 * 32 * 42 = 10752.
    The draft needs no REVIEW on its FLOPs and passes check_flops against the tracer's stand-in."""
    from test_flops_tracer import LOADER, attr_, tensor, write_workdir

    def case(q, k, v, heads, kv, layout, mode, lens=None, lens_kv=None):
        ins = [tensor("query", q), tensor("key", k), tensor("value", v), attr_("num_heads", heads),
               attr_("num_key_value_heads", kv), attr_("input_layout", layout, "str"), attr_("sparse_mode", mode)]
        if lens is not None:
            ins.append(attr_("actual_seq_lengths", lens, "list"))
        if lens_kv is not None:
            ins.append(attr_("actual_seq_lengths_kv", lens_kv, "list"))
        return {"inputs": ins}
    cases = [case([2, 8, 4, 16], [2, 2, 32, 16], [2, 2, 32, 16], 8, 2, "BNSD", 0, [4, 2], [20, 32]),
             case([1, 8, 64], [1, 8, 16], [1, 8, 16], 4, 1, "BSH", 3),
             case([2, 1, 4, 16], [2, 32, 2, 16], [2, 32, 2, 16], 4, 2, "BSND", 0, [1, 1], [10, 32])]
    od = write_workdir(tmp_path, LOADER + textwrap.dedent(FIA_REF), cases)
    generate_into(od)
    draft = ft.generate(od.model_py, od.cases_path)
    assert draft["class"] == "npu_fused_infer_attention"
    assert [t for _, t in draft["review_lines"] if "kernel" not in t.lower()] == []
    ff, rows, _ = check_all(od)
    assert [r["flops"] for r in rows] == [73728.0, 9216.0, 10752.0]
    assert [r["tracer"]["total_flops"] for r in rows] == [73728, 9216, 10752]
    assert [r["status"] for r in rows] == ["pass"] * 3, [r["diagnosis"] for r in rows]


DSA_REF = '''
class Model(nn.Module):
    def forward(self, index_q, index_k, weights, query, kv, sparse_count, sparse_mode):
        import torch_npu
        idx, _ = torch_npu.npu_lightning_indexer(index_q, index_k, weights, sparse_count=sparse_count,
                                                 sparse_mode=sparse_mode)
        return torch_npu.npu_sparse_flash_attention(query, kv, kv, idx, 1.0, sparse_block_size=1)[0]
'''
INDEXER_REF = '''
class Model(nn.Module):
    def forward(self, query, key, weights, sparse_count, sparse_mode):
        import torch_npu
        return torch_npu.npu_lightning_indexer(query, key, weights, sparse_count=sparse_count,
                                               sparse_mode=sparse_mode)[1]
'''
TOPK_BLOCKS_REF = '''
class Model(nn.Module):
    def forward(self, q, k, v, block_size, topk):
        b, h, s, d = q.shape
        kb = k.reshape(b, h, s // block_size, block_size, d)
        scores = torch.einsum("bhsd,bhnd->bhsn", q, kb.mean(3))               # query x key-block summary
        sel = scores.topk(topk, dim=-1).indices                                # top-k key blocks per query
        idx = (sel[..., None] * block_size + torch.arange(block_size)).flatten(-2)
        ks = torch.gather(k[:, :, None].expand(b, h, s, s, d), 3, idx[..., None].expand(-1, -1, -1, -1, d))
        vs = torch.gather(v[:, :, None].expand(b, h, s, s, d), 3, idx[..., None].expand(-1, -1, -1, -1, d))
        p = torch.softmax(torch.einsum("bhsd,bhskd->bhsk", q, ks) / d ** 0.5, dim=-1)
        return torch.einsum("bhsk,bhskd->bhsd", p, vs)
'''


@pytest.mark.skipif(__import__("mfulib.flops.npu_standins").flops.npu_standins.real_torch_npu() is not None,
                    reason="a real torch_npu is installed: its ops run instead of the stand-ins")
def test_sparse_attention_and_lightning_indexer_drafts_are_marked_for_review_and_never_undercount(tmp_path):
    """DeepSeek DSA: indexer (index_q [1, 16, 4, 8], index_k [1, 16, 1, 8], sparse_count 8, sparse_mode 3) feeds
    npu_sparse_flash_attention (query [1, 16, 4, 32], kv [1, 16, 1, 32]). Hand values (as in test_npu_formulas):
    indexer 2 * 4 * 136 * (8 + 1) = 9792; SFA really selects 100 keys -> 2 * 4 * 100 * 64 = 51200; total 60992.
    The draft counts every index slot, 16 * 8 = 128 keys -> 2 * 4 * 128 * 64 = 65536 (an upper bound, never an
    undercount) + 9792 = 75328, with REVIEW lines naming the -1 / causal selection and the indexer's head sum:
    the verdict is unverified (or failed on the upper bound), never pass. Indexer alone: the draft equals 9792 and
    is unverified for its REVIEW line. A torch reference gathering top-k key blocks (q/k/v [1, 2, 16, 8], blocks
    of 4 keys, top-2 blocks per query): attention over 2 * 4 = 8 keys, 2 * 2 heads * 16 * 8 * (8 + 8) = 8192, plus
    the block scores (query x 16 / 4 = 4 block means) 2 * 2 * 16 * 4 * 8 = 2048: 10240 = the tracer's einsums;
    the draft says 10240 with REVIEW lines on the selection, so it is unverified until reviewed."""
    from test_flops_tracer import LOADER, attr_, tensor, write_workdir
    dsa = [tensor("index_q", [1, 16, 4, 8]), tensor("index_k", [1, 16, 1, 8]), tensor("weights", [1, 16, 4]),
           tensor("query", [1, 16, 4, 32]), tensor("kv", [1, 16, 1, 32]), attr_("sparse_count", 8),
           attr_("sparse_mode", 3)]
    od = write_workdir(tmp_path, LOADER + textwrap.dedent(DSA_REF), [{"inputs": dsa}], name="DSA")
    generate_into(od)
    draft = ft.generate(od.model_py, od.cases_path)
    assert draft["class"] == "sparse_flash_attention"
    texts = " ".join(t for _, t in draft["review_lines"])
    assert "-1 ends a token's list" in texts and "weighted head sum" in texts
    ff, rows, file_level = check_all(od)
    assert rows[0]["flops_parts"] == {"attn": 65536, "indexer": 9792}
    assert rows[0]["flops"] == 75328.0 >= rows[0]["tracer"]["total_flops"] == 60992
    assert fchk.summarize(rows, file_level)["verdict"] in ("unverified", "failed")

    ix = [tensor("query", [1, 16, 4, 8]), tensor("key", [1, 16, 1, 8]), tensor("weights", [1, 16, 4]),
          attr_("sparse_count", 8), attr_("sparse_mode", 3)]
    od = write_workdir(tmp_path, LOADER + textwrap.dedent(INDEXER_REF), [{"inputs": ix}], name="LI")
    generate_into(od)
    draft = ft.generate(od.model_py, od.cases_path)
    assert draft["class"] == "lightning_indexer"
    ff, rows, file_level = check_all(od)
    assert rows[0]["flops"] == 9792.0 == rows[0]["tracer"]["total_flops"]
    assert fchk.summarize(rows, file_level)["verdict"] == "unverified"

    tk = [tensor("q", [1, 2, 16, 8]), tensor("k", [1, 2, 16, 8]), tensor("v", [1, 2, 16, 8]),
          attr_("block_size", 4), attr_("topk", 2)]
    od = write_workdir(tmp_path, LOADER + textwrap.dedent(TOPK_BLOCKS_REF), [{"inputs": tk}], name="TopK")
    generate_into(od)
    draft = ft.generate(od.model_py, od.cases_path)
    assert draft["class"] == "sparse_attention"
    assert any("top-k block selection" in t for _, t in draft["review_lines"])
    assert any("selection scores" in t for _, t in draft["review_lines"])
    ff, rows, file_level = check_all(od)
    assert rows[0]["flops"] == 10240.0 == rows[0]["tracer"]["total_flops"]
    assert fchk.summarize(rows, file_level)["verdict"] == "unverified"


PAGED_FIA_REF = '''
class Model(nn.Module):
    def forward(self, query, key, value, num_heads, num_key_value_heads, input_layout, sparse_mode, block_table,
                block_size, actual_seq_lengths_kv=None):
        import torch_npu
        return torch_npu.npu_fused_infer_attention_score(
            query, key, value, block_table=torch.tensor(block_table, dtype=torch.int32), block_size=block_size,
            actual_seq_lengths_kv=actual_seq_lengths_kv, num_heads=num_heads,
            num_key_value_heads=num_key_value_heads, input_layout=input_layout, sparse_mode=sparse_mode)[0]
'''


@pytest.mark.skipif(__import__("mfulib.flops.npu_standins").flops.npu_standins.real_torch_npu() is not None,
                    reason="a real torch_npu is installed: its ops run instead of the stand-ins")
def test_fused_infer_attention_drafts_count_the_tnd_and_paged_kv_branches_by_hand(tmp_path):
    """npu_fused_infer_attention_score (Ascend/op-plugin docs/context/torch_npu-npu_fused_infer_attention_score.md),
    2 * N_q * (D + D_v) per unmasked (query, key) pair; N_q 4, N_kv 2, D = D_v = 16 -> 256 FLOPs per pair.
    TND (both length lists required, cumulative, their count = batch), q [10, 4, 16], k/v [24, 2, 16]:
    1. actual_seq_lengths [3, 10] -> s_q 3, 7; actual_seq_lengths_kv [8, 24] -> s_kv 8, 16; sparse_mode 0:
       3 * 8 + 7 * 16 = 136 pairs -> 34816 (the cumulative values read as lengths would say 3*8 + 10*24 = 264);
    2. the same with sparse_mode 3 (rightDownCausal): query i of batch 1 sees i + 6 keys (6 + 7 + 8 = 21), of
       batch 2 i + 10 (10 + ... + 16 = 91): 112 pairs -> 28672;
    3. no actual_seq_lengths_kv: rejected (the docs require both for TND).
    Page attention (block_table given: the KV caches are [blocknum, blocksize, H] or [blocknum, N_kv, blocksize, D]
    whatever input_layout says; actual_seq_lengths_kv required = the real KV length per batch):
    4. BSH q [2, 4, 64], cache [6, 16, 32], block_table [[0, 1, 2], [3, 4, 5]], block_size 16, lengths_kv [20, 40]:
       4 * 20 + 4 * 40 = 240 pairs -> 61440 (the table's capacity 3 * 16 = 48 would say 384 pairs, 98304);
    5. BNSD decode q [2, 4, 1, 16], cache [6, 2, 16, 16], lengths_kv [33, 7]: 40 pairs -> 10240;
    6. no actual_seq_lengths_kv: rejected (the docs require it for page attention).
    The drafts carry no REVIEW on their FLOPs and equal the tracer's stand-in formula on every case."""
    from test_flops_tracer import LOADER, attr_, tensor, write_workdir

    def common(heads, kv, layout, mode):
        return [attr_("num_heads", heads), attr_("num_key_value_heads", kv), attr_("input_layout", layout, "str"),
                attr_("sparse_mode", mode)]
    tnd = [tensor("query", [10, 4, 16]), tensor("key", [24, 2, 16]), tensor("value", [24, 2, 16])]
    lens = [attr_("actual_seq_lengths", [3, 10], "list"), attr_("actual_seq_lengths_kv", [8, 24], "list")]
    tnd_cases = [{"inputs": tnd + common(4, 2, "TND", 0) + lens}, {"inputs": tnd + common(4, 2, "TND", 3) + lens},
                 {"inputs": tnd + common(4, 2, "TND", 0) + lens[:1]}]
    od = write_workdir(tmp_path, LOADER + textwrap.dedent(FIA_REF), tnd_cases, name="TND")
    generate_into(od)
    draft = ft.generate(od.model_py, od.cases_path)
    assert draft["class"] == "npu_fused_infer_attention"
    assert [t for _, t in draft["review_lines"] if "kernel" not in t.lower()] == []
    _, rows, _ = check_all(od)
    assert [r["flops"] for r in rows[:2]] == [34816.0, 28672.0]
    assert [r["tracer"]["total_flops"] for r in rows[:2]] == [34816, 28672]
    assert [r["status"] for r in rows[:2]] == ["pass", "pass"], [r["diagnosis"] for r in rows]
    assert rows[2]["flops_status"] == "rejected" and rows[2]["tracer"]["status"] == "rejected", rows[2]

    table = attr_("block_table", [[0, 1, 2], [3, 4, 5]], "list")
    paged = [{"inputs": [tensor("query", [2, 4, 64]), tensor("key", [6, 16, 32]), tensor("value", [6, 16, 32])]
              + common(4, 2, "BSH", 0) + [table, attr_("block_size", 16), attr_("actual_seq_lengths_kv", [20, 40],
                                                                                  "list")]},
             {"inputs": [tensor("query", [2, 4, 1, 16]), tensor("key", [6, 2, 16, 16]),
                         tensor("value", [6, 2, 16, 16])]
              + common(4, 2, "BNSD", 0) + [table, attr_("block_size", 16), attr_("actual_seq_lengths_kv", [33, 7],
                                                                                   "list")]},
             {"inputs": [tensor("query", [2, 4, 64]), tensor("key", [6, 16, 32]), tensor("value", [6, 16, 32])]
              + common(4, 2, "BSH", 0) + [table, attr_("block_size", 16)]}]
    od = write_workdir(tmp_path, LOADER + textwrap.dedent(PAGED_FIA_REF), paged, name="Paged")
    generate_into(od)
    draft = ft.generate(od.model_py, od.cases_path)
    assert draft["class"] == "npu_fused_infer_attention"
    assert [t for _, t in draft["review_lines"] if "kernel" not in t.lower()] == []
    _, rows, _ = check_all(od)
    assert [r["flops"] for r in rows[:2]] == [61440.0, 10240.0]
    assert [r["tracer"]["total_flops"] for r in rows[:2]] == [61440, 10240]
    assert [r["status"] for r in rows[:2]] == ["pass", "pass"], [r["diagnosis"] for r in rows]
    assert rows[2]["flops_status"] == "rejected" and rows[2]["tracer"]["status"] == "rejected", rows[2]


def test_a_one_part_draft_without_a_triton_launch_gives_every_kernel_to_its_part():
    # a new user's report: a torch-only ModelNew ran aten::mm; the draft's '*matmul*' matched nothing, "other" held
    # all the time (and an absurd "if fixed" figure followed)
    parts, note = ft.kernel_parts_for("grouped_matmul", ["matmul"], [])
    assert parts == {"matmul": ["*"]} and "REVIEW" in note and "no model_new.py?" not in note
    parts, _ = ft.kernel_parts_for("attention_proj", ["attn", "proj"], [])
    assert parts["proj"] == ["*matmul*", "*gemm*", "*linear*"]  # several parts: named guesses, still REVIEW
