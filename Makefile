# The two commands of the README: `make demo` and `make test`.
# Each sets up .venv idempotently (re-installs only when pyproject.toml changes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,plot,profile]'
	@touch $@

demo: setup
	$(BIN)/elastream demo

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/elastream bench overhead
	$(BIN)/elastream bench topology --topology chain --threads 1 2 --policy all
	$(BIN)/elastream bench latency

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
