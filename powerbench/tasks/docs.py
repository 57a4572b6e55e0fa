"""`powerbench docs`: write the generated docs pages (configuration and metrics).

Both are generated so they cannot go stale: docs/configuration.md from the typed config
schemas and conf/ (powerbench.config.docs), docs/metrics.md from the metric registry every
metric is logged through (powerbench.tracking.metrics). A test fails when either
committed page differs from what this writes.
"""

from __future__ import annotations

from pathlib import Path

from powerbench.config import CONF_DIR, PowerbenchConfig
from powerbench.config.docs import render_markdown as configuration_page
from powerbench.paths import repo_root
from powerbench.tasks.config import DocsTask
from powerbench.tracking.metrics import render_markdown as metrics_page


def generated_pages() -> dict[str, str]:
    """File name -> text of every generated docs page."""
    return {"configuration.md": configuration_page(CONF_DIR) + "\n",
            "metrics.md": metrics_page() + "\n"}


def docs_dir() -> Path:
    root = repo_root()
    return (root if root is not None else Path.cwd()) / "docs"


def docs(task: DocsTask, cfg: PowerbenchConfig, out_dir: Path) -> list[Path]:
    target = Path(task.out_dir) if task.out_dir else docs_dir()
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in generated_pages().items():
        path = target / name
        path.write_text(text)
        written.append(path)
        print(f"wrote {path}")
    return written
