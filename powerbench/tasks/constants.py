"""`powerbench constants`: write docs/constants.md from the constants registry and list
what is wrong with it (a constant without a source or outside its range)."""

from __future__ import annotations

from pathlib import Path

from powerbench.config import PowerbenchConfig
from powerbench.paths import repo_root
from powerbench.simulator.constants import render_table, resolve
from powerbench.tasks.config import ConstantsTask


def constants(task: ConstantsTask, cfg: PowerbenchConfig, out_dir: Path) -> list[str]:
    root = repo_root() or Path.cwd()
    out = Path(task.out) if task.out else root / "docs" / "constants.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_table())
    _, constants_, problems = resolve()
    print(f"{len(constants_)} constants -> {out}")
    for p in problems:
        print(f"PROBLEM: {p}")
    return problems
