"""docs/configuration.md and docs/metrics.md are generated (`powerbench docs`): these
tests fail when a committed page is stale, and check the generators cover everything."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from powerbench.config import CONF_DIR
from powerbench.config.docs import field_comments, render_markdown
from powerbench.config.help import config_groups
from powerbench.config.store import GROUP_MODULES
from powerbench.tasks.docs import docs_dir, generated_pages
from powerbench.tracking.metrics import all_metrics

STALE = "is stale: run `powerbench docs` and commit the result"


@pytest.mark.parametrize("name", ["configuration.md", "metrics.md"])
def test_generated_docs_page_is_not_stale(name):
    page = docs_dir() / name
    assert page.exists(), f"docs/{name} is missing: run `powerbench docs`"
    assert page.read_text() == generated_pages()[name], f"docs/{name} {STALE}"


def test_configuration_page_lists_every_group_option_and_field():
    page = render_markdown(CONF_DIR)
    for group, options in config_groups(CONF_DIR).items():
        for option in options:
            assert f"`{group}={option}`" in page, (group, option)
    for modules in GROUP_MODULES.values():
        for module in modules:
            for cls in importlib.import_module(module).SCHEMAS.values():
                for f in dataclasses.fields(cls):
                    if f.name != "_target_":
                        assert f"| `{f.name}` |" in page or f".{f.name}` |" in page, \
                            (cls.__name__, f.name)
    for setting in ("bench.prompt_tokens", "eval.max_tokens", "profiling.seq_len"):
        assert f"| `{setting}` |" in page
    assert "design" not in page.lower().replace("designed", "")  # no reference notes cited


def test_field_comments_are_read_from_the_schema_source():
    from powerbench.config.schema import BenchConfig

    comments = field_comments(BenchConfig)
    assert comments["threads"].startswith("0: torch's default")


def test_metrics_page_lists_every_registered_metric():
    page = generated_pages()["metrics.md"]
    for metric in all_metrics():
        assert f"`{metric.name}`" in page
