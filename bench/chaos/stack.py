"""Real processes for the chaos scenarios: an embedded PostgreSQL server of the scenario's
own (it may be crashed), `jobrelay` CLI processes with a log file each, and helpers to read
the database. Nothing here runs in-process that a user would run as a process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row

from bench.chaos.app import OUTPUT_TABLE_DDL
from jobrelay.db import migrate
from jobrelay.db.embedded import EmbeddedPostgres

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
APP = "bench.chaos.app:job_types"


class InvariantError(AssertionError):
    """A scenario could not run to its end (e.g. a drain that never finished)."""


def wait_until(probe: Callable[[], T | None], *, timeout_s: float, what: str) -> T:
    """Poll `probe` every 50 ms until it returns a truthy value."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.05)
    raise InvariantError(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r})")


@dataclass
class Database:
    """An embedded PostgreSQL server (durable defaults) with one migrated database."""

    workdir: Path
    name: str = "chaos"
    server: EmbeddedPostgres = field(init=False)
    dsn: str = field(init=False)

    def start(self) -> Database:
        self.server = EmbeddedPostgres(
            self.workdir / "pgdata",
            server_options={
                "max_connections": "300",
            },
        )
        admin = self.server.start()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.name}")  # type: ignore[arg-type]
            conn.execute(f"CREATE DATABASE {self.name}")  # type: ignore[arg-type]
        self.dsn = self.server.dsn(self.name)
        migrate.upgrade(self.dsn)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(OUTPUT_TABLE_DDL)  # type: ignore[arg-type]
        return self

    def stop(self, mode: str = "fast") -> None:
        self.server.stop(mode)

    def rows(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        with psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row) as conn:
            return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]

    def one(self, sql: str, params: Any = None) -> dict[str, Any]:
        [row] = self.rows(sql, params)
        return row

    def now(self) -> Any:
        return self.one("SELECT clock_timestamp() AS t")["t"]


def jobrelay_command() -> list[str]:
    return [str(Path(sys.executable).with_name("jobrelay"))]


@dataclass
class Processes:
    """Named `jobrelay` CLI processes, each logging to `<logs>/<name>.log`."""

    env: dict[str, str]
    logs: Path
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started: int = 0

    def start(self, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                [*jobrelay_command(), *args],
                env={**self.env, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        self.running[name] = process
        self.started += 1
        return process

    def kill(self, name: str) -> int:
        """SIGKILL `name`; returns its pid once it is gone."""
        process = self.running.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        return process.pid

    def signal(self, name: str, sig: signal.Signals) -> None:
        self.running[name].send_signal(sig)

    def dead(self) -> list[str]:
        return [name for name, p in self.running.items() if p.poll() is not None]

    def said(self, name: str, text: str) -> bool:
        path = self.logs / f"{name}.log"
        return path.exists() and text in path.read_text(errors="replace")

    def check_alive(self) -> bool:
        """True, or InvariantError naming a process that exited, with its log's end."""
        for name in self.dead():
            raise InvariantError(f"{name} exited:\n{self.log(name)}")
        return True

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop_all(self) -> dict[str, int]:
        codes: dict[str, int] = {}
        for process in self.running.values():
            if process.poll() is None:
                with _suppress_lookup():
                    process.send_signal(signal.SIGCONT)
                process.send_signal(signal.SIGTERM)
        for name, process in self.running.items():
            try:
                codes[name] = process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                process.kill()
                codes[name] = process.wait()
        self.running.clear()
        return codes


class _suppress_lookup:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is ProcessLookupError


def base_env(dsn: str, workdir: Path, *, lease_s: float, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    pythonpath = env.get("PYTHONPATH")
    env.update(
        DATABASE_URL=dsn,
        PYTHONPATH=f"{REPO}{os.pathsep}{pythonpath}" if pythonpath else str(REPO),
        JOBRELAY_APP=APP,
        JOBRELAY_DATA_DIR=str(workdir / "data"),
        JOBRELAY_JOBS_LEASE_S=str(lease_s),
        JOBRELAY_JOBS_RESCUE_INTERVAL_S="0.2",
        JOBRELAY_WORKER_POLL_INTERVAL_S="0.1",
        JOBRELAY_LOG_LEVEL="WARNING",
        JOBRELAY_ENV="development",  # the local issuer and development secrets
        CHAOS_FINISH_DIR=str(workdir / "finish"),
    )
    (workdir / "finish").mkdir(parents=True, exist_ok=True)
    env.update(extra)
    return env


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


@dataclass
class Aws:
    """moto's server with one queue (and dead-letter queue) and one bucket."""

    emulator: Any = None
    env: dict[str, str] = field(default_factory=dict)

    def start(self, max_receive_count: int = 5) -> Aws:
        import asyncio

        from jobrelay.aws.clients import AwsEndpoint, ensure_resources
        from jobrelay.aws.emulator import LocalEmulator

        self.emulator = LocalEmulator()
        url = self.emulator.start()
        asyncio.run(
            ensure_resources(
                AwsEndpoint(region="us-east-1", endpoint_url=url),
                queue_name="chaos-work",
                dlq_name="chaos-dlq",
                bucket="chaos-results",
                max_receive_count=max_receive_count,
            )
        )
        self.env = {
            "JOBRELAY_AWS_ENDPOINT_URL": url,
            "JOBRELAY_SQS_QUEUE_NAME": "chaos-work",
            "JOBRELAY_SQS_DLQ_NAME": "chaos-dlq",
            "JOBRELAY_S3_BUCKET": "chaos-results",
        }
        return self

    def stop(self) -> None:
        if self.emulator is not None:
            self.emulator.stop()


def api_ready(port: int) -> bool:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def mint_token(env: dict[str, str], sub: str, *, admin: bool) -> str:
    args = [*jobrelay_command(), "token", "--sub", sub, *(["--admin"] if admin else [])]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True, cwd=REPO)
    return done.stdout.strip()
