"""The shape-only catalog matches the public model sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from powerbench.config import CONF_DIR, group_config
from powerbench.model import FFNKind, ModelSpec, bytes_per_param
from powerbench.model.loading import spec_from_config


def catalog_spec(name: str) -> ModelSpec:
    return spec_from_config(group_config("model", name))


# Published parameter counts (billions); our count ignores biases and layer norms.
@pytest.mark.parametrize(("name", "billions", "tol"), [
    ("opt_6_7b", 6.7, 0.05), ("opt_13b", 12.9, 0.05), ("opt_30b", 30.0, 0.05),
    ("opt_66b", 66.0, 0.05), ("opt_175b", 175.0, 0.05), ("falcon_relu_40b", 41.8, 0.05),
    ("llama_reglu_7b", 6.74, 0.03), ("llama_reglu_13b", 13.0, 0.03),
    ("llama_reglu_70b", 69.0, 0.03), ("turbosparse_mixtral_47b", 46.7, 0.03),
])
def test_parameter_counts(name, billions, tol):
    spec = catalog_spec(name)
    assert spec.total_params / 1e9 == pytest.approx(billions, rel=tol)


def test_neuron_bytes_fp16_and_int4():
    spec = catalog_spec("opt_30b")
    assert spec.ffn_kind is FFNKind.relu and spec.params_per_neuron == 2 * 7168
    assert spec.neuron_bytes("fp16") == 2 * 7168 * 2
    assert spec.neuron_bytes("int4") == pytest.approx(2 * 7168 * 18 / 32)
    assert bytes_per_param("int4") < bytes_per_param("int8") < bytes_per_param("fp16")
    gated = catalog_spec("llama_reglu_70b")
    assert gated.params_per_neuron == 3 * 8192 and gated.n_kv_heads == 8


def test_moe_neurons_and_kv_cache():
    moe = catalog_spec("turbosparse_mixtral_47b")
    assert moe.neurons_per_layer == 8 * 14336 and moe.experts_per_token == 2
    opt = catalog_spec("opt_30b")
    # K and V, 48 layers, 7168 wide, fp16: 1.38 MB per token
    assert opt.kv_cache_bytes(context=1) == 2 * 48 * 7168 * 2


def test_every_paper_model_has_stats():
    for path in (Path(CONF_DIR) / "model").glob("*.yaml"):
        cfg = OmegaConf.load(path)
        if "spec" in cfg:
            spec = catalog_spec(path.stem)
            assert spec.stats is not None and 0 < spec.stats.token_sparsity < 1, path.stem


def test_invalid_spec_is_refused():
    with pytest.raises(ValueError, match="n_layers"):
        ModelSpec("bad", n_layers=0, d_model=8, d_ffn=8, n_heads=1, n_kv_heads=1,
                  ffn_kind="relu")
    with pytest.raises(ValueError):
        ModelSpec("bad", n_layers=1, d_model=8, d_ffn=8, n_heads=1, n_kv_heads=1,
                  ffn_kind="gelu")
