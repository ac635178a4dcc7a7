# The two commands of the README: `make demo` and `make test`.
# Each sets up .venv idempotently (re-installs only when pyproject.toml changes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test bench clean

# Spark (elastream.spark, the demo, the spark tests) needs a Java 17+ runtime: install one when
# `java -version` fails, as root with apt-get; otherwise say what to install.
setup: $(STAMP)
	@java -version >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "java not found: installing openjdk-17-jre-headless for Spark"; \
	    apt-get update && { DEBIAN_FRONTEND=noninteractive apt-get install -y openjdk-17-jre-headless \
	      || DEBIAN_FRONTEND=noninteractive apt-get install -y default-jre-headless; }; \
	  else \
	    echo "java not found: Spark needs a Java 17+ runtime (e.g. apt-get install openjdk-17-jre-headless" \
	         "as root); the Spark parts of elastream will fail without it" >&2; \
	  fi; }

$(STAMP): pyproject.toml setup.py $(wildcard src/elastream/*/*.c)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,plot,profile,compare]'
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
