"""Tiny operators for the collector tests (written into tmp_path; the tests never depend on examples/ops).

``two_kernel``: ModelNew launches two Triton kernels per call (``scale_kernel`` then ``add_one_kernel``), the
multi-kernel case; Model is ``x * 2 + 1``. ``variant`` is a comma-separated set of behaviours of ModelNew:

* ``first_call_extra``: the first call also launches ``autotune_probe_kernel`` three times and sleeps 0.2 s, as a
  first call that compiles and autotunes would (must never land in a measured iteration);
* ``view8192``: for the 8192-element case, forward returns a view of its input (no device work: a clear error);
* ``crash1024``: for the 1024-element case, forward calls os.abort() (the run must go on);
* ``hang1024``: for the 1024-element case, forward sleeps for an hour (timeout).

Cases (float32 unless said): 0 [4096], 1 [1024], 2 [16384], 3 [2048] bfloat16, 4 [8192].
"""
import json
import os
import textwrap

CASES = [([4096], "float32"), ([1024], "float32"), ([16384], "float32"), ([2048], "bfloat16"), ([8192], "float32")]

REF = '''
import json, os
import torch
import torch.nn as nn

CASE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "9_TwoKernel.json")
DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

class Model(nn.Module):
    def forward(self, x):
        return x * 2 + 1

def get_input_groups():
    out = []
    with open(CASE_FILE, encoding="utf-8-sig") as f:
        for line in f:
            if line.strip():
                ent = json.loads(line)["inputs"][0]
                out.append([torch.randn(ent["shape"], dtype=DT[ent["dtype"]])])
    return out

def get_init_inputs():
    return []
'''

IMPL = '''
import os, time
import torch
import torch.nn as nn
import triton
import triton.language as tl

VARIANT = set({variant!r}.split(","))
BLOCK = 4096


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * factor, mask=m)


@triton.jit
def add_one_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=m) + 1.0, mask=m)


@triton.jit
def autotune_probe_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(y_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        n = x.numel()
        if "view8192" in VARIANT and n == 8192:
            return x.view(-1)
        if "reject1024" in VARIANT and n == 1024:
            raise ValueError("case rejected: this test operator refuses 1024 elements")
        if "crash1024" in VARIANT and n == 1024:
            os.abort()
        if "hang1024" in VARIANT and n == 1024:
            time.sleep(3600)
        y = torch.empty_like(x)
        grid = (triton.cdiv(n, BLOCK),)
        if "first_call_extra" in VARIANT and self.calls == 1:
            for _ in range(3):
                autotune_probe_kernel[grid](y, n, BLOCK=BLOCK)
            time.sleep(0.2)
        scale_kernel[grid](x, y, n, 2.0, BLOCK=BLOCK)
        add_one_kernel[grid](y, n, BLOCK=BLOCK)
        return y
'''

FLOPS = '''
"""FLOPs of 9_TwoKernel (test operator): one multiply and one add per element, all vector work."""


def flops(case):
    n = 1
    for d in case["inputs"][0]["shape"]:
        n *= d
    return 2.0 * n


def flops_parts(case):
    return {"scale": flops(case) / 2, "add": flops(case) / 2}


KERNEL_PARTS = {"scale": ["scale_kernel"], "add": ["add_one_kernel"]}
'''


def case_lines(cases=CASES):
    return "".join(json.dumps({"inputs": [{"name": "x", "type": "tensor", "required": True, "dtype": dt,
                                           "shape": shape}]}) + "\n" for shape, dt in cases)


def write_sources(src_dir, variant="plain", with_flops=True, cases=CASES):
    """Write 9_TwoKernel.py / .json / _generated.py (+ _flops.py) into ``src_dir``; returns their paths."""
    os.makedirs(src_dir, exist_ok=True)
    paths = {"ref": os.path.join(src_dir, "9_TwoKernel.py"), "cases": os.path.join(src_dir, "9_TwoKernel.json"),
             "impl": os.path.join(src_dir, "9_TwoKernel_generated.py"), "flops": None}
    with open(paths["ref"], "w") as f:
        f.write(textwrap.dedent(REF))
    with open(paths["cases"], "w") as f:
        f.write(case_lines(cases))
    with open(paths["impl"], "w") as f:
        f.write(IMPL.format(variant=variant))
    if with_flops:
        paths["flops"] = os.path.join(src_dir, "9_TwoKernel_flops.py")
        with open(paths["flops"], "w") as f:
            f.write(FLOPS)
    return paths


def make_workdir(root, variant="plain", with_flops=True, cases=CASES):
    """A prepared work directory ``<root>/work`` for the tiny two-kernel operator (via mfulib.sources.prepare)."""
    from mfulib.sources.prepare import prepare_explicit
    p = write_sources(os.path.join(str(root), "src"), variant, with_flops, cases)
    dst = os.path.join(str(root), "work")
    prepare_explicit(p["ref"], p["cases"], p["impl"], dst, flops=p["flops"])
    return dst
