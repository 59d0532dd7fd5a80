# spark-queue: `make run` and `make test` set up everything they need by themselves.
#
#   make run    start the local Cassandra node if needed, seed 2000 sample orders, run the
#               pipeline job once (orders -> shipments / orders-rejected), print a summary
#   make test   run the whole test suite (starts the local node if no Cassandra answers)
#   make stop   stop the local Cassandra node
#   make lint   ruff and mypy
#
# The virtual environment (.venv) is rebuilt only when pyproject.toml or
# constraints.txt change. PYTHON picks the interpreter it is built from.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BDQ := $(BIN)/bdq
PYTEST_ARGS ?=
RUN_ARGS ?=

.PHONY: run test stop lint venv

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "spark-queue needs Python >= 3.11; '$(PYTHON)' is older: run 'make PYTHON=python3.11 ...'" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# compat: a .pth path entry, so Spark's scan of top-level pyspark_* modules finds pyspark_bdq
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]' --config-settings editable_mode=compat
	@touch $@

run: $(STAMP)
	$(BDQ) cassandra start
	$(BIN)/python jobs/demo.py $(RUN_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

stop: $(STAMP)
	$(BDQ) cassandra stop

lint: $(STAMP)
	$(BIN)/ruff check spark_queue jobs tests notebooks
	$(BIN)/mypy spark_queue jobs
