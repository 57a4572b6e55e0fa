"""`powerbench constants`: write docs/constants.md from the constants registry and list
what is wrong with it (a constant without a source or outside its range).

`task.overlap=true` first MEASURES the token-to-token overlap of active neurons that
`simulator.token_overlap` is set from (powerbench.measure.token_overlap): tiny_relu with
its own ReLU rule, SmolLM2-135M with the CATS rule at each `task.overlap_cats_sparsity`,
`task.overlap_tokens` consecutive tokens of the dataset's train split each; one row per
(model, batch size) in results/calibration/token_overlap.csv.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from powerbench.config import PowerbenchConfig
from powerbench.paths import repo_root, results_dir
from powerbench.simulator.constants import render_table, resolve
from powerbench.tasks.config import ConstantsTask

OVERLAP_SEQ_LEN = 128  # the profiler's default sequence length


def measure_token_overlap(task: ConstantsTask, cfg: PowerbenchConfig) -> Path:
    """results/calibration/token_overlap.csv (module doc)."""
    from powerbench.build import build
    from powerbench.dataset import load_texts
    from powerbench.measure.token_overlap import model_overlap
    from powerbench.paths import cache_dir

    texts = load_texts(cfg.dataset).train
    out = results_dir() / "calibration" / "token_overlap.csv"
    rows = []
    for model in task.overlap_models.values():  # typed, composed by the task yaml
        loaded = build(model, cache_dir=cache_dir(cfg.cache_dir))
        sparsities = (task.overlap_cats_sparsity if loaded.spec.ffn_kind == "swiglu"
                      else [0.0])
        for sparsity in sparsities:
            stats = model_overlap(loaded, texts, task.overlap_tokens, OVERLAP_SEQ_LEN,
                                  sparsity)
            print(f"{stats.model}: active {stats.active:.3f}, P(on|on) "
                  f"{stats.persistence:.3f}, lag-1 rho {stats.lag1_rho:.3f}, fitted rho "
                  f"{stats.fitted_rho:.3f}")
            rows += stats.rows()
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out, index=False, float_format="%.4f")
    return out


def constants(task: ConstantsTask, cfg: PowerbenchConfig, out_dir: Path) -> list[str]:
    if task.overlap:
        print(f"token overlap -> {measure_token_overlap(task, cfg)}")
    root = repo_root() or Path.cwd()
    out = Path(task.out) if task.out else root / "docs" / "constants.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_table())
    _, constants_, problems = resolve()
    print(f"{len(constants_)} constants -> {out}")
    for p in problems:
        print(f"PROBLEM: {p}")
    return problems
