"""Tags that say where a number came from: code version and machine."""

from __future__ import annotations

import os
import platform
import subprocess

from powerbench.hardware.facts import cpu_model
from powerbench.paths import repo_root


def git_sha() -> str:
    root = repo_root()
    if root is None:
        return "unknown"
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=5).stdout
        return sha + ("-dirty" if dirty.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine_tags() -> dict[str, str]:
    tags = {
        "git_sha": git_sha(),
        "host_cpu": cpu_model(),
        "host_cores": str(os.cpu_count()),
        "host_platform": platform.platform(),
        "python": platform.python_version(),
    }
    try:
        import torch

        tags["torch"] = torch.__version__
        tags["host_gpu"] = (torch.cuda.get_device_name(0) if torch.cuda.is_available()
                            else "none")
    except ImportError:
        pass
    return tags
