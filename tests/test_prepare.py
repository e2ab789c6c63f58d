"""prepare_op_dir.py: the three source layouts, the quirks of the benchmark conventions note, and bad input."""
import json
import os
import subprocess
import sys

import pytest

import opfactory as F
from mfulib.sources import discover
from mfulib.sources import prepare
from mfulib.core.errors import UserError
from mfulib.core.opdir import OpDir

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "prepare_op_dir.py")


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, cwd=cwd)


def make_verify(root, op="Bmm", impls=("_triton_optimized", "_triton_baseline"), style="literal", artifacts=True):
    os.makedirs(root, exist_ok=True)
    F.write_ref(os.path.join(root, f"{op}_torch.py"), style, case_name=f"{op}_torch.json")
    F.write_cases(os.path.join(root, f"{op}_torch.json"))
    for suf in impls:
        F.write_impl(os.path.join(root, f"{op}{suf}.py"), doc=f"variant {suf}")
    if artifacts:
        F.write_artifacts(root)
    return root


def test_explicit_form_writes_the_five_files_and_rewrites_the_hard_coded_case_name(tmp_path):
    src = make_verify(str(tmp_path / "v"))
    dst = tmp_path / "work" / "Bmm"
    r = run_cli("--ref", f"{src}/Bmm_torch.py", "--cases", f"{src}/Bmm_torch.json",
                "--impl", f"{src}/Bmm_triton_optimized.py", "--dst", str(dst))
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(dst)) == ["Bmm_perf_cases.jsonl", "model.json", "model.py", "model_new.py", "prepare.json"]
    assert '"model.json"' in (dst / "model.py").read_text() and "Bmm_torch.json" not in (dst / "model.py").read_text()
    assert (dst / "model.json").read_text() == (dst / "Bmm_perf_cases.jsonl").read_text()
    info = json.loads((dst / "prepare.json").read_text())
    assert info["n_cases"] == 3 and info["schema"] == 1 and len(info["sources"]["ref"]["sha256"]) == 64
    # the reference loads its cases from the work dir: case 1 is the fp16 line
    built = OpDir(dst).build_case(1)
    assert [tuple(a.shape) for a in built.args] == [(1, 8, 16), (1, 16, 4)]
    built.close()


def test_explicit_form_copies_the_references_own_flops_file_as_the_bundled_operators_ship_it(tmp_path):
    # a new user's report: <ref stem>_flops.py beside --ref stayed behind (a hand fix lived only in the work dir)
    src = make_verify(str(tmp_path / "v"))
    with open(os.path.join(src, "Bmm_torch_flops.py"), "w") as f:
        f.write("def flops(case):\n    return 1.0\n")
    dst = tmp_path / "work" / "Bmm"
    args = ("--ref", f"{src}/Bmm_torch.py", "--cases", f"{src}/Bmm_torch.json", "--impl",
            f"{src}/Bmm_triton_optimized.py", "--dst", str(dst))
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    assert (dst / "flops.py").read_text() == "def flops(case):\n    return 1.0\n"
    assert json.loads((dst / "prepare.json").read_text())["sources"]["flops"]["path"].endswith("Bmm_torch_flops.py")
    r = run_cli(*args, "--check")
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout + r.stderr


def test_sources_are_never_modified(tmp_path):
    src = make_verify(str(tmp_path / "v"))
    before = {n: open(os.path.join(src, n), "rb").read() for n in os.listdir(src)}
    assert run_cli("--src", src, "--dst", str(tmp_path / "w")).returncode == 0
    assert {n: open(os.path.join(src, n), "rb").read() for n in os.listdir(src)} == before


def test_layout_a_prefers_the_optimized_variant_and_baseline_on_request(tmp_path):
    src = make_verify(str(tmp_path / "v"))
    found = discover.discover_layout_a(src)
    assert found["impl"].endswith("Bmm_triton_optimized.py")
    assert found["cases"].endswith("Bmm_torch.json")  # artifacts excluded by name and content
    skipped = dict((os.path.basename(p), why) for p, why in found["skipped"])
    assert skipped["verify_result_20260101.json"] == "artifact by name"
    assert skipped["notes.json"].startswith("not a case file by content")
    assert discover.discover_layout_a(src, variant="baseline")["impl"].endswith("Bmm_triton_baseline.py")


def test_layout_a_takes_the_highest_iteration_unless_told(tmp_path):
    root = tmp_path / "op_Bmm_20260101"
    make_verify(str(root / "output" / "iter_1" / "verify"), impls=("_triton_ascend_impl",))
    make_verify(str(root / "output" / "iter_3" / "verify"), impls=("_generated",))
    make_verify(str(root / "output" / "iter_2" / "verify"), impls=("_triton_optimized",))
    assert discover.discover_layout_a(str(root))["impl"].endswith("iter_3/verify/Bmm_generated.py")
    assert discover.discover_layout_a(str(root), iteration=1)["impl"].endswith("Bmm_triton_ascend_impl.py")
    with pytest.raises(UserError, match="no output/iter_7/verify"):
        discover.discover_layout_a(str(root), iteration=7)


def test_unique_triton_file_wins_over_generated_variants(tmp_path):
    src = make_verify(str(tmp_path / "v"), impls=("_triton_ascend_impl", "_generated_v2"))
    assert discover.discover_layout_a(src)["impl"].endswith("Bmm_triton_ascend_impl.py")


def test_ambiguous_implementations_are_an_error_listing_them_and_nothing_is_written(tmp_path):
    src = make_verify(str(tmp_path / "v"), impls=("_generated_a", "_generated_b"))
    r = run_cli("--src", src, "--dst", str(tmp_path / "w"))
    assert r.returncode == 2
    assert "Bmm_generated_a.py" in r.stderr and "Bmm_generated_b.py" in r.stderr and "--impl" in r.stderr
    assert not (tmp_path / "w").exists()


def test_identical_copies_are_not_ambiguous(tmp_path):
    # the spec: the op root and verify dir hold the same reference; two byte-identical impls are one choice
    src = make_verify(str(tmp_path / "v"), impls=("_generated",))
    with open(os.path.join(src, "Bmm_generated.py")) as f:
        text = f.read()
    with open(os.path.join(src, "Bmm_generated_copy.py"), "w") as f:
        f.write(text)
    assert discover.discover_layout_a(src)["impl"].endswith("Bmm_generated.py")


def _bench(tmp_path):
    bench, gen = tmp_path / "level4", tmp_path / "Level4"
    F.write_ref(str(bench / "1_Bmm.py"), "splitext")
    F.write_cases(str(bench / "1_Bmm.json"))
    F.write_ref(str(bench / "1_Bmm_old.py"), "literal", case_name="1_Bmm_old_cases.json")  # variant, no json
    F.write_cases(str(bench / "1_Bmm_all_case.json"), [F.case_line(b) for b in range(1, 6)])
    F.write_ref(str(bench / "2_Other.py"), "literal", case_name="2_Other.json")
    F.write_cases(str(bench / "2_Other.json"), bom=True)
    F.write_ref(str(bench / "3_Missing.py"), "splitext")
    F.write_cases(str(bench / "3_Missing.json"))
    F.write_impl(str(gen / "1_Bmm_generated_code.py"))
    F.write_impl(str(gen / "2_Other_optimized_code.py"))
    return str(bench), str(gen)


def test_layout_b_pairs_by_id_picks_the_reference_with_a_same_named_json_and_lists_missing_ids(tmp_path):
    bench, gen = _bench(tmp_path)
    pairs, missing = discover.discover_layout_b([bench], gen)
    assert missing == [3]
    by_id = {p["id"]: p for p in pairs}
    assert by_id[1]["ref"].endswith("1_Bmm.py") and by_id[1]["cases"].endswith("1_Bmm.json")
    assert by_id[2]["impl"].endswith("2_Other_optimized_code.py")
    r = run_cli("--bench", bench, "--gen", gen, "--all", "--dst", str(tmp_path / "work"))
    assert r.returncode == 0, r.stderr
    assert "ids [3]" in r.stderr
    assert sorted(os.listdir(tmp_path / "work")) == ["1_Bmm", "2_Other"]
    # the BOM case file and the splitext-style reference both load in the work dir
    for name, n in (("1_Bmm", 3), ("2_Other", 3)):
        od = OpDir(tmp_path / "work" / name)
        assert len(od.read_cases()) == n
        b = od.build_case(0)
        assert b.run().shape == (2, 4, 3)
        b.close()


def test_layout_b_all_case_json_is_ignored_unless_asked(tmp_path):
    bench, gen = _bench(tmp_path)
    os.remove(os.path.join(bench, "1_Bmm.json"))
    os.remove(os.path.join(bench, "1_Bmm_old.py"))
    with pytest.raises(UserError, match="cannot pair"):
        discover.discover_layout_b([bench], gen, ids=[1])
    pairs, _ = discover.discover_layout_b([bench], gen, ids=[1], include_all_case=True)
    assert pairs[0]["cases"].endswith("1_Bmm_all_case.json")


def test_layout_b_bench_may_be_split_between_code_and_data_dirs(tmp_path):
    code, data, gen = tmp_path / "code", tmp_path / "data", tmp_path / "gen"
    F.write_ref(str(code / "7_Bmm.py"), "splitext")
    F.write_cases(str(data / "7_Bmm.json"))
    F.write_impl(str(gen / "7_Bmm_triton_optimized.py"))
    r = run_cli("--bench", f"{code}:{data}", "--gen", str(gen), "--id", "7", "--dst", str(tmp_path / "w"))
    assert r.returncode == 0, r.stderr
    assert OpDir(tmp_path / "w").op_name == "7_Bmm"


def test_tuple_wrapped_cases_run_as_one_argument(tmp_path):
    d = tmp_path / "v"
    F.write_ref(str(d / "Conv_torch.py"), "splitext", tuple_wrapped=True)
    F.write_cases(str(d / "Conv_torch.json"))
    F.write_impl(str(d / "Conv_generated.py"), tuple_wrapped=True)
    assert run_cli("--src", str(d), "--dst", str(tmp_path / "w")).returncode == 0
    b = OpDir(tmp_path / "w").build_case(2)
    assert len(b.args) == 1 and isinstance(b.args[0], tuple)
    assert b.run().shape == (3, 2, 5)
    b.close()


@pytest.mark.parametrize("line,needle", [
    ("{not json", ":2 (case 1): not valid JSON"),
    ('{"cases": []}', ':2: a case line must be a JSON object with an "inputs" list'),
    ('{"inputs": [{"name": "A", "type": "tensor", "dtype": "float32", "shape": "2x3"}]}', "a list of non-negative ints"),
    ('{"inputs": [{"name": "A", "type": "tensor", "dtype": "float8x", "shape": [2]}]}', "unknown dtype"),
])
def test_malformed_case_lines_name_the_file_and_line_and_write_nothing(tmp_path, line, needle):
    d = make_verify(str(tmp_path / "v"), impls=("_generated",), artifacts=False)
    F.write_cases(os.path.join(d, "Bmm_torch.json"), [F.case_line(), line])
    r = run_cli("--src", d, "--dst", str(tmp_path / "w"))
    assert r.returncode == 2 and needle in r.stderr and "Bmm_torch.json" in r.stderr
    assert not (tmp_path / "w").exists()


def test_a_py_without_the_class_is_a_clear_error(tmp_path):
    d = make_verify(str(tmp_path / "v"), impls=("_generated",), artifacts=False)
    with open(os.path.join(d, "plain.py"), "w") as f:
        f.write("def forward(x):\n    return x\n")
    r = run_cli("--ref", os.path.join(d, "Bmm_torch.py"), "--cases", os.path.join(d, "Bmm_torch.json"),
                "--impl", os.path.join(d, "plain.py"), "--dst", str(tmp_path / "w"))
    assert r.returncode == 2 and "plain.py: no `class ModelNew`" in r.stderr


def test_missing_file_and_dst_inside_the_source_are_refused(tmp_path):
    d = make_verify(str(tmp_path / "v"), impls=("_generated",), artifacts=False)
    r = run_cli("--src", d, "--dst", os.path.join(d, "work"))
    assert r.returncode == 2 and "inside the source directory" in r.stderr
    assert not os.path.exists(os.path.join(d, "work"))
    r = run_cli("--ref", os.path.join(d, "nope.py"), "--cases", os.path.join(d, "Bmm_torch.json"),
                "--impl", os.path.join(d, "Bmm_generated.py"), "--dst", str(tmp_path / "w"))
    assert r.returncode == 2 and "nope.py: file not found" in r.stderr


def test_an_existing_work_dir_needs_force_and_is_then_backed_up(tmp_path):
    d = make_verify(str(tmp_path / "v"), impls=("_generated",), artifacts=False)
    w = tmp_path / "w"
    assert run_cli("--src", d, "--dst", str(w)).returncode == 0
    (w / "performance.json").write_text("{}")
    r = run_cli("--src", d, "--dst", str(w))
    assert r.returncode == 2 and "--force" in r.stderr and (w / "performance.json").exists()
    r = run_cli("--src", d, "--dst", str(w), "--force")
    assert r.returncode == 0, r.stderr
    backups = [p for p in os.listdir(tmp_path) if p.startswith("w.bak-")]
    assert len(backups) == 1 and os.path.exists(tmp_path / backups[0] / "performance.json")
    assert not (w / "performance.json").exists()


def test_implementation_deriving_its_case_path_from_file_gets_an_alias(tmp_path):
    d = make_verify(str(tmp_path / "v"), impls=(), artifacts=False)
    with open(os.path.join(d, "Bmm_generated.py"), "w") as f:
        f.write("import os, torch, torch.nn as nn\n"
                "CASES = os.path.splitext(os.path.abspath(__file__))[0] + '.json'\n"
                "class ModelNew(nn.Module):\n"
                "    def __init__(self):\n        super().__init__()\n"
                "        self.n = len(open(CASES).read().splitlines())\n"
                "    def forward(self, a, b):\n        return torch.bmm(a, b)\n")
    info = prepare.prepare_explicit(os.path.join(d, "Bmm_torch.py"), os.path.join(d, "Bmm_torch.json"),
                                    os.path.join(d, "Bmm_generated.py"), str(tmp_path / "w"))
    assert info["case_file_aliases"] == ["model_new.json"]
    b = OpDir(tmp_path / "w").build_case(1, impl="asc")
    assert b.model.n == 1  # the staged alias holds just the one case being built
    b.close()


def test_bundled_examples_are_listed_and_resolve(repo_root):
    r = run_cli("--list-examples")
    assert r.returncode == 0 and "zoo/1_BatchMatmul" in r.stdout


def test_force_never_moves_sources_that_live_under_dst(tmp_path):
    par = tmp_path / "par"
    src = make_verify(str(par / "src"), impls=("_generated",), artifacts=False)
    r = run_cli("--src", src, "--dst", str(par), "--force")
    assert r.returncode == 2 and "contains the source" in r.stderr
    assert os.path.exists(os.path.join(src, "Bmm_torch.py")) and not list(tmp_path.glob("par.bak-*"))


def test_symlinked_sources_count_where_their_files_live(tmp_path):
    real = make_verify(str(tmp_path / "real"), impls=("_generated",), artifacts=False)
    links = tmp_path / "links"
    links.mkdir()
    for name in os.listdir(real):
        os.symlink(os.path.join(real, name), links / name)
    for dst in (real, os.path.join(real, "work")):
        r = run_cli("--src", str(links), "--dst", dst, "--force")
        assert r.returncode == 2, r.stdout
    assert sorted(os.listdir(real)) == ["Bmm_generated.py", "Bmm_torch.json", "Bmm_torch.py"]


def test_dst_that_is_a_file_is_a_clear_error(tmp_path):
    src = make_verify(str(tmp_path / "v"), impls=("_generated",), artifacts=False)
    (tmp_path / "afile").write_text("x")
    r = run_cli("--src", src, "--dst", str(tmp_path / "afile"))
    assert r.returncode == 2 and "is an existing file" in r.stderr and "Traceback" not in r.stderr


def test_two_leading_boms_and_boolean_dims_are_handled(tmp_path):
    src = make_verify(str(tmp_path / "v"), impls=("_generated",), artifacts=False)
    cases_path = os.path.join(src, "Bmm_torch.json")
    with open(cases_path, "w", encoding="utf-8") as f:
        f.write("\ufeff\ufeff" + F.case_line() + "\n")
    assert run_cli("--src", src, "--dst", str(tmp_path / "w1")).returncode == 0
    with open(cases_path, "w") as f:
        f.write(F.case_line().replace("[2, 4, 8]", "[true, 4, 8]") + "\n")
    r = run_cli("--src", src, "--dst", str(tmp_path / "w2"))
    assert r.returncode == 2 and "non-negative ints" in r.stderr


def test_all_reports_broken_ids_and_still_prepares_the_good_ones(tmp_path):
    bench, gen = _bench(tmp_path)
    with open(os.path.join(bench, "4_Broken.py"), "w") as f:
        f.write("class Model(:\n")  # syntax error
    F.write_impl(os.path.join(gen, "4_Broken_generated.py"))
    F.write_impl(os.path.join(gen, "1_Bmm_generated_a.py"), doc="another variant")  # id 1: two variants, ambiguous
    r = run_cli("--bench", bench, "--gen", gen, "--all", "--dst", str(tmp_path / "work"))
    assert r.returncode == 2
    assert "4_Broken.py: not parseable Python" in r.stderr and "1_Bmm_generated_a.py" in r.stderr
    assert os.listdir(tmp_path / "work") == ["2_Other"] and "2 of 3 operators failed" in r.stderr
