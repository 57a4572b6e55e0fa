"""The constants registry (powerbench/simulator/constants.yaml): the source and plausible
range of every constant of the cost model and the static hardware profiles, the values
read from where they are used (conf/*.yaml, a few Python constants), a check of each
against its range and sources, and the generated table (docs/constants.md).
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from powerbench.config import CONF_DIR

REGISTRY = Path(__file__).with_name("constants.yaml")
TABLE_TITLE = "# Cost-model and hardware constants"


@dataclass(frozen=True)
class Constant:
    """One registry entry matched to one value."""

    file: str  # relative to conf/, or python:<module>
    key: str  # the concrete dotted key
    value: Any  # a number or a list of numbers
    unit: str
    low: float
    high: float
    sources: tuple[str, ...]
    note: str

    def problems(self, known_sources: dict[str, str]) -> list[str]:
        """What is wrong with this constant (empty: nothing)."""
        where = f"{self.file}: {self.key} = {self.value}"
        out = []
        if not self.sources:
            out.append(f"{where} has no source")
        out += [f"{where} cites unknown source {s!r}" for s in self.sources
                if s not in known_sources]
        values = self.value if isinstance(self.value, list) else [self.value]
        if any(not self.low <= float(v) <= self.high for v in values):
            out.append(f"{where} is outside its plausible range [{self.low:g}, {self.high:g}]")
        return out


def numeric_leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every number (or list of numbers) in a parsed yaml file,
    Hydra's `defaults` and targets left out."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k not in ("defaults", "_target_"):
                yield from numeric_leaves(v, f"{prefix}{k}.")
    elif isinstance(node, list):
        if node and all(_is_number(x) for x in node):
            yield prefix[:-1], node
        else:
            for i, v in enumerate(node):
                yield from numeric_leaves(v, f"{prefix}{i}.")
    elif _is_number(node):
        yield prefix[:-1], node


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _values(file: str) -> dict[str, Any]:
    """Every numeric constant of a registered file by dotted key."""
    if file.startswith("python:"):
        module = importlib.import_module(file.removeprefix("python:"))
        return {k: v for k, v in vars(module).items() if k.isupper() and _is_number(v)}
    return dict(numeric_leaves(yaml.safe_load((Path(CONF_DIR) / file).read_text())))


def load_registry(path: Path = REGISTRY) -> tuple[dict[str, str], list[dict[str, Any]]]:
    data = yaml.safe_load(path.read_text())
    return dict(data["sources"]), list(data["constants"])


def resolve(path: Path = REGISTRY) -> tuple[dict[str, str], list[Constant], list[str]]:
    """(sources, every constant matched to its entry, problems): a value of a registered
    file with no entry, an entry matching nothing, a constant out of range or unsourced."""
    sources, entries = load_registry(path)
    constants: list[Constant] = []
    problems: list[str] = []
    for file in dict.fromkeys(e["file"] for e in entries):
        values = _values(file)
        mine = [e for e in entries if e["file"] == file]
        matched: set[str] = set()
        for entry in mine:
            keys = [k for k in values if fnmatch.fnmatchcase(k, entry["key"].replace("*", "[!.]*"))
                    or fnmatch.fnmatchcase(k, entry["key"])]
            if not keys:
                problems.append(f"{file}: registry entry {entry['key']!r} matches no constant")
            low, high = (float(x) for x in entry["range"])
            for key in keys:
                if key in matched:
                    continue
                matched.add(key)
                constants.append(Constant(file, key, values[key], str(entry.get("unit", "")),
                                          low, high, tuple(entry.get("source") or ()),
                                          str(entry.get("note", ""))))
        if not file.startswith("python:"):
            problems += [f"{file}: {k} = {values[k]} has no registry entry (source, range)"
                         for k in values if k not in matched]
    for c in constants:
        problems += c.problems(sources)
    return sources, constants, problems


def _fmt(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:g}" for v in value) + "]"
    return f"{value:g}"


def render_table(path: Path = REGISTRY) -> str:
    """docs/constants.md (generated: `powerbench constants`)."""
    sources, constants, problems = resolve(path)
    lines = [TABLE_TITLE, "",
             "Generated by `powerbench constants` from powerbench/simulator/constants.yaml "
             "(sources, ranges) and the files that hold the values; do not edit by hand. "
             "Every value is checked against its plausible range "
             "(tests/simulator/test_constants.py).", ""]
    for file in dict.fromkeys(c.file for c in constants):
        lines += [f"## {file}", "", "| constant | value | unit | plausible range | source | "
                  "derivation |", "|---|---|---|---|---|---|"]
        for c in (c for c in constants if c.file == file):
            lines.append(f"| `{c.key}` | {_fmt(c.value)} | {c.unit} | "
                         f"{c.low:g} - {c.high:g} | {', '.join(c.sources)} | {c.note} |")
        lines.append("")
    lines += ["## Sources", ""] + [f"- **{k}**: {v}" for k, v in sources.items()]
    if problems:
        lines += ["", "## Problems", ""] + [f"- {p}" for p in problems]
    return "\n".join(lines) + "\n"
