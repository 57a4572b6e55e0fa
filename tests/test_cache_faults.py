"""Faults of the cache directory (issue 28): unwritable cache paths fail before any work,
naming the setting; a full disk names the path and the space needed; concurrent first
runs build once."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest

from powerbench.cache import ArtifactCache, DiskFullError, file_lock
from powerbench.paths import UnwritablePathError, cache_dir, check_cache_writable

SIM = ["model=opt_13b", "hardware=pc_low", "solver=greedy", "simulator=cost_model", "~engine"]


@pytest.fixture
def unwritable_dir(tmp_path) -> Path:
    """An existing directory no file can be created in (root ignores mode bits: /proc)."""
    if os.geteuid() == 0:
        return Path("/proc")
    path = tmp_path / "readonly"
    path.mkdir()
    path.chmod(0o500)
    return path


def test_cache_dir_read_only_fails_before_any_stage_naming_cache_dir(run_cli, capsys,
                                                                     unwritable_dir,
                                                                     monkeypatch):
    import powerbench.pipeline as pipeline

    started = []
    monkeypatch.setattr(pipeline, "run_stages", lambda ctx: started.append(ctx))
    start = time.perf_counter()
    with pytest.raises(SystemExit):
        run_cli([*SIM, f"cache_dir={unwritable_dir}", "tracking=disabled"])
    assert time.perf_counter() - start < 10 and not started  # nothing trained or computed
    err = capsys.readouterr().err
    assert f"cache_dir = {unwritable_dir} is not writable" in err


def test_powerbench_cache_env_read_only_names_the_variable(unwritable_dir, monkeypatch):
    monkeypatch.setenv("POWERBENCH_CACHE", str(unwritable_dir))
    with pytest.raises(UnwritablePathError, match=r"\$POWERBENCH_CACHE = .* is not writable"):
        check_cache_writable()
    monkeypatch.setenv("POWERBENCH_CACHE", str(unwritable_dir / "sub"))
    with pytest.raises(UnwritablePathError, match=r"\$POWERBENCH_CACHE = .*sub: cannot create"):
        cache_dir()


def test_check_is_a_real_write_not_os_access(tmp_path):
    assert check_cache_writable(tmp_path / "fresh") == tmp_path / "fresh"
    assert list((tmp_path / "fresh").iterdir()) == []  # the probe file is removed


def test_disk_full_while_saving_names_the_path_and_the_space_needed(tmp_path):
    cache = ArtifactCache(tmp_path / "profiles", suffix=".npz")

    def save_then_fill(value, path: Path) -> None:
        path.write_bytes(b"x" * 3 * 2**20)  # 3 MB got out before the disk filled
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(DiskFullError) as info:
        cache.get_or_build("key", lambda: 1, save_then_fill, lambda p: p.read_bytes())
    message = str(info.value)
    assert str(tmp_path / "profiles" / "key.npz") in message
    assert "needs more than 3.0 MB" in message and "MB free" in message
    assert info.value.errno == errno.ENOSPC
    assert list((tmp_path / "profiles").glob("*.tmp")) == []  # nothing partial left


def test_concurrent_first_runs_wait_on_one_build(tmp_path):
    builds = []
    cache = ArtifactCache(tmp_path, suffix=".txt")

    def build():
        builds.append(threading.get_ident())
        time.sleep(0.5)  # the other caller arrives while this one builds
        return "built"

    results = []

    def worker():
        results.append(cache.get_or_build("model", build, lambda v, p: p.write_text(v),
                                          lambda p: p.read_text()))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1  # one build, the others loaded it
    assert sorted(hit for _, hit in results) == [False, True, True]
    assert {value for value, _ in results} == {"built"}


def test_concurrent_first_tiny_relu_runs_train_once(tmp_path, monkeypatch, tiny_model_config):
    import powerbench.model.tiny_relu as tiny_relu

    trained = []

    def fake_train(tiny, key="", progress=True):
        trained.append(key)
        time.sleep(0.5)
        return None, None, None

    def fake_publish(model, tokenizer, report, directory):
        directory.mkdir(parents=True)
        (directory / "ok").write_text("1")

    monkeypatch.setattr(tiny_relu, "train_tiny_relu", fake_train)
    monkeypatch.setattr(tiny_relu, "_publish", fake_publish)
    monkeypatch.setattr(tiny_relu, "is_valid", lambda d: (d / "ok").exists())
    hits = []
    threads = [threading.Thread(target=lambda: hits.append(tiny_relu.ensure_tiny_relu(
        tiny_model_config.tiny, tmp_path, progress=False)[1])) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(trained) == 1 and sorted(hits) == [False, True]


def test_file_lock_is_released_on_error(tmp_path):
    with pytest.raises(RuntimeError), file_lock(tmp_path / "x.lock"):
        raise RuntimeError
    with file_lock(tmp_path / "x.lock"):  # would block forever if still held
        pass
