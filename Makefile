# Two commands do everything on a fresh machine:
#   make verify   set up .venv on first use, then run the main job
#   make test     set up .venv on first use, then run the whole test suite (fast + slow tiers)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install -q -c constraints.txt
STAMP  := $(VENV)/.installed
OUT    ?= out

.PHONY: setup verify test test-fast bench clean

$(STAMP): pyproject.toml constraints.txt Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(PIP) torch==2.13.0
	$(PIP) -e '.[all]'
	touch $(STAMP)

setup: $(STAMP)

verify: setup
	$(BIN)/grpo-identity closed-forms --table group-size
	$(BIN)/grpo-identity closed-forms --G 8 --p 0.05

test: setup
	$(BIN)/python -m pytest

test-fast: setup
	$(BIN)/python -m pytest -m "not slow"

bench: setup
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info $(OUT)
