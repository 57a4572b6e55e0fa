"""docs/extending.md, followed as a reader would follow it.

Every file block of the page (a fenced block whose preceding line ends with `path`:) is
written into a temporary directory exactly as printed: `conf/...` into a conf tree added
to Hydra's search path, `mylab-project/...` into a project that pip installs (offline,
into a temporary directory put on `sys.path`: its modules, yaml and entry points).
Every `powerbench` line of the page's shell blocks is then run through the CLI (the
shape-only simulations) or composed (the measured runs, whose engine then runs on the
small random OPT of tests/engine/conftest.py instead of a trained tiny_relu).
"""

from __future__ import annotations

import csv
import importlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from powerbench.build import build
from powerbench.cli import main
from powerbench.config import load_config
from powerbench.config.schema import BenchConfig
from powerbench.engine import DenseFFN, run_engine
from powerbench.engine.weights import extract_weights
from tests.engine.conftest import loaded_model, make_opt, tokenizer  # noqa: F401 (fixture)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "extending.md"
FILE_BLOCK = re.compile(r"`([\w./-]+)`:\n\n```\w*\n(.*?)^```", re.S | re.M)
SHELL_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
PROJECT = "mylab-project"
PROMPTS = ["sparse activation makes large language model inference faster " * 3,
           "a neuron that rarely fires can stay on the cpu " * 3]
BENCH = BenchConfig(prompt_tokens=16, new_tokens=6, batch_size=2, warmup=1, repeats=2,
                    threads=1, greedy=True)


def page_files() -> dict[str, str]:
    return dict(FILE_BLOCK.findall(PAGE.read_text()))


def commands(section: int) -> list[list[str]]:
    """The arguments of each `powerbench ...` line in section `section`'s shell blocks."""
    parts = re.split(r"^## (\d+)\. .*$", PAGE.read_text(), flags=re.M)
    body = dict(zip(parts[1::2], parts[2::2], strict=True))[str(section)]
    return [shlex.split(line)[1:] for block in SHELL_BLOCK.findall(body)
            for line in block.splitlines() if line.startswith("powerbench ")]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """The page's files written out and mylab installed; the config store re-reads the
    entry points. Undone after the module."""
    from powerbench.config import store

    root = tmp_path_factory.mktemp("extending")
    for path, text in page_files().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    site = root / "site"  # `pip install mylab-project`, kept out of the test environment
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                          "--no-build-isolation", "--no-index", "--target", str(site),
                          str(root / PROJECT)], capture_output=True, text=True)
    assert pip.returncode == 0, f"pip install {PROJECT} failed:\n{pip.stderr}"
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(site))
        mp.setattr(store, "_registered", False)
        importlib.invalidate_caches()
        yield root
    for name in [m for m in sys.modules if m == "mylab" or m.startswith("mylab.")]:
        del sys.modules[name]


def localised(args: list[str], root: Path) -> list[str]:
    """A page command with the page's conf tree added to Hydra's search path (as the page
    says for files kept outside a clone), before any flag."""
    at = next((i for i, a in enumerate(args) if a.startswith("-")), len(args))
    paths = [f"file://{root / 'conf'}"]
    overrides = []
    for a in args[:at]:
        if a.startswith("hydra.searchpath=["):
            paths = a.removeprefix("hydra.searchpath=[").removesuffix("]").split(",") + paths
        else:
            overrides.append(a)
    return [*overrides, f"hydra.searchpath=[{','.join(paths)}]", *args[at:]]


@pytest.fixture(scope="module")
def simulate(root, tmp_path_factory):
    """`simulate(args)`: the page's command run through the CLI (no MLflow), cached per
    command; returns its run directory."""
    cache = tmp_path_factory.mktemp("cache")
    done: dict[tuple[str, ...], Path] = {}

    def run(args: list[str]) -> Path:
        if tuple(args) not in done:
            run_dir = tmp_path_factory.mktemp("run")
            main([*localised(args, root), "tracking=disabled", f"cache_dir={cache}",
                  f"hydra.run.dir={run_dir}"])
            done[tuple(args)] = run_dir
        return done[tuple(args)]

    return run


def metrics(run_dir: Path) -> dict[str, float]:
    return json.loads((run_dir / "metrics.json").read_text())


def placement_layers(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "placement" / "placement_layers.csv") as f:
        return list(csv.DictReader(f))


def test_the_page_has_its_four_examples_and_their_files():
    files = page_files()
    assert {"conf/model/relu_3b.yaml", "conf/hardware/pc_mid.yaml",
            f"{PROJECT}/mylab/uniform.py", f"{PROJECT}/mylab/topk.py",
            f"{PROJECT}/pyproject.toml"} <= set(files)
    assert all(commands(section) for section in (1, 2, 3, 4))


def test_1_a_shape_only_model_is_simulated(simulate):
    run = simulate(commands(1)[0])
    m = metrics(run)
    assert m["model_layers"] == 26 and m["model_d_ffn"] == 8640
    assert m["sim_feasible"] == 1.0 and m["sim_decode_tokens_per_s"] > 0
    assert 0.8 < m["ffn_sparsity"] < 0.9  # drawn from the yaml's token_sparsity (0.85)


def test_1_a_checkpoint_is_pointed_at_without_running_it(root, simulate, capsys):
    args = commands(1)[1]
    assert args[-2:] == ["--cfg", "job"]
    main(localised(args, root))
    out = capsys.readouterr().out
    assert "_target_: powerbench.model.loading.load_hub_model" in out
    assert "hf_id: /data/checkpoints/relu-3b" in out and "d_ffn: 8640" in out


def test_1_a_local_checkpoint_directory_loads(root, tokenizer, tmp_path):  # noqa: F811
    make_opt(tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    cfg = load_config(localised(["model=relu_3b_local", f"model.hf_id={tmp_path}"], root))
    loaded = build(cfg.model)
    assert loaded.source == f"local:{tmp_path}" and loaded.spec.d_ffn == 256
    assert loaded.spec.stats.token_sparsity == 0.85  # the yaml's statistics, kept


def test_2_a_hardware_profile_is_simulated(root, simulate):
    from powerbench.hardware.load import load_hardware

    (args,) = commands(2)
    m = metrics(simulate(args))
    assert m["sim_feasible"] == 1.0 and m["sim_decode_tokens_per_s"] > 0
    placement = json.loads((simulate(args) / "placement" / "placement.json").read_text())
    assert placement["hardware"] == "pc_mid"
    assert placement["gpu_bytes"]["total"] <= (25.7698 - 0.5) * 1e9  # the yaml's VRAM
    hw = load_hardware(load_config(localised(["hardware=pc_mid"], root)).hardware)
    assert hw.name == "pc_mid" and hw.accelerator == "gpu"


def test_3_a_solver_from_another_package_places_and_is_simulated(simulate):
    (uniform_args,) = commands(3)
    greedy_args = commands(2)[0]  # the same model and machine with the greedy solver
    assert [a for a in uniform_args if not a.startswith("hydra.")] == [
        a.replace("solver=greedy", "solver=uniform") for a in greedy_args]
    uniform, greedy = simulate(uniform_args), simulate(greedy_args)
    assert json.loads((uniform / "placement" / "placement.json").read_text())["solver"] == (
        "uniform")
    per_layer = {row["gpu_neurons"] for row in placement_layers(uniform)}
    assert len(per_layer) == 1 and int(per_layer.pop()) > 0  # the same count in every layer
    assert metrics(uniform)["sim_decode_tokens_per_s"] > 0
    # greedy's global top-k is the optimum of the same budget: uniform can only lose
    assert metrics(uniform)["solver_objective"] < metrics(greedy)["solver_objective"]


def test_3_a_bad_solver_setting_names_itself(root):
    with pytest.raises(Exception, match=r"solver.budget_share=0.0: must be in \(0, 1\]"):
        load_config(localised([*commands(3)[0], "solver.budget_share=0"], root))


@pytest.fixture(scope="module")
def opt(tokenizer):  # noqa: F811
    return loaded_model("tiny_opt", make_opt(tokenizer), tokenizer)


def test_4_the_engine_commands_compose_and_measure(root, opt):
    from mylab.topk import TopKFFNConfig

    for args, keep in zip(commands(4), (0.25, 0.1), strict=True):
        cfg = load_config(localised(args, root))
        assert cfg.model.name == "tiny_relu" and cfg.engine.name == "topk"
        assert isinstance(cfg.engine.ffn, TopKFFNConfig) and cfg.engine.ffn.keep == keep
        result = run_engine(cfg.engine, opt, PROMPTS, BENCH)
        assert result.engine == "topk" and result.metrics["decode_tokens_per_s"] > 0
        assert result.metrics["sparse_computed_fraction"] == round(keep * 256) / 256


def test_4_the_ffn_is_the_dense_ffn_restricted_to_each_tokens_top_k(root, opt):
    from mylab.topk import TopKFFN

    weights = extract_weights(opt.model)
    x = torch.randn(5, weights.layers[0].ffn.w1.shape[1])
    dense = DenseFFN(weights)
    with torch.inference_mode():
        torch.testing.assert_close(TopKFFN(weights, keep=1.0)(1, x), dense(1, x))
        f = weights.layers[1].ffn
        h = torch.relu(x @ f.w1.T + f.b1)
        kept = h * (h >= h.topk(64, dim=1).values[:, -1:])  # keep=0.25 of 256 neurons
        torch.testing.assert_close(TopKFFN(weights, keep=0.25)(1, x), kept @ f.w2.T + f.b2)


def test_4_a_bad_engine_setting_names_itself(root):
    with pytest.raises(Exception, match=r"engine.ffn.keep=0.0: must be in \(0, 1\]"):
        load_config(localised([*commands(4)[0], "engine.ffn.keep=0"], root))


def test_an_entry_point_naming_no_config_group_is_refused(tmp_path, monkeypatch):
    from powerbench.config.store import group_modules

    dist_info = tmp_path / "other-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: other\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text("[powerbench.config]\nsolvers = other.x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="'solvers' is not a config group; valid: model, "):
        group_modules()
