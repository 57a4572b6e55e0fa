"""`powerbench sensitivity`: the calibration rows under the sourced constants, beside the
previous fitted factors, and how much each row moves when each constant moves ±20%.

Writes results/calibration/ (README.md, calibration_rows.csv, sensitivity.csv): every run
the calibration rows read is placed once and re-costed per variant
(powerbench.tasks.calibration_set); hardware constants are varied with the placement held.
SIMULATED numbers: they do not depend on this machine's load.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from powerbench.config import PowerbenchConfig
from powerbench.hardware import HardwareProfile
from powerbench.load_window import utc_now
from powerbench.paths import results_dir
from powerbench.simulator.config import (
    ComputeMode,
    PrefillMode,
    SimulatorConfig,
    TokenOverlapConfig,
)
from powerbench.tasks.calibration_set import (
    Variant,
    compose_jobs,
    prepare,
    row_error,
    rows,
)
from powerbench.tasks.config import SensitivityTask
from powerbench.tasks.validate_synthetic import realsize_section

GB = 1e9


def scale_sim(path: str, factor: float, cap: float | None = None) -> Variant:
    """Multiply the simulator constant at dotted `path` by `factor` (at most `cap`)."""
    head, _, leaf = path.rpartition(".")

    def variant(sim: SimulatorConfig, hw: HardwareProfile) -> tuple[SimulatorConfig,
                                                                      HardwareProfile]:
        parent = getattr(sim, head) if head else sim
        value = getattr(parent, leaf) * factor
        value = min(value, cap) if cap is not None else value
        parent = replace(parent, **{leaf: value})
        return (replace(sim, **{head: parent}) if head else parent), hw

    return variant


def scale_overlap(factor: float) -> Variant:
    """Multiply every point of the measured token overlap (simulator.token_overlap.rho)."""
    def variant(sim: SimulatorConfig, hw: HardwareProfile) -> tuple[SimulatorConfig,
                                                                      HardwareProfile]:
        rho = [min(r * factor, 0.99) for r in sim.token_overlap.rho]
        return replace(sim, token_overlap=replace(sim.token_overlap, rho=rho)), hw

    return variant


def _scale_hw(hw: HardwareProfile, what: str, f: float) -> HardwareProfile:
    if what in ("dram", "vram", "hbm"):
        tier = hw.memories[what]
        return replace(hw, memories={**hw.memories,
                                     what: replace(tier, effective_bw=tier.effective_bw * f)})
    if what == "link":
        link = hw.link
        return replace(hw, link=replace(link, h2d_effective_bw=link.h2d_effective_bw * f,
                                        d2h_effective_bw=link.d2h_effective_bw * f))
    if what in ("sync", "launch"):
        return replace(hw, **{f"{what}_s": getattr(hw, f"{what}_s") * f})
    unit = hw.units[what]  # cpu / gpu FLOP/s
    return replace(hw, units={**hw.units, what: replace(unit,
                                                          effective_flops=unit.effective_flops * f)})


def scale_hw(profile: str, what: str, factor: float) -> Variant:
    """Multiply one constant of hardware profile `profile` (runs on others unchanged)."""
    def variant(sim: SimulatorConfig, hw: HardwareProfile) -> tuple[SimulatorConfig,
                                                                      HardwareProfile]:
        return sim, (_scale_hw(hw, what, factor) if hw.name == profile else hw)

    return variant


HW_KEYS = {"dram": "memories.dram.effective_bw_gb_s", "vram": "memories.vram.effective_bw_gb_s",
           "hbm": "memories.hbm.effective_bw_gb_s", "link": "link.*_effective_gb_s",
           "sync": "sync_us", "launch": "launch_us", "cpu": "units.cpu.effective_tflops",
           "gpu": "units.gpu.effective_tflops"}
SIM_KEYS = ("efficiency.gpu_dense", "efficiency.gpu_sparse", "efficiency.int4",
            "efficiency.int4_axpy", "efficiency.cpu_sparse", "efficiency.cpu_dense",
            "host_layer_us")
HW_VARIED = {"pc_high": ("dram", "vram", "link", "sync", "launch", "cpu", "gpu"),
             "pc_low": ("dram", "vram", "link", "sync", "launch", "cpu", "gpu"),
             "a100": ("hbm", "launch", "gpu")}


def constants_varied(step: float) -> dict[str, tuple[Variant, Variant]]:
    """Constant name (file: key) -> its (-step, +step) variants; efficiencies capped at 1."""
    out: dict[str, tuple[Variant, Variant]] = {}
    for key in SIM_KEYS:
        cap = 1.0 if key.startswith("efficiency.") else None
        name = f"simulator/{'vllm' if key.startswith('host') else 'cost_model'}.yaml: {key}"
        out[name] = (scale_sim(key, 1 - step, cap), scale_sim(key, 1 + step, cap))
    out["simulator/cost_model.yaml: token_overlap.rho"] = (scale_overlap(1 - step),
                                                           scale_overlap(1 + step))
    for profile, whats in HW_VARIED.items():
        for what in whats:
            out[f"hardware/{profile}.yaml: {HW_KEYS[what]}"] = (
                scale_hw(profile, what, 1 - step), scale_hw(profile, what, 1 + step))
    return out


MECHANISMS = ("host_layer_us", "hybrid_roundtrip_us", "hybrid_merges", "token_overlap")


def previous_factors(values: dict[str, float]) -> Variant:
    """The cost model before its constants were sourced (the fitted efficiency factors;
    no vLLM host time, one synchronisation per hybrid layer: `values` 0 for those), for
    the before/after table."""
    def variant(sim: SimulatorConfig, hw: HardwareProfile) -> tuple[SimulatorConfig,
                                                                      HardwareProfile]:
        eff = replace(sim.efficiency, **{k: v for k, v in values.items() if k not in MECHANISMS})
        mech = {k: values[k] for k in MECHANISMS if k in values}
        if "hybrid_merges" in mech:
            mech["hybrid_merges"] = int(mech["hybrid_merges"])
        if mech.get("hybrid_roundtrip_us") == 0:
            mech["hybrid_roundtrip_us"] = None
        if "token_overlap" in mech:  # 0: independent tokens (no measured overlap)
            mech["token_overlap"] = (TokenOverlapConfig() if mech["token_overlap"] == 0
                                     else sim.token_overlap)
        return replace(sim, efficiency=eff, **mech), hw

    return variant


def prompt_read_as(mode: PrefillMode) -> Variant:
    """The runs whose prompt goes through the neuron-aware operators (sparse, prefill
    hybrid) re-costed with prefill `mode`; every other run unchanged."""
    def variant(sim: SimulatorConfig, hw: HardwareProfile) -> tuple[SimulatorConfig,
                                                                      HardwareProfile]:
        if sim.mode is ComputeMode.sparse and sim.prefill.mode is PrefillMode.hybrid:
            return replace(sim, prefill=replace(sim.prefill, mode=mode)), hw
        return sim, hw

    return variant


def _change(c_base: Any, c_new: Any) -> float:
    """How much a row's value moved: relative (%) for relative rows, points for shares."""
    if not (math.isfinite(c_base.ours) and math.isfinite(c_new.ours)):
        return math.nan
    if c_base.published.absolute:
        return c_new.ours - c_base.ours
    return 100.0 * (c_new.ours - c_base.ours) / c_base.ours


def sensitivity(task: SensitivityTask, cfg: PowerbenchConfig, out_dir: Path) -> pd.DataFrame:
    out = Path(task.out_dir) if task.out_dir else results_dir() / "calibration"
    out.mkdir(parents=True, exist_ok=True)
    if task.page_only:  # the page redrawn from the CSVs (e.g. after new validate rows)
        table = pd.read_csv(out / "calibration_rows.csv", keep_default_na=False,
                            na_values=[""])
        sens_frame = pd.read_csv(out / "sensitivity.csv")
    else:
        table, sens_frame = calibration_tables(task)
        table.to_csv(out / "calibration_rows.csv", index=False)
        sens_frame.to_csv(out / "sensitivity.csv", index=False, float_format="%.3f")
    page = render_page(table, sens_frame, task.step)
    page += realsize_section(out.parent / "validation", task.validation_batches)
    (out / "README.md").write_text(page)
    print(page)
    return table


def calibration_tables(task: SensitivityTask) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(calibration rows: previous factors and sourced constants; each row's change per
    constant varied by ±task.step)."""
    jobs = compose_jobs()
    prepare(jobs)
    base = rows(jobs)
    before = rows(jobs, "previous", previous_factors(dict(task.previous)))
    mode = task.alternative_prefill  # checked at composition (SensitivityTask)
    alt = (rows(jobs, f"prefill_{mode}", prompt_read_as(PrefillMode(mode))) if mode
           else [None] * len(base))
    table = pd.DataFrame([{
        "row": c.published.label, "published": c.published.value,
        "tolerance": c.published.tolerance, "absolute": c.published.absolute,
        "previous": b.ours, "previous_error": row_error(b), "previous_within": b.within,
        "ours": c.ours, "error": row_error(c), "within": c.within,
        **({"alternative_prefill": mode, "alternative": a.ours,
            "alternative_error": row_error(a), "alternative_within": a.within} if a is not None else {}),
        "missing_mechanism": _note(task.missing, c.published.label, c.published.value,
                                   c.within),
    } for c, b, a in zip(base, before, alt, strict=True)])
    sens = []
    step = task.step
    for name, (minus, plus) in constants_varied(step).items():
        low = rows(jobs, f"{name}-", minus)
        high = rows(jobs, f"{name}+", plus)
        for c, lo, hi in zip(base, low, high, strict=True):
            sens.append({"constant": name, "row": c.published.label,
                         "published": c.published.value,
                         f"minus_{round(100 * step)}pct": _change(c, lo),
                         f"plus_{round(100 * step)}pct": _change(c, hi),
                         "unit": "points" if c.published.absolute else "%"})
    return table, pd.DataFrame(sens)


def _note(missing: dict[str, str], label: str, value: float, within: bool) -> str:
    """The note of `missing` whose key is '<label prefix> @ <published value>'."""
    if within:
        return ""
    for key, note in missing.items():
        prefix, _, published = key.rpartition(" @ ")
        if label.startswith(prefix) and math.isclose(float(published), value):
            return note
    return "not diagnosed (see the sensitivity table)"


def _top_drivers(sens: pd.DataFrame, row: str, value: float, n: int = 3) -> str:
    rows_ = sens[(sens["row"] == row) & (sens["published"] == value)].copy()
    cols = [c for c in rows_.columns if c.startswith(("minus_", "plus_"))]
    rows_["swing"] = rows_[cols].abs().max(axis=1)
    if not (rows_["swing"] > 0).any():
        return "none (the value depends on the placement only, held here)"
    top = rows_.sort_values("swing", ascending=False).head(n)
    unit = "pt" if (rows_["unit"] == "points").any() else "%"
    return "; ".join(f"{r.constant.split(': ')[1]} ({r.constant.split('/')[1].split('.')[0]}) "
                     f"{getattr(r, cols[0]):+.3g}/{getattr(r, cols[1]):+.3g}{unit}"
                     for r in top.itertuples())


def has_alternative(table: pd.DataFrame) -> bool:
    return "alternative" in table.columns


def alternative_count(table: pd.DataFrame) -> str:
    if not has_alternative(table):
        return ""
    return (f"; PowerInfer's prompt with prefill {table['alternative_prefill'].iloc[0]}: "
            f"{int(table['alternative_within'].sum())}")


def alternative_text(table: pd.DataFrame) -> list[str]:
    """The paragraph that says what the `alternative` column is."""
    if not has_alternative(table):
        return []
    mode = table["alternative_prefill"].iloc[0]
    return [f"`alternative`: ours with the prompt of every run that reads it through the "
            f"neuron-aware operators (`prefill.mode=hybrid`: each device reads the union of "
            f"its active rows once per prompt) re-costed with `prefill.mode={mode}` "
            "(`powerinfer_public`: the rows read as PowerInfer's public code's batch loops "
            "read them, the CPU down axpy and both GPU batch kernels again for every token; "
            "powerbench/simulator/public_prompt.py). Not the default: see "
            "conf/experiment/system/powerinfer.yaml.", ""]


def render_page(table: pd.DataFrame, sens: pd.DataFrame, step: float) -> str:
    pct = round(100 * step)
    within, within_before = int(table["within"].sum()), int(table["previous_within"].sum())
    lines = [
        "# Calibration rows and their sensitivity (SIMULATED)", "",
        f"Generated {utc_now()} by "
        "`powerbench sensitivity` (`task.page_only=true` redraws this page from the CSVs). "
        "Simulated numbers do not depend on the machine; every run the rows read is placed "
        "once and re-costed per variant. Do not edit by hand.", "",
        "The calibration set is the `calibration=True` rows of the reproduction targets "
        "(fig10, fig11, fig12, fig13, fig18). `previous`: the cost model before its "
        "constants were sourced (the fitted gpu_dense 0.4, gpu_sparse 0.2, int4 0.5; one "
        "synchronisation per hybrid layer; no vLLM host time; batch unions of independent "
        "tokens); `ours`: the sourced constants of docs/constants.md and the mechanisms (a "
        "hybrid layer's measured GPU-CPU-GPU round trip, once per host merge: two in "
        "PowerInfer's public code; the int4 down projection's DMMV-class kernel on the GPU; "
        "vLLM's per-layer host time; the token-to-token overlap of active neurons measured "
        "on SmolLM2: token_overlap.csv). The fig18 A100 runs use `simulator=vllm`.", "",
        f"Within tolerance: **{within} of {len(table)}** (previous factors: {within_before}"
        f"{alternative_count(table)}).", "", *alternative_text(table),
        "| row | published | previous | error | ours | error | within |"
        f"{' alternative | error |' * has_alternative(table)} missing mechanism |",
        "|---|---|---|---|---|---|---|" + "---|---|" * has_alternative(table) + "---|"]
    for r in table.itertuples():
        note = r.missing_mechanism if isinstance(r.missing_mechanism, str) else ""
        alt = (f" {r.alternative:.4g} | {r.alternative_error} |" if has_alternative(table)
               else "")
        lines.append(f"| {r.row} | {r.published:.3g} | {r.previous:.4g} | {r.previous_error} | "
                     f"{r.ours:.4g} | {r.error} | {'yes' if r.within else 'NO'} |{alt} {note} |")
    lines += ["", f"## Sensitivity: each constant ±{pct}% (placements held)", "",
              f"Change of each row's value (relative rows in %, share rows in points) when one "
              f"constant moves -{pct}% / +{pct}% (efficiencies capped at 1.0). The three "
              "constants each row hinges on most:", "", "| row | top drivers (-/+) |",
              "|---|---|"]
    for row, value in zip(table["row"], table["published"], strict=True):
        lines.append(f"| {row} | {_top_drivers(sens, row, value)} |")
    lines += ["", "Every constant and row: `sensitivity.csv`; the rows: `calibration_rows.csv`.",
              ""]
    return "\n".join(lines)
