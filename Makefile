# triton-mfu-analyzer: per-operator MFU pipeline. `make` (or `make help`) lists the targets.
#
#   make OP=5_MHABlock all                      a bundled operator (examples/ops; `make examples` lists them)
#   make OP=20_FlashAttentionV2 V=<verify dir> all            layout A (one verify directory / op root)
#   make OP=2_FFN BENCH=<level dir> GEN=<generated dir> all   layout B (paired by the numeric prefix of OP)

SKILL_DIR ?= $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
PY        ?= python3
OP        ?=
V         ?=
BENCH     ?=
GEN       ?=
WORK      ?= work/$(OP)
BACKEND   ?= auto
DEVICE_ID ?= 0
SEED      ?= 0
FORCE     ?=
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
.PHONY: help setup test prepare examples clean-work

VALID_BACKENDS := auto npu cuda cpu
ifeq ($(filter $(BACKEND),$(VALID_BACKENDS)),)
$(error BACKEND=$(BACKEND) is not one of: $(VALID_BACKENDS))
endif

SCRIPTS := $(SKILL_DIR)/scripts

# where step 1 reads the operator from
ifneq ($(V),)
  PREPARE_SRC := --src $(V)
  $(info source: layout A, V=$(V))
else ifneq ($(BENCH),)
  ifeq ($(GEN),)
    $(error BENCH is set but GEN is not: layout B needs both (GEN=<generated-code dir>))
  endif
  OP_ID := $(firstword $(subst _, ,$(notdir $(OP))))
  PREPARE_SRC := --bench $(BENCH) --gen $(GEN) --id $(OP_ID)
  $(info source: layout B, BENCH=$(BENCH) GEN=$(GEN) id=$(OP_ID))
else
  PREPARE_SRC := --example $(OP)
endif

need-op = $(if $(OP),,$(error OP is not set: e.g. make OP=5_MHABlock $@ (make examples lists the bundled ones)))

help: ## show this help
	@echo "triton-mfu-analyzer - usage: make OP=<op> [V=<verify dir> | BENCH=<dir> GEN=<dir>] <target>"
	@echo "variables: OP V BENCH GEN WORK=$(WORK) BACKEND=$(BACKEND) DEVICE_ID=$(DEVICE_ID) SEED=$(SEED) PY=$(PY) SKILL_DIR=$(SKILL_DIR)"
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-12s %s\n", $$1, $$2}'

setup: ## install the Python dependencies (triton only where none is installed; never torch_npu)
	$(PY) -m pip install -r $(SKILL_DIR)/requirements.txt
	@$(PY) -c "import triton" 2>/dev/null && echo "triton already installed: kept (never installed over triton-ascend)" \
	  || $(PY) -m pip install "triton>=3.2"

test: ## run the test suite (CPU-only machines run Triton kernels in the interpreter)
	cd $(SKILL_DIR) && $(PY) -m pytest -q $(PYTEST_ARGS) tests

examples: ## list the bundled operators usable as OP=<name>
	@$(PY) $(SCRIPTS)/prepare_op_dir.py --list-examples

prepare: $(WORK)/prepare.json ## step 1: adapt the operator into $(WORK) (FORCE=1 redoes it, keeping a backup)

$(WORK)/prepare.json:
	$(need-op)
	$(PY) $(SCRIPTS)/prepare_op_dir.py $(PREPARE_SRC) --dst $(WORK) $(if $(FORCE),--force)

clean-work: ## remove $(WORK)
	$(need-op)
	rm -rf $(WORK)
