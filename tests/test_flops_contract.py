"""flops.py contract helpers: closed-form pair counts, layouts, sparse modes, FFN chains, length checks, loading."""
import itertools
import json

import pytest

from mfulib.flops import formulas as flop_formulas
from mfulib.flops import check as fchk
from mfulib.flops import contract as fcon


def brute_pairs(s_q, s_k, causal, align, wl, wr):
    off = 0 if align == "top_left" else s_k - s_q
    n = 0
    for i, j in itertools.product(range(s_q), range(s_k)):
        hi = i + off if causal else (i + off + wr if wr is not None and wr >= 0 else s_k)
        lo = i + off - wl if wl is not None and wl >= 0 else -1
        n += lo <= j <= hi
    return n


@pytest.mark.parametrize("s_q, s_k", [(0, 5), (1, 1), (7, 7), (4, 11), (11, 4), (13, 13)])
@pytest.mark.parametrize("causal, align, wl, wr", [
    (False, "top_left", None, None), (True, "top_left", None, None), (True, "bottom_right", None, None),
    (True, "top_left", 3, None), (False, "bottom_right", 2, 1), (True, "bottom_right", 0, None)])
def test_attention_pairs_closed_form_equals_a_brute_force_count(s_q, s_k, causal, align, wl, wr):
    got = fcon.attention_pairs(s_q, s_k, causal=causal, align=align, window_left=wl, window_right=wr)
    assert got == brute_pairs(s_q, s_k, causal, align, wl, wr)
    assert got <= s_q * s_k  # never above the dense count


def test_attention_pairs_is_exact_at_long_sequence_lengths():
    assert fcon.attention_pairs(131072, 131072, causal=True) == 131072 * 131073 // 2
    # bottom-right, 1000 queries over 5000 keys: rows see 4001 .. 5000 keys
    assert fcon.attention_pairs(1000, 5000, causal=True, align="bottom_right") == sum(range(4001, 5001))


@pytest.mark.parametrize("mode", [2, 3, 4, 5])
def test_npu_sparse_pairs_agree_with_the_tracers_independent_count(mode):
    for s_q, s_k, pre, nxt, prefix in [(9, 9, 2, 1, 3), (5, 12, 3, 0, 4), (12, 5, 1, 2, 7), (16, 16, 100, 100, 0)]:
        a = fcon.npu_sparse_pairs(mode, s_q, s_k, pre, nxt, prefix=prefix)
        b = flop_formulas.npu_mode_pairs(mode, s_q, s_k, pre, nxt, prefix)
        assert a == b, (mode, s_q, s_k)


def test_npu_sparse_modes_that_need_mask_values_or_a_prefix_are_rejected():
    with pytest.raises(ValueError, match="case rejected: sparse_mode 1"):
        fcon.npu_sparse_pairs(1, 8, 8)
    with pytest.raises(ValueError, match="case rejected: sparse_mode 5"):
        fcon.npu_sparse_pairs(5, 8, 8)
    assert fcon.npu_sparse_pairs(0, 8, 6) == 48  # no mask: pre/next tokens ignored, every pair


def case_of(**inputs):
    ents = []
    for name, v in inputs.items():
        if isinstance(v, tuple):
            ents.append({"name": name, "type": "tensor", "required": True, "dtype": v[1], "shape": v[0]})
        else:
            ents.append({"name": name, "type": "attr", "required": True, "dtype": "int", "value": v})
    return {"inputs": ents}


@pytest.mark.parametrize("layout, q, k, heads, want", [
    ("BSH", [2, 16, 64], [2, 20, 32], 4, dict(b=2, hq=4, hkv=2, s_q=16, s_k=20, d=16, d_v=16)),
    ("SBH", [16, 2, 64], [16, 2, 64], 4, dict(b=2, hq=4, hkv=4, s_q=16, s_k=16, d=16, d_v=16)),
    ("BSND", [2, 16, 8, 32], [2, 24, 2, 32], None, dict(b=2, hq=8, hkv=2, s_q=16, s_k=24, d=32, d_v=32)),
    ("BNSD", [2, 8, 16, 32], [2, 2, 24, 32], None, dict(b=2, hq=8, hkv=2, s_q=16, s_k=24, d=32, d_v=32)),
    ("TND", [40, 8, 32], [40, 8, 32], None, dict(b=None, hq=8, hkv=8, s_q=40, s_k=40, d=32, d_v=32)),
])
def test_attention_dims_reads_every_torch_npu_layout(layout, q, k, heads, want):
    case = case_of(query=(q, "float16"), key=(k, "float16"), value=(k, "float16"))
    assert fcon.attention_dims(case, layout=layout, head_num=heads) == want


def test_attention_dims_rejects_heads_that_do_not_group():
    case = case_of(query=([1, 6, 8, 16], "float16"), key=([1, 4, 8, 16], "float16"), value=([1, 4, 8, 16], "float16"))
    with pytest.raises(ValueError, match="case rejected"):
        fcon.attention_dims(case, layout="BNSD")


def test_ffn_parts_count_both_gemms_and_reject_a_gated_chain_that_does_not_halve():
    # x [8, 16] @ W1 [16, 64] (swiglu halves to 32) @ W2 [32, 16]
    assert fcon.ffn_parts([8, 16], [16, 64], [32, 16], gated=True) == {"up": 2 * 8 * 16 * 64, "down": 2 * 8 * 32 * 16}
    with pytest.raises(ValueError, match="case rejected"):
        fcon.ffn_parts([8, 16], [16, 64], [64, 16], gated=True)  # the real-data quirk: W2 has n1 rows
    assert fcon.ffn_parts([2, 4, 16], [64, 16], [16, 64], gated=False, weights_as_linear=True)["up"] == 2 * 8 * 16 * 64


def test_case_helpers_read_inputs_by_name_or_position():
    case = case_of(x=([4, 8], "float16"), head_num=2)
    assert fcon.shape(case, "x") == fcon.shape(case, 0) == [4, 8]
    assert fcon.attr(case, "head_num") == fcon.attr(case, 1) == 2
    assert fcon.attr(case, "missing", 7) == 7 and fcon.dtype(case, "x") == "float16"
    assert fcon.has(case, "x") and not fcon.has(case, "bias") and fcon.numel(case, "x") == 32
    with pytest.raises(KeyError):
        fcon.attr(case, "missing")


def test_sequence_length_problems_name_a_length_beyond_the_sequence_axis_and_a_wrong_count():
    ok = case_of(q=([2, 32, 4, 8], "float16"))
    ok["inputs"].append({"name": "actual_seq_lengths", "type": "attr", "dtype": "list", "value": [32, 5]})
    assert fchk.sequence_length_problems(ok) == []
    bad = json.loads(json.dumps(ok))
    bad["inputs"][1]["value"] = [33, 5, 1]
    probs = " ".join(fchk.sequence_length_problems(bad))
    assert "3 lengths" in probs and "exceeds the sequence axis 32" in probs
    cum = case_of(query=([10, 4, 8], "float16"))
    cum["inputs"] += [{"name": "input_layout", "type": "attr", "dtype": "str", "value": "TND"},
                      {"name": "actual_seq_qlen", "type": "attr", "dtype": "list", "value": [6, 4]}]
    assert "must not decrease" in " ".join(fchk.sequence_length_problems(cum))


def test_a_flops_py_with_two_parameters_is_called_with_the_forward_arguments(tmp_path):
    p = tmp_path / "flops.py"
    p.write_text("KERNEL_PARTS = {'a': ['*k*']}\ndef flops(case, args):\n    return float(args[0])\n"
                 "def flops_parts(case, args):\n    return {'a': float(args[0])}\n# REVIEW: check me\n")
    ff = fcon.load_flops(p)
    assert ff.takes_args and ff.flops({}, [3]) == 3.0 and ff.parts({}, [3]) == {"a": 3.0}
    assert ff.review_lines() == [(6, "# REVIEW: check me")]
    assert ff.check_kernel_parts_keys(["a"]) == [] and ff.check_kernel_parts_keys(["b"])


def test_a_flops_py_without_flops_is_a_user_error(tmp_path):
    from mfulib.core.errors import UserError
    p = tmp_path / "flops.py"
    p.write_text("X = 1\n")
    with pytest.raises(UserError, match="no flops"):
        fcon.load_flops(p)


def test_compute_dtype_defaults_to_the_first_floating_input_and_flops_py_can_override_it(tmp_path):
    case = case_of(idx=([4], "int32"), x=([4, 8], "bfloat16"))
    p = tmp_path / "flops.py"
    p.write_text("def flops(case):\n    return 1.0\n")
    assert fcon.load_flops(p).compute_dtype(case) == "bfloat16"
    p.write_text("def flops(case):\n    return 1.0\ndef compute_dtype(case):\n    return 'fp32'\n")
    assert fcon.load_flops(p).compute_dtype(case) == "float32"


# ------------------------------------------------------------------------------------------------ bad flops.py

@pytest.mark.parametrize("body, says", [
    ("raise SystemExit(3)", "flops() called sys.exit(3)"),
    ("return '384'", "flops() returned str '384' for case 3: return a float"),
    ("return True", "flops() returned bool True for case 3"),
    ("return None", "flops() returned NoneType None for case 3"),
])
def test_a_flops_py_that_exits_or_returns_a_non_number_is_an_error_for_that_case_not_a_process_exit(tmp_path, body,
                                                                                                    says):
    p = tmp_path / "flops.py"
    p.write_text(f"def flops(case):\n    {body}\n")
    ev = fcon.evaluate_case(fcon.load_flops(p), {"inputs": []}, case_id=3)
    assert ev["status"] == "error" and ev["flops"] is None and says in ev["reason"] and str(p) in ev["reason"]


def test_flops_parts_values_must_be_numbers_while_numpy_scalars_count_as_numbers(tmp_path):
    p = tmp_path / "flops.py"
    p.write_text("import numpy as np\ndef flops(case):\n    return np.float64(2.0)\n"
                 "def flops_parts(case):\n    return {'a': np.int64(1), 'b': '1'}\n")
    ev = fcon.evaluate_case(fcon.load_flops(p), {"inputs": []}, case_id=0)
    assert ev["status"] == "error" and "flops_parts()['b'] returned str '1'" in ev["reason"]
    p.write_text("def flops(case):\n    return 2\ndef flops_parts(case):\n    return {'a': 1, 'b': 1.0}\n")
    ev = fcon.evaluate_case(fcon.load_flops(p), {"inputs": []})
    assert ev == {"flops": 2.0, "flops_parts": {"a": 1.0, "b": 1.0}, "vector_flops": None, "status": "ok",
                  "reason": None}


def test_an_unknown_compute_dtype_or_a_sys_exit_while_importing_is_refused_naming_the_file(tmp_path):
    from mfulib.core.errors import UserError
    p = tmp_path / "flops.py"
    p.write_text("def flops(case):\n    return 1.0\ndef compute_dtype(case):\n    return 'fp8'\n")
    with pytest.raises(UserError, match=r"flops.py: compute_dtype\(\) returned 'fp8' for case 5: unknown dtype"):
        fcon.load_flops(p).compute_dtype(case_of(x=([4], "float16")), 5)
    p.write_text("import sys\nsys.exit(0)\n")
    with pytest.raises(UserError, match="does not import"):
        fcon.load_flops(p)
