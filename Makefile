# deltamv: `make demo` and `make test` set everything up themselves.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DELTA_JARS := $(VENV)/delta-jars
CLASSES := $(VENV)/.class-archive
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON ?= $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON ?= $(abspath $(PY))

.PHONY: help setup java postgres compile test test-slow check lint format demo bench kill-test soak clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

java:  ## make sure Java 17+ is on PATH (installs openjdk-17 with apt when missing)
	@bash scripts/ensure-java.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,plot,read,dev]'
	touch $(STAMP)

postgres:  ## make sure PostgreSQL server binaries exist (installs postgresql-15 with apt when missing)
	@bash scripts/ensure-postgres.sh

# delta-spark's jars, fetched once with Maven (docs/delta-spark.md); without Maven or
# Maven Central the script says so in one line and deltamv reads views with delta-rs.
$(DELTA_JARS)/.fetched: $(STAMP) scripts/fetch-delta-jars.sh
	@bash scripts/fetch-delta-jars.sh $(DELTA_JARS) $(PY)

# Spark's driver classes, archived once for a faster start (src/deltamv/class_archive.py);
# when that fails, one line says so and Spark starts without it.
$(CLASSES): $(STAMP) $(DELTA_JARS)/.fetched
	@$(PY) -m deltamv.class_archive $(VENV)/spark-classes.jsa
	@touch $@

# deltamv's own modules compiled to bytecode, again where a source changed: an editable
# install is not compiled by pip, and where PYTHONDONTWRITEBYTECODE is set every process
# would compile them anew at import (0.3 s for a CLI command, 50 ms of a streaming
# query's start in the worker that runs its source).
compile: $(STAMP)
	@$(PY) -m compileall -q src/deltamv

setup: java postgres $(STAMP) compile $(DELTA_JARS)/.fetched $(CLASSES)  ## create .venv, install deltamv and its test tools, fetch the Delta jars, archive Spark's classes

test: setup  ## run the default test suite (20-35 minutes on 2 shared cores)
	$(PY) -m pytest -q --durations=15 $(PYTEST_ARGS)

test-slow: setup  ## also run the slow tests (local-cluster, 2M-row transaction)
	$(PY) -m pytest -q -m 'not long' $(PYTEST_ARGS)

check: setup  ## ruff and mypy
	$(VENV)/bin/ruff check src tests benchmarks jobs
	$(VENV)/bin/ruff format --check src tests benchmarks jobs
	$(VENV)/bin/mypy

format: setup  ## apply ruff's formatting and fixes
	$(VENV)/bin/ruff format src tests benchmarks jobs
	$(VENV)/bin/ruff check --fix src tests benchmarks jobs

demo: setup  ## the account-transfer demo, end to end (writes demo-out/)
	$(PY) -m deltamv.demo $(DEMO_ARGS)

bench: setup  ## quick benchmarks (FULL=1 for the full set); writes benchmarks/results/
	$(PY) benchmarks/run.py $(if $(FULL),--full,)

clean:  ## remove the venv and generated output
	rm -rf $(VENV) demo-out .pytest_cache

kill-test: setup  ## kill the job 100+ times at random, restart, check every version (KILLS=n)
	KILLS=$(or $(KILLS),100) $(PY) -m pytest -q -s -m long tests/faults/test_kill.py -k kill_many -p no:cacheprovider -o addopts='' --timeout=0

soak: setup  ## live simulator + continuous job for SOAK_MINUTES (30); RSS plot in demo-out/soak
	$(PY) -m tests.faults.soak --minutes $(or $(SOAK_MINUTES),30)
