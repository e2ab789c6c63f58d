"""Layout C, step 1: sample a reference's own inputs function and write the texts of its work directory.

:func:`build_work_files` turns one pair found by :func:`mfulib.sources.layoutc.discover_layout_c` into the files of
the work directory: the case file from one seeded call of the reference's ``get_inputs()`` /
``get_inputs_dyn_list()`` (:func:`sample_reference`, :func:`case_lines`), model.py = the reference verbatim +
:data:`REF_WRAPPER` (the layout-C runtime, :mod:`mfulib.sources.layoutc_runtime`, inlined: :func:`runtime_source`),
model_new.py = the implementation verbatim (+ :data:`IMPL_WRAPPER`, a ``class ModelNew`` around a launcher
function). Writing them to disk is :func:`mfulib.sources.prepare.prepare_layout_c`'s job.

The runtime is imported only when a reference is sampled (it imports torch, which discovery and ``--check`` never
need). Raises UserError naming the file and the fix for everything a user can correct.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os

from mfulib.core.errors import UserError
from mfulib.sources.discover import inspect_py, read_source, sha256
from mfulib.sources.layoutc import DYNAMIC_FN, STATIC_FN, reference_kind

WRAPPER_MARK = "# ---- added by triton-mfu-analyzer prepare_op_dir.py (layout C)"
#: the line of :mod:`mfulib.sources.layoutc_runtime` below which its text is inlined into model.py
INLINE_MARK = "# ---- inlined into model.py from here to the end of the file (layout C reference wrapper) ----"


def runtime_source() -> str:
    """The layout-C runtime's text as model.py carries it: :mod:`mfulib.sources.layoutc_runtime` below its
    ``INLINE_MARK`` line, read from the file (not imported: no torch needed). Raises RuntimeError when the marker
    line is missing (the module was edited without it)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layoutc_runtime.py")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    _, sep, inlined = text.partition("\n" + INLINE_MARK + "\n")
    if not sep:
        raise RuntimeError(f"{path}: no line {INLINE_MARK!r} - the inlined part of the runtime starts below it")
    return inlined


def _runtime():
    """:mod:`mfulib.sources.layoutc_runtime`, imported on first use (it imports torch)."""
    from mfulib.sources import layoutc_runtime
    return layoutc_runtime


def on_host():
    """Context manager: while it is open, Tensor.cuda()/.npu() return the tensor itself (built on the host)."""
    return _runtime()._mfu_on_host()


def case_line(group, names, with_range=True) -> dict:
    """The case-file line of one forward argument list ``group`` (parameter ``names``)."""
    return _runtime()._mfu_case(group, names, with_range)


def as_group(value) -> list:
    """A get_inputs() result as one forward argument list."""
    return _runtime()._mfu_as_group(value)

REF_WRAPPER = '''

{mark}: the tool's interface ----
# The original get_inputs() above is kept; the tool seeds torch/numpy/random before calling get_input_groups().
# Cases: model.json beside this file (written by prepare from one seeded {fn}() call).
{runtime}

_MFU_ORIGINAL_GET_INIT_INPUTS = globals().get("get_init_inputs")


def get_input_groups():
    """One forward argument list per line of model.json (beside this file),
    built by the original {fn}()."""
    with _mfu_on_host():
        draws = {draws}
    case_path = _mfu_os.path.join(_mfu_os.path.dirname(_mfu_os.path.abspath(__file__)), "model.json")
    return _mfu_pick_groups(case_path, draws)


def get_init_inputs():
    """Model's constructor arguments: the original get_init_inputs() ([] when it has none); with several case
    lines, one copy per line, so the per-case reading of the tool always gets these arguments."""
    init = list(_MFU_ORIGINAL_GET_INIT_INPUTS()) if _MFU_ORIGINAL_GET_INIT_INPUTS else []
    case_path = _mfu_os.path.join(_mfu_os.path.dirname(_mfu_os.path.abspath(__file__)), "model.json")
    with open(case_path, encoding="utf-8-sig") as f:
        n = sum(1 for line in f if line.strip())
    return [list(init) for _ in range(n)] if n > 1 else init
'''

IMPL_WRAPPER = '''

{mark}: class ModelNew around {entry}() ----
import torch as _mfu_torch


class ModelNew(_mfu_torch.nn.Module):
    """forward(*inputs) = {entry}(*inputs): the function takes Model.forward's inputs.

    Model's constructor arguments (get_init_inputs()) are accepted and not used: the function hard-codes what
    they set (prepare.json records them under generated.init_inputs)."""

    def __init__(self, *init_args, **init_kwargs):
        super().__init__()

    def forward(self, *inputs):
        return {entry}(*inputs)
'''

def _forward_names(model_cls):
    try:
        params = list(inspect.signature(model_cls.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def sample_reference(ref, seed=0):
    """Import ``ref`` in its own directory, seed, and call its get_init_inputs() and get_inputs() /
    get_inputs_dyn_list(). Returns dict(kind, groups, init, names, n_params, param_names). Raises UserError
    naming the file when the reference cannot be imported or its functions fail."""
    from mfulib.core.opdir import import_file, in_directory, seed_everything
    info = inspect_py(ref)
    if info.error:
        raise UserError(f"{ref}: cannot parse the reference ({info.error})")
    if "Model" not in info.classes:
        raise UserError(f"{ref}: no `class Model` - the reference must define class Model(nn.Module)")
    kind = reference_kind(info)
    if kind is None:
        raise UserError(f"{ref}: neither {STATIC_FN}() nor {DYNAMIC_FN}() - without a case file the reference "
                        f"must build its inputs with one of them (or pass --cases with a get_input_groups() ref)")
    fn = DYNAMIC_FN if kind == "dynamic" else STATIC_FN
    step = "import"
    ref_abs = os.path.abspath(ref)
    try:
        with in_directory(os.path.dirname(ref_abs)):
            mod = import_file(ref_abs, "layoutc_ref")
            seed_everything(seed)
            step = f"{fn}()"
            with on_host():
                raw = getattr(mod, fn)()
            groups = [as_group(g) for g in raw] if kind == "dynamic" else [as_group(raw)]
            step = "get_init_inputs()"
            init = list(mod.get_init_inputs()) if hasattr(mod, "get_init_inputs") else []
            step = f"Model(*get_init_inputs())"
            seed_everything(seed)
            model = mod.Model(*init)
    except UserError:
        raise
    except Exception as exc:
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").startswith("torch_npu"):
            raise UserError(f"{ref}: {step} needs torch_npu (an NPU-only reference) - run prepare on the NPU host, "
                            "where its inputs can be built") from None
        raise UserError(f"{ref}: {step} failed ({type(exc).__name__}: {exc}) - the reference must run on this "
                        "host to describe its inputs (no case file in layout C)") from None
    if not groups:
        raise UserError(f"{ref}: {fn}() returned no case")
    params = [n for n, _ in model.named_parameters()] + [n for n, b in model.named_buffers() if b is not None] \
        if hasattr(model, "named_parameters") else []
    return {"kind": kind, "fn": fn, "groups": groups, "init": init, "names": _forward_names(mod.Model),
            "param_names": params}


def case_lines(sample):
    """The case lines of a sampled reference (validated in the benchmark format)."""
    from mfulib.core import cases as _cases
    out = []
    for i, g in enumerate(sample["groups"]):
        line = case_line(g, sample["names"])
        if sample["kind"] == "dynamic":
            line["dyn_index"] = i
        _cases.validate_case(line, f"{sample['fn']}() entry {i}", None)
        out.append(line)
    return out


def check_function_impl(impl, entry, sample, ref):
    """Refuse a function implementation that cannot stand in for Model: Model holds parameters/buffers (the
    function never receives them), or the function's arity does not fit forward's inputs."""
    if sample["param_names"]:
        names = ", ".join(sample["param_names"][:6]) + (" ..." if len(sample["param_names"]) > 6 else "")
        raise UserError(f"{impl}: {entry}() is a plain function, but {os.path.basename(ref)}'s Model has "
                        f"{len(sample['param_names'])} parameters/buffers ({names}) that a function never receives "
                        "- write the implementation as class ModelNew(nn.Module) that creates the same weights "
                        "(the tool seeds identically before building Model and ModelNew)")
    required, positional, varargs = inspect_py(impl).launchers[entry]
    n = {len(g) for g in sample["groups"]}
    bad = [k for k in n if k < required or (k > positional and not varargs)]
    if bad:
        raise UserError(f"{impl}: {entry}() takes {required}..{'any' if varargs else positional} positional "
                        f"arguments, but {sample['fn']}() of {ref} gives forward {sorted(n)} - the function must "
                        "take exactly Model.forward's inputs, in order")


def build_work_files(pair, seed=0):
    """Texts of the work directory for a layout-C pair: (texts {name: text}, info part for prepare.json)."""
    from mfulib.core.opdir import MODEL_JSON, MODEL_NEW_PY, MODEL_PY, PERF_CASES_SUFFIX
    from mfulib.core.cases import dump_case_lines
    ref, impl = pair["ref"], pair["impl"]
    sample = sample_reference(ref, seed)
    if pair["impl_kind"] == "function":
        check_function_impl(impl, pair["entry"], sample, ref)
    lines = case_lines(sample)
    body = dump_case_lines(lines)
    ref_src = read_source(ref)
    ref_text = ref_src.rstrip("\n") + "\n" + REF_WRAPPER.format(
        mark=WRAPPER_MARK, fn=sample["fn"], runtime=runtime_source(),
        draws=(f"[_mfu_as_group(g) for g in {DYNAMIC_FN}()]" if sample["kind"] == "dynamic"
               else f"[_mfu_as_group({STATIC_FN}())]"))
    impl_src = read_source(impl)
    if pair["impl_kind"] == "function":
        impl_text = impl_src.rstrip("\n") + "\n" + IMPL_WRAPPER.format(mark=WRAPPER_MARK, entry=pair["entry"])
    else:
        impl_text = impl_src
    op = pair["name"]
    texts = {MODEL_PY: ref_text, MODEL_NEW_PY: impl_text, op + PERF_CASES_SUFFIX: body, MODEL_JSON: body}
    digest = {k: hashlib.sha256(v.encode("utf-8")).hexdigest() for k, v in texts.items()}
    wrappers = {
        MODEL_PY: {"wraps": os.path.abspath(ref), "wraps_sha256": sha256(ref), "sha256": digest[MODEL_PY],
                   "adds": ["get_input_groups()", "get_init_inputs()"], "inputs_from": sample["fn"] + "()",
                   "picks": "per case line the draw with the same shapes/dtypes/attrs (dyn_index first)"},
        MODEL_NEW_PY: ({"wraps": os.path.abspath(impl), "wraps_sha256": sha256(impl), "sha256": digest[MODEL_NEW_PY],
                        "adds": ["class ModelNew"], "entry": pair["entry"],
                        "calls": f"{pair['entry']}(*forward inputs)"}
                       if pair["impl_kind"] == "function" else
                       {"copied": os.path.abspath(impl), "sha256": digest[MODEL_NEW_PY],
                        "note": "defines class ModelNew itself; copied verbatim"}),
    }
    generated = {"cases": {"from": sample["fn"] + "()", "seed": seed, "n_cases": len(lines),
                           "input_names": "Model.forward's parameters" if sample["names"] else "input<i>",
                           "sha256": digest[op + PERF_CASES_SUFFIX]},
                 "init_inputs": _json_safe(sample["init"])}
    return texts, {"wrappers": wrappers, "generated": generated, "n_cases": len(lines)}


def _json_safe(values):
    try:
        return json.loads(json.dumps(values))
    except (TypeError, ValueError):
        return [repr(v) for v in values]
