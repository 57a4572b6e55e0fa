"""A model whose FFN lives only in its flash file: the streamed writer, the DRAM-only
loader, the resident-memory guard, the disk-space check, the memory cap, the GGUF peer."""

from __future__ import annotations

import shutil
from collections import namedtuple

import numpy as np
import pytest
import torch

from powerbench.engine.decoder import Decoder
from powerbench.engine.sparse import SparseFFN
from powerbench.engine.synthetic import FFNInFile, TraceReplay, synthetic_decoder_weights
from powerbench.flash.ffn import FlashFFN
from powerbench.flash.layout import geometry_for, layers_of
from powerbench.flash.layout_io import read_layout
from powerbench.flash.synthetic_file import synthetic_flash_file, synthetic_geometry
from powerbench.measure.flash_capped_runs import (
    CappedExperiment,
    InsufficientDiskSpace,
    planned_files,
    prepare_files,
    run_capped,
)
from powerbench.measure.flash_capped_worker import FlashRun, Sparsity
from powerbench.measure.resident_memory import (
    ResidentBudget,
    ResidentMemoryExceeded,
    peak_rss,
    reset_peak_rss,
    rss,
    tensor_bytes,
)
from powerbench.profiling.synthetic import synthetic_profile

TINY = ["spec.d_model=1024", "spec.d_ffn=512", "spec.n_heads=8", "spec.n_kv_heads=8",
        "spec.vocab_size=300", "spec.max_positions=64"]


@pytest.fixture(scope="module")
def spec():
    from powerbench.config import group_config
    from powerbench.engine.synthetic import synthetic_spec

    return synthetic_spec(group_config("model", "llama_reglu_13b", TINY), layers=3)


def test_streamed_file_holds_the_in_dram_layers(spec, tmp_path):
    header = synthetic_flash_file(spec, torch.float16, 3, tmp_path / "m.pbflash")
    dense = synthetic_decoder_weights(spec, torch.float16, 3, ffn="per_layer")
    _, back = read_layout(tmp_path / "m.pbflash")
    for a, b in zip(layers_of(dense), back, strict=True):
        for pa, pb in zip(a.parts, b.parts, strict=True):
            assert torch.equal(pa, pb)
    assert header.geometry == geometry_for(layers_of(dense), "reglu", True)
    # reused as it is (the recipe's fingerprint checks out without any weights)
    assert synthetic_flash_file(spec, torch.float16, 3, tmp_path / "m.pbflash") == header


def test_an_interrupted_write_resumes_to_the_same_file(spec, tmp_path):
    whole = synthetic_flash_file(spec, torch.float16, 0, tmp_path / "a.pbflash")

    def stop_after_two(done, n):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        synthetic_flash_file(spec, torch.float16, 0, tmp_path / "b.pbflash",
                             progress=stop_after_two)
    assert not (tmp_path / "b.pbflash").exists()
    assert (tmp_path / "b.pbflash.partial").exists()
    layers_written = []
    resumed = synthetic_flash_file(spec, torch.float16, 0, tmp_path / "b.pbflash",
                                   progress=lambda done, n: layers_written.append(done))
    assert layers_written == [3]  # only the missing layer was drawn and written
    assert resumed.layer_crcs == whole.layer_crcs and resumed.bias_crc == whole.bias_crc
    assert (tmp_path / "b.pbflash").read_bytes() == (tmp_path / "a.pbflash").read_bytes()
    assert not (tmp_path / "b.pbflash.partial").exists()


def test_dram_only_loader_decodes_as_the_in_dram_engine(spec, tmp_path):
    """The decoder holds no FFN weight (FFNInFile); FlashFFN reads the streamed file; the
    logits equal the in-DRAM sparse engine's on the same weights and active sets."""
    path = tmp_path / "m.pbflash"
    synthetic_flash_file(spec, torch.float16, 1, path)
    full = synthetic_decoder_weights(spec, torch.float16, 1, ffn="per_layer")
    dense_only = synthetic_decoder_weights(spec, torch.float16, 1, ffn="none")
    assert all(isinstance(layer.ffn, FFNInFile) for layer in dense_only.layers)
    ffn_bytes = 3 * spec.n_layers * spec.d_ffn * spec.d_model * 2
    assert tensor_bytes(full) - tensor_bytes(dense_only) >= ffn_bytes
    for a, b in zip(full.layers, dense_only.layers, strict=True):  # same non-FFN weights
        assert torch.equal(a.attn.wq, b.attn.wq) and torch.equal(a.attn.wo, b.attn.wo)
    profile = synthetic_profile(spec, trace_tokens=12, seed=0)
    ref = Decoder(full, ffn=SparseFFN(full, backend="sparse_cpu", predictors=TraceReplay(profile)))
    flash = FlashFFN(None, predictors=TraceReplay(profile), path=str(path),
                     dram_budget_fraction=0.3, profile=profile, dense_from_rows=1 << 30)
    try:
        dec = Decoder(dense_only, ffn=flash)
        ids = torch.randint(0, spec.vocab_size, (1, 8), generator=torch.Generator().manual_seed(0))
        caches = ref.new_cache(1, 8), dec.new_cache(1, 8)
        for t in range(8):
            want = ref.forward(ids[:, t: t + 1], caches[0], last_only=True).float()
            got = dec.forward(ids[:, t: t + 1], caches[1], last_only=True).float()
            assert torch.allclose(got, want, atol=2e-2, rtol=2e-2), t
        assert flash.metrics()["flash_reads"] > 0  # the FFN came from the file
    finally:
        flash.close()


def test_resident_guard_trips_above_its_budget():
    reset_peak_rss()
    base = rss()
    budget = ResidentBudget(base, dense_bytes=0, cache_bytes=16 << 20, scratch_bytes=0,
                            slack_bytes=32 << 20)
    budget.check(peak_rss())  # nothing held yet: within
    held = torch.ones(200 << 20, dtype=torch.uint8)  # 200 MB touched, over 48 MB of room
    with pytest.raises(ResidentMemoryExceeded, match="exceeds the budget .* FFN cache 0.02"):
        budget.check(peak_rss())
    del held


def _experiment(spec, tmp_path, **kw):
    runs = (FlashRun("flash", "published", 0.002),
            FlashRun("page cache", "published", 0.0, bundled=False, direct=False, cache=False,
                     pipeline=False))
    args = dict(name="tiny", spec=spec, dtype="fp16", seed=0, work_dir=tmp_path / "big",
                cap_bytes=2 * 10**9, sparsities=(Sparsity("published", 0.78, "test"),),
                runs=runs, llamacpp=False, new_tokens=3, rounds=1)
    return CappedExperiment(**{**args, **kw})


def test_a_run_without_disk_space_fails_before_writing(spec, tmp_path, monkeypatch):
    exp = _experiment(spec, tmp_path)
    need = sum(planned_files(exp).values())
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**12, 10**12, need // 2))
    with pytest.raises(InsufficientDiskSpace, match=r"needs .* GB for its files .* GB free"):
        prepare_files(exp)
    assert not (tmp_path / "big").exists() or not any((tmp_path / "big").iterdir())


def test_files_are_sized_as_written(spec, tmp_path):
    exp = _experiment(spec, tmp_path)
    sizes = prepare_files(exp)
    for path, n in planned_files(exp).items():
        assert sizes[path.name] == n == path.stat().st_size
    g = synthetic_geometry(spec, torch.float16, False)
    assert not g.bundled and g.file_bytes == sizes[exp.flash_path(False).name]


cgroup = pytest.mark.skipif(
    not __import__("os").path.exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    or __import__("os").geteuid() != 0, reason="needs root and the cgroup v1 memory controller")


@cgroup
def test_capped_runs_measure_in_a_memory_cgroup_and_clean_up(spec, tmp_path):
    report = run_capped(_experiment(spec, tmp_path))
    assert [r["label"] for r in report.results] == ["flash", "page cache"]
    for r in report.results:
        assert r["tokens_per_s"] > 0 and r["peak_rss"] <= r["rss_limit"]
        assert r["cap_peak"] > 0  # the run's memory was charged to the cgroup
    flash = report.results[0]
    assert flash["read_bytes_per_token"] > 0  # O_DIRECT reads counted by the kernel
    assert report.ceiling["best"] > 0
    assert not any((tmp_path / "big").glob("*.pbflash"))  # large files deleted


@cgroup
def test_the_guard_stops_a_capped_run_over_budget(spec, tmp_path):
    with pytest.raises(RuntimeError, match="exceeds the budget"):
        run_capped(_experiment(spec, tmp_path, slack_bytes=-(10**9)))


def test_random_gguf_has_the_llama_tensors(spec, tmp_path):
    gguf = pytest.importorskip("gguf")
    from powerbench.engine.llamacpp import random_llama_gguf

    path = random_llama_gguf(spec, tmp_path / "m.gguf", seed=0)
    reader = gguf.GGUFReader(path)
    names = {t.name: t for t in reader.tensors}
    assert "output.weight" not in names  # tied to token_embd, as our decoder
    assert len(names) == 2 + 9 * spec.n_layers
    gate = names["blk.0.ffn_gate.weight"]
    assert gate.tensor_type.name == "F16" and sorted(gate.shape.tolist()) == sorted(
        [spec.d_model, spec.d_ffn])
    assert np.isfinite(np.asarray(gate.data, dtype=np.float32)).all()


def test_the_task_composes_the_13b_comparison_and_the_fig14_ablation(tmp_path):
    from types import SimpleNamespace

    from powerbench.config import load_config
    from powerbench.measure.flash_capped_runs import model_bytes
    from powerbench.tasks.bench_flash import capped_experiments
    from powerbench.tasks.config import BenchFlashTask

    task = load_config(["task=bench_flash", f"task.work_dir={tmp_path}"]).task  # its models
    main, ablation = capped_experiments(task, SimpleNamespace(cache_dir=None))
    assert main.spec.name == "llama_reglu_13b" and main.llamacpp
    assert 24e9 < model_bytes(main.spec) < 28e9  # ~26 GB in fp16
    assert main.cap_bytes <= 2 / 3 * model_bytes(main.spec)
    assert [s.token_sparsity for s in main.sparsities] == [0.78, 0.89]  # published, ProSparse
    assert len(main.runs) == 4 and {r.sparsity for r in main.runs} == {"published", "sparser"}
    assert [r.label for r in ablation.runs] == ["page-cache reads", "+Bundle", "+NeuronCache",
                                                "+Pipeline"]
    flags = [(r.bundled, r.direct, r.cache, r.pipeline) for r in ablation.runs]
    assert flags == [(False, False, False, False), (True, False, False, False),
                     (True, True, True, False), (True, True, True, True)]  # cumulative
    assert not ablation.llamacpp and len({r.budget_gb for r in ablation.runs}) == 1
    with pytest.raises(ValueError, match="task.cap_fraction"):
        capped_experiments(BenchFlashTask(cap_fraction=1.5), SimpleNamespace(cache_dir=None))
    with pytest.raises(ValueError, match="model@task.model"):
        capped_experiments(BenchFlashTask(), SimpleNamespace(cache_dir=None))
    with pytest.raises(ValueError, match="task.mode"):
        from powerbench.tasks.bench_flash import bench_flash

        bench_flash(BenchFlashTask(mode="nope"), SimpleNamespace(), tmp_path)


def test_a_missing_llamacpp_peer_stops_the_run_before_writing(spec, tmp_path, monkeypatch):
    monkeypatch.setattr("powerbench.engine.llamacpp.llamacpp_available", lambda: False)
    exp = _experiment(spec, tmp_path, llamacpp=True)
    with pytest.raises(RuntimeError, match="make llamacpp"):
        run_capped(exp)
    assert not (tmp_path / "big").exists() or not any((tmp_path / "big").iterdir())
