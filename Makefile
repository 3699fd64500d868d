# attnlab: every target sets up what it needs from nothing.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export WANDB_MODE ?= offline
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install train test test-slow test-full test-latest lint format bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP) ## create .venv and install attnlab with the dev extra, pinned by constraints.txt

train: $(STAMP) ## train the default small GPT on the embedded corpus, then print a sample (ARGS="model=vit ...")
	$(BIN)/attnlab-train $(ARGS)

# The suite starts dozens of processes (process contracts, their ranks, workers): each reads attnlab's
# and the tests' modules compiled by the first, as Python does by default, even where the environment
# turns bytecode files off (PYTHONDONTWRITEBYTECODE; they go in __pycache__/, which git ignores).
test test-slow test-full: export PYTHONDONTWRITEBYTECODE =

# The suite in two tiers, as lightning-hydra-template has them: `make test` runs every test but the
# `slow` end-to-end cases (several processes, kills, nodes, long trainings), within minutes on a 2-core
# machine; `make test-slow` runs those; CI runs both (.ci/run), `make test-full` both in one session.
test: $(STAMP) ## the test suite but its slow end-to-end cases, on every core (pytest-xdist); CI also runs test-slow
	$(BIN)/pytest -q -n auto --dist worksteal -m "not slow"

test-slow: $(STAMP) ## only the slow end-to-end cases (multi-process runs, kills, nodes, long trainings)
	$(BIN)/pytest -q -n auto --dist worksteal -m slow

test-full: $(STAMP) ## every test, slow cases included, in one session
	$(BIN)/pytest -q -n auto --dist worksteal

# attnlab as a user installs it (`pip install .`, no constraints.txt: the newest releases pyproject.toml
# allows), in a virtual environment of its own made anew, then the commands' smoke tests: train, eval,
# sample, sweep + report, export. It fails when a new release of a dependency breaks attnlab.
LATEST := .venv-latest
SMOKE  := tests/cli/test_train_families.py tests/cli/test_eval_overrides.py tests/cli/test_sample_explain.py \
          tests/cli/test_report_sweep.py tests/cli/test_export.py

test-latest: export PYTHONDONTWRITEBYTECODE =
test-latest: ## the smoke tests against the newest dependencies pyproject.toml allows (pip install ., no constraints)
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/pip install --quiet --upgrade pip
	$(LATEST)/bin/pip install --quiet torch==2.13.0
	$(LATEST)/bin/pip install --quiet ".[dev]"
	$(LATEST)/bin/pip list --format=freeze | grep -iE '^(hydra-core|omegaconf|pytorch-lightning|torch|transformers|wandb|datasets)=='
	$(LATEST)/bin/pytest -q -n auto --dist worksteal -p no:cacheprovider $(SMOKE)

lint: $(STAMP) ## ruff, then the import contracts of docs/architecture.md (pyproject.toml [tool.importlinter])
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP) ## the benchmark suite: writes benchmarks/results.md and plots
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) $(LATEST) outputs multirun wandb .pytest_cache
