"""A simulator without a placement stops when the config is composed, before any stage."""

from __future__ import annotations

import pytest

import powerbench.pipeline as pipeline
from powerbench.config import load_config
from powerbench.schema_helpers import MissingSettingError, UserError


@pytest.mark.parametrize(("overrides", "missing"), [
    (["simulator=cost_model"], ("hardware=<name> (", "solver=<name> (")),
    (["simulator=cost_model", "solver=ilp"], ("hardware=<name> (",)),
    (["simulator=phone", "hardware=oneplus12"], ("solver=<name> (",)),
])
def test_simulator_without_placement_stops_before_any_stage(tmp_path, monkeypatch, overrides,
                                                            missing):
    def no_stage(ctx):
        raise AssertionError("a stage ran before the settings were checked")

    monkeypatch.setattr(pipeline, "stage_model", no_stage)
    with pytest.raises(MissingSettingError, match="needs a placement") as stopped:
        cfg = load_config(["model=opt_30b", "~engine", "tracking=disabled",
                           f"cache_dir={tmp_path / 'cache'}", *overrides])
        pipeline.run_experiment(cfg, tmp_path / "run")
    assert isinstance(stopped.value, UserError)  # the CLI prints it without a traceback
    message = str(stopped.value)
    assert message.startswith(f"{overrides[0]} needs a placement")
    for part in missing:
        assert part in message
    if "hardware=<name> (" in missing:  # every profile, the phones' too
        assert "oneplus_ace2" in message and "pc_high" in message
    if "solver=<name> (" in missing:
        assert "pi2_planner" in message and "ilp" in message
