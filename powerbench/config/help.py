"""`powerbench [<task>] --help`: the app help from one composition.

Hydra's own `--help` lists every config group's options through a fresh copy of the
whole config store per group (about 160 deep copies of our typed schemas): 5-15 s for one
help page. This prints the same page (the header and footer of `hydra.help` in
conf/config.yaml, the groups a user can pick from conf/, the composed config) from a
single `compose`. `--hydra-help` still reaches Hydra.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf, open_dict

HELP_FLAGS = ("--help", "-h")


def config_groups(conf_dir: str | Path) -> dict[str, list[str]]:
    """Group -> its options, from the yaml files under `conf_dir` (Hydra's own groups and
    the typed schemas registered in code are not for picking, so not listed)."""
    root = Path(conf_dir)
    groups: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.yaml")):
        group = path.parent.relative_to(root).as_posix()
        if group != "." and not group.startswith("hydra"):
            groups.setdefault(group, []).append(path.stem)
    return dict(sorted(groups.items()))


def app_help(overrides: Sequence[str], tasks: str = "") -> str:
    """The help page of `powerbench <overrides> --help` (`tasks`: the entry point's list of
    tasks, printed under == Tasks ==)."""
    from hydra import compose
    from hydra.errors import HydraException

    from powerbench.config.compose import CONF_DIR, hydra_context

    try:
        with hydra_context():
            cfg = compose(config_name="config", overrides=list(overrides),
                          return_hydra_config=True)
    except HydraException as err:  # an unknown group option: Hydra's message lists the valid
        raise SystemExit(f"powerbench: {err}") from None
    text = OmegaConf.to_container(cfg.hydra.help, resolve=True)
    with open_dict(cfg):
        del cfg["hydra"]
    groups = "\n".join(f"{g}: {', '.join(o)}" for g, o in config_groups(CONF_DIR).items())
    task_doc = _task_doc(cfg.task)
    tasks_part = f"== Tasks ==\n{tasks}\n\n" if tasks else ""
    return (f"{text['header']}\n{task_doc}\n{tasks_part}== Configuration groups ==\n"
            "Compose your configuration from those groups (group=option)\n\n"
            f"{groups}\n\n== Config ==\nOverride anything in the config (foo.bar=value)\n\n"
            f"{OmegaConf.to_yaml(cfg)}\n{text['footer']}")


def _task_doc(task_node) -> str:
    """The selected task's description: its schema's docstring."""
    from powerbench.config.store import task_schema

    schema = task_schema(str(task_node.name))
    doc = " ".join((schema.__doc__ or "").split()) if schema is not None else ""
    return f"This task ({task_node.name}): {doc}\n" if doc else ""
