"""Drivers: one per CLI task, the layer above `powerbench.pipeline` and the libraries.

Each task is `fn(task_cfg, cfg, out_dir)` named by `_target_` in conf/task/<name>.yaml and
built by the one Hydra app in `powerbench.cli` with the typed `PowerbenchConfig`.
"""
