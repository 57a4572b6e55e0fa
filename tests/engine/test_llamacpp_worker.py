"""The llama.cpp worker process without llama.cpp: a fake runner served by the same
`serve` loop, in a child Python started with `python -c` (no script entry point)."""

from __future__ import annotations

import ast
import io
import os
import sys
from pathlib import Path

import pytest

from powerbench.engine import llamacpp
from powerbench.engine.llamacpp import (
    LlamaCppProcess,
    WorkerProcess,
    llamacpp_available,
    serve,
)

FAKE = Path(__file__).with_name("llamacpp_fake_worker.py")


def test_worker_runs_in_its_own_process_and_reports_errors():
    with WorkerProcess(FAKE, "fake_worker", ["ok"], name="fake worker") as worker:
        tokens, timing = worker.generate([3, 4, 5], 3)
        assert tokens == [5, 4, 3, worker.pid] and worker.pid != os.getpid()
        assert timing.step_s == [0.25, 0.25] and timing.decode_tokens_per_s == 4.0
        with pytest.raises(RuntimeError, match="fake worker: ValueError: new_tokens"):
            worker.generate([1], 0)  # an error in the child is raised here
        assert worker.generate([7], 1)[0][0] == 7  # and the worker serves on
    assert worker.proc.returncode == 0  # `quit` ended it


def test_a_runner_that_cannot_start_is_reported():
    with pytest.raises(RuntimeError, match="ImportError: no llama.cpp here"):
        WorkerProcess(FAKE, "fake_worker", ["fail"], name="fake worker")


@pytest.mark.skipif(llamacpp_available(), reason="llama-cpp-python is installed")
def test_the_llamacpp_worker_starts_from_this_file_alone():
    """The real child program: llamacpp.py loaded without its package, llamacpp_worker
    serving; here llama_cpp is missing, which the child reports."""
    with pytest.raises(RuntimeError, match="llama-cpp-python"):
        WorkerProcess(llamacpp.__file__, "llamacpp_worker", ["missing.gguf", 1, 64])
    with pytest.raises(ImportError, match="make llamacpp"):
        LlamaCppProcess("model.gguf", threads=1)  # said before any child starts


def test_llamacpp_module_imports_only_the_standard_library_at_module_level():
    """What lets the child load it alone, without powerbench.engine (torch)."""
    tree = ast.parse(Path(llamacpp.__file__).read_text())
    names = [alias.name for node in tree.body if isinstance(node, ast.Import)
             for alias in node.names]
    names += [node.module for node in tree.body
              if isinstance(node, ast.ImportFrom) and node.module != "__future__"]
    assert names and all(n.split(".")[0] in sys.stdlib_module_names for n in names), names


def test_bad_function_name_is_refused():
    with pytest.raises(ValueError, match="function name"):
        WorkerProcess(FAKE, "fake_worker; import os", [])


def test_serve_answers_each_request_line():
    class Runner:
        def generate(self, prompt, new_tokens):
            raise AssertionError("not called")

    out = io.StringIO()
    requests = ['{"cmd": "ping"}\n', '{"cmd": "quit"}\n', '{"cmd": "ping"}\n']
    assert serve(Runner, requests, out) == 0
    assert out.getvalue().splitlines() == ['@@powerbench-llamacpp {"ok": true}'] * 2
