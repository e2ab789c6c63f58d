"""The step graph is written once, in the Makefile: mfulib.pipeline.step_graph reads it, make status judges with it."""
import pytest

from mfulib.pipeline import step_graph
from mfulib.pipeline import workdir_state
from mfulib.core.errors import UserError


def test_the_project_makefile_gives_every_step_its_report_and_inputs():
    steps = {s.name: s for s in step_graph.read_steps()}
    assert tuple(steps) == step_graph.STEP_ORDER
    assert steps["collect"].report == "performance.json"
    assert set(steps["collect"].needs) == {"verify", "flops"}  # SEARCH=1's conditional edge is not an own input
    assert steps["verify"].needs == ("prepare",) and steps["verify"].files == ("model_new.py",)
    assert steps["peak"].needs == ("prepare",) and steps["peak"].files == ()  # a redo of step 1 redoes it
    assert steps["decompose"].files == ("performance.json", "peak.json")
    assert steps["search"].files == ("model_new.py", "probe.json")  # $(wildcard ...): a hand edit redoes the search
    assert workdir_state.STEPS == step_graph.read_steps()  # make status uses the very same table


MINI = """\
$(ST)/verify.ok: $(WORK)/prepare.json $(WORK)/model_new.py
\t$(call step,verify,$(WORK)/verify.json,$(VERIFY_CMD))
$(ST)/flops.ok: $(WORK)/flops.py
\t$(call step,flops,$(WORK)/flops_check.json,$(X))
$(ST)/probe.ok: $(ST)/verify.ok
\t$(call step,probe,$(WORK)/probe.json,$(X))
$(ST)/search.ok: $(ST)/probe.ok
\t$(call step,search,$(WORK)/grid_search.json,$(X))
$(ST)/collect.ok: $(ST)/flops.ok $(if $(SEARCH),$(ST)/search.ok) $(WORK)/model_new.py
\t$(call step,collect,$(WORK)/performance.json,$(X))
$(ST)/collect.ok: $(wildcard $(ST)/search.ok)
$(ST)/peak.ok: $(if $(N),_always) | $(WORK)/prepare.json
\t$(call step,peak,$(WORK)/peak.json,$(X))
$(ST)/decompose.ok: $(ST)/collect.ok $(ST)/peak.ok
\t$(call step,decompose,$(WORK)/mfu_decompose.json,$(X))
"""


def test_an_edge_added_to_the_makefile_reaches_make_status():
    steps = {s.name: s for s in step_graph.parse_makefile(MINI)}
    assert steps["collect"].needs == ("flops",) and steps["collect"].files == ("model_new.py",)
    edited = MINI.replace("$(ST)/decompose.ok: $(ST)/collect.ok", "$(ST)/decompose.ok: $(WORK)/flops.py $(ST)/collect.ok")
    steps = {s.name: s for s in step_graph.parse_makefile(edited)}
    assert steps["decompose"].files == ("flops.py",)


def test_a_step_rule_unknown_to_the_step_order_or_missing_is_refused():
    with pytest.raises(UserError, match="disagree"):
        step_graph.parse_makefile(MINI + "$(ST)/lint.ok: $(WORK)/model.py\n\t$(call step,lint,$(WORK)/lint.json,x)\n")
    with pytest.raises(UserError, match="missing in the Makefile: \\['peak'\\]"):
        step_graph.parse_makefile(MINI.replace("$(call step,peak,", "$(call notstep,peak,"))


def test_every_rule_line_of_a_stamp_counts_with_continuations_and_variables_expanded():
    text = MINI.replace("$(ST)/collect.ok: $(wildcard $(ST)/search.ok)\n",
                        "$(ST)/collect.ok: $(ST)/verify.ok\n")  # an unconditional extra edge on its own line
    assert {s.name: s for s in step_graph.parse_makefile(text)}["collect"].needs == ("flops", "verify")
    text = "COLLECT_NEEDS := $(ST)/verify.ok\nEXTRA = $(COLLECT_NEEDS) $(WORK)/x.py\n" + MINI.replace(
        "$(ST)/collect.ok: $(ST)/flops.ok $(if $(SEARCH),$(ST)/search.ok) $(WORK)/model_new.py",
        "$(ST)/collect.ok: $(ST)/flops.ok \\\n  $(EXTRA) $(WORK)/model_new.py")
    collect = {s.name: s for s in step_graph.parse_makefile(text)}["collect"]
    assert collect.needs == ("flops", "verify") and collect.files == ("x.py", "model_new.py")


def test_edges_make_status_could_not_judge_are_refused_with_the_fix():
    with pytest.raises(UserError, match="lint.ok, which no step writes"):
        step_graph.parse_makefile(MINI.replace("$(ST)/decompose.ok: $(ST)/collect.ok",
                                               "$(ST)/decompose.ok: $(ST)/lint.ok $(ST)/collect.ok"))
    with pytest.raises(UserError, match="listed after it"):
        step_graph.parse_makefile(MINI.replace("$(ST)/verify.ok: $(WORK)/prepare.json",
                                               "$(ST)/verify.ok: $(ST)/peak.ok $(WORK)/prepare.json"))
    with pytest.raises(UserError, match=r"uses \$\(NOWHERE\)"):
        step_graph.parse_makefile(MINI.replace("$(ST)/flops.ok: $(WORK)/flops.py",
                                               "$(ST)/flops.ok: $(NOWHERE) $(WORK)/flops.py"))

