"""Gate 3 where the whole reference does not fit: verification on slices (mfulib.verify.slices).

TEST DOUBLES: the references below raise ``torch.OutOfMemoryError`` when their dense score tensor would exceed
``LIMIT`` elements - a memory limit imposed by the test, standing in for a device that cannot hold [b, h, s, s]
scores. ModelNew is the same arithmetic in plain torch, one batch item / head / query row at a time (no limit), so
the expected verdicts are known by construction: the slices must agree where the arithmetic agrees, and the
deliberately broken ModelNews must fail where they are broken.
"""
import json
import os
import textwrap

import pytest
import torch

from mfulib.core.opdir import OpDir
from mfulib.search.probe_gates import gates34
from mfulib.sources.prepare import prepare_explicit
from mfulib.verify import correctness

REF = '''
"""TEST DOUBLE: dense attention that raises torch.OutOfMemoryError above LIMIT score elements."""
import json, os
import torch
import torch.nn as nn

LIMIT = {limit}
CASE_FILE = os.path.splitext(os.path.abspath(__file__))[0] + ".json"


def dense(q, k, v, causal_top_left):
    if q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] > LIMIT:
        raise torch.OutOfMemoryError("out of memory (test double): scores exceed LIMIT elements")
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal_top_left:  # rebuilt from the shapes it is given: wrong for a block of query rows
        s = s.masked_fill(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu(1), float("-inf"))
    return s.softmax(-1) @ v


class Model(nn.Module):
    def forward(self, {args}):
        {body}


def get_input_groups():
    groups = []
    for line in open(CASE_FILE):
        args = []
        for ent in json.loads(line)["inputs"]:
            args.append(torch.randn(ent["shape"]) if ent["type"] == "tensor" else ent["value"])
        groups.append(args)
    return groups
'''

IMPL = '''
import torch
import torch.nn as nn


def one(q, k, v, causal_top_left):
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal_top_left:
        s = s.masked_fill(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu(1), float("-inf"))
    return s.softmax(-1) @ v


class ModelNew(nn.Module):
    def forward(self, {args}):
        {body}
'''

QKV = "q, k, v, input_layout"
QKV_REF = "return dense(q, k, v, False)"
QKV_IMPL = "return torch.cat([torch.cat([one(q[i:i+1, j:j+1], k[i:i+1, j:j+1], v[i:i+1, j:j+1], False) " \
           "for j in range(q.shape[1])], 1) for i in range(q.shape[0])], 0)"


def tensor(name, shape):
    return {"name": name, "type": "tensor", "dtype": "float32", "shape": shape}


def bnsd(b, h, sq, sk, d=8):
    return {"inputs": [tensor("q", [b, h, sq, d]), tensor("k", [b, h, sk, d]), tensor("v", [b, h, sk, d]),
                       {"name": "input_layout", "type": "attr", "value": "BNSD"}]}


def make_op(tmp_path, lines, limit, ref_body=QKV_REF, impl_body=QKV_IMPL, args=QKV):
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "ref.py").write_text(REF.format(limit=limit, args=args, body=ref_body))
    (src / "impl.py").write_text(IMPL.format(args=args, body=impl_body))
    (src / "ref.json").write_text("".join(json.dumps(c) + "\n" for c in lines))
    dst = tmp_path / "work"
    prepare_explicit(str(src / "ref.py"), str(src / "ref.json"), str(src / "impl.py"), str(dst))
    return OpDir(dst)


def test_a_batch_the_reference_cannot_hold_whole_is_verified_on_batch_items(tmp_path):
    # case 1: 8 items x 2 heads x 16 x 16 = 4096 score elements > LIMIT 1100; 2 items (1024) fit, 4 (2048) do not
    od = make_op(tmp_path, [bnsd(1, 2, 16, 16), bnsd(8, 2, 16, 16), bnsd(2, 4, 8, 24)], limit=1100)
    assert correctness.verify_case(od, 0)["verified_by"] == "full"
    row = correctness.verify_case(od, 1)
    assert row["status"] == "pass" and row["verified_by"] == "batch_slice", row
    sl = row["slices"]
    assert sl["rule"] == "batch_slice" and sl["units"] == 8 and sl["block"] == 2  # 4 items ran out of memory
    assert sl["compared"] == [[0, 2], [6, 8]] and sl["output_axes"] == [0]
    assert sorted(map(tuple, sl["inputs"])) == [("k", 0), ("q", 0), ("v", 0)]
    assert "test double" in row["reference_oom"] and row["max_norm_err"] < 1e-5


def test_slices_catch_a_wrong_block_and_non_finite_values_between_the_blocks(tmp_path):
    lines = [bnsd(1, 2, 16, 16), bnsd(8, 2, 16, 16), bnsd(2, 4, 8, 24)]
    wrong_last = QKV_IMPL.replace("return ", "out = ") + "\n        out[7] += 1.0\n        return out"
    od = make_op(tmp_path, lines, limit=1100, impl_body=wrong_last)
    row = correctness.verify_case(od, 1)
    assert row["status"] == "fail" and row["verified_by"] == "batch_slice" and "[6, 8]" in row["reason"], row
    nan_inside = QKV_IMPL.replace("return ", "out = ") + "\n        out[4, 0, 0, 0] = float('nan')\n        return out"
    (tmp_path / "work" / "model_new.py").write_text(IMPL.format(args=QKV, body=nan_inside))
    row = correctness.verify_case(od, 1)
    assert row["status"] == "fail" and "non-finite" in row["reason"] and "[2, 6)" in row["reason"], row


def test_with_one_batch_item_the_heads_are_sliced(tmp_path):
    # case 1: batch 1, 8 heads x 16 x 16 = 2048 > LIMIT 600: 2 heads (512) fit
    od = make_op(tmp_path, [bnsd(2, 2, 16, 16), bnsd(1, 8, 16, 16), bnsd(3, 4, 8, 24)], limit=600)
    row = correctness.verify_case(od, 1)
    assert row["status"] == "pass" and row["verified_by"] == "head_slice", row
    assert row["slices"]["units"] == 8 and row["slices"]["output_axes"] == [1]
    assert "batch_slice" not in row["slices"]["rule"]


def gqa(b, hq, hkv, s, d=8):
    return {"inputs": [tensor("q", [b, hq, s, d]), tensor("k", [b, hkv, s, d]), tensor("v", [b, hkv, s, d]),
                       {"name": "input_layout", "type": "attr", "value": "BNSD"}]}


GQA_REF = ("g = q.shape[1] // k.shape[1]\n"
           "        if k.shape[1] == 0 or q.shape[1] % k.shape[1]:\n"
           "            raise ValueError(f'case rejected: {q.shape[1]} query heads, {k.shape[1]} key/value heads')\n"
           "        return dense(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), False)")
GQA_IMPL = ("g = q.shape[1] // k.shape[1]\n"
            "        return torch.cat([torch.cat([one(q[i:i+1, j:j+1], k[i:i+1, j//g:j//g+1], v[i:i+1, j//g:j//g+1], "
            "False) for j in range(q.shape[1])], 1) for i in range(q.shape[0])], 0)")


def test_grouped_query_heads_are_sliced_with_their_key_value_head(tmp_path):
    # case 1: batch 1, 16 query heads over 4 key/value heads, 16 x 16 scores: 4096 > LIMIT 2100; two key/value
    # heads with their 8 query heads (2048) fit. Cutting the query heads alone would leave 1 query head over 4
    # kv heads, which this reference refuses (as real GQA references do)
    lines = [gqa(2, 4, 2, 16), gqa(1, 16, 4, 16), gqa(1, 8, 4, 8)]
    od = make_op(tmp_path, lines, limit=2100, ref_body=GQA_REF, impl_body=GQA_IMPL)
    row = correctness.verify_case(od, 1)
    assert row["status"] == "pass" and row["verified_by"] == "head_slice", row
    sl = row["slices"]
    assert sl["units"] == 4 and sl["group"] == 4 and sl["output_axes"] == [1] and sl["output_widths"] == [4], sl
    assert sorted(sl["inputs"]) == [["k", 1], ["q", 1], ["v", 1]] and sl["compared"] == [[0, 2], [2, 4]]
    # a ModelNew that pairs each query head with the wrong key/value head fails on the slices
    bad = GQA_IMPL.replace("k[i:i+1, j//g:j//g+1], v[i:i+1, j//g:j//g+1]",
                           "k[i:i+1, j%k.shape[1]:j%k.shape[1]+1], v[i:i+1, j%k.shape[1]:j%k.shape[1]+1]")
    (tmp_path / "bad").mkdir()
    od = make_op(tmp_path / "bad", lines, limit=2100, ref_body=GQA_REF, impl_body=bad)
    row = correctness.verify_case(od, 1)
    assert row["status"] == "fail" and row["verified_by"] == "head_slice", row


def test_two_key_value_heads_in_one_batch_item_are_verified_by_query_heads(tmp_path):
    # batch 1, 8 query heads over 2 key/value heads (a long-context shape): one key/value head per unit would need
    # the reference on 2 units - the whole case - to check the rule; one query head per unit (with the key/value
    # head it reads) checks on 2 query heads and compares blocks of 4 (one key/value head each, 1024 <= LIMIT)
    lines = [gqa(2, 4, 2, 16), gqa(1, 8, 2, 16), gqa(1, 8, 4, 8)]
    od = make_op(tmp_path, lines, limit=1100, ref_body=GQA_REF, impl_body=GQA_IMPL)
    row = correctness.verify_case(od, 1)
    assert row["status"] == "pass" and row["verified_by"] == "head_slice", row
    sl = row["slices"]
    assert sl["units"] == 8 and sl["group"] == 4 and sl["output_widths"] == [1] and sl["compared"] == [[0, 4], [4, 8]]
    assert "1 per 4" in sl["symbol"]


def test_a_reference_that_refuses_a_slice_leaves_the_case_unverified_never_rejected(tmp_path):
    # heads that do not divide (6 query heads over 4 key/value heads - nonsense, but the reference's own rule):
    # no grouped slice; cutting the query heads alone makes the reference raise - the rule is unusable, no verdict
    ref = GQA_REF.replace("q.shape[1] % k.shape[1]", "q.shape[1] < k.shape[1]")
    impl = GQA_IMPL
    lines = [gqa(2, 4, 2, 16), gqa(1, 6, 4, 16), gqa(1, 8, 4, 8)]
    od = make_op(tmp_path, lines, limit=1100, ref_body=ref, impl_body=impl)
    row = correctness.verify_case(od, 1)
    assert row["status"] == "unverified" and "reference_oom" in row, row
    assert "head_slice: the reference refuses a slice (ValueError: case rejected" in row["reason"], row


def test_query_rows_are_sliced_with_the_full_keys_when_q_and_kv_lengths_differ(tmp_path):
    # case 1: one item, one head, 64 query rows x 32 keys = 2048 > LIMIT 600: 16 rows (512) fit
    lines = [bnsd(2, 2, 16, 8), bnsd(1, 1, 64, 32), bnsd(2, 3, 8, 24)]
    od = make_op(tmp_path, lines, limit=600)
    row = correctness.verify_case(od, 1)
    assert row["status"] == "pass" and row["verified_by"] == "row_slice", row
    assert row["slices"]["block"] == 16 and row["slices"]["compared"] == [[0, 16], [48, 64]]
    assert row["slices"]["output_axes"] == [2] and row["slices"]["inputs"] == [["q", 2]]


def test_a_causal_mask_rebuilt_per_row_block_fails_the_rule_check_and_the_case_is_unverified(tmp_path):
    lines = [bnsd(2, 2, 16, 8), bnsd(1, 1, 64, 32), bnsd(2, 3, 8, 24)]
    impl = QKV_IMPL.replace("False", "True")
    od = make_op(tmp_path, lines, limit=600, ref_body="return dense(q, k, v, True)", impl_body=impl)
    row = correctness.verify_case(od, 1)
    assert row["status"] == "unverified" and row.get("verified_by") is None, row
    assert row["reason"].startswith("reference does not fit") and "not independent" in row["reason"]


def test_an_operator_whose_heads_are_an_attribute_cannot_be_sliced_and_stays_unverified(tmp_path):
    # x [1, s, hidden] + head_num: batch is 1, the heads are no tensor axis, the sequence is q's and k's at once
    args = "x, head_num"
    body = textwrap.dedent('''\
        b, s, hd = x.shape
        q = x.view(b, s, head_num, hd // head_num).transpose(1, 2)
        return dense(q, q, q, True).transpose(1, 2).reshape(b, s, hd)''').replace("\n", "\n        ")
    impl = body.replace("dense(q, q, q, True)", "one(q, q, q, True)")
    lines = [{"inputs": [tensor("x", [1, s, 16]), {"name": "head_num", "type": "attr", "value": 2}]}
             for s in (8, 64)]
    od = make_op(tmp_path, lines, limit=4000, ref_body=body, impl_body=impl, args=args)
    assert correctness.verify_case(od, 0)["status"] == "pass"
    row = correctness.verify_case(od, 1)  # 2 heads x 64 x 64 = 8192 > 4000
    assert row["status"] == "unverified", row
    for rule in ("batch_slice", "head_slice", "row_slice"):
        assert rule in row["reason"]


class OneReply:
    """Stand-in for the gate-3/4 child: replies with the given verify row and a timing."""

    def __init__(self, row):
        self.row, self.requests = row, []

    def call(self, req, timeout_s):
        self.requests.append(req)
        timed = self.row["status"] == "pass" or req.get("accept_unverified_reference")
        return ({"verify": self.row, "verify_s": 1.0,
                 "time": {"status": "ok", "time_ms": 2.0, "runs_ms": [2.0], "wall_s": 0.1} if timed else None},
                "done", 1.0, 0)


@pytest.mark.parametrize("accept", [False, True])
def test_gate3_records_how_a_case_was_verified_and_an_unverified_one_passes_only_with_the_flag(tmp_path, accept):
    sliced = {"status": "pass", "verified_by": "batch_slice", "max_norm_err": 1e-6, "tol": 1e-4,
              "reason": "the whole reference does not fit: verified on 4 of 8 batch units"}
    g3, g4, _row, t = gates34(OneReply(sliced), str(tmp_path / "c"), 0, 100.0, 60.0)
    assert g3["ok"] and g3["verified_by"] == "batch_slice" and g4["ok"] and t == 2.0
    unverified = {"status": "unverified", "verified_by": None, "reason": "reference does not fit (...)"}
    worker = OneReply(unverified)
    g3, g4, _row, t = gates34(worker, str(tmp_path / "c"), 0, 100.0, 60.0, accept_unverified=accept)
    assert worker.requests[0]["accept_unverified_reference"] is accept
    assert g3["verified_by"] == "unverified" and "unverified (reference does not fit)" in g3["detail"]
    if accept:  # passes, marked: the candidate can be appended and timed
        assert g3["ok"] is True and "--accept-unverified-reference" in g3["detail"] and g4["ok"]
    else:  # never appended, so never the limit
        assert g3["ok"] is False and g4 is None and t is None


OOM_WRAPPER = '''

# TEST DOUBLE (appended by tests/test_verify_slices.py): a device that holds at most LIMIT dense score elements
_dense_forward = Model.forward
LIMIT = {limit}


def _limited_forward(self, x, head_num):
    if x.shape[0] * head_num * x.shape[1] ** 2 > LIMIT:
        raise torch.OutOfMemoryError("out of memory (test double): [b, h, s, s] scores exceed LIMIT elements")
    return _dense_forward(self, x, head_num)


Model.forward = _limited_forward
'''


def test_the_bundled_flash_attention_layer_is_verified_on_batch_items_when_its_dense_reference_does_not_fit(
        tmp_path):
    from zoo_support import OPS, install_compat_or_skip
    install_compat_or_skip("cpu")  # the ModelNew is Triton-Ascend style; its kernels run in the interpreter here
    src = tmp_path / "src"
    src.mkdir()
    line = {"inputs": [{"name": "x", "type": "tensor", "dtype": "float16", "shape": [4, 64, 64]},
                       {"name": "head_num", "type": "attr", "dtype": "int", "value": 2}]}
    (src / "fa.json").write_text(json.dumps(line) + "\n")
    dst = tmp_path / "work"
    prepare_explicit(os.path.join(OPS, "bench/zoo/20_FlashAttentionV2.py"), str(src / "fa.json"),
                     os.path.join(OPS, "gen/zoo/20_FlashAttentionV2_triton.py"), str(dst))
    with open(dst / "model.py", "a") as f:  # 4 x 2 x 64 x 64 = 32768 > 20000; 2 items (16384) fit
        f.write(OOM_WRAPPER.format(limit=20000))
    row = correctness.verify_case(OpDir(dst), 0)
    assert row["status"] == "pass" and row["verified_by"] == "batch_slice", row
    assert row["slices"]["compared"] == [[0, 2], [2, 4]] and row["slices"]["inputs"] == [["x", 0]]
    assert row["max_norm_err"] <= 1e-2
