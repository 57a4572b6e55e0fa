"""The llama.cpp worker process without llama.cpp: a fake runner served by the same
`serve` loop, in a child Python started with `python -c` (no script entry point)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from powerbench.engine.llamacpp import (
    LlamaCppProcess,
    WorkerProcess,
    llamacpp_available,
    serve,
)

FAKE = "llamacpp_fake_worker:fake_worker"


@pytest.fixture
def fake_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))


def test_worker_runs_in_its_own_torch_free_process(fake_path):
    import torch  # noqa: F401 - imported here: the child must still be torch-free

    with WorkerProcess(FAKE, ["ok"], name="fake worker") as worker:
        tokens, timing = worker.generate([3, 4, 5], 3)
        assert tokens[:3] == [5, 4, 3]
        assert tokens[3] == 0  # the child never imported torch
        assert tokens[4] == worker.pid != os.getpid()
        assert timing.step_s == [0.25, 0.25] and timing.decode_tokens_per_s == 4.0
        with pytest.raises(RuntimeError, match="fake worker: ValueError: new_tokens"):
            worker.generate([1], 0)  # an error in the child is raised here
        assert worker.generate([7], 1)[0][0] == 7  # and the worker serves on
    assert worker.proc.returncode == 0  # `quit` ended it


def test_a_runner_that_cannot_start_is_reported(fake_path):
    with pytest.raises(RuntimeError, match="ImportError: no llama.cpp here"):
        WorkerProcess(FAKE, ["fail"], name="fake worker")


def test_bad_target_is_refused():
    with pytest.raises(ValueError, match="module:function"):
        WorkerProcess("powerbench.engine.llamacpp", [])


def test_serve_answers_each_request_line():
    class Runner:
        def generate(self, prompt, new_tokens):
            raise AssertionError("not called")

    out = io.StringIO()
    requests = ['{"cmd": "ping"}\n', '{"cmd": "quit"}\n', '{"cmd": "ping"}\n']
    assert serve(Runner, requests, out) == 0
    assert out.getvalue().splitlines() == ['@@powerbench-llamacpp {"ok": true}'] * 2


@pytest.mark.skipif(llamacpp_available(), reason="llama-cpp-python is installed")
def test_llamacpp_process_needs_llama_cpp_python():
    with pytest.raises(ImportError, match="make llamacpp"):
        LlamaCppProcess("model.gguf", threads=1)
