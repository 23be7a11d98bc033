"""A rolling deploy fails nothing (issue 24): the previous release's `jobrelay api`,
`worker` and `relay` (from a git worktree of its commit, RELEASES.md, in a virtualenv of
their own) keep running while this checkout migrates the database (expand only) and
starts its own processes beside them. Jobs enqueued through both APIs and a batch created
through the old API all complete; nothing fails.

The previous release's virtualenv holds only that release's jobrelay; its pinned
dependencies are this checkout's (when requirements.lock is the same at both commits, it
reads them from this virtualenv instead of installing them again)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from jobrelay.aws.emulator import free_port
from jobrelay.db import migrate
from tests.e2e_support import page_server, tenant, token
from tests.harness import AwsTestResources, cli_env, jobrelay_command, run_cli, wait_until

pytestmark = pytest.mark.long

REPO = Path(__file__).resolve().parents[2]
JOBS = 40
ITEMS = 10


def previous_release() -> tuple[str, str]:
    """(version, commit) of the newest release in RELEASES.md."""
    rows = re.findall(
        r"^\| (v[\d.]+) \| [\d-]+ \| ([0-9a-f]{40}) \|$",
        (REPO / "RELEASES.md").read_text(),
        re.MULTILINE,
    )
    assert rows, "RELEASES.md lists no release"
    return rows[-1]


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True, timeout=120
    ).stdout


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The previous release's `jobrelay` command, from a worktree and a virtualenv of its own."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs the git history of the repository")
    version, commit = previous_release()
    try:
        _git("cat-file", "-e", f"{commit}^{{commit}}")
    except subprocess.CalledProcessError:
        pytest.skip(f"{version} ({commit[:7]}) is not in this clone's history")
    root = tmp_path_factory.mktemp("previous")
    tree = root / "tree"
    _git("worktree", "add", "--detach", str(tree), commit)
    try:
        venv = root / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        python = venv / "bin" / "python"
        same_lock = _git("diff", "--name-only", commit, "HEAD", "--", "requirements.lock") == ""
        if same_lock:
            site = subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            Path(site, "_pinned_dependencies.pth").write_text(sysconfig.get_paths()["purelib"])
        else:
            subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--require-hashes",
                    "-r",
                    str(tree / "requirements.lock"),
                ],
                check=True,
                timeout=1200,
            )
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-build-isolation",
                "-e",
                str(tree),
            ],
            check=True,
            timeout=600,
        )
        yield [str(venv / "bin" / "jobrelay")]
    finally:
        _git("worktree", "remove", "--force", str(tree))


class Fleet:
    """Processes of two releases on one database, by name."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, command: list[str], *args: str, port: int | None = None) -> None:
        log = (self.logs / f"{name}.log").open("ab")
        extra = ["--port", str(port)] if port else []
        self.processes[name] = subprocess.Popen(
            [*command, *args, *extra], env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        if port:
            wait_until(lambda: self._ready(name, port), timeout_s=90, what=f"{name} ready")

    def _ready(self, name: str, port: int) -> bool:
        assert self.processes[name].poll() is None, self.log(name)
        try:
            return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]

    def alive(self) -> None:
        for name, process in self.processes.items():
            assert process.poll() is None, f"{name} exited: {self.log(name)}"

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()


@contextmanager
def fleet(env: dict[str, str], logs: Path) -> Iterator[Fleet]:
    running = Fleet(env, logs)
    try:
        yield running
    finally:
        running.stop_all()


def test_the_previous_release_and_this_one_share_a_database(
    previous: list[str],
    empty_db_dsn: str,
    emulator_url: str,
    aws_resources: AwsTestResources,
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    logs = tmp_path / "logs"
    logs.mkdir()
    old_port, new_port = free_port(), free_port()
    env = cli_env(
        DATABASE_URL=empty_db_dsn,
        JOBRELAY_DATA_DIR=str(data_dir),
        JOBRELAY_AWS_ENDPOINT_URL=emulator_url,
        JOBRELAY_SQS_QUEUE_NAME=aws_resources.queues.work.rsplit("/", 1)[-1],
        JOBRELAY_SQS_DLQ_NAME=aws_resources.queues.dead_letter.rsplit("/", 1)[-1],
        JOBRELAY_S3_BUCKET=aws_resources.bucket,
        JOBRELAY_SQS_WORKER_WEBHOOK_URL=f"http://127.0.0.1:{new_port}/v1/webhooks/worker",
        JOBRELAY_SQS_WORKER_POLL_WAIT_S="1",
        JOBRELAY_DIAG_JOBS_ENABLED="true",
        JOBRELAY_WORKER_POLL_INTERVAL_S="0.1",
        JOBRELAY_LOG_FORMAT="json",
        PYTHONPATH=None,  # each release imports its own code
    )
    migrated = subprocess.run(
        [*previous, "migrate"], env=env, capture_output=True, text=True, timeout=120
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    previous_revision = migrate.current_revision(empty_db_dsn)
    project_id = tenant(empty_db_dsn, "alice")
    headers = {"Authorization": f"Bearer {token(data_dir, 'alice')}"}
    minted = run_cli("token", "--sub", "ops", "--admin", JOBRELAY_DATA_DIR=str(data_dir))
    assert minted.returncode == 0, minted.stderr
    admin = {"Authorization": f"Bearer {minted.stdout.strip()}"}
    with ExitStack() as stack:
        running = stack.enter_context(fleet(env, logs))
        urls = stack.enter_context(page_server(ITEMS))
        # The old fleet runs...
        running.start("old-api", previous, "api", port=old_port)
        running.start("old-worker", previous, "worker")
        running.start("old-relay", previous, "relay")
        # Past their start (v0.1.0 migrates at start, and refuses a revision it does not
        # know: started after the migration below, it would exit).
        wait_until(
            lambda: _listening(empty_db_dsn) >= 2, timeout_s=90, what="the old worker and relay"
        )
        # ...while this release migrates (expand only) and rolls out beside it.
        upgraded = subprocess.run(
            [*jobrelay_command(), "migrate"], env=env, capture_output=True, text=True, timeout=120
        )
        assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
        assert migrate.current_revision(empty_db_dsn) != previous_revision
        running.start("new-api", jobrelay_command(), "api", port=new_port)
        running.start("new-worker", jobrelay_command(), "worker")
        running.start("new-relay", jobrelay_command(), "relay")
        running.start("sqs-worker", jobrelay_command(), "sqs-worker")
        # Both workers must be able to claim before the jobs arrive: on a loaded machine the
        # new worker's start can take longer than the old one needs to claim all 40 jobs.
        wait_until(
            lambda: _listening(empty_db_dsn) >= 4, timeout_s=90, what="the new worker and relay"
        )

        ids: list[str] = []
        for n in range(JOBS):
            port = old_port if n % 2 else new_port
            response = httpx.post(
                f"http://127.0.0.1:{port}/v1/jobs",
                json={"type": "diag.sleep", "payload": {"seconds": 2}},
                headers=admin,
                timeout=10,
            )
            assert response.status_code == 201, response.text
            ids.append(response.json()["id"])
        created = httpx.post(
            f"http://127.0.0.1:{old_port}/v1/projects/{project_id}/batches",
            json={"type": "page_import", "items": [{"url": u} for u in urls]},
            headers=headers,
            timeout=30,
        )
        assert created.status_code == 201, created.text
        batch_id = created.json()["id"]

        def batch_done() -> dict[str, Any] | None:
            running.alive()
            body = httpx.get(
                f"http://127.0.0.1:{new_port}/v1/batches/{batch_id}", headers=headers, timeout=5
            ).json()
            return body if body["status"] != "0" else None

        batch = wait_until(batch_done, timeout_s=120, what="the batch to end")
        wait_until(
            lambda: _ended(empty_db_dsn, ids) == JOBS, timeout_s=120, what="every job to end"
        )
        claimed_by = _claimers(empty_db_dsn, ids)
        running.alive()
    assert batch["status"] == "1", batch
    assert batch["counts"]["completed"] == ITEMS, batch
    with psycopg.connect(empty_db_dsn) as conn:
        statuses = dict(
            conn.execute(
                "SELECT status, count(*) FROM all_jobs WHERE id = ANY(%s::uuid[]) GROUP BY status",
                (ids,),
            ).fetchall()
        )
    assert statuses == {"completed": JOBS}, statuses
    print(f"\njobs run by {len(claimed_by)} workers of the two releases: {sorted(claimed_by)}")
    assert len(claimed_by) == 2, claimed_by  # 40 jobs of 2 s: more than one worker's slots


def _listening(dsn: str) -> int:
    """Workers and relays past their start: their LISTEN connections."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE '%%LISTEN jobrelay_%%'"
        ).fetchone()
    return int(row[0]) if row else 0


def _ended(dsn: str, ids: list[str]) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM all_jobs WHERE id = ANY(%s::uuid[]) "
            "AND status IN ('completed', 'failed', 'cancelled')",
            (ids,),
        ).fetchone()
    return int(row[0]) if row else 0


def _claimers(dsn: str, ids: list[str]) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {
            str(r[0])
            for r in conn.execute(
                "SELECT DISTINCT claimed_by FROM all_jobs WHERE id = ANY(%s::uuid[])", (ids,)
            )
        }
