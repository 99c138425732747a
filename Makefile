# Two commands do everything on a fresh machine:
#   make verify   set up .venv on first use, then run the main job
#   make test     set up .venv on first use, then run the whole test suite (fast + slow tiers)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install -q -c constraints.txt
STAMP  := $(VENV)/.installed
FW     := $(VENV)/.frameworks
# real frameworks the checks audit in CI (tests marked `frameworks`): pyproject's `frameworks` extra
# (pip install 'grpo-identity[frameworks]') pins these releases with their declared requirements so
# that `pip check` passes: verl 0.9.1 wants transformers < 5.11 (TRL 1.16.0 takes >= 4.56.2), and its
# trainer module imports cachetools, uvicorn, fastapi and pillow beyond them; a test checks that the
# extra pins the versions below. Other releases: `grpo-identity audit trl --release 0.22.0` (own environment).
TRL_VERSION  := 1.16.0
VERL_VERSION := 0.9.1
# AReaL is audited in its release environment only (grpo-identity audit areal --release 1.0.4), never in .venv
AREAL_VERSION := 1.0.4
# OpenRLHF requires flash-attn (CUDA) and is never installed here: it is audited from its release
# environment (`grpo-identity audit openrlhf --release $(OPENRLHF_VERSION) --set …`, checks/releases.py)
OPENRLHF_VERSION := 0.11.2
TRANSFORMERS_VERSION := 5.10.4
OUT    ?= out

.PHONY: setup frameworks verify test test-fast lint docs bench mutate clean

$(STAMP): pyproject.toml constraints.txt Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(PIP) torch==2.13.0
	$(PIP) -e '.[all]'
	touch $(STAMP)

$(FW): $(STAMP) constraints.txt pyproject.toml
	$(PIP) -e '.[frameworks]'
	$(BIN)/python -m pip check
	touch $(FW)

frameworks: $(FW)

setup: $(STAMP) $(FW)

verify: setup
	$(BIN)/grpo-identity verify --out $(OUT)/verify

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/typecheck.py

test: setup lint
	$(BIN)/python -m pytest -n auto --dist loadgroup

test-fast: setup
	$(BIN)/python -m pytest -n auto --dist loadgroup -m "not slow"

# the documentation site, built offline and strictly (a broken link or reference fails it): mkdocs.yml, docs/
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(OUT)/site
	@echo "the site: $(OUT)/site/index.html"

bench: setup
	$(BIN)/python benchmarks/run_all.py

# mutation testing of dial.py, closed_forms.py and checks/{infer,properties}.py (long; not in CI):
# kill rate per module and overall, and every surviving mutant; see scripts/mutate.py
mutate: setup
	$(PIP) -e '.[mutate]'
	mkdir -p $(OUT)
	$(BIN)/python scripts/mutate.py --json $(OUT)/mutate.json

clean:
	rm -rf $(VENV) build dist *.egg-info $(OUT)
