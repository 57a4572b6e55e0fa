"""SimResult: the simulator's metrics and its per-component time breakdown."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from powerbench.simulator.cost import PassCosts

BREAKDOWN_COLUMNS = ["phase", "component", "device", "seconds", "per_pass_ms", "share",
                     "critical_path"]


def _split(name: str) -> tuple[str, str]:
    component, _, device = name.partition("@")
    return component, device or "-"


def breakdown_frame(phase: str, costs: PassCosts) -> pd.DataFrame:
    """Rows per component: critical-path rows (critical_path=True) sum to the phase time;
    busy rows (FFN time of each device, FFN-branch link time) are overlapped with them."""
    n_pass = max(int(costs.total.shape[0]), 1)
    total = float(costs.total.sum())
    rows = []
    for name, seconds in costs.component_totals().items():
        component, device = _split(name)
        rows.append((phase, component, device, seconds, True))
    for name, values in costs.busy.items():
        component, device = _split(name)
        rows.append((phase, f"{component}_busy", device, float(values.sum()), False))
    frame = pd.DataFrame(rows, columns=["phase", "component", "device", "seconds",
                                        "critical_path"])
    frame = frame[(frame.seconds > 0) | frame.critical_path]
    frame["per_pass_ms"] = frame.seconds / n_pass * 1e3
    frame["share"] = frame.seconds / total if total > 0 else 0.0
    return frame[BREAKDOWN_COLUMNS].reset_index(drop=True)


def layer_frame(phase: str, costs: PassCosts) -> pd.DataFrame:
    """Seconds per layer and component (summed over passes), critical-path components."""
    data = {name: values.sum(axis=0) for name, values in costs.layer.items()}
    data.update({f"{name}_busy": values.sum(axis=0) for name, values in costs.busy.items()})
    frame = pd.DataFrame(data)
    frame.insert(0, "layer", range(len(frame)))
    frame.insert(0, "phase", phase)
    return frame


@dataclass
class SimResult:
    metrics: dict[str, float]
    breakdown: pd.DataFrame  # BREAKDOWN_COLUMNS, decode and prefill
    steps: pd.DataFrame  # one row per decode step
    layers: pd.DataFrame | None = None  # per-layer breakdown (cfg.breakdown_per_layer)
    notes: list[str] = field(default_factory=list)

    def write(self, out_dir: str | Path) -> list[Path]:
        """CSV artifacts: sim_breakdown.csv, sim_steps.csv (+ sim_layers.csv)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / "sim_breakdown.csv", out / "sim_steps.csv"]
        self.breakdown.to_csv(paths[0], index=False)
        self.steps.to_csv(paths[1], index=False)
        if self.layers is not None:
            paths.append(out / "sim_layers.csv")
            self.layers.to_csv(paths[-1], index=False)
        return paths
