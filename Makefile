# The two commands: `make run` and `make test`. Both create .venv on first use.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The hubs are unreachable on the reference machines: fail fast instead of retrying.
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

.PHONY: setup run test lint clean llamacpp

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	# torch pinned: 2.13.0 is a CPU build on local disk; an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(OFFLINE) $(VENV)/bin/powerbench $(ARGS)

test: $(STAMP)
	$(OFFLINE) $(VENV)/bin/ruff check powerbench tests experiments
	$(OFFLINE) $(VENV)/bin/pytest -q $(PYTEST_ARGS)

# Optional llama.cpp peer for experiments/smollm2_sparsity.py (compiles llama.cpp: minutes).
llamacpp: $(STAMP)
	CMAKE_ARGS="-DGGML_NATIVE=ON" $(PY) -m pip install -q -e '.[llamacpp]'

lint: $(STAMP)
	$(VENV)/bin/ruff check powerbench tests experiments

clean:
	rm -rf $(VENV) .cache outputs multirun
