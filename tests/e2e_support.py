"""An end-to-end stack of real processes: `jobrelay api`, `relay`, `worker` and
`sqs-worker` on one test database and the emulator, plus a loopback page server."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import httpx
import psycopg

from jobrelay.aws.emulator import free_port
from jobrelay.cli.commands.demo import serve_demo_pages
from tests.harness import AwsTestResources, cli_env, jobrelay_command, run_cli, wait_until


@dataclass
class Stack:
    """Processes by name; each can be killed and started again."""

    env: dict[str, str]
    api_port: int
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    COMMANDS: ClassVar[dict[str, list[str]]] = {
        "api": ["api"],
        "relay": ["relay"],
        "worker": ["worker"],
        "sqs-worker": ["sqs-worker"],
    }

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start(self, name: str) -> None:
        args = list(self.COMMANDS[name])
        if name == "api":
            args += ["--port", str(self.api_port)]
        log = (self.logs / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [*jobrelay_command(), *args], env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        if name == "api":
            wait_until(self.api_ready, timeout_s=60, what="the API")

    def api_ready(self) -> bool:
        process = self.processes.get("api")
        assert process is None or process.poll() is None, self.log("api")
        try:
            return httpx.get(f"{self.base_url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, name: str, sig: signal.Signals = signal.SIGTERM) -> None:
        process = self.processes.pop(name)
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


@contextmanager
def running_stack(
    dsn: str, emulator_url: str, resources: AwsTestResources, data_dir: Path, **env: str
) -> Iterator[Stack]:
    port = free_port()
    environment = cli_env(
        DATABASE_URL=dsn,
        JOBRELAY_DATA_DIR=str(data_dir),
        JOBRELAY_AWS_ENDPOINT_URL=emulator_url,
        JOBRELAY_SQS_QUEUE_NAME=resources.queues.work.rsplit("/", 1)[-1],
        JOBRELAY_SQS_DLQ_NAME=resources.queues.dead_letter.rsplit("/", 1)[-1],
        JOBRELAY_S3_BUCKET=resources.bucket,
        JOBRELAY_SQS_WORKER_WEBHOOK_URL=f"http://127.0.0.1:{port}/v1/webhooks/worker",
        JOBRELAY_SQS_WORKER_POLL_WAIT_S="1",
        JOBRELAY_LOG_FORMAT="json",
        **env,
    )
    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stack = Stack(env=environment, api_port=port, logs=logs)
    try:
        for name in ("api", "relay", "worker", "sqs-worker"):
            stack.start(name)
        yield stack
    finally:
        stack.stop_all()


page_server = serve_demo_pages


def token(data_dir: Path, sub: str) -> str:
    result = run_cli("token", "--sub", sub, JOBRELAY_DATA_DIR=str(data_dir))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def tenant(dsn: str, sub: str) -> int:
    """A new organization with `sub` as a member and one project; the project's id."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            """
            WITH org AS (INSERT INTO organization (name, created_by, updated_by)
                         VALUES ('e2e', 'ops', 'ops') RETURNING id),
                 member AS (INSERT INTO organization_member (organization_id, subject,
                                                              created_by, updated_by)
                            SELECT id, %s, 'ops', 'ops' FROM org)
            INSERT INTO project (organization_id, name, created_by, updated_by)
            SELECT id, 'e2e', 'ops', 'ops' FROM org RETURNING id
            """,
            (sub,),
        ).fetchone()
    assert row is not None
    return int(row[0])
