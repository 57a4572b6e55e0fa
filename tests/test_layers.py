"""The layer order of `powerbench/`, enforced: a module imports only its own layer or lower.

Lowest first. A package may import packages listed before it (and the foundation modules);
never one listed after it. The order and what each layer holds is in docs/architecture.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "powerbench"

FOUNDATION = ("schema_helpers", "paths", "cache", "hub", "threads", "build", "config", "progress",
              "load_window")
LAYERS: tuple[tuple[str, ...], ...] = (
    FOUNDATION,
    ("ops",),
    ("hardware",),
    ("tracking",),
    ("dataset",),
    ("model",),
    ("profiling",),
    ("predictor",),
    ("evaluation",),
    ("solver",),
    ("engine",),
    ("flash",),
    ("simulator",),
    ("measure",),
    ("figures",),
    ("pipeline",),
    ("reproduce",),
    ("tasks",),
    ("cli",),
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def unit_of(module: str) -> str:
    """'powerbench.engine.decoder' -> 'engine'; 'powerbench.cache' -> 'cache'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, name: str, is_package: bool) -> list[tuple[str, int]]:
    """Every powerbench module that module `name` imports, at any depth (function-level too)."""
    package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, node.lineno))
    return [(t, line) for t, line in found if t == "powerbench" or t.startswith("powerbench.")]


def upward_imports(source: str, name: str, is_package: bool = False) -> list[str]:
    low = unit_of(name)
    if low == "__init__":
        return []
    return [f"{name} (line {line}) imports {target}: layer '{unit_of(target)}' is above '{low}'"
            for target, line in imported_modules(source, name, is_package)
            if unit_of(target) in RANK and RANK[unit_of(target)] > RANK[low]]


SOURCES = sorted(p for p in ROOT.rglob("*.py") if "csrc" not in p.parts)


def test_every_package_has_a_layer():
    units = {unit_of(module_name(p)) for p in SOURCES} - {"__init__"}
    missing = sorted(units - set(RANK))
    assert not missing, f"place these in tests/test_layers.py LAYERS (and the docs): {missing}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_no_upward_import(path: Path):
    upward = upward_imports(path.read_text(), module_name(path), path.name == "__init__.py")
    assert not upward, "\n".join(upward)


@pytest.mark.parametrize("source", [
    "def f():\n    from powerbench.tasks import run\n",
    "import powerbench.simulator.cost\n",
    "from ...engine import decoder\n",
])
def test_an_upward_import_is_reported(source: str):
    """The check can fail: ops importing tasks / simulator / (relatively) engine."""
    found = upward_imports(source, "powerbench.ops.probe.module")
    assert len(found) == 1 and "powerbench.ops.probe.module (line" in found[0]


def test_a_downward_import_passes():
    assert upward_imports("from powerbench.ops import x\nfrom . import y\n",
                          "powerbench.engine.decoder") == []
