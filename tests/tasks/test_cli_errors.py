"""A user error (powerbench.schema_helpers.UserError) prints its message without a
traceback and exits 1, keeping what the run wrote before it; every other exception keeps
its traceback; HYDRA_FULL_ERROR=1 shows the user error's too."""

from __future__ import annotations

import json

import pytest

from powerbench.schema_helpers import ConfigRangeError, UserError
from powerbench.solver import PlacementInfeasibleError

# opt_30b in fp16 does not fit pc_high's 24 GiB GPU: the placement stage fails
TOO_BIG = ["model=opt_30b", "hardware=pc_high", "solver=all_gpu", "~engine",
           "tracking=disabled"]


@pytest.fixture(autouse=True)
def _compact(monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr("hydra._internal.utils.is_under_debugger", lambda: False)


def test_the_user_errors_are_one_class():
    assert issubclass(ConfigRangeError, UserError) and issubclass(ConfigRangeError, ValueError)
    assert issubclass(PlacementInfeasibleError, UserError)
    assert issubclass(PlacementInfeasibleError, RuntimeError)


def test_a_setting_out_of_range_prints_its_message_without_a_traceback(run_cli, capsys):
    with pytest.raises(SystemExit) as stopped:
        run_cli(["eval.max_tokens=-5", "tracking=disabled"])
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert "ConfigRangeError: eval.max_tokens=-5 is out of range" in err
    assert "Traceback" not in err and 'File "' not in err


def test_a_model_too_large_prints_its_message_and_keeps_the_results(run_cli, capsys,
                                                                   tmp_path):
    with pytest.raises(SystemExit) as stopped:
        run_cli([*TOO_BIG, f"hydra.run.dir={tmp_path / 'run'}"])
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert "PlacementInfeasibleError: GPU budget short by" in err
    assert "Traceback" not in err and 'File "' not in err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics  # the profile stage's metrics, written before the placement failed


def test_other_errors_keep_their_traceback(run_cli, capsys, monkeypatch):
    import powerbench.pipeline as pipeline

    def broken(ctx):
        raise RuntimeError("a bug, not a user error")

    monkeypatch.setattr(pipeline, "run_stages", broken)
    with pytest.raises(SystemExit) as stopped:
        run_cli(["tracking=disabled"])
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: a bug, not a user error" in err


def test_hydra_full_error_shows_the_user_errors_traceback(run_cli, monkeypatch):
    from powerbench.cli import UserErrorMessage

    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(UserErrorMessage) as raised:
        run_cli(["eval.max_tokens=-5", "tracking=disabled"])
    assert isinstance(raised.value.__cause__, ConfigRangeError)
