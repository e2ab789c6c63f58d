# triton-mfu-analyzer: per-operator MFU pipeline. `make` (or `make help`) lists the targets.
#
#   make OP=5_MHABlock all                      a bundled operator (examples/ops; `make examples` lists them)
#   make OP=20_FlashAttentionV2 V=<verify dir> all            layout A (one verify directory / op root;
#                                                              ITER=<n>, VARIANT=baseline pick another copy)
#   make OP=2_FFN BENCH=<level dir> GEN=<generated dir> all   layout B (paired by the numeric prefix of OP)
#   make OP=static_shape/matmul/matmul_relu REF_ROOT=<bench> IMPL_ROOT=<impl root> all
#                                                              layout C (paired by the relative path OP)
#   make OP=... status                          per step: done / stale (why) / failed (its report) / not run
#
# State: step 1 is redone when the command line's source choice or a source's *content* differs from what
# $(WORK)/prepare.json records (the old directory is kept as <work>.bak-<time>); a touch changes nothing. Every
# later step writes the stamp $(WORK)/.state/<step>.ok only when its script succeeded; its report keeps its name
# whatever happened (a failed or interrupted step's report is evidence; the next `make` redoes the step and keeps
# the one before in $(WORK)/.state/previous/).

SKILL_DIR ?= $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
PY        ?= python3
OP        ?=
V         ?=
BENCH     ?=
GEN       ?=
REF_ROOT  ?=
IMPL_ROOT ?=
ITER      ?=
VARIANT   ?=
# the baseline is its own work directory: the two are two rows, never one replacing the other
WORK      ?= work/$(patsubst %.py,%,$(OP))$(if $(filter baseline,$(VARIANT)),-baseline)
# WORK=work/ (a trailing slash) would make targets and messages say work//prepare.json: drop it (and remember where
# WORK came from, for the hints that repeat a command-line WORK)
WORK_ORIGIN := $(origin WORK)
override WORK := $(patsubst %/,%,$(patsubst %/,%,$(strip $(WORK))))
BACKEND   ?= auto
DEVICE_ID ?= 0
SEED      ?= 0
FORCE     ?=
PYTEST_ARGS ?=
VERIFY_ARGS ?=
COLLECT_ARGS ?=
# L2 flush before every timed iteration of the operator, MiB (0 = warm cache, as the operator runs in a model);
# peak.json is always measured flushed: mfu_decompose.py says in its "cache regime" line which regime both share
FLUSH_CACHE_MIB ?= 0
# PMU=ncu: hardware counters per kernel from Nsight Compute (cuda; ~10 s more per measured case: ncu replays each
# kernel per metric pass); PMU=auto: when ncu is found and counters are permitted; none (default): no counters, the
# bound labels fall back to the fp32-vs-fp16 rule (said so in the table). On npu the counters come from msprof
# --aic-metrics (COLLECT_ARGS).
PMU ?= none
# ACCEPT_VERIFY_FAILURES=1: verify's failing cases do not stop the pipeline (the collector never times them)
# ACCEPT_UNVERIFIED_CASES=1: the collector also times cases verify did not pass (each marked in performance.json)
ACCEPT_VERIFY_FAILURES ?=
ACCEPT_UNVERIFIED_CASES ?=
# The on/off switches: 1 (yes, true, on) or unset; 0 (no, false, off) turns one off - it is emptied here, before
# anything reads it, since make treats every non-empty value as on - and any other value is refused.
SWITCHES  := SEARCH FORCE ACCEPT_VERIFY_FAILURES ACCEPT_UNVERIFIED_CASES ACCEPT_UNVERIFIED
OFF_WORDS := 0 no No NO false False FALSE off Off OFF
ON_WORDS  := 1 yes Yes YES true True TRUE on On ON
$(foreach v,$(SWITCHES),$(if $(filter-out $(OFF_WORDS) $(ON_WORDS),$(strip $($(v)))),$(error $(v)=$($(v)): \
  use $(v)=1 to turn it on, $(v)=0 or no $(v) to leave it off)))
$(foreach v,$(SWITCHES),$(if $(filter $(OFF_WORDS),$(strip $($(v)))),$(eval override $(v) :=)))

empty :=
space := $(empty) $(empty)
comma := ,
.DEFAULT_GOAL := help
# deletes a half-made stamp or flops.py; the reports are not targets, so a failing step's report stays
.DELETE_ON_ERROR:
.PHONY: help setup test test-fast test-e2e golden prepare verify flops collect peak decompose report all examples clean-work status _always

# backends registered through MFU_BACKEND_PLUGINS (name=module:Class[,...]) are valid too
comma := ,
VALID_BACKENDS := auto npu cuda cpu $(foreach p,$(subst $(comma), ,$(MFU_BACKEND_PLUGINS)),$(firstword $(subst =, ,$(p))))
ifeq ($(filter $(BACKEND),$(VALID_BACKENDS)),)
$(error BACKEND=$(BACKEND) is not one of: $(VALID_BACKENDS))
endif

SCRIPTS := $(SKILL_DIR)/scripts
ST       = $(WORK)/.state
CHOICES := $(if $(ITER),--iter $(ITER)) $(if $(VARIANT),--variant $(VARIANT))

# where step 1 reads the operator from (ITER / VARIANT go to every form: prepare refuses them where they do not apply)
ifneq ($(V),)
  PREPARE_SRC := --src $(V) $(CHOICES)
  $(info source: layout A, V=$(V))
else ifneq ($(BENCH),)
  ifeq ($(GEN),)
    $(error BENCH is set but GEN is not: layout B needs both (GEN=<generated-code dir>))
  endif
  OP_ID := $(firstword $(subst _, ,$(notdir $(OP))))
  PREPARE_SRC := --bench $(BENCH) --gen $(GEN) --id $(OP_ID) $(CHOICES)
  $(info source: layout B, BENCH=$(BENCH) GEN=$(GEN) id=$(OP_ID))
else ifneq ($(REF_ROOT)$(IMPL_ROOT),)
  ifeq ($(REF_ROOT),)
    $(error IMPL_ROOT is set but REF_ROOT is not: layout C needs both (REF_ROOT=<reference tree root>))
  endif
  ifeq ($(IMPL_ROOT),)
    $(error REF_ROOT is set but IMPL_ROOT is not: layout C needs both (IMPL_ROOT=<implementation tree root>))
  endif
  PREPARE_SRC := --ref-root $(REF_ROOT) --impl-root $(IMPL_ROOT) --id $(OP) $(CHOICES)
  $(info source: layout C, REF_ROOT=$(REF_ROOT) IMPL_ROOT=$(IMPL_ROOT) path=$(OP))
else
  PREPARE_SRC := --example $(OP) $(CHOICES)
endif

need-op = $(if $(OP),,$(error OP is not set: e.g. make OP=5_MHABlock $@ (make examples lists the bundled ones)))

help: ## show this help
	@echo "triton-mfu-analyzer - usage: make OP=<op> [V=<verify dir> | BENCH=<dir> GEN=<dir> | REF_ROOT=<dir> IMPL_ROOT=<dir>] <target>"
	@echo "variables: OP V BENCH GEN REF_ROOT IMPL_ROOT ITER VARIANT WORK=$(if $(OP),$(WORK),work/<OP>) BACKEND=$(BACKEND) DEVICE_ID=$(DEVICE_ID) SEED=$(SEED) PY=$(PY) SKILL_DIR=$(SKILL_DIR)"
	@echo "           VERIFY_ARGS COLLECT_ARGS FLUSH_CACHE_MIB=$(FLUSH_CACHE_MIB) PMU=$(PMU) ACCEPT_VERIFY_FAILURES=1 ACCEPT_UNVERIFIED_CASES=1 ACCEPT_UNVERIFIED=1"
	@echo "           FORCE=1 ALL_JOBS=$(ALL_JOBS)"
	@echo "           SEARCH=1 (probe + search before collect) PROBE_ARGS SEARCH_ARGS"
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-12s %s\n", $$1, $$2}'

# torch: a host that already has torch (+ torch_npu) keeps it; a host with an NVIDIA driver gets the default
# (CUDA) wheel; any other host gets the CPU build (the +cpu local version, which PyPI's CUDA wheels never carry:
# from a local wheel/find-links or the CPU index), never the multi-GB CUDA build with its nvidia-* wheels.
TORCH_CPU_VERSION ?= 2.13.0
TORCH_CPU_INDEX   ?= https://download.pytorch.org/whl/cpu
setup: ## install the Python dependencies (CPU torch where no GPU and no torch; triton only where none; never torch_npu)
	@had_triton=$$($(PY) -c "import triton; print(triton.__version__)" 2>/dev/null); \
	if $(PY) -c "import torch" 2>/dev/null; then \
	  echo "torch $$($(PY) -c 'import torch; print(torch.__version__)') already installed: kept"; \
	elif command -v nvidia-smi >/dev/null 2>&1; then \
	  echo "no torch, nvidia-smi found: installing the default (CUDA) torch"; $(PY) -m pip install "torch>=2.1" || exit 1; \
	else \
	  echo "no torch and no GPU (no nvidia-smi): installing the CPU build torch==$(TORCH_CPU_VERSION)+cpu"; \
	  $(PY) -m pip install "torch==$(TORCH_CPU_VERSION)+cpu" \
	    || $(PY) -m pip install torch --index-url $(TORCH_CPU_INDEX) \
	    || { echo "could not install a CPU torch: install one by hand, e.g. pip install torch --index-url $(TORCH_CPU_INDEX)"; exit 1; }; \
	fi; \
	$(PY) -m pip install -r $(SKILL_DIR)/requirements.txt || exit 1; \
	now_triton=$$($(PY) -c "import triton; print(triton.__version__)" 2>/dev/null); \
	if [ -n "$$had_triton" ]; then echo "triton $$had_triton already installed: kept (never installed over triton-ascend)"; \
	elif [ -n "$$now_triton" ]; then echo "triton $$now_triton: installed as a dependency of torch"; \
	else $(PY) -m pip install "triton==3.8.0"; fi

# Test tiers (markers registered in tests/conftest.py): test-fast is the unit tier (-m "not e2e": in-process, no
# pipeline of subprocesses, no sleeps); test-e2e the end-to-end tier (-m e2e: whole CPU pipelines through make and
# the step scripts, built once per session by tests/pipelines.py and copied); test runs both, the unit tier first
# (a failure there stops before the slow tier; each tier's pytest prints its own count and time).
# Every tier runs under pytest-xdist when it is installed (.ci/run installs it; requirements.txt lists it):
# TEST_JOBS workers (2: CI's two cores), --dist loadfile (one file's tests in one worker, so a module's fixture is
# built once); TEST_JOBS=0 runs in this process. Each test has its own TMPDIR, so its device lock is its own.
TEST_JOBS   ?= 2
HAVE_XDIST   = $(shell $(PY) -c "import xdist" 2>/dev/null && echo 1)
PYTEST_RUN   = cd $(SKILL_DIR) && $(PY) -m pytest -q $(if $(and $(HAVE_XDIST),$(filter-out 0,$(TEST_JOBS))),-n \
  $(TEST_JOBS) --dist loadfile) $(PYTEST_ARGS)
test: ## run the test suite, both tiers (CPU-only machines run Triton kernels in the interpreter)
	$(PYTEST_RUN) -m "not e2e" tests
	$(PYTEST_RUN) -m e2e tests
test-fast: ## the unit tier of the test suite (no subprocess pipelines, no sleeps)
	$(PYTEST_RUN) -m "not e2e" tests
test-e2e: ## the end-to-end tier of the test suite (whole CPU pipelines through make and the step scripts)
	$(PYTEST_RUN) -m e2e tests
golden: ## regenerate tests/golden/work_dir_keys.json from a real CPU pipeline (after a deliberate format change)
	cd $(SKILL_DIR) && MFU_UPDATE_GOLDEN=1 $(PY) -m pytest -q $(PYTEST_ARGS) \
	  tests/test_work_dir_schemas.py::test_every_work_dir_json_has_exactly_the_golden_keys

examples: ## list the bundled operators usable as OP=<name>
	@$(PY) $(SCRIPTS)/prepare_op_dir.py --list-examples

status: ## per step of the work directory: done / stale (why) / failed (its report) / not run
	$(if $(or $(OP),$(filter command line,$(WORK_ORIGIN))),,$(need-op))
	@$(PY) $(SCRIPTS)/prepare_op_dir.py $(if $(OP),$(PREPARE_SRC)) --dst $(WORK) --status --settings-changed '$(strip \
	  $(foreach s,verify flops collect probe search,$(if $(call settings_changed,$(s)),$(s):$(subst $(space),$(comma),$(call settings_changed,$(s))))))' \
	  --waits '$(strip $(SEARCH_EDGES))'

# ---------------------------------------------------------------------------------------------- step 1
# Is $(WORK) built from this command line's source choice and the sources' current content? Asked once, at parse
# time, of prepare.json (mfulib/pipeline/workdir_state.py): "ok" leaves step 1 alone (a touch changes nothing); "redo"
# (another V/ITER/VARIANT/..., another resolved file, changed content), "new" or "error" (e.g. a V that does not
# exist) runs prepare, which redoes the directory (old one kept as a backup) or fails with the reason.
PIPELINE_GOALS := prepare verify flops collect peak decompose report all probe search
ifneq ($(OP),)
ifneq ($(filter $(PIPELINE_GOALS) $(WORK)/%,$(MAKECMDGOALS)),)
PREPARE_CHECK := $(shell $(PY) $(SCRIPTS)/prepare_op_dir.py $(PREPARE_SRC) --dst $(WORK) --check 2>&1)
PREPARE_VERDICT := $(firstword $(PREPARE_CHECK))
ifeq ($(PREPARE_VERDICT),redo)
$(info $(WORK) was built from other sources or choices: $(wordlist 2,$(words $(PREPARE_CHECK)),$(PREPARE_CHECK)) - step 1 is redone (the old directory is kept as $(WORK).bak-<time>))
endif
endif
endif

prepare: $(WORK)/prepare.json ## step 1: adapt the operator into $(WORK) (FORCE=1 redoes it, keeping a backup)

$(WORK)/prepare.json: $(if $(or $(FORCE),$(filter-out ok,$(PREPARE_VERDICT))),_always)
	$(need-op)
	$(PY) $(SCRIPTS)/prepare_op_dir.py $(PREPARE_SRC) --dst $(WORK) $(if $(or $(FORCE),$(wildcard $@)),--force)

# ---------------------------------------------------------------------------------------------- verify, steps 3-6
# $(call step,<name>,<report>,<command>[,<accepted exit status>,<why accepted>]): run a step's script; its stamp
# $@ is written only when it succeeded (an earlier one is removed first: a re-run forced by a changed setting that
# fails must not leave the stamp of the run before it). A failing step keeps its report at its name (the one before
# it is copied to $(ST)/previous/ first), says where it is, records its exit status in $(ST)/<name>.failed (for
# make status; removed when the step starts again) and stops make; the next `make` redoes the step. An interrupted
# step (exit status 128 + SIGHUP / SIGINT / SIGTERM: scripts/device_lock.py) is not a failure: no record, no stamp.
# A step that refuses its settings before changing anything (exit status 4: mfulib.core.errors.SettingsRefused - the
# probe asked for a smaller --max-scale than the cases it appended) gets the earlier run's stamp back: that run stands.
STATUS_HINT = make status$(if $(OP), OP=$(OP))$(if $(V), V=$(V))$(if $(BENCH), BENCH=$(BENCH) GEN=$(GEN))$(strip \
  )$(if $(REF_ROOT), REF_ROOT=$(REF_ROOT) IMPL_ROOT=$(IMPL_ROOT))$(if $(ITER), ITER=$(ITER))$(strip \
  )$(if $(VARIANT), VARIANT=$(VARIANT))$(if $(filter command line,$(WORK_ORIGIN)), WORK=$(WORK))
define step
@rm -f $(ST)/$(1).failed $(ST)/$(1).ok.prev && mkdir -p $(ST)/previous && if [ -f $@ ]; then mv -f $@ $(ST)/$(1).ok.prev; fi && if [ -f $(2) ]; then cp -p $(2) $(ST)/previous/; fi && touch $(ST)/$(1).started
$(info $(3))@( $(3) ) || { rc=$$?; \
	  case $$rc in 129|130|143) rm -f $(ST)/$(1).ok.prev; echo "make: step $(1) interrupted (exit status $$rc): not done, the next make redoes it" >&2; \
	    exit $$rc;; esac; \
	  if [ "$$rc" = 4 ] && [ -f $(ST)/$(1).ok.prev ]; then mv -f $(ST)/$(1).ok.prev $@; touch -r $@ $(ST)/$(1).started; \
	    echo "make: step $(1) refused these settings before changing anything (exit status 4): its earlier run stands (the next make keeps it; the error above says what to do)" >&2; exit $$rc; fi; \
	  rm -f $(ST)/$(1).ok.prev; \
	  if [ -n "$(4)" ] && [ "$$rc" = "$(4)" ]; then echo "make: step $(1): exit status $$rc accepted ($(5)); report: $(2)" >&2; \
	  else if [ -f $(2) ] && [ $(2) -nt $(ST)/$(1).started ]; then echo "make: step $(1) FAILED (exit status $$rc); its report is kept: $(2)" >&2; \
	       elif [ -f $(2) ]; then echo "make: step $(1) FAILED (exit status $$rc) before writing a new $(2) - the one there is from an earlier run; the error is above" >&2; \
	       else echo "make: step $(1) FAILED (exit status $$rc) before writing $(2)" >&2; fi; \
	       echo $$rc > $(ST)/$(1).failed; echo "make: the next make redoes it; $(STATUS_HINT) shows every step" >&2; exit $$rc; fi; }
@rm -f $(ST)/$(1).ok.prev; touch $@
$(if $(SETVARS_$(1)),@printf '%s\n' $(foreach v,$(SETVARS_$(1)),'$(v)=$(subst ','\'',$(strip $($(v))))') > $(ST)/$(1).settings)
endef

# each step's script records whether make ran it (made_from.by_make in its report: a run by hand counts as make's
# only with make's settings and inputs - mfulib/schemas/provenance.py)
$(ST)/%.ok: export MFU_MAKE_STEP = $(patsubst %.ok,%,$(notdir $@))

# One device, one step at a time: verify, collect, peak, the probe and the search run under an exclusive lock
# (scripts/device_lock.py), so under `make -j` (and in `all`, which runs its steps with -j$(ALL_JOBS)) peak never times
# GEMMs while a case runs, even from another make. Its scope follows the backend: an accelerator's lock is machine-wide
# per device ($(TMPDIR)/triton-mfu-analyzer-device<LOCK_DEVICE>.lock); the CPU's is per work directory (unrelated
# checkouts and operators do not queue behind each other). flops (a host-only tracer) takes it only on the CPU. A
# step that waits says who holds the lock (pid, command, since: the holder record beside it) and shows a timer; a
# SIGINT / SIGTERM to make or to its process group stops the running step, which is then not done.
# LOCK_DEVICE: the physical device a batch worker's DEVICE_ID=0 stands for (its CUDA_VISIBLE_DEVICES / ASCEND_RT_...)
# DEVICE_LOCK=<file>: this lock file for every step instead
LOCK_DEVICE ?= $(DEVICE_ID)
DEVICE_LOCK ?=
LOCK_ARGS    = --backend $(BACKEND) --device $(LOCK_DEVICE) --work $(abspath $(WORK)) $(if $(DEVICE_LOCK),--lock \
  $(DEVICE_LOCK))
DEVICE_RUN   = $(PY) $(SCRIPTS)/device_lock.py $(LOCK_ARGS) --
FLOPS_RUN    = $(PY) $(SCRIPTS)/device_lock.py $(LOCK_ARGS) --host-only --
ALL_JOBS    ?= 3

VERIFY_CMD = $(DEVICE_RUN) $(PY) $(SCRIPTS)/verify_op.py --op-dir $(WORK) --backend $(BACKEND) --device $(DEVICE_ID) \
  --seed $(SEED) $(VERIFY_ARGS)
CHECK_FLOPS_CMD = $(FLOPS_RUN) $(PY) $(SCRIPTS)/check_flops.py --op-dir $(WORK) --backend $(BACKEND) --seed $(SEED) \
  $(if $(ACCEPT_UNVERIFIED),--accept-unverified)
COLLECT_CMD = cd $(WORK) && $(DEVICE_RUN) $(PY) $(SCRIPTS)/ops_profiling/msprof_perf_summary.py --quick --mfu --impl asc \
  --output-dir . --keep-prof . --backend $(BACKEND) --device $(DEVICE_ID) --seed $(SEED) \
  --flush-cache-mib $(FLUSH_CACHE_MIB) --pmu $(PMU) $(if $(ACCEPT_UNVERIFIED_CASES),--unverified-ok) $(COLLECT_ARGS)
PEAK_CMD = $(DEVICE_RUN) $(PY) $(SCRIPTS)/peak_calib.py -o $(WORK)/peak.json --backend $(BACKEND) --device $(DEVICE_ID)
DECOMPOSE_CMD = $(PY) $(SCRIPTS)/mfu_decompose.py --op-dir $(WORK) --peak-json $(WORK)/peak.json --plot

# written by step 1: named here so that `make -j` (and `all`) orders them after prepare instead of failing early
$(WORK)/model.py $(WORK)/model_new.py: | $(WORK)/prepare.json

verify: $(ST)/verify.ok ## check ModelNew against Model per case before anything is timed (only passed cases are)

$(ST)/verify.ok: $(WORK)/prepare.json $(WORK)/model_new.py
	$(call step,verify,$(WORK)/verify.json,$(VERIFY_CMD),$(if $(ACCEPT_VERIFY_FAILURES),1),$(strip \
	  )ACCEPT_VERIFY_FAILURES=1: the failing cases are never timed)

flops: $(ST)/flops.ok ## step 3: draft flops.py when absent (review it!), then check it against the tracer

# order-only: an existing (reviewed) flops.py is never regenerated
$(WORK)/flops.py: | $(WORK)/prepare.json
	@if [ -f $@ ]; then echo "$@: shipped with the operator, kept"; else \
	  $(PY) $(SCRIPTS)/flops_generator.py --model $(WORK)/model.py --cases $(WORK)/model.json -o $@; fi

# prepare.json is a normal prerequisite of every step that builds on step 1 (verify, flops, peak): a redo of step 1
# replaces the directory, and make, which stats a stamp once, would otherwise keep the old directory's stamps
$(ST)/flops.ok: $(WORK)/prepare.json $(WORK)/flops.py $(WORK)/model.py
	$(call step,flops,$(WORK)/flops_check.json,$(CHECK_FLOPS_CMD))

collect: $(ST)/collect.ok ## step 4: kernel times of the top-3 verified cases by FLOPs (cpu: the smallest 3), or of the search's chosen cases after a search; raw profiles kept

$(ST)/collect.ok: $(ST)/flops.ok $(ST)/verify.ok $(WORK)/model_new.py
	$(call step,collect,$(WORK)/performance.json,$(COLLECT_CMD))

peak: $(ST)/peak.ok ## step 5: measured per-dtype GEMM peaks and bandwidth (cached per device)

# an accelerator calibration that came out noisy (peak.json trust.trusted false: kept, never cached) is measured
# again by the next make; a CPU one is kept (a shared CPU is noisy every time; its numbers only validate the pipeline)
PEAK_NOISY = $(if $(wildcard $(WORK)/peak.json),$(shell $(PY) -c 'import sys; sys.path.insert(0, sys.argv[1]); \
  from mfulib.schemas.peak_json import measure_again_reason as m; print(1 if m(sys.argv[2]) else "")' \
  $(SCRIPTS) $(WORK)/peak.json 2>/dev/null))
$(ST)/peak.ok: $(WORK)/prepare.json $(if $(PEAK_NOISY),_always)
	$(call step,peak,$(WORK)/peak.json,$(PEAK_CMD))

decompose: $(ST)/decompose.ok ## step 6: per-case and per-kernel-part MFU table

# the reports too: a collector or peak_calib.py re-run by hand is decomposed again (an incomplete one is refused);
# each report is written by its step, which `make -j` therefore runs first
$(WORK)/performance.json: | $(ST)/collect.ok
$(WORK)/peak.json: | $(ST)/peak.ok
$(ST)/decompose.ok: $(ST)/collect.ok $(ST)/peak.ok $(WORK)/performance.json $(WORK)/peak.json
	$(call step,decompose,$(WORK)/mfu_decompose.json,$(DECOMPOSE_CMD))

# the decomposition again (same inputs, same mfu_decompose.json) with its HTML report beside it
REPORT_CMD = $(PY) $(SCRIPTS)/mfu_decompose.py --op-dir $(WORK) --from-json --html $(WORK)/report.html

report: $(WORK)/report.html ## one self-contained HTML report of the decomposition -> $(WORK)/report.html (all makes it)

# it renders what mfu_decompose.json and the reports it names hold: a newer one of them renders it again
$(WORK)/mfu_decompose.json: | $(ST)/decompose.ok
$(WORK)/report.html: $(ST)/decompose.ok $(WORK)/mfu_decompose.json $(WORK)/performance.json $(WORK)/peak.json
	$(REPORT_CMD)


# ---------------------------------------------------------------------------------------------- step 2: limit-MFU search
# probe: scale the cases under five gates and append the legal ones to both case copies (probe.json); search: rank
# the pool of (case, scale) points by wall clock, measure the top 3 with the collector (grid_search.json). With
# SEARCH=1 (or once make ran the search in the work directory: SEARCH_EDGES below), collect waits for the search;
# after a successful search (its stamp), collect measures the chosen cases (--search-json), each marked with its
# origin in performance.json.
SEARCH      ?=
PROBE_ARGS  ?=
SEARCH_ARGS ?=
.PHONY: probe search
PROBE_CMD = $(DEVICE_RUN) $(PY) $(SCRIPTS)/max_shape_probe.py --dir $(WORK) --flops-tool $(SCRIPTS)/check_flops.py \
  --max-bytes 10e9 --max-ms 4000 --backend $(BACKEND) --device $(DEVICE_ID) --seed $(SEED) $(PROBE_ARGS)
SEARCH_CMD = $(DEVICE_RUN) $(PY) $(SCRIPTS)/mfu_grid_search.py --dir $(WORK) --flops-tool $(SCRIPTS)/check_flops.py \
  --backend $(BACKEND) --device $(DEVICE_ID) --seed $(SEED) $(SEARCH_ARGS)
# The collector measures the search's chosen cases exactly when make takes the search as done (its stamp and its
# report there), else the top-k cases - never a grid_search.json make has not accepted (a hand run's with other
# settings, a stopped one's) - unless COLLECT_ARGS chooses (--search-json / --no-search-json). A run-time test, not
# parse time: with SEARCH=1 the search runs in the same make as the collection.
SEARCH_JSON_ARG = $$(if test -f .state/search.ok && test -f grid_search.json; \
  then echo --search-json grid_search.json; else echo --no-search-json; fi)
COLLECT_SEARCH_ARG = $(if $(filter --search-json% --no-search-json,$(COLLECT_ARGS)),,$(SEARCH_JSON_ARG))
COLLECT_CMD += $(COLLECT_SEARCH_ARG)

probe: $(ST)/probe.ok ## step 2a: scale the cases under five gates, append the legal ones (probe.json; PROBE_ARGS)

$(ST)/probe.ok: $(ST)/verify.ok $(WORK)/model.py $(WORK)/model_new.py
	$(call step,probe,$(WORK)/probe.json,$(PROBE_CMD))

search: $(ST)/search.ok ## step 2b: (case, scale) search for the limit MFU (grid_search.json; SEARCH_ARGS)
# probe.json too (when present): a hand-edited one (a candidate dropped from `appended`) is searched again

$(ST)/search.ok: $(ST)/probe.ok $(WORK)/model_new.py $(wildcard $(WORK)/probe.json)
	$(call step,search,$(WORK)/grid_search.json,$(SEARCH_CMD))
# a stamp without its report is no finished search (make status: stale, its report is gone): the search is redone
$(ST)/search.ok: $(if $(wildcard $(WORK)/grid_search.json),,_always)

# The settings each step last ran with: $(ST)/<step>.settings holds VAR=value for each of its variables
# (SETVARS_<step>), written when the step succeeds. A make *given* one of them (command line or environment) with a
# value other than the one the step last ran with runs that step again - and what follows it - instead of "Nothing
# to be done". A variable not given keeps the earlier run: `make collect` after `make search SEARCH_ARGS=...` does not
# redo the search with the defaults. A work dir made before these files existed keeps its steps.
SETVARS_verify  = VERIFY_ARGS SEED BACKEND DEVICE_ID
SETVARS_flops   = SEED BACKEND ACCEPT_UNVERIFIED
SETVARS_collect = COLLECT_ARGS FLUSH_CACHE_MIB PMU SEED BACKEND DEVICE_ID ACCEPT_UNVERIFIED_CASES
SETVARS_probe   = PROBE_ARGS SEED BACKEND DEVICE_ID
SETVARS_search  = SEARCH_ARGS SEED BACKEND DEVICE_ID
streq = $(and $(findstring x$(1)x,x$(2)x),$(findstring x$(2)x,x$(1)x))
settings_given = $(strip $(foreach v,$(SETVARS_$(1)),$(if $(filter command% environment%,$(origin $(v))),$(v))))
settings_was = $(strip $(shell sed -n 's/^$(2)=//p' $(ST)/$(1).settings 2>/dev/null))
settings_changed = $(if $(wildcard $(ST)/$(1).settings),$(strip $(foreach v,$(call settings_given,$(1)),$(if \
  $(call streq,$(call settings_was,$(1),$(v)),$(strip $($(v)))),,$(v)))))
$(foreach s,verify flops collect probe search,$(eval $(ST)/$(s).ok: $(if $(call settings_changed,$(s)),_always)))
# A step's own arguments are sticky: one not given takes the value the step last ran with, so a step re-run because
# something before it changed (`make SEED=1 all` after `make all SEARCH=1 PROBE_ARGS=...`) keeps its PROBE_ARGS
# instead of falling back to the defaults. Give `VAR=` to go back to the default. SEED, BACKEND and DEVICE_ID are
# shared by every step and keep their defaults.
STICKY_verify  = VERIFY_ARGS
STICKY_collect = COLLECT_ARGS FLUSH_CACHE_MIB PMU
STICKY_probe   = PROBE_ARGS
STICKY_search  = SEARCH_ARGS
settings_has = $(shell grep -qs '^$(2)=' $(ST)/$(1).settings && echo y)
$(foreach s,verify collect probe search,$(foreach v,$(STICKY_$(s)),$(if $(filter command% environment%,$(origin \
  $(v))),,$(if $(call settings_has,$(s),$(v)),$(eval $(v) := $(call settings_was,$(s),$(v)))))))

# The search's edges: collect waits for the search (a new search re-collects), flops for the probe (it appends
# cases: flops.py is checked on them too before they are collected) and the search for flops (it ranks the cases by
# flops.py's FLOPs: never by a draft that fails its check, and a changed flops.py redoes the search) with SEARCH=1 -
# and in a work directory where make has run or started that step before (its .state/<step>.ok, .started or
# .settings), and for `make probe` / `make search` themselves (the first `make search` runs the FLOPs check before
# it, so a later collect redoes nothing), so that a step whose stamp was removed since (a hand run with other
# settings than make's, a stop, a failure) stays on make's path: the next make redoes it before the collection, as
# make status says. `make status` is given the same edges (--waits), so
# the two judge one graph. The probe and the search are on make's path together: files of either step keep both
# (a first SEARCH=1 run that stopped at the FLOPs check leaves the probe's files only; the next `make all` without
# SEARCH=1 still searches before it collects).
SEARCH_ON := $(or $(SEARCH),$(filter probe search,$(MAKECMDGOALS)),$(wildcard $(foreach s,probe search,$(ST)/$(s).ok \
  $(ST)/$(s).started $(ST)/$(s).settings)))
SEARCH_EDGES := $(if $(SEARCH_ON),flops:probe collect:search search:flops)
$(foreach e,$(SEARCH_EDGES),$(eval $(ST)/$(firstword $(subst :, ,$(e))).ok: $(ST)/$(lastword $(subst :, ,$(e))).ok))

# the steps in parallel where the graph and the device lock allow (verify | flops | peak, then collect, decompose):
# `all` adds -j$(ALL_JOBS) to this make (GNU make >= 4.3; older ones run one step at a time unless given -j), unless
# a -j was given (on the command line it wins; from an enclosing make, its job server is kept). ALL_JOBS=1: one step
# at a time. One make, no sub-make: a signal to it stops the pipeline (an inner make would have run on). Output is
# not synchronised (make's -O holds a step's whole output until it ends: no progress lines), so lines of the steps
# that overlap (flops beside verify or peak) interleave.
ifneq ($(filter all,$(MAKECMDGOALS)),)
ifeq ($(filter 3.% 4.0% 4.1% 4.2%,$(MAKE_VERSION)),)
ifeq ($(findstring -j,$(shell printenv MAKEFLAGS)),)
MAKEFLAGS += -j$(ALL_JOBS)
endif
endif
endif
all: decompose $(WORK)/report.html ## prepare -> verify + flops (+ peak) -> collect -> decompose -> report.html; SEARCH=1: probe + search before collect; ALL_JOBS=1: one step at a time

clean-work: ## remove $(WORK)
	$(need-op)
	rm -rf $(WORK)

# ---------------------------------------------------------------------------------------------- batch
# make batch BENCH=<level dir> GEN=<generated dir> | ROOT=<dir of op_<Op>_<time> dirs> | REF_ROOT=.. IMPL_ROOT=..
#            | EXAMPLES=zoo   -> every operator's `make ... all` in $(BATCH_OUT)/ops/<op>, summary in $(BATCH_OUT)
# (scripts/mfu_batch.py; README "Batch"). OPS=a,b subset; FORCE=1 redo finished ones; SEARCH=1; KEEP_PROF=0;
# OP_TIMEOUT_S=<s>; DEVICES=0,1 (default: the visible devices); RUNNER=local|ray; COSTS_FROM=<batch_summary.json>
.PHONY: batch
BATCH_OUT    ?= work/batch
ROOT         ?=
EXAMPLES     ?=
OPS          ?=
KEEP_PROF    ?= 1
OP_TIMEOUT_S ?=
DEVICES      ?=
RUNNER       ?= local
COSTS_FROM   ?=
BATCH_ARGS   ?=
BATCH_MAKE   := $(MAKE)
BATCH_SRC = $(if $(BENCH),--bench $(BENCH) --gen $(GEN))$(if $(ROOT), --root $(ROOT))$(strip \
  )$(if $(REF_ROOT), --ref-root $(REF_ROOT) --impl-root $(IMPL_ROOT))$(if $(EXAMPLES), --examples $(EXAMPLES))
batch: ## every operator of BENCH+GEN | ROOT | REF_ROOT+IMPL_ROOT | EXAMPLES=zoo, one worker per device -> $(BATCH_OUT)
	$(PY) $(SCRIPTS)/mfu_batch.py --out $(BATCH_OUT) $(BATCH_SRC) --backend $(BACKEND) --runner $(RUNNER) \
	  --make "$(BATCH_MAKE)" --keep-prof $(KEEP_PROF) $(if $(OPS),--ops $(OPS)) $(if $(FORCE),--force) \
	  $(if $(SEARCH),--search) $(if $(OP_TIMEOUT_S),--op-timeout-s $(OP_TIMEOUT_S)) \
	  $(if $(DEVICES),--devices $(DEVICES)) $(if $(COSTS_FROM),--costs-from $(COSTS_FROM)) $(BATCH_ARGS)
