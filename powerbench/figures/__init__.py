"""Figures: MLflow runs -> pandas -> results/<figure>.csv and .png (one function each).

Simulated series are labelled "simulated" and name their hardware profile. The paper's
figures are also reproduction targets (powerbench.reproduce.TARGETS; `powerbench figure`
accepts their names too).
"""

from powerbench.figures.paper_pc import fig10, fig11, fig12, fig13
from powerbench.figures.runs import FigureOutput, search_runs
from powerbench.figures.validation import validation_local

# figures that are no reproduction target
FIGURES = {"validation_local": validation_local}

__all__ = ["FIGURES", "FigureOutput", "fig10", "fig11", "fig12", "fig13", "search_runs",
           "validation_local"]
