"""Layout C (parallel reference / implementation trees without case files): pairing by relative path, the written
case file, both wrappers, the rejections, and the whole pipeline through make on CPU."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from mfulib.core import cases
from mfulib.sources import layoutc
from mfulib.sources import layoutc_workdir
from mfulib.core.errors import UserError
from mfulib.core.opdir import OpDir, seed_everything

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "prepare_op_dir.py")
EXAMPLE = os.path.join(ROOT, "examples", "ops", "layoutc")
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def run_cli(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def make(*args, env=None):
    return subprocess.run(["make", "-C", ROOT, *args], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, **(env or {})))


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return path


GATHER_REF = """
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, table, index, mask, scale):
            return table[index] * mask[:, None] * scale

    def get_inputs():
        table = torch.randn(7, 16).cuda()              # KernelBench style: moved to the device in get_inputs
        index = torch.randint(0, 7, (5,))
        mask = torch.rand(5) > 0.5
        return [table, index, mask, 0.5]

    def get_init_inputs():
        return []
"""

GATHER_IMPL = """
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def gather_kernel(t_ptr, i_ptr, m_ptr, o_ptr, scale, D: tl.constexpr):
        row = tl.program_id(0)
        idx = tl.load(i_ptr + row)
        keep = tl.load(m_ptr + row).to(tl.float32)
        cols = tl.arange(0, D)
        v = tl.load(t_ptr + idx * D + cols)
        tl.store(o_ptr + row * D + cols, v * keep * scale)

    def get_npu_properties():
        return {}

    def gather_op_triton_torch(table, index, mask, scale):
        out = torch.empty((index.shape[0], table.shape[1]), dtype=table.dtype)
        gather_kernel[(index.shape[0],)](table, index, mask.to(torch.int8), out, scale, D=table.shape[1])
        return out
"""


def gather_tree(tmp_path, impl=GATHER_IMPL, ref=GATHER_REF):
    refs, impls = tmp_path / "bench", tmp_path / "triton_ascend" / "impl"
    write(str(refs / "static_shape" / "index" / "gather.py"), ref)
    write(str(impls / "static_shape" / "index" / "gather.py"), impl)
    return str(refs), str(impls)


def test_case_file_attrs_and_value_domains_survive_through_the_reference_wrapper(tmp_path):
    refs, impls = gather_tree(tmp_path)
    dst = tmp_path / "work"
    r = run_cli("--ref-root", refs, "--impl-root", impls, "--id", "static_shape/index/gather.py", "--dst", str(dst))
    assert r.returncode == 0, r.stderr
    (case,) = cases.read_case_file(str(dst / "gather_perf_cases.jsonl"))
    by_name = {e["name"]: e for e in case["inputs"]}       # names are Model.forward's parameters
    assert by_name["table"]["shape"] == [7, 16] and by_name["table"]["dtype"] == "float32"
    lo, hi = by_name["index"]["range"]
    assert by_name["index"]["dtype"] == "int64" and 0 <= lo <= hi <= 6
    assert by_name["mask"]["dtype"] == "bool" and "range" not in by_name["mask"]
    assert by_name["scale"] == {"name": "scale", "type": "attr", "required": True, "dtype": "float", "value": 0.5}
    # model.py's get_input_groups() returns exactly what the original get_inputs() draws after the same seed
    built = OpDir(dst).build_case(0, seed=3)
    ns = {}
    exec(compile(textwrap.dedent(GATHER_REF), "ref", "exec"), ns)
    seed_everything(3)
    with layoutc_workdir.on_host():
        original = ns["get_inputs"]()
    for got, want in zip(built.args, original):
        assert torch.equal(got, want) if isinstance(want, torch.Tensor) else got == want
    built.close()
    # the wrapped function implementation runs and matches the reference
    ref_b, asc_b = OpDir(dst).build_case(0, "ref"), OpDir(dst).build_case(0, "asc")
    assert torch.allclose(ref_b.run(), asc_b.run())
    info = json.loads((dst / "prepare.json").read_text())
    assert info["layout"] == "C" and info["entry"] == "gather_op_triton_torch"
    assert info["wrappers"]["model_new.py"]["adds"] == ["class ModelNew"]
    assert info["wrappers"]["model.py"]["inputs_from"] == "get_inputs()"
    assert info["generated"]["cases"]["from"] == "get_inputs()" and info["generated"]["cases"]["seed"] == 0


def test_the_runtime_is_a_module_whose_inlined_text_every_layout_c_model_py_carries(tmp_path):
    import ast
    from mfulib.sources import layoutc_runtime
    text = layoutc_workdir.runtime_source()
    with open(layoutc_runtime.__file__, encoding="utf-8") as f:
        assert f.read().endswith(layoutc_workdir.INLINE_MARK + "\n" + text)   # the module's own code, below the mark
    tree = ast.parse(text)                                            # plain module code, valid inside any file
    assert not any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body)
    top = [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets] + \
        [n.name for n in tree.body if isinstance(n, ast.FunctionDef)] + \
        [a.asname for n in tree.body if isinstance(n, ast.Import) for a in n.names]
    assert top and all(name.startswith("_mfu_") for name in top)     # nothing of the reference is shadowed
    refs, impls = gather_tree(tmp_path)
    (pair,), _ = layoutc.discover_layout_c(refs, impls, ["static_shape/index/gather"])
    texts, _ = layoutc_workdir.build_work_files(pair)
    assert text in texts["model.py"]


def test_runtime_matches_a_case_line_by_shapes_dtypes_and_values_and_draws_an_unmatched_one(tmp_path, capsys):
    from mfulib.sources import layoutc_runtime as rt
    draws = [[torch.zeros(2, 3), torch.arange(4), 0.5], [torch.zeros(5, 3), torch.arange(4), 0.5]]
    lines = [rt._mfu_case(g, ["x", "idx", "scale"]) for g in draws]
    assert lines[0]["inputs"][1] == {"name": "idx", "type": "tensor", "required": True, "dtype": "int64",
                                     "shape": [4], "range": [0, 3]}
    assert rt._mfu_signature(lines[0]) == rt._mfu_signature(rt._mfu_case(draws[0], [], with_range=False))
    assert rt._mfu_signature(lines[0]) != rt._mfu_signature(lines[1])
    moved = json.loads(json.dumps(lines[1]))
    moved["inputs"][0]["shape"] = [7, 3]                              # a shape no draw has
    case_path = tmp_path / "model.json"
    case_path.write_text("\n".join(json.dumps(c) for c in (lines[1], moved, dict(lines[0], dyn_index=0))) + "\n")
    groups = rt._mfu_pick_groups(str(case_path), draws)
    assert groups[0] is draws[1] and groups[2] is draws[0]
    assert list(groups[1][0].shape) == [7, 3] and groups[1][2] == 0.5
    assert 0 <= int(groups[1][1].min()) and int(groups[1][1].max()) <= 3   # ints drawn within the line's range
    assert "line 2 matches no draw" in capsys.readouterr().err
    obj = {"inputs": [{"name": "cfg", "type": "attr", "dtype": "object", "value": "<Cfg>"}]}
    with pytest.raises(ValueError, match="case rejected"):
        rt._mfu_draw_case(obj, "model.json line 1")
    assert rt._mfu_as_group(torch.zeros(1)).__class__ is list and rt._mfu_as_group((1, 2)) == [1, 2]


def test_dynamic_reference_one_case_per_entry_and_a_changed_line_is_drawn_from_itself(tmp_path):
    dst = tmp_path / "sv"
    r = run_cli("--ref-root", os.path.join(EXAMPLE, "ref"), "--impl-root", os.path.join(EXAMPLE, "impl"),
                "--id", "dynamic_shape/softmax/softmax_var", "--dst", str(dst))
    assert r.returncode == 0, r.stderr
    od = OpDir(dst)
    assert [c.tensors[0].shape for c in od.describe_all()] == [[4, 100], [16, 256], [33, 1000]]
    assert [c["dyn_index"] for c in od.read_cases()] == [0, 1, 2]
    built = od.build_case(2, "asc")
    assert list(built.args[0].shape) == [33, 1000] and built.init_args == [-1]   # get_init_inputs() per case
    assert torch.allclose(built.run(), torch.softmax(built.args[0], -1), atol=1e-5)
    built.close()
    # a line whose shapes no draw has (e.g. scaled by a search) is built from the line, with a warning
    lines = (dst / "model.json").read_text().splitlines()
    scaled = json.loads(lines[1])
    scaled["inputs"][0]["shape"] = [8, 300]
    lines[1] = json.dumps(scaled)
    for name in ("model.json", "softmax_var_perf_cases.jsonl"):
        (dst / name).write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import model; "
                           "print([list(g[0].shape) for g in model.get_input_groups()])", str(dst)],
                          capture_output=True, text=True, cwd=str(dst))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[[4, 100], [8, 300], [33, 1000]]"
    assert "line 2 matches no draw" in proc.stderr


def test_function_implementation_for_a_model_with_weights_is_rejected_with_the_fix(tmp_path):
    ref = """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x):
                return torch.relu(self.proj(x))

        def get_inputs():
            return [torch.randn(4, 8)]

        def get_init_inputs():
            return [8]
    """
    impl = """
        import triton

        @triton.jit
        def k(x_ptr):
            pass

        def linear_relu_triton_torch(x):
            return x
    """
    refs, impls = gather_tree(tmp_path, impl=impl, ref=ref)
    r = run_cli("--ref-root", refs, "--impl-root", impls, "--id", "static_shape/index/gather", "--dst",
                str(tmp_path / "w"))
    assert r.returncode == 2
    assert "parameters/buffers (proj.weight, proj.bias)" in r.stderr and "class ModelNew(nn.Module)" in r.stderr
    assert not (tmp_path / "w").exists()


@pytest.mark.e2e
def test_arity_launcher_choice_and_explicit_form(tmp_path):
    two = GATHER_IMPL.replace("def get_npu_properties():\n        return {}",
                              "def other_helper(a):\n        return a")
    refs, impls = gather_tree(tmp_path, impl=two.replace("gather_op_triton_torch", "launch"))
    r = run_cli("--ref-root", refs, "--impl-root", impls, "--id", "static_shape/index/gather", "--dst",
                str(tmp_path / "w"))
    assert r.returncode == 2 and "pass --entry <function>" in r.stderr and "'launch'" in r.stderr
    r = run_cli("--ref-root", refs, "--impl-root", impls, "--id", "static_shape/index/gather", "--entry",
                "other_helper", "--dst", str(tmp_path / "w"))
    assert r.returncode == 2 and "other_helper() takes 1..1 positional arguments" in r.stderr
    r = run_cli("--ref-root", refs, "--impl-root", impls, "--id", "static_shape/index/gather", "--entry", "launch",
                "--dst", str(tmp_path / "w"))
    assert r.returncode == 0, r.stderr
    # explicit form: --ref + --impl, no --cases
    ref_py, impl_py = (os.path.join(refs, "static_shape/index/gather.py"),
                       os.path.join(impls, "static_shape/index/gather.py"))
    r = run_cli("--ref", ref_py, "--impl", impl_py, "--entry", "launch", "--dst", str(tmp_path / "e"))
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "e" / "prepare.json").read_text())["layout"] == "explicit"
    # a case-file reference without --cases: told to pass --cases
    b_ref = write(str(tmp_path / "b" / "1_X.py"), "class Model:\n    pass\n\ndef get_input_groups():\n    return []\n")
    r = run_cli("--ref", b_ref, "--impl", impl_py, "--dst", str(tmp_path / "e2"))
    assert r.returncode == 2 and "pass --cases" in r.stderr


def test_all_lists_unpaired_and_broken_references_and_modelnew_impls_are_copied(tmp_path):
    refs, impls = gather_tree(tmp_path)
    write(os.path.join(refs, "static_shape/index/lonely.py"), GATHER_REF)                  # no implementation
    write(os.path.join(refs, "static_shape/index/old.py"), "class Model:\n    pass\n")       # no get_inputs()
    write(os.path.join(refs, "static_shape/nn/lin.py"), """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x):
                return self.proj(x)

        def get_inputs():
            return [torch.randn(3, 8)]

        def get_init_inputs():
            return [8]
    """)
    write(os.path.join(impls, "static_shape/nn/lin.py"), """
        import torch
        import torch.nn as nn

        class ModelNew(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x):
                return self.proj(x)
    """)
    write(os.path.join(impls, "static_shape/index/old.py"), GATHER_IMPL)
    r = run_cli("--ref-root", refs, "--impl-root", impls, "--all", "--dst", str(tmp_path / "all"))
    assert r.returncode == 2                                   # one broken pair; the others are prepared
    assert "['static_shape/index/lonely']" in r.stderr
    (old,) = [ln for ln in r.stderr.splitlines() if "old.py" in ln]
    assert "get_inputs()" in old and "get_inputs_dyn_list()" in old
    lin = tmp_path / "all" / "static_shape" / "nn" / "lin"
    assert (tmp_path / "all" / "static_shape" / "index" / "gather" / "prepare.json").exists()
    info = json.loads((lin / "prepare.json").read_text())
    assert info["implementation_kind"] == "class" and "copied" in info["wrappers"]["model_new.py"]
    ref_b, asc_b = OpDir(lin).build_case(0, "ref"), OpDir(lin).build_case(0, "asc")
    assert torch.allclose(ref_b.run(), asc_b.run())          # seeded alike: identical weights
    with pytest.raises(UserError, match="static_shape/nope.py.*class Model"):
        layoutc.discover_layout_c(refs, impls, ["static_shape/nope"])
    with pytest.raises(UserError, match=r"a file of that name is at: \['static_shape/index/gather'\]"):
        layoutc.discover_layout_c(refs, impls, ["index/gather"])          # path not relative to --ref-root


@pytest.mark.e2e
def test_a_lone_tensor_from_get_inputs_and_a_generated_flops_draft_that_checks(tmp_path):
    old_forward = "def forward(self, table, index, mask, scale):\n            return table[index] * mask[:, None] * scale"
    ref = GATHER_REF.replace(old_forward, "def forward(self, a):\n            return torch.matmul(a, a.t())")
    ref = ref.replace("return [table, index, mask, 0.5]", "return table")       # not a list: one argument
    impl = """
        import torch
        import triton

        @triton.jit
        def unused_kernel(x_ptr):
            pass

        def gram_triton_torch(a):
            return a @ a.t()
    """
    refs, impls = gather_tree(tmp_path, impl=impl, ref=ref)
    dst = tmp_path / "w"
    assert run_cli("--ref-root", refs, "--impl-root", impls, "--id", "static_shape/index/gather", "--dst",
                   str(dst)).returncode == 0
    assert [(t.name, t.shape) for t in OpDir(dst).describe(0).tensors] == [("a", [7, 16])]
    # no flops.py shipped (explicit form): the generator's draft for the wrapped model.py checks against the tracer
    work = tmp_path / "mr"
    r = run_cli("--ref", os.path.join(EXAMPLE, "ref/static_shape/matmul/matmul_relu.py"),
                "--impl", os.path.join(EXAMPLE, "impl/static_shape/matmul/matmul_relu.py"), "--dst", str(work))
    assert r.returncode == 0 and not (work / "flops.py").exists(), r.stderr
    gen = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "flops_generator.py"), "--op-dir", str(work)],
                         capture_output=True, text=True)
    assert gen.returncode == 0 and 'shape(case, "A"), shape(case, "B")' in (work / "flops.py").read_text(), gen.stderr
    chk = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "check_flops.py"), "--op-dir", str(work),
                          "--backend", "cpu"], capture_output=True, text=True)
    assert chk.returncode == 0, chk.stdout + chk.stderr
    per_case = json.loads((work / "flops_check.json").read_text())["per_case"][0]
    assert per_case["ratio"] == pytest.approx(1.0) and per_case["tracer"]["total_flops"] == 2 * 96 * 80 * 64


def test_layout_b_ids_must_be_numbers(tmp_path):
    r = run_cli("--bench", os.path.join(ROOT, "examples/ops/bench/zoo"), "--gen",
                os.path.join(ROOT, "examples/ops/gen/zoo"), "--id", "static_shape/x", "--dst", str(tmp_path / "w"))
    assert r.returncode == 2 and "layout B ids are numbers" in r.stderr


@pytest.mark.e2e
@needs_make
def test_make_all_runs_the_layout_c_matmul_relu_pair_on_cpu(tmp_path):
    work = tmp_path / "mr"
    src = ["REF_ROOT=" + os.path.join(EXAMPLE, "ref"), "IMPL_ROOT=" + os.path.join(EXAMPLE, "impl"),
           "OP=static_shape/matmul/matmul_relu"]
    r = make(*src, f"WORK={work}", "BACKEND=cpu", "all", env={"MFU_PEAK_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    info = json.loads((work / "prepare.json").read_text())
    assert info["layout"] == "C" and info["relative_path"] == "static_shape/matmul/matmul_relu"
    assert set(info["wrappers"]) == {"model.py", "model_new.py"}
    assert info["wrappers"]["model_new.py"]["entry"] == "matmul_relu_triton_torch"
    for name, w in info["wrappers"].items():
        assert len(w["sha256"]) == 64 and len(w["wraps_sha256"]) == 64, name
    assert set(info["sources"]) == {"ref", "impl", "flops"}
    assert json.loads((work / "verify.json").read_text())["summary"] == {"pass": 1}
    check = json.loads((work / "flops_check.json").read_text())
    assert check["summary"]["passed"] and check["per_case"][0]["ratio"] == pytest.approx(1.0)
    assert check["per_case"][0]["tracer"]["total_flops"] == 2 * 96 * 80 * 64
    dec = json.loads((work / "mfu_decompose.json").read_text())
    rows = [row for row in dec["reports"][0]["rows"] if row["status"] == "ok"]
    assert len(rows) == 1 and rows[0]["parts"][0]["part"] == "matmul"
    again = make(*src, f"WORK={work}", "BACKEND=cpu", "all")
    assert "Nothing to be done" in again.stdout


@pytest.mark.e2e
@needs_make
def test_make_layout_c_dynamic_list_sources_and_errors(tmp_path):
    trees = tmp_path / "trees"
    shutil.copytree(EXAMPLE, trees)
    work = tmp_path / "sv"
    src = [f"REF_ROOT={trees / 'ref'}", f"IMPL_ROOT={trees / 'impl'}", "OP=dynamic_shape/softmax/softmax_var.py"]
    r = make(*src, f"WORK={work}", "BACKEND=cpu", "verify", "flops")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert json.loads((work / "verify.json").read_text())["summary"] == {"pass": 3}
    assert json.loads((work / "flops_check.json").read_text())["summary"]["n_cases"] == 3
    # prepare.json records the sources' sha256: a touch redoes nothing, an edited implementation re-runs step 1
    impl = trees / "impl" / "dynamic_shape" / "softmax" / "softmax_var.py"
    later = (work / "prepare.json").stat().st_mtime + 5       # copytree kept the checkout's (older) mtimes
    os.utime(impl, (later, later))
    touched = make(*src, f"WORK={work}", "BACKEND=cpu", "prepare")
    assert touched.returncode == 0 and "Nothing to be done for 'prepare'" in touched.stdout
    with open(impl, "a") as f:
        f.write("# edited\n")
    again = make(*src, f"WORK={work}", "BACKEND=cpu", "prepare")
    assert again.returncode == 0 and "prepared softmax_var" in again.stdout and "impl content changed" in again.stdout
    bundled = make("OP=matmul_relu", f"WORK={tmp_path / 'bundled'}", "prepare")      # examples/ops/layoutc
    assert bundled.returncode == 0, bundled.stderr
    assert json.loads((tmp_path / "bundled" / "prepare.json").read_text())["relative_path"] == \
        "static_shape/matmul/matmul_relu"
    bad = make(f"REF_ROOT={trees / 'ref'}", "OP=x", "prepare")
    assert bad.returncode != 0 and "REF_ROOT is set but IMPL_ROOT is not" in bad.stderr
