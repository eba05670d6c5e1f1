# Two commands on a fresh machine with Python 3.11:
#   make demo   create .venv, install, run the main job
#   make test   create/update .venv with test dependencies, run the whole suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
export MLFLOW_DISABLE_TELEMETRY := true
export TF_ENABLE_ONEDNN_OPTS := 0
export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: demo test venv venv-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,tensorflow,ml]'
	touch $@ $(VENV)/.base

venv: $(VENV)/.base
venv-test: $(VENV)/.test

demo: venv
	$(BIN)/autosync-transfer domains show bert-A
	$(BIN)/autosync-transfer strategies baseline bert-A
	$(BIN)/autosync-transfer strategies sample bert-A -n 5 --seed 0 --estimate

test: venv-test
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
