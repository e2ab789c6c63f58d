"""The bundled basic operators and the real-case operators they pair with:

* zoo: 1_BatchMatmul, 2_Softmax, 3_RMSNorm, 4_FFN (examples/ops/bench/zoo + examples/ops/gen/zoo);
* real cases (../shared/data/npukernelbench): level3/1_BatchMatmul, level1/10_LayerNorm, level4/2_FFN
  (examples/ops/bench/npukernelbench + examples/ops/gen/npukernelbench);
* layout A op roots: examples/ops/verify/{1_BatchMatmul,2_Softmax,4_FFN} (baseline + optimized per iteration).

Correctness goes through the pipeline's own path (prepare_explicit -> OpDir -> mfulib.verify.correctness.verify_case) with the
tolerances by dtype stated there, on the normalised max error max|out - ref| / max|ref|: float16 1e-2, bfloat16
2e-2, float32 1e-4 (1e-2 on CUDA, where tl.dot on fp32 is TF32). Measured here in the interpreter: float16 <= 1e-3,
float32 <= 1e-6. On a CPU the kernels run in the Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1
before any kernel is defined), so only float16/float32 cases of at most INTERPRETER_MAX_BYTES of input run
(each well under a second); every other line - bf16 and the GPU-sized ones - is checked on fake tensors
(torch's FakeTensorMode: shapes and dtypes, no storage), which allocate nothing. (Fake tensors rather than
``with torch.device("meta")``: once mfulib.run.compat has wrapped torch's factory functions, the device context no longer
reaches them and would allocate the GPU-sized cases for real.) tests/gpu/test_zoo_basic_cuda.py runs every line on the GPU.
"""
import json
import os
import shutil

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from mfulib.core import cases
from mfulib.sources import discover
from mfulib.core.opdir import import_file
from zoo_support import OPS, install_compat_or_skip, verify_cases, work_dir

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
INTERPRETER_MAX_BYTES = 1_100_000  # total input bytes of a case run in the interpreter (~<1 s each)
REJECT = "case rejected: "

# op -> (reference, implementation) relative to examples/ops; cases = the reference's sibling .json
ZOO = {
    "1_BatchMatmul": ("bench/zoo/1_BatchMatmul.py", "gen/zoo/1_BatchMatmul_triton_optimized.py"),
    "2_Softmax": ("bench/zoo/2_Softmax.py", "gen/zoo/2_Softmax_generated.py"),
    "3_RMSNorm": ("bench/zoo/3_RMSNorm.py", "gen/zoo/3_RMSNorm_generated_code.py"),
    "4_FFN": ("bench/zoo/4_FFN.py", "gen/zoo/4_FFN_triton_ascend_impl.py"),
}
ZOO_INTERPRETER_CASES = {"1_BatchMatmul": [0, 1, 2, 3], "2_Softmax": [0, 1, 2, 3], "3_RMSNorm": [0, 1, 2],
                         "4_FFN": [0, 1, 2, 3, 4, 11]}
ZOO_REJECTED = {"4_FFN": {11: "weight2 must be [64, n2]"}}  # planted: swiglu with weight2 [128, 64]
BASELINES = {op: (ZOO[op][0], f"verify/{op}/output/iter_1/verify/{op}_triton_baseline.py")
             for op in ("1_BatchMatmul", "2_Softmax", "4_FFN")}
BASELINE_MAX_BYTES = 40_000  # the naive kernels are slow in the interpreter (BatchMatmul: one program per row)
# real case file (under ../shared/data) -> (reference, implementation)
REAL = {
    "npukernelbench/level3/1_BatchMatmul.json": ("bench/npukernelbench/level3/1_BatchMatmul.py",
                                                 "gen/npukernelbench/level3/1_BatchMatmul_generated.py"),
    "npukernelbench/level1/10_LayerNorm.json": ("bench/npukernelbench/level1/10_LayerNorm.py",
                                                "gen/npukernelbench/level1/10_LayerNorm_generated.py"),
    "npukernelbench/level4/2_FFN.json": ("bench/npukernelbench/level4/2_FFN.py",
                                         "gen/npukernelbench/level4/2_FFN_triton_optimized.py"),
}
GLU = ("swiglu", "geglu", "reglu")


@pytest.fixture(scope="module", autouse=True)
def npu_compat():
    """4_FFN's ModelNew is Triton-Ascend style (import torch_npu, "npu" devices, a vector_core_num grid)."""
    return install_compat_or_skip(DEVICE)


def small_case_ids(case_path, max_bytes=INTERPRETER_MAX_BYTES):
    """Ids of the lines the interpreter can run quickly: fp16/fp32 (bf16 too on CUDA), input <= max_bytes."""
    dtypes = ("float16", "float32") + (("bfloat16",) if DEVICE == "cuda" else ())
    infos = [cases.describe_case(c, i) for i, c in enumerate(cases.read_case_file(case_path))]
    return [i.case_id for i in infos if i.compute_dtype in dtypes and i.input_bytes <= max_bytes]


def assert_pass_or_expected_rejection(rows, expected_rejections=None):
    expected_rejections = expected_rejections or {}
    for i, row in rows.items():
        if i in expected_rejections:
            assert row["status"] == "rejected" and expected_rejections[i] in row["reason"], row
        else:
            assert row["status"] == "pass", row


FAKE = FakeTensorMode()  # tensors with shapes and dtypes but no storage: GPU-sized cases cost nothing


def fake_groups(ref_path, case_path, tmp_path):
    """get_input_groups() of a reference run beside a copy of ``case_path``, every tensor a fake (no storage).

    The reference is copied as ``<stem>.py`` and the cases as ``<stem>.json``: the name both the hard-coded and
    the splitext style read. Returns (Model instance, groups)."""
    stem = os.path.splitext(os.path.basename(ref_path))[0]
    d = tmp_path / f"fake_{stem}"
    d.mkdir(exist_ok=True)
    shutil.copyfile(ref_path, d / f"{stem}.py")  # follows the level3 symlink
    shutil.copyfile(case_path, d / f"{stem}.json")
    module = import_file(str(d / f"{stem}.py"), f"fake_{stem}")
    with FAKE:
        groups = module.get_input_groups()
    return module.Model(), groups


def outcome(fn, args):
    """('ok', output) or ('rejected', reason) of ``fn(*args)`` on fake tensors; other exceptions propagate."""
    try:
        with FAKE:
            return "ok", fn(*args)
    except ValueError as exc:
        assert str(exc).startswith(REJECT), f"a ValueError that is not a per-case rejection: {exc}"
        return "rejected", str(exc)[len(REJECT):]


# --- zoo ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def zoo_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo_basic")
    return {op: work_dir(root, op, ref, impl, os.path.join(OPS, os.path.splitext(ref)[0] + ".json"))
            for op, (ref, impl) in ZOO.items()}


@pytest.mark.parametrize("op", sorted(ZOO))
def test_zoo_model_new_matches_its_reference_on_every_interpreter_sized_case(zoo_dirs, op):
    ids = small_case_ids(zoo_dirs[op].cases_path)
    if DEVICE == "cpu":
        assert ids == ZOO_INTERPRETER_CASES[op]
    assert_pass_or_expected_rejection(verify_cases(zoo_dirs[op], ids, DEVICE), ZOO_REJECTED.get(op))


@pytest.mark.parametrize("op", sorted(BASELINES))
def test_layout_a_baseline_kernels_match_the_reference_on_the_smallest_cases(tmp_path, op):
    ref, impl = BASELINES[op]
    op_dir = work_dir(tmp_path, op, ref, impl, os.path.join(OPS, os.path.splitext(ref)[0] + ".json"))
    ids = small_case_ids(op_dir.cases_path, BASELINE_MAX_BYTES)
    assert ids, "no case small enough for the naive kernel"
    assert_pass_or_expected_rejection(verify_cases(op_dir, ids, DEVICE), ZOO_REJECTED.get(op))


@pytest.mark.parametrize("op", sorted(ZOO))
def test_zoo_case_files_span_interpreter_to_h200_sizes_and_build_as_fake_tensors(tmp_path, op):
    ref_path = os.path.join(OPS, ZOO[op][0])
    case_path = os.path.splitext(ref_path)[0] + ".json"
    infos = [cases.describe_case(c, i) for i, c in enumerate(cases.read_case_file(case_path))]
    assert {i.compute_dtype for i in infos} == {"float16", "bfloat16", "float32"}
    assert max(i.input_bytes for i in infos) >= 128 << 20  # at least one case fills the GPU, not its caches
    model, groups = fake_groups(ref_path, case_path, tmp_path)
    assert len(groups) == len(infos)
    results = [outcome(model, g) for g in groups]
    rejected = {i for i, (status, _) in enumerate(results) if status == "rejected"}
    assert rejected == set(ZOO_REJECTED.get(op, {}))
    for info, (status, out) in zip(infos, results):
        if status == "ok":
            assert out.dtype == cases.parse_dtype(info.compute_dtype)


def test_batch_matmul_cases_include_a_gemm_of_over_two_tflop():
    # 16 x 4096^3 x 2 = 2.2e12 FLOPs: >= 2.7 ms at the H200's ~808 TFLOP/s measured fp16/bf16 ceiling
    lines = cases.read_case_file(os.path.join(OPS, "bench/zoo/1_BatchMatmul.json"))
    flops = [2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
             for a, b in (cases.describe_case(c).tensors for c in lines)]
    assert max(flops) == 2 * 16 * 4096 ** 3


def test_ascend_style_ffn_sizes_its_persistent_grid_from_the_reported_vector_core_count(npu_compat):
    impl = import_file(os.path.join(OPS, ZOO["4_FFN"][1]), "ffn_zoo_cores")
    assert impl.ModelNew().core_num == npu_compat["vector_core_num"]


# --- real cases --------------------------------------------------------------------------------------------------

def real_case_path(shared_dir, rel):
    return os.path.join(shared_dir, "data", rel)


@pytest.mark.parametrize("rel", sorted(REAL))
def test_real_model_new_matches_its_reference_on_the_interpreter_sized_real_cases(shared_dir, tmp_path, rel):
    ref, impl = REAL[rel]
    path = real_case_path(shared_dir, rel)
    op_dir = work_dir(tmp_path, os.path.basename(rel)[:-5], ref, impl, path)
    ids = small_case_ids(path)
    if DEVICE == "cpu":
        # BatchMatmul: all 36 fp16/fp32 lines; LayerNorm: the 11 lines of <= 1.1 MB (8, 24, 27, 30, 33, 36, 39, 50,
        # 54, 55, 56 - 55 has no bias, 56 no weight); FFN: lines 0, 9, 16, 24 (fastgelu, relu, relu, silu) and 48
        assert len(ids) == {"1_BatchMatmul.json": 36, "10_LayerNorm.json": 11, "2_FFN.json": 5}[os.path.basename(rel)]
    # FFN line 48 is reglu with W1 [256, 512] and W2 [512, 256]: the reference rejects it
    expected = {48: "needs 256 rows, it has 512"} if rel.endswith("2_FFN.json") else {}
    assert_pass_or_expected_rejection(verify_cases(op_dir, ids, DEVICE), {i: r for i, r in expected.items() if i in ids})


def test_every_real_batch_matmul_line_is_accepted_with_a_b_m_n_output(shared_dir, tmp_path):
    path = real_case_path(shared_dir, "npukernelbench/level3/1_BatchMatmul.json")
    model, groups = fake_groups(os.path.join(OPS, REAL["npukernelbench/level3/1_BatchMatmul.json"][0]), path, tmp_path)
    assert len(groups) == 51
    for (a, b) in groups:
        status, out = outcome(model, [a, b])
        assert status == "ok" and list(out.shape) == [a.shape[0], a.shape[1], b.shape[2]]


def test_every_real_layer_norm_line_is_accepted_and_optional_inputs_keep_their_positions(shared_dir, tmp_path):
    path = real_case_path(shared_dir, "npukernelbench/level1/10_LayerNorm.json")
    model, groups = fake_groups(os.path.join(OPS, REAL["npukernelbench/level1/10_LayerNorm.json"][0]), path, tmp_path)
    lines = cases.read_case_file(path)
    assert len(groups) == len(lines) == 60
    for line, group in zip(lines, groups):
        names = {e["name"] for e in line["inputs"]}
        x, shape, weight, bias = group
        assert (weight is not None) == ("weight" in names) and (bias is not None) == ("bias" in names)
        status, out = outcome(model, group)
        assert status == "ok" and out.shape == x.shape
    # line 56 gives bias but no weight: bias must stay the 4th argument, weight None
    assert groups[56][2] is None and list(groups[56][3].shape) == [4096]
    assert groups[57][1] == [4096, 64]  # the one two-dim normalized_shape (262144 elements per row)


def test_real_ffn_rejects_exactly_the_21_gated_lines_whose_weight2_is_not_half_of_weight1(shared_dir, tmp_path):
    path = real_case_path(shared_dir, "npukernelbench/level4/2_FFN.json")
    ref_rel, impl_rel = REAL["npukernelbench/level4/2_FFN.json"]
    model, groups = fake_groups(os.path.join(OPS, ref_rel), path, tmp_path)
    impl = import_file(os.path.join(OPS, impl_rel), "ffn_real_impl_fake").ModelNew()
    lines = cases.read_case_file(path)
    assert len(groups) == 50
    accepted, rejected = [], []
    for i, (line, group) in enumerate(zip(lines, groups)):
        status, result = outcome(model, group)
        x, w1, w2, act = group
        if status == "ok":
            accepted.append(i)
            assert act not in GLU and list(result.shape) == [x.shape[0], w2.shape[1]]
        else:
            rejected.append(i)
            # by hand: every gated line has weight2 [n1, k1] instead of [n1 / 2, n2], e.g. line 4: W1 [1024, 2048],
            # W2 [2048, 1024] -> "needs 1024 rows, it has 2048"
            assert act in GLU and f"needs {w1.shape[1] // 2} rows, it has {w2.shape[0]}" in result
            assert outcome(impl, group)[0] == "rejected"  # the implementation refuses it too, before any launch
    assert len(accepted) == 29 and len(rejected) == 21
    assert rejected == [i for i, c in enumerate(lines) if cases.case_value(c, "activation") in GLU]


# --- small synthetic lines for the real-case implementations (paths the real interpreter-sized lines miss) ------

def tensor(name, dtype, shape, required=True):
    return {"name": name, "type": "tensor", "required": required, "dtype": dtype, "shape": shape}


def attr(name, dtype, value):
    return {"name": name, "type": "attr", "required": True, "dtype": dtype, "value": value}


def write_case_file(path, inputs_per_line):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"inputs": inputs}) + "\n" for inputs in inputs_per_line))
    return path


def test_real_ffn_implementation_computes_all_seven_npu_ffn_activations(tmp_path):
    lines = []
    for act, (m, k, n1, k2, n2) in {"fastgelu": (64, 128, 128, 128, 128), "gelu": (48, 64, 64, 64, 64),
                                    "relu": (32, 64, 64, 64, 64), "silu": (40, 64, 64, 64, 64),
                                    "geglu": (32, 64, 128, 64, 96), "swiglu": (40, 64, 128, 64, 80),
                                    "reglu": (16, 64, 128, 64, 64)}.items():
        dtype = "float16" if len(lines) % 2 else "float32"
        lines.append([tensor("x", dtype, [m, k]), tensor("weight1", dtype, [k, n1]), tensor("weight2", dtype, [k2, n2]),
                      attr("activation", "str", act)])
    # x with 3 dims (npu_ffn takes 2..8) and a gated line with an inconsistent weight2 (rejected)
    lines.append([tensor("x", "float32", [2, 8, 64]), tensor("weight1", "float32", [64, 128]),
                  tensor("weight2", "float32", [128, 64]), attr("activation", "str", "silu")])
    lines.append([tensor("x", "float16", [16, 64]), tensor("weight1", "float16", [64, 128]),
                  tensor("weight2", "float16", [128, 64]), attr("activation", "str", "reglu")])
    case_path = write_case_file(tmp_path / "cases" / "2_FFN.json", lines)
    ref, impl = REAL["npukernelbench/level4/2_FFN.json"]
    op_dir = work_dir(tmp_path / "work", "2_FFN", ref, impl, case_path)
    rows = verify_cases(op_dir, range(len(lines)), DEVICE)
    assert_pass_or_expected_rejection(rows, {8: "needs 64 rows, it has 128"})


def test_real_layer_norm_implementation_handles_missing_affine_inputs_and_rows_longer_than_one_chunk(tmp_path):
    ns = lambda v: attr("normalized_shape", "list", v)  # noqa: E731
    lines = [
        [tensor("x", "float32", [2, 8, 64]), ns([64]), tensor("weight", "float32", [64], False),
         tensor("bias", "float32", [64], False)],
        [tensor("x", "float16", [4, 100]), ns([100]), tensor("weight", "float16", [100], False)],
        [tensor("x", "float16", [4, 100]), ns([100]), tensor("bias", "float16", [100], False)],
        [tensor("x", "float32", [3, 5, 48]), ns([5, 48])],
        # 3 * 12288 = 36864 > 8192 elements per row: the chunked three-pass path
        [tensor("x", "float32", [2, 3, 12288]), ns([3, 12288]), tensor("weight", "float32", [3, 12288], False),
         tensor("bias", "float32", [3, 12288], False)],
        [tensor("x", "float16", [2, 64]), ns([32])],  # not a suffix of x's shape: rejected
    ]
    case_path = write_case_file(tmp_path / "cases" / "10_LayerNorm.json", lines)
    ref, impl = REAL["npukernelbench/level1/10_LayerNorm.json"]
    op_dir = work_dir(tmp_path / "work", "10_LayerNorm", ref, impl, case_path)
    assert_pass_or_expected_rejection(verify_cases(op_dir, range(len(lines)), DEVICE), {5: "not a suffix"})


# --- layout A ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", sorted(BASELINES))
def test_layout_a_op_root_links_the_canonical_files_and_picks_the_optimized_implementation(op):
    root = os.path.join(OPS, "verify", op)
    ref, impl = (os.path.realpath(os.path.join(OPS, p)) for p in ZOO[op])
    canonical = {f"{op}.py": ref, f"{op}.json": os.path.splitext(ref)[0] + ".json", f"{op}_generated.py": impl}
    for it in (1, 2):
        v = f"output/iter_{it}/verify/"
        canonical.update({v + f"{op}_torch.py": ref, v + f"{op}_torch.json": canonical[f"{op}.json"],
                          v + f"{op}_triton_optimized.py": impl})
    for rel, target in canonical.items():
        path = os.path.join(root, rel)
        assert os.path.islink(path) and not os.path.isabs(os.readlink(path)), rel  # relative links: git keeps them
        assert os.path.realpath(path) == target, rel
    for it in (1, 2):
        vdir = os.path.join(root, f"output/iter_{it}/verify")
        baseline = os.path.realpath(os.path.join(vdir, f"{op}_triton_baseline.py"))
        assert discover.inspect_py(baseline).kind == "implementation" and baseline != impl
        artifacts = sorted(n for n in os.listdir(vdir) if discover.is_artifact_name(n))
        assert "perf_result.json" in artifacts and any(n.startswith("verify_result_") for n in artifacts)
        for name in artifacts:
            with open(os.path.join(vdir, name)) as f:
                assert "example" in json.load(f)["_note"]
        found = discover.discover_layout_a(root, iteration=it)
        assert os.path.basename(found["impl"]) == f"{op}_triton_optimized.py"
        assert os.path.basename(found["cases"]) == f"{op}_torch.json"
