"""A shared MLflow tracking server on a real PostgreSQL backend, on loopback.

`TrackingServer(data_dir, port, pg_port).start()` creates (once) a PostgreSQL cluster in
`data_dir/postgres` and a database `mlflow`, starts PostgreSQL, then `mlflow server` with
that backend and an artifact root in `data_dir/artifacts` (served through the server, so
clients need no shared disk). `stop()` stops both; `start()` again resumes on the same
data. PostgreSQL refuses to run as root, so as root its commands run as the `postgres`
user. Used by `powerbench mlflow-server` (`make mlflow-server`) and the tests.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from powerbench.tracking.store import server_reachable

log = logging.getLogger(__name__)

DATABASE = "mlflow"
# MLflow 3's server also starts its job execution (a job runner and three huey consumers,
# for GenAI jobs) unless told not to: powerbench does not use it, and on a small machine
# those processes cost seconds of CPU at every start. An explicit setting is kept.
NO_JOB_EXECUTION = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def server_env() -> dict[str, str]:
    """The environment of `mlflow server`: this one, without job execution unless set."""
    return {**NO_JOB_EXECUTION, **os.environ}


class ServerError(RuntimeError):
    """PostgreSQL or the MLflow server could not be started (the message says which)."""


def pg_bin(name: str) -> str:
    """A PostgreSQL server binary (Debian keeps them in /usr/lib/postgresql/<v>/bin)."""
    found = shutil.which(name)
    if found:
        return found
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / name).exists():
            return str(folder / name)
    raise ServerError(f"PostgreSQL's {name} not found: install Debian's postgresql "
                      "(`apt-get install -y postgresql`; `make mlflow-server` does it)")


@dataclass
class TrackingServer:
    data_dir: Path
    port: int = 5000
    pg_port: int = 5433
    host: str = "127.0.0.1"
    mlflow: Path = field(default_factory=lambda: Path(sys.executable).parent / "mlflow")
    _process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def backend_uri(self) -> str:
        return f"postgresql+psycopg2://postgres@{self.host}:{self.pg_port}/{DATABASE}"

    @property
    def pg_data(self) -> Path:
        return Path(self.data_dir) / "postgres"

    def _as_postgres(self, args: list[str], **kwargs) -> subprocess.CompletedProcess:
        if os.geteuid() == 0:
            args = ["runuser", "-u", "postgres", "--", *args]
        return subprocess.run(args, capture_output=True, text=True, **kwargs)

    def _check(self, result: subprocess.CompletedProcess, what: str) -> None:
        if result.returncode != 0:
            raise ServerError(f"{what} failed: {(result.stderr or result.stdout).strip()}")

    def start_database(self) -> None:
        data = self.pg_data
        data.parent.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(data.parent, "postgres")
        if not (data / "PG_VERSION").exists():
            self._check(self._as_postgres([pg_bin("initdb"), "-D", str(data), "-A", "trust",
                                           "-U", "postgres"]), "initdb")
        log_file = data.parent / "postgres.log"
        self._check(self._as_postgres([
            pg_bin("pg_ctl"), "-D", str(data), "-l", str(log_file), "-w", "-t", "60",
            "-o", f"-p {self.pg_port} -h {self.host} -k {data}", "start"]), "pg_ctl start")
        exists = self._as_postgres(["psql", "-h", self.host, "-p", str(self.pg_port), "-U",
                                    "postgres", "-tAc",
                                    f"SELECT 1 FROM pg_database WHERE datname='{DATABASE}'"])
        self._check(exists, "psql")
        if exists.stdout.strip() != "1":
            self._check(self._as_postgres([
                "psql", "-h", self.host, "-p", str(self.pg_port), "-U", "postgres", "-c",
                f"CREATE DATABASE {DATABASE}"]), "CREATE DATABASE")

    def start_mlflow(self, timeout_s: float = 120.0) -> None:
        artifacts = Path(self.data_dir) / "artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        log_path = Path(self.data_dir) / "mlflow-server.log"
        self._process = subprocess.Popen(
            [str(self.mlflow), "server", "--host", self.host, "--port", str(self.port),
             "--backend-store-uri", self.backend_uri, "--artifacts-destination",
             str(artifacts), "--workers", "1"],
            stdout=log_path.open("ab"), stderr=subprocess.STDOUT, env=server_env())
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self._process.poll() is not None:
                raise ServerError(f"mlflow server exited ({self._process.returncode}); "
                                  f"see {log_path}")
            if server_reachable(self.uri, timeout_s=1.0):
                return
            time.sleep(0.5)
        raise ServerError(f"mlflow server not up at {self.uri} after {timeout_s:.0f} s; "
                          f"see {log_path}")

    def start(self) -> TrackingServer:
        self.start_database()
        try:
            self.start_mlflow()
        except BaseException:
            self.stop()  # leave no PostgreSQL running behind a failed start
            raise
        log.info("MLflow server %s on PostgreSQL %s", self.uri, self.backend_uri)
        return self

    def stop_mlflow(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def stop(self) -> None:
        self.stop_mlflow()
        if (self.pg_data / "postmaster.pid").exists():
            self._as_postgres([pg_bin("pg_ctl"), "-D", str(self.pg_data), "-m", "fast", "-w",
                               "stop"])
