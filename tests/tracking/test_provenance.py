"""Provenance tags without torch where a run does not need it, and the driver's GPU name."""

from __future__ import annotations

import subprocess
import sys

from powerbench.tracking.provenance import driver_gpu


def test_driver_gpu_reads_the_first_gpus_model(tmp_path):
    assert driver_gpu(tmp_path) == "none"
    for bus, model in (("0000:c1:00.0", "NVIDIA H200"), ("0000:41:00.0", "NVIDIA H100 80GB HBM3")):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text(
            f"Model: \t\t {model}\nIRQ:   \t\t 42\nGPU UUID: \t GPU-0\n")
    assert driver_gpu(tmp_path) == "NVIDIA H100 80GB HBM3"  # the lowest bus id


def test_config_registration_and_tags_import_no_torch():
    """Composing a simulated run (every config schema registered) and tagging it import no
    torch: the version comes from the package metadata."""
    code = ("import sys\n"
            "from powerbench.config.store import register_configs\n"
            "from powerbench.tracking.provenance import machine_tags\n"
            "from powerbench.ops.registry import BACKENDS\n"
            "from powerbench.predictor.stats import overall_metrics\n"
            "register_configs()\n"
            "tags = machine_tags()\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "assert tags['torch'] and tags['host_gpu'], tags\n"
            "assert 'sparse_cpu' in BACKENDS\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_tags_use_torch_once_it_is_loaded():
    import torch

    from powerbench.tracking.provenance import machine_tags

    tags = machine_tags()
    assert tags["torch"] == torch.__version__
    expected = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    assert tags["host_gpu"] == expected
