"""Where the project's Hydra configuration lives (no Hydra needed to ask)."""

from __future__ import annotations

from pathlib import Path


def _conf_dir() -> str:
    """`conf/` of a source checkout, else the copy packaged as `powerbench/conf`."""
    package = Path(__file__).resolve().parents[1]
    checkout = package.parent / "conf"
    return str(checkout if (checkout / "config.yaml").exists() else package / "conf")


CONF_DIR = _conf_dir()
