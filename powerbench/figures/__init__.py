"""Figures: MLflow runs -> pandas -> <out_dir>/<figure>.csv (content-hashed) and .png.

Shared parts of the paper figures (runs, e2e, simulated, phone, stamp); the paper figures
themselves are reproduction targets (powerbench.reproduce.targets; `powerbench figure`
accepts their names too). Simulated series are labelled "simulated" and name their
hardware profile.
"""

from powerbench.figures.runs import FigureOutput, search_runs
from powerbench.figures.validation import validation_local

# figures that are no reproduction target
FIGURES = {"validation_local": validation_local}

__all__ = ["FIGURES", "FigureOutput", "search_runs", "validation_local"]
