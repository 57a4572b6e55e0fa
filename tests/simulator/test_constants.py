"""The constants registry: every constant of a registered file has a source and sits in
its plausible range, and docs/constants.md is the generator's current output."""

from __future__ import annotations

from pathlib import Path

import yaml

from powerbench.paths import repo_root
from powerbench.simulator.constants import REGISTRY, numeric_leaves, render_table, resolve


def test_every_constant_is_sourced_and_in_range():
    _, constants, problems = resolve()
    assert constants and not problems, "\n".join(problems)


def test_generated_table_is_current():
    table = (repo_root() / "docs" / "constants.md").read_text()
    assert table == render_table(), "docs/constants.md is stale: run `powerbench constants`"


def _registry_with(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load(REGISTRY.read_text())
    edit(data)
    path = tmp_path / "constants.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_value_outside_its_range_is_reported(tmp_path):
    def narrow(data):
        entry = next(e for e in data["constants"] if e["key"] == "efficiency.gpu_dense")
        entry["range"] = [0.1, 0.2]

    _, _, problems = resolve(_registry_with(tmp_path, narrow))
    assert any("efficiency.gpu_dense" in p and "outside" in p for p in problems)


def test_a_missing_source_or_entry_is_reported(tmp_path):
    def strip(data):
        entry = next(e for e in data["constants"] if e["key"] == "sync_us"
                     and e["file"] == "hardware/pc_high.yaml")
        entry["source"] = []
        data["constants"] = [e for e in data["constants"]
                             if not (e["key"] == "launch_us" and e["file"] == "hardware/pc_low.yaml")]

    _, _, problems = resolve(_registry_with(tmp_path, strip))
    assert any("pc_high.yaml: sync_us" in p and "no source" in p for p in problems)
    assert any("pc_low.yaml: launch_us" in p and "no registry entry" in p for p in problems)


def test_numeric_leaves_walk_lists_and_skip_hydra_keys():
    node = {"defaults": [1], "a": {"b": 2, "c": [1.0, 2.0], "d": [{"e": 3}]}, "f": "x"}
    assert dict(numeric_leaves(node)) == {"a.b": 2, "a.c": [1.0, 2.0], "a.d.0.e": 3}
