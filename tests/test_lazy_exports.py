"""Packages that export their names lazily (`powerbench.build.lazy_attributes`): every name
resolves to the object its module defines, and none is shadowed by a submodule of the same
name (importing `pkg.x` binds `pkg.x` to the module, after which a lazy `x` never loads)."""

from __future__ import annotations

import importlib
import types

import pytest

LAZY_PACKAGES = ("powerbench.engine", "powerbench.flash", "powerbench.ops",
                 "powerbench.predictor", "powerbench.profiling")


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_lazy_name_is_its_modules_object(package):
    pkg = importlib.import_module(package)
    lazy = getattr(pkg, "_LAZY", None)
    assert lazy, f"{package} has no _LAZY map"
    for name, module in lazy.items():
        assert module.rsplit(".", 1)[-1] != name, \
            f"{package}.{name} is also a submodule's name ({module}): rename the module"
        importlib.import_module(module)  # as another caller might, before the name is used
        value = getattr(pkg, name)
        assert not isinstance(value, types.ModuleType), f"{package}.{name} is a module"
        assert value is getattr(importlib.import_module(module), name)
    assert set(pkg.__all__) <= set(lazy) | set(vars(pkg)), "__all__ names a missing name"
