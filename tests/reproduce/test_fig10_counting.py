"""Fig. 10's alternative counting: (prompt + output tokens) over both phases' time."""

from __future__ import annotations

import pandas as pd
import pytest

from powerbench.reproduce.targets.fig10 import with_prompt_tokens_counted


def test_prompt_and_output_tokens_over_both_phases():
    """P 64, N 8, B 1: prefill 128 tok/s = 0.5 s, 7 decode steps at 14 tok/s = 0.5 s ->
    72 tokens / 1.0 s; N 1: the prompt alone, 65 tokens / 0.5 s."""
    table = pd.DataFrame({
        "prompt_tokens": [64, 64], "new_tokens": [8, 1], "batch_size": [1, 1],
        "powerinfer_prefill_tokens_per_s": [128.0, 128.0],
        "powerinfer_decode_tokens_per_s": [14.0, float("nan")],
        "llamacpp_prefill_tokens_per_s": [64.0, 64.0],
        "llamacpp_decode_tokens_per_s": [7.0, float("nan")]})
    out = with_prompt_tokens_counted(table)
    assert out.powerinfer_prompt_and_output_tokens_per_s.tolist() == pytest.approx([72.0, 130.0])
    assert out.llamacpp_prompt_and_output_tokens_per_s.tolist() == pytest.approx([36.0, 65.0])
