# Two commands do everything on a fresh machine:
#   make verify   set up .venv on first use, then run the main job
#   make test     set up .venv on first use, then run the whole test suite (fast + slow tiers)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# the one locked environment: every extra resolved together (scripts/lock.py; `make lock` remakes it)
LOCK   := requirements.lock
LOCKPY := scripts/lock.py
SOURCES := grpo_identity checks proofs trainer
STAMP  := $(VENV)/.installed
# the real frameworks the checks audit in CI (tests marked `frameworks`) are in the lock, from pyproject's
# `frameworks` extra (pip install 'grpo-identity[frameworks]'): TRL and verl, at the releases their registry rows
# name as tested (`tested` in checks/frameworks/registry.py, the one place a framework is registered). AReaL,
# OpenRLHF, SkyRL and ms-swift are never installed in .venv (flash-attn, or requirements their trainers refuse):
# each is audited from an environment of its release (`grpo-identity audit openrlhf --release RELEASE --set …`,
# checks/calls/releases.py), as are other releases of TRL and verl (`grpo-identity audit trl --release 0.22.0`).
TRANSFORMERS_VERSION := 5.10.4
OUT    ?= out

.PHONY: setup frameworks verify test test-fast lint docs docs-serve bench mutate lock lock-upgrade lock-check fresh-check clean

# Set-up installs only from the lock: the lock is checked first (a dependency changed in pyproject.toml
# without `make lock` stops here, in one line); uv comes at the lock's version from the index; torch is
# the CPU build, fetched by this machine's pip (uv reads no pip configuration) and checked against the
# lock's hash; `uv pip sync` makes .venv exactly the lock, compiled to bytecode (where PYTHONDONTWRITEBYTECODE
# is set, as on CI images, nothing else would: each process would compile torch and the frameworks from source);
# then the project itself, without dependencies.
# pip check cannot see a package that breaks another's import (issue 27: kernels under transformers
# 5.10.4), so every extra is imported too.
$(STAMP): $(LOCK) pyproject.toml constraints.txt Makefile
	@$(PYTHON) $(LOCKPY) check
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-deps "$$($(PYTHON) $(LOCKPY) pin uv)"
	$(BIN)/python $(LOCKPY) torch $(VENV)/wheels
	$(BIN)/uv pip sync -q --python $(BIN)/python --require-hashes --compile-bytecode --find-links $(VENV)/wheels $(LOCK)
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
	$(BIN)/python $(LOCKPY) imports
	touch $(STAMP)

setup: $(STAMP)

# kept for muscle memory: the frameworks are part of the one lock
frameworks: setup

# re-resolve every extra against today's index after changing pyproject.toml or constraints.txt: the locked
# versions are kept where they still resolve (a new extra or pin moves only what it needs); `make lock-upgrade`
# takes today's newest releases instead. Commit requirements.lock with the change that needed it
lock:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-deps "$$($(PYTHON) $(LOCKPY) pin uv)"
	$(BIN)/python $(LOCKPY) lock

lock-upgrade:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-deps "$$($(PYTHON) $(LOCKPY) pin uv)"
	$(BIN)/python $(LOCKPY) lock --upgrade

lock-check:
	@$(PYTHON) $(LOCKPY) check

# not in CI: resolve the extras against today's index in throwaway venvs (and pip's one-step installs of
# the frameworks and trainer extras), import everything, run the fast tests there: the next break, before it bites
fresh-check: setup
	$(BIN)/python $(LOCKPY) fresh --folder build/fresh

verify: setup
	$(BIN)/grpo-identity verify --out $(OUT)/verify

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/typecheck.py

# the project's own modules compiled first (PYTHONDONTWRITEBYTECODE, where set, keeps imports from writing
# bytecode, so each of the suite's hundreds of processes would compile what it imports from source)
test: setup lint
	$(BIN)/python -m compileall -q $(SOURCES)
	$(BIN)/python -m pytest -n auto --dist loadgroup

test-fast: setup
	$(BIN)/python -m compileall -q $(SOURCES)
	$(BIN)/python -m pytest -n auto --dist loadgroup -m "not slow"

# the documentation site, built offline and strictly (a broken link or reference fails it): mkdocs.yml, docs/
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(OUT)/site
	@echo "the site: $(OUT)/site/index.html (search works when served: make docs-serve)"

# the built site over http on 127.0.0.1 (the search box needs a server; everything else reads from disk)
DOCS_PORT ?= 8000
docs-serve: docs
	@echo "serving $(OUT)/site on http://127.0.0.1:$(DOCS_PORT)/ (Ctrl-C ends it)"
	$(BIN)/python -m http.server $(DOCS_PORT) --bind 127.0.0.1 --directory $(OUT)/site

bench: setup
	$(BIN)/python benchmarks/run_all.py

# mutation testing (mutmut is in the lock: the `mutate` extra) of dial.py, closed_forms.py and
# checks/measure/{infer,properties}.py (long; not in CI): kill rate per module and overall, and every surviving
# mutant; see scripts/mutate.py
mutate: setup
	mkdir -p $(OUT)
	$(BIN)/python scripts/mutate.py --json $(OUT)/mutate.json

clean:
	rm -rf $(VENV) build dist *.egg-info $(OUT)
