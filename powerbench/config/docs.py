"""docs/configuration.md, generated from the typed schemas (so it cannot go stale).

Every config group (its options: the yaml files under conf/<group>, with each file's
first comment line) and every field of every schema registered for it: name, type,
default and the comment written beside the field in the dataclass. `powerbench docs`
writes the page; a test fails when the committed page differs from `render_markdown()`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import io
import re
import tokenize
import typing
from enum import Enum
from pathlib import Path
from typing import Any

from powerbench.config.help import config_groups
from powerbench.config.schema import PowerbenchConfig
from powerbench.config.store import GROUP_MODULES


def field_comments(cls: type) -> dict[str, str]:
    """Field -> the comment on its line, or on the comment lines just above it (a field
    inherited from a base schema keeps the base's comment unless redeclared with one)."""
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        comments.update(_own_comments(klass))
    return comments


def _own_comments(cls: type) -> dict[str, str]:
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    pending: list[str] = []
    line_comment: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            line_comment[tok.start[0]] = tok.string.lstrip("#").strip()
    for number, line in enumerate(source.splitlines(), 1):
        stripped = line.strip()
        match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*:", stripped)
        if stripped.startswith("#"):
            pending.append(line_comment.get(number, ""))
        elif match and not stripped.startswith(("def ", "class ")):
            own = line_comment.get(number)
            text = " ".join([*pending, own] if own else pending)
            if text:
                comments.setdefault(match.group(1), text)
            pending = []
        else:
            pending = []
    return comments


def _type_name(hint: Any) -> str:
    text = hint.__name__ if isinstance(hint, type) else str(hint)
    return re.sub(r"\btyping\.|\bbuiltins\.|<class '|'>|\b[a-z_]+\.(?=[A-Z])", "",
                  text.replace("NoneType", "None"))


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
    else:
        return "(required)"
    if dataclasses.is_dataclass(value):
        return "(see below)"
    if isinstance(value, Enum):
        value = value.value
    if value == "???":
        return "(required)"
    return f"`{value!r}`".replace("|", "\\|")


def field_rows(cls: type, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(name, type, default, meaning) of every field, nested dataclasses flattened."""
    hints = typing.get_type_hints(cls)
    comments = field_comments(cls)
    rows = []
    nested = []
    for f in dataclasses.fields(cls):
        if f.name == "_target_":
            continue
        hint = hints.get(f.name, f.type)
        name = f"{prefix}{f.name}"
        if isinstance(hint, type) and issubclass(hint, Enum):
            choices = ", ".join(str(m.value) for m in hint)
            comment = f"{comments.get(f.name, '')} (one of: {choices})".strip()
        else:
            comment = comments.get(f.name, "")
        rows.append((name, _type_name(hint), _default(f), comment))
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            nested.append((hint, f"{name}."))
    for hint, sub in nested:
        rows += field_rows(hint, sub)
    return rows


def _table(rows: list[tuple[str, str, str, str]]) -> list[str]:
    out = ["| option | type | default | meaning |", "|---|---|---|---|"]
    out += [f"| `{n}` | {t.replace('|', chr(92) + '|')} | {d} | {c.replace('|', '/')} |"
            for n, t, d, c in rows]
    return out


def option_summary(path: Path) -> str:
    """The first sentence of a yaml's leading comment block (`# @package` lines skipped)."""
    block: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("# @package"):
            continue
        text = line.lstrip("#").strip()
        if not line.startswith("#") or not text:
            if block:
                break
            continue
        block.append(text)
    # the project's docs cite only what the project contains: no reference-notes sections
    summary = re.sub(r",?\s*design (section|§)\s*\d+", "", " ".join(block))
    end = summary.find(". ")
    return summary[:end + 1] if end >= 0 else summary


def group_options(conf_dir: Path, group: str) -> list[tuple[str, str]]:
    """(option, summary of its yaml) for conf/<group>/*.yaml."""
    return [(path.stem, option_summary(path))
            for path in sorted((conf_dir / group).glob("*.yaml"))]


def _options(conf: Path, group: str) -> list[str]:
    return [f"- `{group}={name}`" + (f": {text}" if text else "")
            for name, text in group_options(conf, group)]


def _schema_doc(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    generated = doc.startswith(f"{cls.__name__}(")  # dataclass's own signature doc
    return "" if generated else " ".join(doc.split("\n\n")[0].split())


def render_markdown(conf_dir: str | Path) -> str:
    conf = Path(conf_dir)
    lines = ["# Configuration", "",
             "Every config group, its options and every setting, generated from the typed "
             "schemas (`powerbench docs`; do not edit by hand). Pick an option with "
             "`group=option` and set a value with `group.key=value`, e.g. "
             "`powerbench model=opt_13b bench.new_tokens=128`. Unknown keys, wrong types and "
             "out-of-range values fail when the configuration is composed.", "",
             "## Top level", "", *_table(field_rows(PowerbenchConfig)), ""]
    for group, module_names in GROUP_MODULES.items():
        lines += [f"## `{group}`", "", "Options (`conf/" + group + "/`):", "",
                  *_options(conf, group), ""]
        for module_name in module_names:
            for schema_name, cls in importlib.import_module(module_name).SCHEMAS.items():
                lines += [f"### `{group}` schema `{schema_name}` ({cls.__name__})", ""]
                doc = _schema_doc(cls)
                if doc:
                    lines += [doc, ""]
                lines += [*_table(field_rows(cls)), ""]
    for group in config_groups(conf):  # groups of presets (no schema of their own)
        if group not in GROUP_MODULES:
            lines += [f"## `{group}`", "", "Presets that set options of the groups above "
                      f"(`conf/{group}/`):", "", *_options(conf, group), ""]
    return "\n".join(lines)
