"""A non-editable install carries every package and the configs (powerbench.conf)."""

from __future__ import annotations

import tomllib

from powerbench.paths import repo_root


def test_every_package_is_listed_for_the_wheel():
    listed = set(tomllib.loads((repo_root() / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(repo_root()).parts)
               for p in (repo_root() / "powerbench").rglob("__init__.py")}
    assert on_disk <= listed, f"add to pyproject.toml [tool.setuptools] packages: {on_disk - listed}"
    assert "powerbench.conf" in listed


def test_engine_operators_and_flash_import_with_torch_alone():
    """A lent GPU machine has torch but no Hydra, OmegaConf or MLflow."""
    import subprocess
    import sys

    code = ("import sys, powerbench.engine, powerbench.ops, powerbench.flash.ffn, "
            "powerbench.measure.flash_ffn_bench\n"
            "bad = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'hydra', 'omegaconf', 'mlflow', 'cvxpy'})\n"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=repo_root())
