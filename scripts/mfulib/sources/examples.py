"""The bundled operators in examples/ops and how to prepare each (used by ``make OP=<name>``).

* ``examples/ops/verify/<Op>/``: layout A op roots (name ``verify/<Op>``, e.g. ``verify/MHABlock``);
* ``examples/ops/bench/<set>/<N>_<Op>.py`` with implementations in ``examples/ops/gen/<set>/``: layout B (name
  ``<N>_<Op>`` or ``<set>/<N>_<Op>``). For the ``npukernelbench`` sets the case JSON is read from
  ``../shared/data/npukernelbench/<level>`` (or ``$MFU_SHARED_DATA/npukernelbench/<level>``), never copied;
* ``examples/ops/layoutc/ref/<rel>.py`` with implementations at ``examples/ops/layoutc/impl/<rel>.py``: layout C
  (name ``layoutc/<rel>``, e.g. ``layoutc/static_shape/matmul/matmul_relu``).

A name may drop its set (``5_MHABlock``) when that leaves one match; otherwise the error lists the candidates.
"""
from __future__ import annotations

import glob
import os

from mfulib.core.paths import REPO_ROOT
from mfulib.sources.discover import op_id
from mfulib.core.errors import UserError
from mfulib.sources.layoutc import is_layout_c_reference

EXAMPLES = os.path.join(REPO_ROOT, "examples", "ops")


def shared_data_dir() -> str:
    return os.environ.get("MFU_SHARED_DATA", os.path.join(os.path.dirname(REPO_ROOT), "shared", "data"))


def list_examples():
    """[(name, source)] for every bundled operator."""
    out = []
    for d in sorted(glob.glob(os.path.join(EXAMPLES, "verify", "*"))):
        if os.path.isdir(d):
            out.append(("verify/" + os.path.basename(d), os.path.relpath(d, REPO_ROOT) + " (layout A)"))
    bench_root = os.path.join(EXAMPLES, "bench")
    for ref in sorted(glob.glob(os.path.join(bench_root, "**", "*.py"), recursive=True)):
        stem = os.path.splitext(os.path.basename(ref))[0]
        if op_id(ref) is None or stem.endswith("_flops"):
            continue
        rel_set = os.path.relpath(os.path.dirname(ref), bench_root)
        where = " (layout B; its case file is read from $MFU_SHARED_DATA or ../shared/data)" \
            if rel_set.startswith("npukernelbench") else " (layout B)"
        out.append((f"{rel_set}/{stem}", os.path.relpath(ref, REPO_ROOT) + where))
    c_ref = os.path.join(EXAMPLES, "layoutc", "ref")
    for ref in sorted(glob.glob(os.path.join(c_ref, "**", "*.py"), recursive=True)):
        if is_layout_c_reference(ref):
            rel = os.path.splitext(os.path.relpath(ref, c_ref))[0].replace(os.sep, "/")
            out.append((f"layoutc/{rel}", os.path.relpath(ref, REPO_ROOT) + " (layout C)"))
    return out


def resolve(name: str) -> dict:
    """How to prepare bundled operator ``name``: {"layout": "A", "src"}, {"layout": "B", "bench", "gen", "id"} or
    {"layout": "C", "ref_root", "impl_root", "id"}. Raises UserError for an unknown or ambiguous name."""
    names = [n for n, _ in list_examples()]
    matches = [n for n in names if n == name or n.split("/")[-1] == name]
    if not matches:
        raise UserError(f"no bundled operator named {name!r}; bundled: {', '.join(names)}. For your own operator "
                        "give its sources: V=<verify dir or op root> (layout A), BENCH=<level dir> GEN=<generated "
                        "dir> (layout B, paired by OP's numeric prefix) or REF_ROOT=<reference tree> "
                        "IMPL_ROOT=<implementation tree> (layout C, OP = the relative path) to make; --src, --bench/--gen or "
                        "--ref-root/--impl-root to prepare_op_dir.py (README \"Step 1\")")
    if len(matches) > 1:
        raise UserError(f"{name!r} is ambiguous: {', '.join(matches)} - use the qualified name")
    if matches[0].startswith("layoutc/"):
        c_root = os.path.join(EXAMPLES, "layoutc")
        return {"layout": "C", "ref_root": os.path.join(c_root, "ref"), "impl_root": os.path.join(c_root, "impl"),
                "id": matches[0][len("layoutc/"):]}
    set_name, stem = matches[0].rsplit("/", 1)
    if set_name == "verify":
        return {"layout": "A", "src": os.path.join(EXAMPLES, "verify", stem)}
    bench = [os.path.join(EXAMPLES, "bench", set_name)]
    if set_name.startswith("npukernelbench"):
        data = os.path.join(shared_data_dir(), set_name)
        if not os.path.isdir(data):
            raise UserError(f"{name}: its case file lives in {data}, which is absent - put the shared data there "
                            "or set MFU_SHARED_DATA to the folder holding npukernelbench/")
        bench.append(data)
    return {"layout": "B", "bench": ":".join(bench), "gen": os.path.join(EXAMPLES, "gen", set_name),
            "id": op_id(stem + ".py")}
