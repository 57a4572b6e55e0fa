"""build_predictors: `_target_` strategies from conf/predictor, caching, metrics."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from planted import D_MODEL, make_profile, planted_layer, planted_loaded, skewed_frequencies

from powerbench.cli import CONF_DIR
from powerbench.config import typed
from powerbench.predictor import PredictorSet, build_predictors, predictor_report
from powerbench.predictor.config import SCHEMAS

FAST = ["train.max_epochs=6", "train.patience=3", "rank=16"]


def _compose(option: str, overrides: list[str] = ()):
    cs = ConfigStore.instance()
    for name, node in SCHEMAS.items():
        cs.store(group="schema/predictor", name=name, node=node)
    with initialize_config_dir(config_dir=str(Path(CONF_DIR) / "predictor"), version_base=None):
        return typed(compose(config_name=option, overrides=list(overrides)))


@pytest.mark.parametrize("option", ["fixed", "adaptive", "oracle", "none"])
def test_every_predictor_yaml_composes_and_locates_its_strategy(option):
    from powerbench.predictor.cached_predictors import make_strategy

    cfg = _compose(option)
    strategy = make_strategy(cfg)
    assert type(strategy).__name__ in cfg._target_
    with pytest.raises(Exception, match="rankk"):
        _compose(option, ["rankk=3"])


def test_fixed_is_cached_and_reported(flat_profile, tmp_path):
    cfg = _compose("fixed", FAST)
    loaded = planted_loaded(2)
    first = build_predictors(cfg, loaded, flat_profile, tmp_path)
    assert isinstance(first, PredictorSet) and first.ranks == [16, 16]
    assert all(t <= 0.0 for t in first.thresholds)  # never above the decision boundary
    assert first.info["cache_hit"] is False
    second = build_predictors(cfg, loaded, flat_profile, tmp_path)
    assert second.info["cache_hit"] is True
    x = torch.randn(4, D_MODEL)
    assert torch.equal(first.predict_mask(0, x), second.predict_mask(0, x))
    # another strategy config, another model or another profile: another entry
    other = build_predictors(_compose("fixed", FAST[:2] + ["rank=8"]), loaded, flat_profile,
                             tmp_path)
    assert other.info["cache_key"] != first.info["cache_key"] and other.ranks == [8, 8]
    skewed = make_profile([planted_layer(0, skewed_frequencies(), n=3000, seed=1),
                           planted_layer(1, skewed_frequencies(), n=3000, seed=2)])
    assert build_predictors(cfg, loaded, skewed, tmp_path).info["cache_hit"] is False

    metrics, files = predictor_report(first, loaded.spec, flat_profile, tmp_path)
    for name in ("predictor_recall", "predictor_precision", "predicted_active_fraction",
                 "predictor_param_bytes", "predictor_param_share", "predictor_train_s"):
        assert math.isfinite(metrics[name]), name
    assert metrics["predictor_param_bytes"] == 2 * first.predictors[0].param_count * 2  # fp16
    header = files[0].read_text().splitlines()[0]
    assert "recall" in header and "predicted_active_fraction" in header
    assert len(files[0].read_text().splitlines()) == 3


def test_corrupt_cache_entry_is_rebuilt(flat_profile, tmp_path):
    cfg = _compose("fixed", FAST)
    loaded = planted_loaded(2)
    pset = build_predictors(cfg, loaded, flat_profile, tmp_path)
    path = tmp_path / "predictors" / f"{pset.info['cache_key']}.pt"
    path.write_bytes(path.read_bytes()[:100])
    rebuilt = build_predictors(cfg, loaded, flat_profile, tmp_path)
    assert rebuilt.info["cache_hit"] is False


def test_profile_of_another_model_shape_is_refused(flat_profile, tmp_path):
    cfg = _compose("fixed", FAST)
    with pytest.raises(ValueError, match="n_layers=3"):
        build_predictors(cfg, planted_loaded(3), flat_profile, tmp_path)


def test_none_builds_nothing_and_reports_dense_bound(flat_profile, tmp_path):
    loaded = planted_loaded(2)
    assert build_predictors(_compose("none"), loaded, flat_profile, tmp_path) is None
    metrics, files = predictor_report(None, loaded.spec, flat_profile, tmp_path)
    assert metrics["predicted_active_fraction"] == 1.0 and files == []
