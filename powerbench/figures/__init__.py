"""Figures: MLflow runs -> pandas -> results/<figure>.csv and .png (one function each).

Simulated series are labelled "simulated" and name their hardware profile.
"""

from powerbench.figures.e2e import e2e_figure, pc_high_e2e, pc_low_e2e
from powerbench.figures.runs import FigureOutput, search_runs
from powerbench.figures.validation import validation_local

FIGURES = {"pc_high_e2e": pc_high_e2e, "pc_low_e2e": pc_low_e2e}

__all__ = ["FIGURES", "FigureOutput", "e2e_figure", "pc_high_e2e", "pc_low_e2e", "search_runs",
           "validation_local"]
