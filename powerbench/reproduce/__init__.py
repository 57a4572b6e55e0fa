"""`powerbench reproduce <name>`: one command per paper figure or table.

TARGETS maps each name to its Target (powerbench.reproduce.target); each target's module
is powerbench.reproduce.targets.<name>, its sweeps are in conf/experiment.
"""

from powerbench.reproduce.target import Published, Target
from powerbench.reproduce.targets import ALL

TARGETS: dict[str, Target] = {t.name: t for t in ALL}

__all__ = ["TARGETS", "Published", "Target"]
