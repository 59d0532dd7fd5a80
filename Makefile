# spark-queue: `make run` and `make test` set up everything they need by themselves.
#
#   make run    start the local Cassandra node if needed, seed 2000 sample orders, run the
#               pipeline job once (orders -> shipments / orders-rejected), print a summary
#   make test   run the whole test suite (starts the local node if no Cassandra answers)
#   make check  the fast tier: make lint, then every test that needs neither Cassandra
#               nor Spark (under 2 minutes; prints its time)
#   make lint   ruff (lint and format), mypy strict, the import-layer contracts
#   make docs   build the docs site into site/ with mkdocs --strict (executes the
#               walk-through notebook, so it starts the local node if needed)
#   make stop   stop the local Cassandra node
#   make bytecode  compile spark-queue's modules (before a benchmark, after an edit)
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

# The fast tier: tests that need neither Cassandra nor Spark (conftest marks the others).
FAST := not cassandra and not spark and not multinode

.PHONY: run test check lint docs stop venv faketime bytecode

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "spark-queue needs Python >= 3.11; '$(PYTHON)' is older: run 'make PYTHON=python3.11 ...'" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# compat: a .pth path entry, so Spark's scan of top-level pyspark_* modules finds pyspark_bdq
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]' --config-settings editable_mode=compat
	# Spark's Python processes import pyspark from its pyspark.zip: with bytecode in it, each
	# streaming query starts about 0.3 s sooner, and 0.14 s more without Spark's own tests
	# in it (docs/spark.md, "Python start-up")
	env -u SPARK_HOME $(BDQ) spark compile-zip --drop-tests
	@touch $@

# The editable install's own bytecode, as pip writes a wheel's: under
# PYTHONDONTWRITEBYTECODE=1 Python writes none, and every process Spark starts for a
# query compiles spark-queue again (docs/spark.md, "Python start-up"). Only what changed
# is compiled again.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q spark_queue pyspark_bdq.py

run: bytecode
	$(BDQ) cassandra start
	$(BIN)/python jobs/demo.py $(RUN_ARGS)

test: bytecode faketime
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The clock-skew fault level runs the Spark relay under Debian's faketime (libfaketime).
# Installed here when missing (as root, with apt-get); a no-op when it is on PATH.
faketime:
	@command -v faketime >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get install -y -q faketime >/dev/null 2>&1 || \
				{ apt-get update -q >/dev/null && apt-get install -y -q faketime >/dev/null; }; \
		else \
			echo "faketime is missing (apt-get install faketime): the skew test will fail under CI" >&2; \
		fi; }

stop: $(STAMP)
	$(BDQ) cassandra stop

lint: $(STAMP)
	$(BIN)/ruff check spark_queue jobs tests notebooks pyspark_bdq.py
	$(BIN)/ruff format --check spark_queue jobs tests pyspark_bdq.py
	$(BIN)/mypy spark_queue jobs
	$(BIN)/lint-imports

check: bytecode
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory lint && \
	$(BIN)/python -m pytest -m "$(FAST)" $(PYTEST_ARGS); status=$$?; \
	echo "make check: $$(( $$(date +%s) - start )) s"; exit $$status

docs: bytecode
	$(BDQ) cassandra start
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
