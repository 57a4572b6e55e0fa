"""A new SQLite store copied from the migrated empty template is the store MLflow makes:
same schema and revision, its own Default experiment, the same experiment ids; an
existing file is never replaced; a template that cannot be made leaves it to MLflow."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import mlflow
import pytest

from powerbench.tracking.empty_store import create_sqlite_store, template_path
from powerbench.tracking.tracker import ensure_experiment


def _tables(path: Path) -> dict[str, set[str]]:
    """Each table's columns and its indexes (MLflow's own migrations order CHECK
    constraints differently from run to run, so the CREATE text is not compared)."""
    db = sqlite3.connect(path)
    try:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {name: {f"{c[1]} {c[2]} notnull={c[3]} pk={c[5]}"
                       for c in db.execute(f'PRAGMA table_info("{name}")')}
                | {f"index {i[1]} unique={i[2]}"
                   for i in db.execute(f'PRAGMA index_list("{name}")')}
                for name in names}
    finally:
        db.close()


def _use(uri: str) -> list[tuple]:
    client = mlflow.tracking.MlflowClient(uri)
    experiment_id = ensure_experiment(client, "e", uri)
    run = client.create_run(experiment_id)
    client.log_metric(run.info.run_id, "m", 1.0)
    return sorted((e.experiment_id, e.name, e.artifact_location)
                  for e in client.search_experiments())


def test_a_store_from_the_template_is_the_store_mlflow_makes(tmp_path, monkeypatch):
    monkeypatch.setenv("POWERBENCH_CACHE", str(tmp_path / "cache"))
    copied, migrated = tmp_path / "a" / "copied.db", tmp_path / "b" / "migrated.db"
    assert not create_sqlite_store(copied)  # no folder: MLflow's error, as before
    copied.parent.mkdir()
    migrated.parent.mkdir()
    assert create_sqlite_store(copied)
    assert template_path().is_relative_to(tmp_path / "cache")
    used_copy, used_migrated = _use(f"sqlite:///{copied}"), _use(f"sqlite:///{migrated}")
    # the Default experiment is made on first open, where MLflow puts it for this store
    assert used_copy[0] == used_migrated[0] and used_copy[0][:2] == ("0", "Default")
    assert used_copy[1] == ("1", "e", (copied.parent / "mlartifacts" / "e").as_uri())
    assert [row[:2] for row in used_copy] == [row[:2] for row in used_migrated]
    assert _tables(copied) == _tables(migrated)
    revision = "SELECT version_num FROM alembic_version"
    assert (sqlite3.connect(copied).execute(revision).fetchall()
            == sqlite3.connect(migrated).execute(revision).fetchall())


def test_an_existing_file_is_never_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("POWERBENCH_CACHE", str(tmp_path / "cache"))
    empty = tmp_path / "empty.db"
    empty.touch()  # e.g. left by a write check: MLflow migrates it as before
    assert not create_sqlite_store(empty) and empty.stat().st_size == 0
    store = tmp_path / "store.db"
    assert create_sqlite_store(store)
    _use(f"sqlite:///{store}")
    before = store.read_bytes()
    assert not create_sqlite_store(store) and store.read_bytes() == before
    assert not list(tmp_path.glob(".*.new"))  # no staged copy left behind


def test_without_a_template_mlflow_creates_the_store(tmp_path, monkeypatch):
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache directory would be")
    monkeypatch.setenv("POWERBENCH_CACHE", str(blocked))
    store = tmp_path / "store.db"
    assert not create_sqlite_store(store) and not store.exists()
    assert [row[1] for row in _use(f"sqlite:///{store}")] == ["Default", "e"]


@pytest.mark.parametrize("damaged", [b"", b"not a database"])
def test_a_damaged_template_is_made_again(tmp_path, monkeypatch, damaged):
    monkeypatch.setenv("POWERBENCH_CACHE", str(tmp_path / "cache"))
    template_path().parent.mkdir(parents=True)
    template_path().write_bytes(damaged)
    store = tmp_path / "store.db"
    assert create_sqlite_store(store)
    assert template_path().read_bytes()[:16] == b"SQLite format 3\x00"
    assert [row[1] for row in _use(f"sqlite:///{store}")] == ["Default", "e"]
