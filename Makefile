# Homework kit (the attention homework by default; HOMEWORK=DIR another). `make help` lists the targets.
#
# `make install` creates .venv with requirements.txt (and the tests' own,
# requirements-test.txt) through
# kit/install_deps.py: torch alone from the PyTorch CPU index on Linux
# (TORCH_INDEX; falls back fast to the default index if unreachable;
# TORCH_INDEX= skips it), everything else from the default index. It needs
# Python >= 3.11 (PYTHON=python3.11 to pick one). PY=/path/to/python uses an
# interpreter that already has the packages: nothing is installed.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
ifeq ($(origin PY),undefined)
PY := $(VENV)/bin/python
SETUP := install
else
SETUP := python-version
endif
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-test.txt 2>/dev/null | cksum | cut -d' ' -f1)
export PYTHONPATH := $(CURDIR)
# The homework in use: a folder holding homework.toml (empty: this one).
HOMEWORK ?=
export HOMEWORK
export MPLBACKEND := Agg

SUBMISSIONS ?= build/examples
OUT ?= grades

.DEFAULT_GOAL := help
.PHONY: help install python-version fresh-values test test-all test-faults test-rubric-change test-fresh generate build-notebook facts skeleton mistakes test-values check grade term \
        bench bench-attention release autograder demo clean fresh-all

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  make %-19s %s\n", $$1, $$2}'

install: $(STAMP) ## create .venv with the pinned dependencies (idempotent)

$(STAMP): requirements.txt requirements-test.txt
	$(PYTHON) kit/system_deps.py --check
	$(PYTHON) kit/install_deps.py --venv $(VENV) -r requirements.txt \
	  --torch-index "$(TORCH_INDEX)"
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check \
	  -r requirements-test.txt
	$(VENV)/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	@rm -f $(VENV)/.installed-* && touch $@

python-version: # with PY=: stop at once unless it is Python >= 3.11
	@$(PY) kit/install_deps.py --check

fresh-values: $(SETUP) # stop if test_values/ or the shipped mistakes are older than what generates them
	@$(PY) -m kit.generate --check test-values mistakes >/dev/null   # no torch

fresh-all: $(SETUP) # stop if any generated file is older than what generates it (the releases ship the notebook, facts and questions too)
	@$(PY) -m kit.generate --check >/dev/null

# Test processes: one more than the cores (the end-to-end tests wait on
# subprocesses); one file per process (--dist loadfile) so that a module's
# shared fixture (a graded batch, a built release) is built once; the
# slowest files of the last run first (kit_tests/file_seconds.py orders
# them: xdist's own reordering is off).
TEST_JOBS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))
PYTEST_PARALLEL = -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder

test: $(SETUP) ## the quick suite: everything but the end-to-end tests, in parallel (pytest prints its time)
	$(PY) -m pytest kit_tests $(PYTEST_PARALLEL) -m "not e2e"

test-all: $(SETUP) ## the whole suite, end-to-end tests included (CI runs this)
	$(PY) -m pytest kit_tests $(PYTEST_PARALLEL)

test-faults: $(SETUP) ## the fault-injection suite alone (kills, full or unwritable OUT...; part of test-all)
	$(PY) -m pytest kit_tests/faults $(PYTEST_PARALLEL)

test-rubric-change: $(SETUP) ## in a temp copy: give rubric item ITEM (default 2.2) one point more, make generate, make test; must stay green
	$(PY) -m kit.generate.rubric_change $(if $(ITEM),--item $(ITEM))

.PHONY: test-add-task
test-add-task: $(SETUP) ## in a temp copy: add a task (4.1) and a question (Q6) by docs/architecture.md's files alone, make generate, grade, test; must stay green
	$(PY) -m kit.add_task

test-fresh: $(SETUP) ## as root: the README's quick start and suite on a minimal Debian, as root and as a user, timed (ARGS=--quick-start-only)
	$(PY) -m kit.machine.fresh_machine $(ARGS)

# The generators are one list (kit/generate/__init__.py); each target below
# runs one of them. `python -m kit.generate --check` lists what is stale.
generate: $(SETUP) ## after changing the reference, rubric, cases, mistakes or notebook source: regenerate everything derived from them
	$(PY) -m kit.generate

build-notebook: $(SETUP) ## rebuild the notebook master (and its questions.toml) from its source ([notebook] in homework.toml) and the rubric
	$(PY) -m kit.generate build-notebook

facts: $(SETUP) ## rewrite the rubric's facts blocks in the homework's documents (README.md, the student README, ...: python -m kit.generate --list)
	$(PY) -m kit.generate facts

skeleton: $(SETUP) ## regenerate the student module ([module] file in homework.toml) from the reference
	$(PY) -m kit.generate skeleton

mistakes: $(SETUP) ## write the shipped autograder/mistakes.toml from kit/variants/mistakes.toml
	$(PY) -m kit.generate mistakes

test-values: $(SETUP) ## regenerate the frozen test values from the reference
	$(PY) -m kit.generate test-values

.PHONY: new-homework
new-homework: $(SETUP) ## write a new homework (layer norm + softmax classifier, from kit/templates/) into DIR=path, anywhere (NAME=id); then make generate HOMEWORK=DIR
	$(PY) -m kit new-homework "$(DIR)" $(if $(NAME),--name $(NAME))

.PHONY: new-edition
new-edition: $(SETUP) ## next year's hidden values: EDITION=2025 (or SEED=n) redraws every hidden case's seed and sizes, regenerates the values, reports what stays equal (PUBLIC=1: the public seeds too)
	$(PY) -m kit.generate.new_edition $(if $(EDITION),--edition "$(EDITION)") $(if $(SEED),--seed $(SEED)) $(if $(PUBLIC),--public)

check: $(SETUP) fresh-values ## student preview: grade the student module ([module] file; FILE=other.py: another file) on the public cases
	$(PY) -m autograder check $(FILE)

# A folder's entries are globbed by the shell when the grading line runs:
# make expands a recipe before its first line, when the examples that line
# writes do not exist yet on a first run. No entries: the path itself.
grade: $(SETUP) fresh-values ## grade every entry of SUBMISSIONS=DIR (or a Gradescope export .zip) into OUT=grades (default: the examples); COMPARE=OLD_OUT writes OUT/regrade.md; COURSE=DIR: the course folder (default course/); NEW_VALUES=1: regrade an OUT graded with other test values
	@if [ "$(SUBMISSIONS)" = build/examples ]; then $(PY) -m kit.corpus.examples; fi
	@shopt -s nullglob; paths=("$(SUBMISSIONS)"/*); \
	echo "$(PY) -m autograder grade --out $(OUT) $(if $(COMPARE),--compare $(COMPARE) )$(if $(COURSE),--course $(COURSE) )$(if $(NEW_VALUES),--new-values )$(SUBMISSIONS)$${paths:+/*}"; \
	$(PY) -m autograder grade --out $(OUT) $(if $(COMPARE),--compare $(COMPARE)) $(if $(COURSE),--course $(COURSE)) $(if $(NEW_VALUES),--new-values) "$${paths[@]:-$(SUBMISSIONS)}"

term: $(SETUP) ## apply the course folder (COURSE=DIR, default course/) to the graded folder OUT=grades again, without grading
	$(PY) -m autograder term $(OUT) $(if $(COURSE),--course $(COURSE))

bench: $(SETUP) ## seconds per submission (warm workers vs fresh interpreters) and peak memory
	$(PY) -m kit.machine.bench

bench-attention: $(SETUP) ## time stacked vs fused heads at GPT-2 size and write the notebook's chart (ARGS=--small: a quick run, charted under build/)
	$(PY) -m kit.machine.bench_attention $(ARGS)

release: $(SETUP) fresh-all ## build dist/student/ and dist/student.zip (another HOMEWORK: dist/NAME/...; leak-scanned, self-graded)
	$(PY) -m kit release

autograder: $(SETUP) fresh-all ## build dist/autograder.zip for Gradescope (another HOMEWORK: dist/NAME/autograder.zip)
	$(PY) -m kit autograder

demo: $(SETUP) fresh-all ## build both, grade the examples (kit/variants/examples.toml; + reference, skeleton), print a score table
	$(PY) -m kit.release.demo

clean: ## remove build outputs (keeps .venv)
	rm -rf dist build grades .pytest_cache
