"""bench-decode's predictors are typed configs Hydra composes from conf/predictor (the task
yaml's defaults list), picked by name; an unknown name lists the composed ones."""

from __future__ import annotations

import pytest

from powerbench.config import load_config
from powerbench.predictor.config import FixedConfig, OracleConfig
from powerbench.tasks.bench_decode import chosen_predictors


def test_predictors_are_composed_and_picked_by_name():
    cfg = load_config(["task=bench_decode", "task.predictors=[oracle,fixed]", "task.unfused=null",
                       "task.predictor_configs.fixed.rank=8"])
    chosen = chosen_predictors(cfg.task, cfg)
    assert list(chosen) == ["fixed", "oracle"]
    assert isinstance(chosen["fixed"], FixedConfig) and chosen["fixed"].rank == 8
    assert isinstance(chosen["oracle"], OracleConfig)


def test_the_experiments_own_predictor_wins_for_its_name():
    cfg = load_config(["task=bench_decode", "task.predictors=[fixed]", "task.unfused=null",
                       "predictor=fixed", "predictor.rank=16"])
    assert chosen_predictors(cfg.task, cfg)["fixed"].rank == 16


def test_an_unknown_predictor_names_the_valid_ones():
    cfg = load_config(["task=bench_decode", "task.predictors=[nope]"])
    with pytest.raises(ValueError, match=r"\['nope'\].*valid: \['adaptive', 'fixed', 'oracle', "
                                         r"'threshold'\]"):
        chosen_predictors(cfg.task, cfg)


def test_task_models_are_typed_model_configs():
    task = load_config(["task=bench_decode", "model@task.synthetic_model=opt_6_7b",
                        "task.synthetic_model.spec.d_model=64"]).task
    assert task.synthetic_model.name == "opt_6_7b" and task.synthetic_model.spec.d_model == 64
    flash = load_config(["task=bench_flash", "~model@task.sparser_model"]).task
    assert flash.model.name == "llama_reglu_13b" and flash.sparser_model is None
    assert flash.decode_model.name == flash.ablation_model.name == "opt_1_3b"
    overlap = load_config(["task=constants"]).task.overlap_models
    assert [m.name for m in overlap.values()] == ["tiny_relu", "smollm2_135m"]
