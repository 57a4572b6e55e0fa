"""Tags that say where a number came from: code version and machine."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

from powerbench.cache import stable_hash
from powerbench.hardware.facts import cpu_model
from powerbench.paths import repo_root

SOURCE_SUFFIXES = (".py", ".h", ".cpp", ".cu", ".cuh")


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


def sources_fingerprint(package: Path | None = None) -> str:
    """Hash of the package's own source files (Python, C++ and CUDA), committed or not:
    what a measurement runs. Docs, results and configs outside the package leave it alone,
    unlike `git_sha`. `package`: another source tree (default: powerbench's)."""
    package = package or Path(__file__).resolve().parents[1]
    paths = sorted(p for p in package.rglob("*") if p.suffix in SOURCE_SUFFIXES)
    return stable_hash(*(part for p in paths
                         for part in (p.relative_to(package).as_posix(), p.read_bytes())))


def machine_tags() -> dict[str, str]:
    tags = {
        "git_sha": git_sha(),
        "host_cpu": cpu_model(),
        "host_cores": str(os.cpu_count()),
        "host_platform": platform.platform(),
        "python": platform.python_version(),
    }
    return {**tags, **torch_tags()}


def torch_tags() -> dict[str, str]:
    """torch's version and the host's GPU. Without importing torch where the run has not
    (a simulated run never needs it, and the import costs ~1.4 s): the version from the
    package metadata, the GPU from the NVIDIA driver (`driver_gpu`)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
        return {"torch": torch.__version__, "host_gpu": gpu}
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return {}
    return {"torch": version, "host_gpu": driver_gpu()}


def driver_gpu(root: Path = Path("/proc/driver/nvidia/gpus")) -> str:
    """The first NVIDIA GPU's model as the driver names it ("none" without one)."""
    for info in sorted(root.glob("*/information")):
        for line in info.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model" and value.strip():
                return value.strip()
    return "none"
