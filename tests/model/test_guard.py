"""NaN/inf guard (issue 28): NaN weights in a cached checkpoint, or activations and logits
that stop being finite, fail the run naming the layer and the stage (and the run's
`failure` tag says why), instead of finishing with a NaN perplexity MLflow drops."""

from __future__ import annotations

import copy
import math
import shutil

import mlflow
import pytest
import torch
from safetensors.torch import load_file, save_file

from powerbench.cache import ArtifactCache
from powerbench.model.guard import NonFiniteError, check_finite_weights, finite_guard
from powerbench.tracking.tracker import FAILURE_TAG


def _ids(tiny_model) -> torch.Tensor:
    return torch.tensor([tiny_model.tokenizer("hello there, how are you")["input_ids"]])


def test_nan_weights_in_a_cached_checkpoint_fail_the_run_naming_layer_and_stage(
        run_cli, tiny_model, tiny_cache, tiny_overrides, tmp_path, capsys):
    cache = tmp_path / "cache"
    shutil.copytree(tiny_cache, cache)
    directory = cache / tiny_model.directory.relative_to(tiny_cache)
    weights = load_file(directory / "model.safetensors")
    name = next(k for k in weights if "layers.1.fc1.weight" in k)
    weights[name][0, 0] = float("nan")
    entries = ArtifactCache(directory, suffix="")  # checksum updated: the cache trusts it
    entries.store("model.safetensors", lambda p: save_file(weights, str(p)))
    overrides = [o for o in tiny_overrides if not o.startswith("cache_dir=")]
    with pytest.raises(SystemExit):
        run_cli([*overrides, f"cache_dir={cache}", "tracking.experiment=nan"])
    err = capsys.readouterr().err
    assert "model stage: NaN in the weights of layer" in err and "layers.1.fc1.weight" in err
    mlflow.set_tracking_uri(run_cli.store)
    run = mlflow.search_runs(experiment_names=["nan"]).iloc[0]
    assert run["status"] == "FAILED"
    assert run[f"tags.{FAILURE_TAG}"].startswith("NonFiniteError: model stage: NaN")
    assert math.isnan(run.get("metrics.stage_profile_s", math.nan))  # stopped before it


def test_inf_activations_fail_naming_the_layer_and_stage(tiny_model):
    model = copy.deepcopy(tiny_model.model)
    with torch.no_grad():
        model.model.decoder.layers[1].fc1.weight.mul_(1e30)  # 1e60: past float32
        model.model.decoder.layers[1].fc2.weight.mul_(1e30)
    check_finite_weights(model)  # the weights are finite: only the activations overflow
    with pytest.raises(NonFiniteError, match=r"eval stage: (inf|NaN) in the activations of "
                                             r"layer model\.decoder\.layers\.1"):
        with finite_guard(model, "eval"):
            model(input_ids=_ids(tiny_model))


def test_non_finite_logits_fail_naming_the_lm_head(tiny_model):
    model = copy.deepcopy(tiny_model.model)
    with torch.no_grad():
        model.model.decoder.final_layer_norm.weight.fill_(float("inf"))
    with pytest.raises(NonFiniteError, match=r"profile stage: (inf|NaN) in the logits of "
                                             r"layer lm_head"):
        with finite_guard(model, "profile"):
            model(input_ids=_ids(tiny_model))


def test_guard_is_silent_on_a_healthy_model_and_removes_its_hooks(tiny_model):
    model = tiny_model.model
    with finite_guard(model, "eval"):
        logits = model(input_ids=_ids(tiny_model)).logits
    assert torch.isfinite(logits).all()
    assert all(not m._forward_hooks for m in model.modules())
