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
