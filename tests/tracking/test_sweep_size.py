"""The sweep progress line's job count (`sweep: k/N`) and the keys run names carry match
what Hydra's sweeper runs."""

from __future__ import annotations

from powerbench.tracking.callbacks import sweep_size
from powerbench.tracking.naming import swept_keys

FIG13_PARAMS = {"model": "opt_30b,opt_66b,llama_70b", "bench.new_tokens": "8,128,512,1024",
                "hardware": "pc_high,pc_low,pc_mid,pc_max"}  # 3 x 4 x 4 = 48 jobs


def test_counts_the_product_of_swept_values():
    assert sweep_size([], FIG13_PARAMS) == 48
    assert sweep_size(["seed=1,2", "bench.prompt_tokens=range(0,3)"], None) == 6
    assert sweep_size(["seed=1"], None) == 1


def test_a_command_line_override_replaces_the_sweeper_params():
    """A `--quick` run fixes the model and length on the command line: 4 jobs, not 48."""
    assert sweep_size(["model=opt_66b", "bench.new_tokens=128"], FIG13_PARAMS) == 4
    assert sweep_size(["hardware=pc_high,pc_low"], FIG13_PARAMS) == 24
    assert sweep_size(["model=opt_66b", "bench.new_tokens=128", "hardware=pc_high"],
                      FIG13_PARAMS) == 1


def test_an_interval_sweep_has_no_count():
    assert sweep_size(["lr=interval(0.1,1.0)"], None) is None


def test_run_names_carry_only_the_keys_still_swept():
    """A key the command line fixes to one value is not swept: `--quick` run names carry
    no `new_tokens=128`."""
    assert swept_keys([], FIG13_PARAMS) == ["model", "bench.new_tokens", "hardware"]
    assert swept_keys(["model=opt_66b", "bench.new_tokens=128"], FIG13_PARAMS) == ["hardware"]
    assert swept_keys(["seed=1,2", "hardware=pc_low"], FIG13_PARAMS) == [
        "model", "bench.new_tokens", "seed"]
