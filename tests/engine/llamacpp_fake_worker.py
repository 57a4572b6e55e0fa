"""A stand-in for llama.cpp in the worker process (tests/engine/test_llamacpp_worker.py):
answers `generate` with the prompt reversed, and token 1 when torch got imported."""

from __future__ import annotations

import os
import sys

from powerbench.engine.llamacpp import LlamaCppTiming, serve


class EchoRunner:
    def __init__(self, fail: bool) -> None:
        if fail:
            raise ImportError("no llama.cpp here")

    def generate(self, prompt: list[int], new_tokens: int) -> tuple[list[int], LlamaCppTiming]:
        if new_tokens < 1:
            raise ValueError("new_tokens must be >= 1")
        torch_loaded = int("torch" in sys.modules)
        tokens = [*reversed(prompt), torch_loaded, os.getpid()][:new_tokens + 2]
        return tokens, LlamaCppTiming(prefill_s=0.5, step_s=[0.25] * (new_tokens - 1))


def fake_worker(argv: list[str]) -> int:
    return serve(lambda: EchoRunner(fail=argv[0] == "fail"))
