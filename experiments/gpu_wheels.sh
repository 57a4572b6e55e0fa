#!/bin/bash
# The pure-Python wheels experiments/gpu_checks.sh installs on a lent GPU machine that has
# torch but not Hydra: hydra-core, omegaconf and antlr4-python3-runtime, at the versions of
# this checkout's .venv (make setup), into .whl/ (git-ignored; carry it with the call).
# antlr4-python3-runtime 4.9.3 ships as a source archive only: its wheel is built here.
set -eu
cd "$(dirname "$0")/.."
version() { .venv/bin/python -c "import importlib.metadata as m; print(m.version('$1'))"; }
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
  "hydra-core==$(version hydra-core)" "omegaconf==$(version omegaconf)"
python3 -m pip wheel -q --no-deps -w .whl \
  "antlr4-python3-runtime==$(version antlr4-python3-runtime)"
ls .whl
