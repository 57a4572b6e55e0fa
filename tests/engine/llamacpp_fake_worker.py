"""A stand-in for llama.cpp in the worker process (tests/engine/test_llamacpp_worker.py),
loaded alone by the child like powerbench/engine/llamacpp.py: answers `generate` with the
prompt reversed and the child's pid."""

from __future__ import annotations

import os

from powerbench.engine.llamacpp import LlamaCppTiming, serve


class EchoRunner:
    def __init__(self, fail: bool) -> None:
        if fail:
            raise ImportError("no llama.cpp here")

    def generate(self, prompt: list[int], new_tokens: int) -> tuple[list[int], LlamaCppTiming]:
        if new_tokens < 1:
            raise ValueError("new_tokens must be >= 1")
        tokens = [*reversed(prompt), os.getpid()]
        return tokens, LlamaCppTiming(prefill_s=0.5, step_s=[0.25] * (new_tokens - 1))


def fake_worker(argv: list[str]) -> int:
    return serve(lambda: EchoRunner(fail=argv[0] == "fail"))
