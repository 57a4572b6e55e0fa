"""The hybrid timeline's phase timings and trace on the CPU (sparse_torch standing in for
both devices): every phase is timed once per call, and the wrapped methods are restored."""

from __future__ import annotations

import gzip
import json

import torch

from powerbench.engine.hybrid import HybridFFN
from powerbench.engine.hybrid_cpu import CpuPartRunner
from powerbench.engine.synthetic import synthetic_decoder_weights, trace_profile
from powerbench.measure.hybrid_bench import hybrid_decoder
from powerbench.measure.hybrid_timeline import PHASES, chrome_trace, phase_table, phase_times

from .test_hybrid_bench import SPEC


def _decoder():
    profile = trace_profile(SPEC, SPEC.n_layers, trace_tokens=32)
    weights = synthetic_decoder_weights(SPEC, torch.float32)
    return hybrid_decoder(weights, SPEC, profile, 0.5, gpu_backend="sparse_torch",
                          cpu_backend="sparse_torch")


def test_every_phase_is_timed_once_per_call_and_the_methods_come_back():
    before = {phase: getattr(cls, name) for phase, (cls, name) in PHASES.items()}
    decoder = _decoder()
    ids = torch.randint(0, SPEC.vocab_size, (1, 5), generator=torch.Generator().manual_seed(1))
    result = phase_times(decoder, ids, new_tokens=3, rounds=2, warmups=1)
    calls = 2 * 3 * SPEC.n_layers  # two generations of a prompt pass and two decode steps
    phases = result["phases"]
    assert set(phases) == set(PHASES)
    assert {p: phases[p]["calls"] for p in ("ffn_call", "mask", "gpu_part", "submit", "merge",
                                             "cpu_part", "to_host")} == dict.fromkeys(
        ("ffn_call", "mask", "gpu_part", "submit", "merge", "cpu_part", "to_host"), calls)
    for inner in ("mask", "gpu_part", "submit", "merge"):
        assert phases[inner]["mean_us"] < phases["ffn_call"]["mean_us"]
    assert result["decode_ms_per_token"] > 0
    assert "ffn_call" in phase_table(result)
    assert {phase: getattr(cls, name) for phase, (cls, name) in PHASES.items()} == before
    assert HybridFFN.__call__ is before["ffn_call"] and CpuPartRunner._run is before["cpu_part"]
    decoder.ffn.cpu_runner.close()


def test_the_trace_is_a_gzipped_chrome_trace(tmp_path):
    decoder = _decoder()
    ids = torch.randint(0, SPEC.vocab_size, (1, 4), generator=torch.Generator().manual_seed(2))
    beside = tmp_path / "trace.json"  # a file of the plain name (the phases, say) is kept
    beside.write_text("{}")
    path = chrome_trace(decoder, ids, 2, tmp_path / "trace.json.gz")
    events = json.loads(gzip.open(path).read())["traceEvents"]
    assert any(e.get("name", "").startswith("aten::") for e in events)
    assert beside.read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json", "trace.json.gz"]
    decoder.ffn.cpu_runner.close()
