# Tidemark: the two commands of the README quick start, and the checks they build on.
# `demo` needs Python 3.11, Java 17 and Maven on the machine; `test` also Go (helm, kubeconform)
# and apt-get (Prometheus). Everything else is installed here.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
# The pinned versions of everything installed (scripts/freeze-constraints.py).
CONSTRAINTS := constraints.txt constraints-dev.txt
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml $(CONSTRAINTS) | sha1sum | cut -c1-12)
DEMO_SECONDS ?= 45
PYTEST_ARGS ?=

.PHONY: demo test lint typecheck setup kafka schema-registry s3proxy tools constraints clean

# pip's output (setuptools' editable-install notices among it) goes to $(PIP_LOG), shown
# only when the install fails.
PIP_LOG := $(VENV)/pip-install.log

# The virtual environment, reinstalled only when pyproject.toml or the constraints change:
# every distribution at the version the constraints pin, so a fresh clone installs what the
# tests ran with, not whatever was released since.
$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing Tidemark and its dependencies into $(VENV) (first run only)..."
	@{ $(BIN)/pip install --upgrade pip \
		&& $(BIN)/pip install $(addprefix -c ,$(CONSTRAINTS)) -e '.[dev]'; } \
		> $(PIP_LOG) 2>&1 || { cat $(PIP_LOG); echo "pip install failed (log: $(PIP_LOG))"; exit 1; }
	@rm -f $(VENV)/.installed-*
	@touch $@

# Move the pins: install .[dev] without constraints (the newest versions pyproject.toml
# allows) into a throwaway environment and rewrite both files from it; the next `make`
# reinstalls $(VENV) with them. Commit the two files with the change that needs them.
CONSTRAINTS_VENV := .cache/constraints-venv
constraints:
	@rm -rf $(CONSTRAINTS_VENV) && $(PYTHON) -m venv $(CONSTRAINTS_VENV)
	@echo "resolving .[dev] anew in $(CONSTRAINTS_VENV)..."
	@{ $(CONSTRAINTS_VENV)/bin/pip install --upgrade pip \
		&& $(CONSTRAINTS_VENV)/bin/pip install '.[dev]'; } > $(CONSTRAINTS_VENV).log 2>&1 \
		|| { cat $(CONSTRAINTS_VENV).log; echo "pip install failed"; exit 1; }
	@$(CONSTRAINTS_VENV)/bin/python scripts/freeze-constraints.py
	@rm -rf $(CONSTRAINTS_VENV) $(CONSTRAINTS_VENV).log
	@git diff --stat -- $(CONSTRAINTS) || true

setup: $(STAMP) kafka schema-registry s3proxy

kafka:
	@bash scripts/fetch-kafka.sh

schema-registry:
	@bash scripts/fetch-schema-registry.sh

# S3Proxy for the tests' s3a:// checkpoints, and Spark's s3a:// filesystem (hadoop-aws).
s3proxy: $(STAMP)
	@bash scripts/fetch-s3proxy.sh

tools:
	@bash scripts/install-prometheus.sh
	@bash scripts/install-k8s-tools.sh

# The example pipeline end to end: local Kafka broker, local Spark, generated events.
# PROGRAM=pipelines/<name>.sql runs that program instead, on records generated for its tables.
demo: setup
	@$(BIN)/tidemark demo --duration-seconds $(DEMO_SECONDS) $(if $(PROGRAM),--program $(PROGRAM))

# Unit and property tests first (fast), then the end-to-end tests (real broker and Spark).
test: setup tools
	@bash scripts/run-tests.sh $(PYTEST_ARGS)

lint: $(STAMP)
	@$(BIN)/ruff check app tests loadtests
	@$(BIN)/mypy app

typecheck: $(STAMP)
	@$(BIN)/mypy app

clean:
	rm -rf $(VENV) .cache var .pytest_cache .mypy_cache .ruff_cache
