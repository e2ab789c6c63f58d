"""Builders for tiny operator source trees used by the tests (written into tmp_path; nothing checked in).

The reference reads its case file either by a hard-coded name or by ``splitext(__file__)`` - the two naming styles
of the benchmark conventions note - and can wrap each case in a 1-tuple like 7_ConvStandard2d.
"""
import json
import os
import textwrap

REF_TEMPLATE = '''
import json, os
import torch
import torch.nn as nn

{case_path}

class Model(nn.Module):
    def forward(self, {fwd_args}):
        {fwd_body}

def get_input_groups():
    groups = []
    with open(CASE_FILE, encoding="utf-8-sig") as f:
        for line in f:
            if not line.strip():
                continue
            ins = json.loads(line)["inputs"]
            args = []
            for ent in ins:
                if ent["type"] == "tensor":
                    dt = {{"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
                           "fp16": torch.float16}}[ent["dtype"]]
                    args.append(torch.randn(ent["shape"], dtype=dt))
                else:
                    args.append(ent["value"])
            groups.append({wrap})
    return groups

def get_init_inputs():
    return []
'''

IMPL_TEMPLATE = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    """{doc}"""
    def forward(self, {fwd_args}):
        {fwd_body}
'''


def write_ref(path, style="literal", case_name=None, tuple_wrapped=False):
    """A bmm reference. style: 'literal' (hard-coded ``case_name``) or 'splitext' (derived from __file__)."""
    if style == "literal":
        cp = f'CASE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "{case_name}")'
    else:
        cp = 'CASE_FILE = os.path.splitext(os.path.abspath(__file__))[0] + ".json"'
    if tuple_wrapped:
        fwd_args, body, wrap = "inputs", "a, b = inputs\n        return torch.bmm(a, b)", "[tuple(args)]"
    else:
        fwd_args, body, wrap = "a, b", "return torch.bmm(a, b)", "args"
    _write(path, REF_TEMPLATE.format(case_path=cp, fwd_args=fwd_args, fwd_body=body, wrap=wrap))


def write_impl(path, doc="bmm implementation", tuple_wrapped=False):
    if tuple_wrapped:
        fwd_args, body = "inputs", "a, b = inputs\n        return torch.bmm(a.npu(), b.npu())"
    else:
        fwd_args, body = "a, b", "return torch.bmm(a.to('npu'), b.npu())"
    _write(path, IMPL_TEMPLATE.format(doc=doc, fwd_args=fwd_args, fwd_body=body))


def case_line(b=2, m=4, k=8, n=3, dtype="float32"):
    return json.dumps({"inputs": [
        {"name": "A", "type": "tensor", "required": True, "dtype": dtype, "shape": [b, m, k]},
        {"name": "B", "type": "tensor", "required": True, "dtype": dtype, "shape": [b, k, n]}]})


def write_cases(path, lines=None, bom=False):
    lines = lines if lines is not None else [case_line(), case_line(1, 8, 16, 4, "fp16"), case_line(3, 2, 4, 5)]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8-sig" if bom else "utf-8") as f:
        f.write("\n".join(lines) + "\n")


def write_artifacts(d):
    """Artifacts as found in verify dirs: one named like an artifact, one a JSON array, one an object."""
    with open(os.path.join(d, "verify_result_20260101.json"), "w") as f:
        json.dump({"inputs": [], "passed": True}, f)  # case-like content: only the name excludes it
    with open(os.path.join(d, "perf_result.json"), "w") as f:
        json.dump({"cases": [1, 2]}, f)
    with open(os.path.join(d, "notes.json"), "w") as f:
        json.dump({"summary": "not a case file"}, f)  # excluded by content


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
