# Attention homework kit. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | cksum | cut -d' ' -f1)
export PYTHONPATH := $(CURDIR)
export MPLBACKEND := Agg

SUBMISSIONS ?= build/examples
OUT ?= grades

.DEFAULT_GOAL := help
.PHONY: help install test skeleton test-values check grade bench bench-attention \
        release autograder demo clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  make %-16s %s\n", $$1, $$2}'

install: $(STAMP) ## create .venv with the pinned dependencies (idempotent)

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@rm -f $(VENV)/.installed-* && touch $@

test: install ## run the kit's whole test suite
	$(PY) -m pytest kit_tests

skeleton: install ## regenerate transformer_lm/modeling_attention.py from the reference
	$(PY) -m kit.skeleton

test-values: install ## regenerate the frozen test values from the reference
	$(PY) -m kit.make_test_values

check: install ## student preview: grade transformer_lm/modeling_attention.py on the public cases
	$(PY) -m autograder check $(FILE)

grade: install ## grade every entry of SUBMISSIONS=DIR (or a Gradescope export .zip) into OUT=grades (default: the examples)
	@if [ "$(SUBMISSIONS)" = build/examples ]; then $(PY) -m kit.examples; fi
	$(PY) -m autograder grade --out $(OUT) $(if $(wildcard $(SUBMISSIONS)/*),$(SUBMISSIONS)/*,$(SUBMISSIONS))

bench: install ## seconds per submission (warm workers vs fresh interpreters) and peak memory
	$(PY) -m kit.bench

bench-attention: install ## time stacked vs fused heads at GPT-2 size (ARGS=--small); writes the notebook's chart
	$(PY) -m kit.bench_attention $(ARGS)

release: install ## build dist/student/ and dist/student.zip (leak-scanned, self-graded)
	$(PY) -m kit.release

autograder: install ## build dist/autograder.zip for Gradescope
	$(PY) -m kit.gradescope

demo: install ## build both, grade examples/ (+ reference, skeleton), print a score table
	$(PY) -m kit.demo

clean: ## remove build outputs (keeps .venv)
	rm -rf dist build grades .pytest_cache
