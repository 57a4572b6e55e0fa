"""experiments/bench_gpu.py runs where only torch is installed: with Hydra, omegaconf,
MLflow and cvxpy made unimportable, `operators` measures and `hybrid --no-simulate` gets as
far as the GPU check (this machine has none) with every import it needs done."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from powerbench.paths import repo_root

BLOCKED = ("hydra", "omegaconf", "mlflow", "cvxpy")
SCRIPT = repo_root() / "experiments" / "bench_gpu.py"
# a bare interpreter whose import of any BLOCKED package fails, running the script as __main__
RUN = f"""
import runpy, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError("blocked on a torch-only machine: " + name)
sys.meta_path.insert(0, Block())
sys.argv = [{str(SCRIPT)!r}, *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True,
                          timeout=300)


def test_operators_runs_without_hydra_omegaconf_mlflow_cvxpy(tmp_path):
    done = run_script("operators", "--shapes", "64x256", "--dtypes", "fp32", "--batches", "1",
                      "--sparsities", "0.5", "--ops", "row", "--backends", "sparse_torch",
                      "--no-plot", "--out-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "operators_cpu" / "operators.csv").exists()
    assert "load average" in done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU stop")
def test_hybrid_imports_without_hydra_and_stops_without_a_gpu(tmp_path):
    done = run_script("hybrid", "--no-simulate", "--model", "opt_6_7b", "--out-dir",
                      str(tmp_path))
    assert done.returncode != 0
    assert "needs a CUDA GPU" in done.stderr, done.stderr
    assert "opt_6_7b: 32 layers, d_model 4096, d_ffn 16384" in done.stderr  # spec built
    assert "blocked" not in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU stop")
def test_timeline_imports_without_hydra_and_stops_without_a_gpu(tmp_path):
    done = run_script("timeline", "--layers", "1", "--out-dir", str(tmp_path))
    assert done.returncode != 0
    assert "timeline needs a CUDA GPU" in done.stderr, done.stderr
    assert "blocked" not in done.stderr


def test_yaml_spec_is_the_composed_one():
    """The script's spec (model yaml read with PyYAML) equals the library's (Hydra)."""
    import runpy

    from powerbench.config import group_config
    from powerbench.model.loading import spec_from_config

    script = runpy.run_path(str(SCRIPT))
    for name in ("opt_6_7b", "llama_reglu_13b", "opt_1_3b"):
        assert script["model_spec"](name) == spec_from_config(group_config("model", name))


def test_the_hybrid_twin_needs_no_hydra():
    """The hybrid rows' simulated twins (cost model, placements, profile) on the CPU, with
    the same packages unimportable (sparse_torch standing in for both devices)."""
    code = RUN.split("sys.argv =")[0] + """
import torch
from powerbench.engine.synthetic import synthetic_decoder_weights, trace_profile
from powerbench.measure.hybrid_bench import HybridBenchConfig, measure
from powerbench.model.spec import ModelSpec, SparsityStats
from tests.simulator.factories import make_hardware
spec = ModelSpec(name="toy", n_layers=2, d_model=64, d_ffn=256, n_heads=4, n_kv_heads=4,
                 ffn_kind="relu", vocab_size=97, max_positions=128,
                 stats=SparsityStats(token_sparsity=0.9))
cfg = HybridBenchConfig(layers=2, gpu_ffn_shares=(0.5,), rounds=1, new_tokens=3,
                        prompt_tokens=4, cpu_threads=1)
rows = measure(synthetic_decoder_weights(spec, torch.float32), spec,
               trace_profile(spec, 2, trace_tokens=32), cfg, hardware=make_hardware(),
               gpu_backend="sparse_torch", cpu_backend="sparse_torch")
print("twins", [r["sim_decode_tokens_per_s"] > 0 for r in rows])
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=repo_root())
    assert done.returncode == 0, done.stderr
    assert "twins [True, True, True, True, True]" in done.stdout  # inline row too
