"""mfulib: the shared library behind triton-mfu-analyzer's scripts, one subpackage per pipeline step.

``core`` (definitions, cases, work directory, device), ``sources`` (step 1), ``verify``, ``search`` (step 2),
``flops`` (step 3), ``collect`` (step 4), ``peaks`` (step 5), ``report`` (step 6), ``batch``, ``run`` (how
operator code is run), plus ``backends`` (npu / cuda / cpu) and ``schemas`` (one module per work-directory JSON
file). docs/ARCHITECTURE.md draws the layers.

Modules of the earlier flat layout stay importable under their old names (``mfulib.flops_contract`` is
``mfulib.flops.contract``), so existing work directories' flops.py files keep working: :data:`MOVED` maps each
old name to its home and an import of the old name yields the very same module object.
"""

import importlib
import importlib.abc
import importlib.util
import sys

__version__ = "0.1.0"

#: old flat module name -> its home since the subpackage layout (both without the ``mfulib.`` prefix). Old names
#: that are now packages themselves (``batch``, ``peaks``, ``profiles``, ``report``, ``verify``) cannot be aliases;
#: nothing outside the repository imported them.
MOVED = {
    "definitions": "core.definitions", "errors": "core.errors", "jsonio": "core.jsonio", "cases": "core.cases",
    "opdir": "core.opdir", "device": "core.device", "cli": "core.cli", "failures": "core.failures",
    "workdir_state": "pipeline.workdir_state", "symbols": "core.symbols", "input_draw": "core.input_draw",
    "discover": "sources.discover", "prepare": "sources.prepare", "layoutc": "sources.layoutc",
    "examples": "sources.examples",
    "verified_cases": "verify.verified_cases",
    "flop_dispatch": "flops.dispatch", "flop_formulas": "flops.formulas", "flopcount": "flops.tracer",
    "flops_check": "flops.check", "flops_contract": "flops.contract", "flops_templates": "flops.drafts",
    "flops_templates_attention": "flops.drafts.attention", "flops_templates_vector": "flops.drafts.vector",
    "vector_costs": "flops.vector_costs", "npu_formulas": "flops.npu_formulas", "npu_standins": "flops.npu_standins",
    "lazy_masks": "flops.lazy_masks", "meta_build": "flops.meta_build", "kernel_parts": "flops.kernel_parts",
    "backends.collect": "collect.driver", "kernels": "profiles.kernels", "msprof": "profiles.msprof",
    "msprof_fast": "profiles.msprof_csv", "ncu": "profiles.ncu", "pmu": "profiles.pmu",
    "calib": "peaks.calib", "gemm_search": "peaks.gemm_search", "gemm_timing": "peaks.gemm_timing",
    "probe": "search.probe", "probe_child": "search.probe_child", "probe_gates": "search.probe_gates",
    "grid_search": "search.grid", "search_pool": "search.pool", "search_numerator": "search.numerator",
    "flops_law": "search.flops_law",
    "decompose": "report.decompose", "decompose_reading": "report.reading", "html_report": "report.html",
    "roofline": "report.roofline", "bound": "report.bound",
    "batch_driver": "batch.driver", "batch_ray": "batch.ray_runner", "batch_run": "batch.job",
    "batch_summary": "batch.summary",
    "worker": "run.worker", "trace_zygote": "run.trace_zygote", "compat": "run.compat", "interpreter": "run.interpreter",
    "noise": "run.noise",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``mfulib.<old name>`` to the module at its new home (the same object, registered under both names)."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(__name__ + "."):
            return None
        old = fullname[len(__name__) + 1:]
        if old not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        real = importlib.import_module(f"{__name__}.{MOVED[module.__name__[len(__name__) + 1:]]}")
        sys.modules[module.__name__] = real  # the import system returns what sys.modules holds under the name


if not any(isinstance(f, _Alias) for f in sys.meta_path):
    sys.meta_path.append(_Alias())
