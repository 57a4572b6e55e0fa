"""Without CUDA, engine=hybrid and bench-hybrid stop naming what runs instead: every
`group=option` they suggest is an option that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from powerbench.config import CONF_DIR
from powerbench.engine.hybrid import NO_CUDA


def _suggested(message: str) -> list[tuple[str, str]]:
    return re.findall(r"\b(engine|simulator|solver|hardware|predictor)=(\w+)", message)


def _assert_options_exist(message: str) -> None:
    suggested = _suggested(message)
    assert ("simulator", "cost_model") in suggested
    missing = [f"{g}={o}" for g, o in suggested if not (Path(CONF_DIR) / g / f"{o}.yaml").exists()
               and not (g == "engine" and o == "hybrid")]
    assert not missing, f"suggests options that do not exist: {missing}"
    for option in ("sparse_torch", "dense"):  # `engine=sparse_cpu, sparse_torch or dense`
        assert (Path(CONF_DIR) / "engine" / f"{option}.yaml").exists()


def test_engine_hybrid_without_cuda_suggests_real_options():
    _assert_options_exist(NO_CUDA)


def test_bench_hybrid_without_cuda_suggests_real_options(monkeypatch, tmp_path):
    from powerbench.tasks.bench_hybrid import bench_hybrid

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as stopped:
        bench_hybrid(None, None, tmp_path)  # stops before reading the task or the config
    assert "has none" in str(stopped.value.code)
    _assert_options_exist(str(stopped.value.code))
