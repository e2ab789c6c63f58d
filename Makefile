# triton-mfu-analyzer: per-operator MFU pipeline. `make` (or `make help`) lists the targets.
#
#   make OP=5_MHABlock all                      a bundled operator (examples/ops; `make examples` lists them)
#   make OP=20_FlashAttentionV2 V=<verify dir> all            layout A (one verify directory / op root;
#                                                              ITER=<n>, VARIANT=baseline pick another copy)
#   make OP=2_FFN BENCH=<level dir> GEN=<generated dir> all   layout B (paired by the numeric prefix of OP)
#   make OP=static_shape/matmul/matmul_relu REF_ROOT=<bench> IMPL_ROOT=<impl root> all
#                                                              layout C (paired by the relative path OP)

SKILL_DIR ?= $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
PY        ?= python3
OP        ?=
V         ?=
BENCH     ?=
GEN       ?=
REF_ROOT  ?=
IMPL_ROOT ?=
WORK      ?= work/$(patsubst %.py,%,$(OP))
BACKEND   ?= auto
DEVICE_ID ?= 0
SEED      ?= 0
ITER      ?=
VARIANT   ?=
FORCE     ?=
PYTEST_ARGS ?=
COLLECT_ARGS ?=

.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
.PHONY: help setup test prepare verify flops collect peak decompose all examples clean-work

VALID_BACKENDS := auto npu cuda cpu
ifeq ($(filter $(BACKEND),$(VALID_BACKENDS)),)
$(error BACKEND=$(BACKEND) is not one of: $(VALID_BACKENDS))
endif

SCRIPTS := $(SKILL_DIR)/scripts

# where step 1 reads the operator from
ifneq ($(V),)
  PREPARE_SRC := --src $(V) $(if $(ITER),--iter $(ITER)) $(if $(VARIANT),--variant $(VARIANT))
  $(info source: layout A, V=$(V))
else ifneq ($(BENCH),)
  ifeq ($(GEN),)
    $(error BENCH is set but GEN is not: layout B needs both (GEN=<generated-code dir>))
  endif
  OP_ID := $(firstword $(subst _, ,$(notdir $(OP))))
  PREPARE_SRC := --bench $(BENCH) --gen $(GEN) --id $(OP_ID)
  $(info source: layout B, BENCH=$(BENCH) GEN=$(GEN) id=$(OP_ID))
else ifneq ($(REF_ROOT)$(IMPL_ROOT),)
  ifeq ($(REF_ROOT),)
    $(error IMPL_ROOT is set but REF_ROOT is not: layout C needs both (REF_ROOT=<reference tree root>))
  endif
  ifeq ($(IMPL_ROOT),)
    $(error REF_ROOT is set but IMPL_ROOT is not: layout C needs both (IMPL_ROOT=<implementation tree root>))
  endif
  PREPARE_SRC := --ref-root $(REF_ROOT) --impl-root $(IMPL_ROOT) --id $(OP)
  $(info source: layout C, REF_ROOT=$(REF_ROOT) IMPL_ROOT=$(IMPL_ROOT) path=$(OP))
else
  PREPARE_SRC := --example $(OP)
endif

need-op = $(if $(OP),,$(error OP is not set: e.g. make OP=5_MHABlock $@ (make examples lists the bundled ones)))

help: ## show this help
	@echo "triton-mfu-analyzer - usage: make OP=<op> [V=<verify dir> | BENCH=<dir> GEN=<dir> | REF_ROOT=<dir> IMPL_ROOT=<dir>] <target>"
	@echo "variables: OP V BENCH GEN REF_ROOT IMPL_ROOT WORK=$(WORK) BACKEND=$(BACKEND) DEVICE_ID=$(DEVICE_ID) SEED=$(SEED) PY=$(PY) SKILL_DIR=$(SKILL_DIR)"
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-12s %s\n", $$1, $$2}'

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

test: ## run the test suite (CPU-only machines run Triton kernels in the interpreter)
	cd $(SKILL_DIR) && $(PY) -m pytest -q $(PYTEST_ARGS) tests

examples: ## list the bundled operators usable as OP=<name>
	@$(PY) $(SCRIPTS)/prepare_op_dir.py --list-examples

prepare: $(WORK)/prepare.json ## step 1: adapt the operator into $(WORK) (FORCE=1 redoes it, keeping a backup)

# the sources are prerequisites: an edited reference/implementation/case file redoes step 1 (the old work dir
# is kept as <work>.bak-<time>) and everything after it
ifneq ($(OP),)
PREPARE_SOURCES := $(shell $(PY) $(SCRIPTS)/prepare_op_dir.py $(PREPARE_SRC) --list-sources 2>/dev/null)
endif
.PHONY: _always
$(WORK)/prepare.json: $(PREPARE_SOURCES) $(if $(FORCE),_always)
	$(need-op)
	$(PY) $(SCRIPTS)/prepare_op_dir.py $(PREPARE_SRC) --dst $(WORK) $(if $(or $(FORCE),$(wildcard $@)),--force)

verify: $(WORK)/verify.json ## check ModelNew against Model per case before anything is timed (collect needs it)

$(WORK)/verify.json: $(WORK)/prepare.json $(WORK)/model_new.py
	$(PY) $(SCRIPTS)/verify_op.py --op-dir $(WORK) --backend $(BACKEND) --device $(DEVICE_ID) --seed $(SEED)

flops: $(WORK)/flops_check.json ## step 3: draft flops.py when absent (review it!), then check it against the tracer

# order-only: an existing (reviewed) flops.py is never regenerated
$(WORK)/flops.py: | $(WORK)/prepare.json
	@if [ -f $@ ]; then echo "$@: shipped with the operator, kept"; else \
	  $(PY) $(SCRIPTS)/flops_generator.py --model $(WORK)/model.py --cases $(WORK)/model.json -o $@; fi

$(WORK)/flops_check.json: $(WORK)/flops.py $(WORK)/model.py
	$(PY) $(SCRIPTS)/check_flops.py --op-dir $(WORK) --backend $(BACKEND)

collect: $(WORK)/performance.json ## step 4: kernel times of the top-3 cases by FLOPs (raw profiles kept)

$(WORK)/performance.json: $(WORK)/flops_check.json $(WORK)/verify.json $(WORK)/model_new.py
	cd $(WORK) && $(PY) $(SCRIPTS)/ops_profiling/msprof_perf_summary.py --quick --mfu --impl asc --output-dir . \
	  --keep-prof . --backend $(BACKEND) --device $(DEVICE_ID) --seed $(SEED) $(COLLECT_ARGS)

peak: $(WORK)/peak.json ## step 5: measured per-dtype GEMM peaks and bandwidth (cached per device)

$(WORK)/peak.json: | $(WORK)/prepare.json
	$(PY) $(SCRIPTS)/peak_calib.py -o $@ --backend $(BACKEND) --device $(DEVICE_ID)

decompose: $(WORK)/mfu_decompose.json ## step 6: per-case and per-kernel-part MFU table

$(WORK)/mfu_decompose.json: $(WORK)/performance.json $(WORK)/peak.json
	$(PY) $(SCRIPTS)/mfu_decompose.py --op-dir $(WORK) --peak-json $(WORK)/peak.json --plot

all: decompose ## prepare -> verify + flops -> collect -> peak -> decompose

clean-work: ## remove $(WORK)
	$(need-op)
	rm -rf $(WORK)
