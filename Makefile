# attnlab: every target sets up what it needs from nothing.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export WANDB_MODE ?= offline
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install train test test-fast lint format bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP) ## create .venv and install attnlab with the dev extra, pinned by constraints.txt

train: $(STAMP) ## train the default small GPT on the embedded corpus, then print a sample (ARGS="model=vit ...")
	$(BIN)/attnlab-train $(ARGS)

# The suite starts hundreds of processes (commands, ranks, fork servers, workers): each reads attnlab's
# and the tests' modules compiled by the first, as Python does by default, even where the environment
# turns bytecode files off (PYTHONDONTWRITEBYTECODE; they go in __pycache__/, which git ignores).
test test-fast: export PYTHONDONTWRITEBYTECODE =

test: $(STAMP) ## the whole test suite (slow cases included), on every core (pytest-xdist)
	$(BIN)/pytest -q -n auto --dist worksteal

test-fast: $(STAMP) ## the suite without the slow end-to-end cases
	$(BIN)/pytest -q -n auto --dist worksteal -m "not slow"

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
	rm -rf $(VENV) outputs multirun wandb .pytest_cache
