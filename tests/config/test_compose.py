"""Every config option composes against its typed schema; mistakes fail at composition."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from powerbench.config import CONF_DIR, PowerbenchConfig, typed

GROUPS = sorted(p.name for p in Path(CONF_DIR).iterdir() if p.is_dir())
# experiments and tasks are `# @package _global_` files: they set other groups, not a node
GLOBAL = ("experiment", "task")
OPTIONS = [(g, f.stem) for g in GROUPS if g not in GLOBAL
           for f in sorted((Path(CONF_DIR) / g).glob("*.yaml"))]
EXPERIMENTS = sorted(f.stem for f in (Path(CONF_DIR) / "experiment").glob("*.yaml"))
TASKS = sorted(f.stem for f in (Path(CONF_DIR) / "task").glob("*.yaml"))


pytestmark = pytest.mark.usefixtures("hydra_conf")


def test_default_composes():
    cfg = compose(config_name="config")
    assert cfg.model.name == "tiny_relu"
    assert OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(typed(cfg), PowerbenchConfig) and typed(cfg).task.name == "run"


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes(group, option, monkeypatch):
    import torch

    # an option composes with what it needs: an engine a predictor (sparse, flash) and, as
    # the job's machine is checked when typed, a CUDA device (hybrid); a simulator and
    # engine=hybrid a placement (tests/config/test_ranges.py)
    companions = ["predictor=fixed"] if group == "engine" else []
    if group == "simulator" or (group, option) == ("engine", "hybrid"):
        companions += ["hardware=pc_high", "solver=greedy"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = compose(config_name="config", overrides=[f"{group}={option}", *companions])
    node = cfg[group]
    assert node._target_, f"{group}/{option} has no _target_"
    OmegaConf.to_container(node, resolve=True)
    assert type(getattr(typed(cfg), group)).__name__.endswith(("Config", "Task"))


def test_the_experiment_and_task_globs_are_not_empty():
    assert {"fig10", "fig11", "fig12", "fig13"} <= set(EXPERIMENTS) and {"run", "validate", "bench_decode"} <= set(TASKS)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_types(experiment):
    cfg = compose(config_name="config", overrides=[f"experiment={experiment}"],
                  return_hydra_config=True)
    config = typed(compose(config_name="config", overrides=[f"experiment={experiment}"]))
    assert config.name == experiment and config.task.name == "run"
    for key, values in cfg.hydra.sweeper.params.items():  # every swept value composes too
        for value in str(values).split(","):
            point = typed(compose(config_name="config",
                                  overrides=[f"experiment={experiment}", f"{key}={value}"]))
            # a simulated sweep places and simulates; a measured one runs an engine
            assert (point.simulator is not None and point.solver is not None) \
                or point.engine is not None


@pytest.mark.parametrize("task", TASKS)
def test_every_task_composes_and_types(task, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # hybrid-local's engine
    config = typed(compose(config_name="config", overrides=[f"task={task}"]))
    assert config.task.name == task and config.task._target_.startswith("powerbench.tasks.")


@pytest.mark.parametrize("group", [g for g in GROUPS if g not in GLOBAL])
def test_group_yaml_declares_a_schema(group):
    for path in (Path(CONF_DIR) / group).glob("*.yaml"):
        text = path.read_text()
        assert f"/schema/{group}/" in text, f"{path} does not select a typed schema"


def test_unknown_option_lists_valid_choices():
    with pytest.raises(MissingConfigException) as err:
        compose(config_name="config", overrides=["model=tiny_reul"])
    message = str(err.value)
    assert "tiny_relu" in message and "opt_30b" in message


def test_unknown_key_fails():
    with pytest.raises(ConfigCompositionException) as err:
        compose(config_name="config", overrides=["model.d_modle=3"])
    cause = err.value.__cause__
    assert isinstance(cause, ConfigAttributeError | ConfigKeyError)
    assert "d_modle" in str(cause)


def test_wrong_type_fails():
    with pytest.raises(ConfigCompositionException) as err:
        compose(config_name="config", overrides=["bench.new_tokens=many"])
    assert isinstance(err.value.__cause__, ValidationError)


def test_bad_enum_lists_valid_values():
    with pytest.raises(ConfigCompositionException) as err:
        compose(config_name="config", overrides=["model.weight_dtype=fp12"])
    assert "int4" in str(err.value.__cause__)
