"""Every reproduction target, one module each: its figure and its published numbers.
How each runs (sweeps, quick overrides, systems) is in its conf/experiment yaml."""

from powerbench.reproduce.target import Target
from powerbench.reproduce.targets import (
    fig10,
    fig11,
    fig12,
    fig13,
    fig14,
    fig15,
    fig16,
    fig17,
    fig18,
    pi2_ablation,
    pi2_budget,
    pi2_decode,
    pi2_memory,
    pi2_prefill,
    table6,
    table7,
)

ALL: tuple[Target, ...] = tuple(m.TARGET for m in (
    fig10, fig11, fig12, fig13, fig14, fig15, fig16, fig17, fig18, table6, table7,
    pi2_decode, pi2_budget, pi2_prefill, pi2_memory, pi2_ablation))
