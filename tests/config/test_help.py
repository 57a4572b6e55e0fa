"""`powerbench --help` from one composition (powerbench.config.help)."""

from __future__ import annotations

import pytest

from powerbench.cli import main
from powerbench.config import CONF_DIR
from powerbench.config.help import config_groups


def test_groups_are_the_pickable_yaml_files():
    groups = config_groups(CONF_DIR)
    assert "tiny_relu" in groups["model"] and "fig12" in groups["experiment"]
    assert "powerinfer" in groups["experiment/system"]
    assert not any(g.startswith("hydra") for g in groups)  # launcher presets are Hydra's
    assert list(groups) == sorted(groups)


def test_help_shows_the_composed_overrides(capsys):
    with pytest.raises(SystemExit) as done:
        main(["bench-decode", "model=opt_1_3b", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("powerbench bench_decode:")
    assert "name: opt_1_3b" in out and "hydra:" not in out


def test_help_with_an_unknown_option_names_the_valid_ones():
    with pytest.raises(SystemExit, match="(?s)Could not find 'model/nope'.*tiny_relu"):
        main(["--help", "model=nope"])


def test_help_lists_every_task(capsys):
    from powerbench.cli import TASKS

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "== Tasks ==" in out
    for task in TASKS:
        assert f"powerbench {task} " in out, task


def test_ui_help_mentions_its_argument(capsys):
    with pytest.raises(SystemExit):
        main(["ui", "--help"])
    out = capsys.readouterr().out
    assert "powerbench ui [URI]" in out and "sets tracking.uri" in out
    assert "This task (ui): `powerbench ui [URI]`" in out
