"""`powerbench reproduce <name>`: one command per PowerInfer paper figure or table.

TARGETS maps each name to its Target (powerbench.reproduce.target); the end-to-end PC
figures live in `pc_figures`, the others in `more_figures`.
"""

from powerbench.reproduce.more_figures import TARGETS as _MORE
from powerbench.reproduce.pc_figures import TARGETS as _PC
from powerbench.reproduce.pi2_figures import TARGETS as _PI2
from powerbench.reproduce.target import Published, Target

TARGETS: dict[str, Target] = {t.name: t for t in (*_PC, *_MORE, *_PI2)}

__all__ = ["TARGETS", "Published", "Target"]
