# Two commands on a fresh machine with Python 3.11:
#   make demo   create .venv, install, run the main job: adapt the bert-A simulator to bert-B
#   make test   create/update .venv with test dependencies, run the whole suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
export MLFLOW_DISABLE_TELEMETRY := true
export TF_ENABLE_ONEDNN_OPTS := 0
export TF_CPP_MIN_LOG_LEVEL := 2

.PHONY: demo test venv venv-ml venv-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,tensorflow,ml]'
	touch $@ $(VENV)/.base $(VENV)/.ml

$(VENV)/.ml: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[ml]'
	touch $@ $(VENV)/.base

venv: $(VENV)/.base
venv-ml: $(VENV)/.ml
venv-test: $(VENV)/.test

demo: venv-ml
	$(BIN)/autosync-transfer adapt --source bert-A --target bert-B
	@echo
	@echo "Look at it in the MLflow UI: $(BIN)/autosync-transfer ui   (then open the printed address)"
	@echo "  Models > autosync-bert-B: the adapted version, its lineage tags (source_model, method, shots),"
	@echo "  held-out metrics and plots (rank_scatter_heldout.png); select two versions > Compare."
	@echo "  $(BIN)/autosync-transfer registry show autosync-bert-B   lists the same in the terminal."

# the suite in JOBS pytest-xdist workers; a test that measures the whole machine (its foreign CPU
# share, a shaped link's rate: marked `exclusive`) runs while no other test does (tests/conftest.py);
# bytecode is written: the test processes and the hundreds of worker processes they start reuse it
JOBS ?= 2
test: venv-test
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n $(JOBS) --dist worksteal

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# regenerate the protobuf modules of the vendored AutoDist schema (needs grpcio-tools; its protoc
# must not be newer than the protobuf runtime that pyproject.toml asks for)
.PHONY: proto
proto:
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. \
		autosync_transfer/strategies/proto/synchronizers.proto \
		autosync_transfer/strategies/proto/strategy.proto
