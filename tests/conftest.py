"""Session-wide fixtures shared by every test package.

`tiny_model`: a small `tiny_relu` (2 layers, d_model 64, d_ffn 256, 512-token BPE,
80 steps on ShareGPT train text; a few seconds on two cores) built through the same code
path as the default model (`load_tiny_relu`) into a temporary cache. It is a real trained
`OPTForCausalLM` + `PreTrainedTokenizerFast` (a `TinyLoadedModel`: `.model`, `.tokenizer`,
`.spec`, `.report`); its held-out perplexity is clearly below the unigram perplexity.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("POWERBENCH_STRICT_METRICS", "1")  # undeclared metric names fail

TINY_TEST_TRAIN = dict(
    vocab_size=512, tokenizer_chars=300_000, n_layers=2, d_model=64, d_ffn=256, n_heads=2,
    max_positions=128, seq_len=64, batch_size=32, steps=80, lr=3e-3, warmup_steps=8,
    train_chars=400_000, eval_tokens=4096, max_docs=2000,
)


@pytest.fixture
def tiny_model_config():
    """A fresh ModelConfig of the test-sized tiny_relu (the one `tiny_model` is built from)."""
    from powerbench.model.config import ModelConfig, TinyTrainConfig

    return ModelConfig(_target_="powerbench.model.tiny_relu.load_tiny_relu", name="tiny_relu",
                       tiny=TinyTrainConfig(**TINY_TEST_TRAIN))


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory):
    """The cache directory `tiny_model` is trained into (pass it as `cache_dir=`, with
    `tiny_overrides`, and the pipeline finds the same trained model)."""
    return tmp_path_factory.mktemp("tiny_cache")


@pytest.fixture(scope="session")
def tiny_model(tiny_cache):
    """A small trained tiny_relu (TinyLoadedModel), trained once per test session."""
    from powerbench.model.config import ModelConfig, TinyTrainConfig
    from powerbench.model.tiny_relu import load_tiny_relu

    cfg = ModelConfig(_target_="powerbench.model.tiny_relu.load_tiny_relu", name="tiny_relu",
                      tiny=TinyTrainConfig(**TINY_TEST_TRAIN))
    return load_tiny_relu(cfg, cache_dir=tiny_cache, progress=False)


@pytest.fixture(scope="session")
def tiny_overrides(tiny_model, tiny_cache) -> list[str]:
    """Hydra overrides that make `model=tiny_relu` the session's trained test model."""
    return [f"cache_dir={tiny_cache}", "model=tiny_relu",
            *(f"model.tiny.{k}={v}" for k, v in TINY_TEST_TRAIN.items())]


@pytest.fixture(scope="module")
def hydra_conf():
    """conf/ initialised with the typed schemas: `hydra.compose` works in the module's tests
    (use with `pytestmark = pytest.mark.usefixtures("hydra_conf")`)."""
    from powerbench.config import hydra_context

    with hydra_context():
        yield



@pytest.fixture
def run_cli(tmp_path):
    """`run_cli(argv)`: `powerbench <argv>` in this process, its cache, run directory and
    MLflow store under tmp_path (`cache_dir`, `tracking.uri`, `hydra.run.dir` added unless
    given)."""
    from powerbench.cli import main

    calls = []

    def run(argv: list[str]) -> None:
        args = list(argv)
        if not any(a.startswith("cache_dir=") for a in args):  # job ledger, profiles: fresh
            args.append(f"cache_dir={tmp_path / 'cache'}")
        if not any(a.startswith("tracking.uri=") or a.startswith("tracking=") for a in args):
            args.append(f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}")
        if not any(a.startswith("hydra.run.dir=") for a in args):
            args.append(f"hydra.run.dir={tmp_path / f'run{len(calls)}'}")
        if not any(a.startswith("hydra.sweep.dir=") for a in args):
            args.append(f"hydra.sweep.dir={tmp_path / f'sweep{len(calls)}'}")
        calls.append(args)
        main(args)

    run.store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return run
