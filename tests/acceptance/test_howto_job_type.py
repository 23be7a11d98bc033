"""docs/how-to/write-a-job-type.md followed as written, by a user whose package lives
outside the repository: the module of section 1, the shell blocks of section 2 beside a
running `jobrelay up` (CLI, HTTP, the console, a worker of their own joining a stack that
does not know their types), and the tests of section 4 run by pytest in their project with
jobrelay's plugin. No job fails, and everything lands in one database: the per-user data
directory (here under a temporary XDG_STATE_HOME), found from any folder."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from jobrelay.aws.emulator import free_port
from jobrelay.db.embedded import EmbeddedPostgres
from tests.harness import cli_env, wait_until

REPO = Path(__file__).resolve().parents[2]
HOWTO = REPO / "docs" / "how-to" / "write-a-job-type.md"
DOC_PORT = "8000"  # the port the page writes; the test gives the stack a free one
TYPE = "mypackage.greet"


def _section(doc: str, title: str) -> str:
    start = doc.index(f"## {title}")
    end = doc.find("\n## ", start + 1)
    return doc[start : end if end != -1 else len(doc)]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


class Project:
    """The user's project folder and their shell: `jobrelay` on the PATH (the activated
    virtualenv), nothing of the repository importable, a data directory of the test's."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.state_home = root.parent / "state"
        self.processes: list[subprocess.Popen[str]] = []
        self.env = cli_env(
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            XDG_STATE_HOME=str(self.state_home),
            JOBRELAY_API_PORT=str(port),
            JOBRELAY_DATA_DIR=None,
            DATABASE_URL=None,
            JOBRELAY_AWS_ENDPOINT_URL=None,
            JOBRELAY_APP=None,
            PYTHONPATH=None,
            JOBRELAY_ENV=None,  # what the page's reader has: nothing set
        )

    @property
    def data_dir(self) -> Path:
        return self.state_home / "jobrelay"

    def script(self, block: str) -> str:
        return block.replace(f"127.0.0.1:{DOC_PORT}", f"127.0.0.1:{self.port}")

    def run(self, block: str, cwd: Path | None = None) -> str:
        result = subprocess.run(
            ["bash", "-e", "-c", self.script(block)],
            cwd=cwd or self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert result.returncode == 0, f"{block}\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def start(self, block: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            ["bash", "-e", "-c", "exec 2>&1\n" + self.script(block)],
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # the block's shell and its jobrelay, stopped together
        )
        self.processes.append(process)
        return process

    def stop(self, process: subprocess.Popen[str]) -> str:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
        output, _ = process.communicate(timeout=90)
        return output

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
                try:
                    process.communicate(timeout=90)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.communicate()

    def ready(self, process: subprocess.Popen[str]) -> bool:
        assert process.poll() is None, process.communicate()[0]
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=2).is_success
        except httpx.HTTPError:
            return False

    def jobs(self) -> list[dict[str, Any]]:
        dsn = EmbeddedPostgres(self.data_dir / "pgdata").dsn("postgres")
        with psycopg.connect(dsn, row_factory=dict_row) as conn:
            return conn.execute(
                "SELECT id::text, status, payload, claimed_by, last_error FROM all_jobs"
                " WHERE type = %s ORDER BY created_at",
                (TYPE,),
            ).fetchall()


def _all_completed(project: Project, count: int) -> list[dict[str, Any]] | None:
    jobs = project.jobs()
    assert not [j for j in jobs if j["status"] == "failed"], jobs
    done = [j for j in jobs if j["status"] == "completed"]
    return jobs if len(jobs) == count and len(done) == count else None


def _console_lists(project: Project, job_ids: list[str]) -> None:
    """The console, logged in through its form as an admin, lists the jobs by type."""
    with httpx.Client(base_url=f"http://127.0.0.1:{project.port}") as browser:
        form = HTMLParser(browser.get("/ui/login").text).css_first("input[name=csrf]")
        assert form is not None
        logged_in = browser.post(
            "/ui/login",
            data={"csrf": form.attributes["value"], "subject": "me", "admin": "on", "next": "/ui/"},
        )
        assert logged_in.status_code == 303, logged_in.text
        page = browser.get("/ui/jobs", params={"type": TYPE})
    assert page.status_code == 200
    assert TYPE in page.text
    for job_id in job_ids:
        assert job_id in page.text, f"job {job_id} not on the console's jobs page"


@pytest.mark.long
def test_the_how_to_runs_as_written_from_a_package_outside_the_repository(
    tmp_path: Path,
) -> None:
    doc = HOWTO.read_text(encoding="utf-8")
    project = Project(tmp_path / "project", free_port())
    package = project.root / "mypackage"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    [module] = [b for b in _blocks(doc, "python") if b.startswith("# mypackage/jobs.py")]
    (package / "jobs.py").write_text(module)

    up_block, use_block, worker_block = _blocks(_section(doc, "2. Run them"), "sh")
    elsewhere = tmp_path / "somewhere-else"
    elsewhere.mkdir()
    try:
        # Terminal 1: the stack with the user's types.
        up = project.start(up_block)
        wait_until(
            lambda: project.ready(up), timeout_s=120, interval_s=0.2, what="`up --app` ready"
        )

        # Terminal 2: CLI and HTTP, then the list.
        output = project.run(use_block)
        assert output.count('"outcome": "created"') == 1, output  # the CLI's pretty JSON
        assert '"outcome":"created"' in output, output  # curl's compact answer
        wait_until(
            lambda: _all_completed(project, 2), timeout_s=60, interval_s=0.2, what="both jobs done"
        )
        # From another folder the same stack answers: one data directory per user.
        listed = json.loads(project.run(f"jobrelay jobs list --type {TYPE}", cwd=elsewhere))
        assert sorted(j["payload"]["name"] for j in listed["items"]) == ["Ada", "Grace"]
        _console_lists(project, [j["id"] for j in listed["items"]])
        stopped = project.stop(up)
        assert "stopped" in stopped, stopped

        # A plain stack that does not know the type, and the user's own worker beside it:
        # up's worker leaves the jobs to it.
        up = project.start("jobrelay up")
        wait_until(
            lambda: project.ready(up), timeout_s=120, interval_s=0.2, what="plain `up` ready"
        )
        worker = project.start(worker_block)
        for name in ("Edsger", "Barbara"):
            payload = json.dumps({"name": name})
            project.run(
                "export PYTHONPATH=$PWD\n"
                f"jobrelay jobs enqueue {TYPE} -p '{payload}' --app mypackage.jobs:job_types"
            )
        jobs = wait_until(
            lambda: _all_completed(project, 4),
            timeout_s=90,
            interval_s=0.2,
            what="the worker's two jobs done",
        )
        worker_output = project.stop(worker)
        up_output = project.stop(up)
    finally:
        project.stop_all()
    [worker_id] = re.findall(r"worker (\S+) running", worker_output) or [None]
    assert worker_id, worker_output
    assert [j["claimed_by"] for j in jobs[2:]] == [worker_id] * 2, jobs
    assert "unknown job type" not in up_output
    # One database: nothing was created under the project or the other folder.
    assert not (project.root / ".jobrelay").exists() and not (elsewhere / ".jobrelay").exists()
    assert (project.data_dir / "pgdata" / "PG_VERSION").exists()

    # Section 4: the tests of the page, in the project, with jobrelay's plugin.
    testing = _section(doc, "4. Test them")
    [ini] = _blocks(testing, "toml")
    (project.root / "pyproject.toml").write_text(ini)
    [tests] = _blocks(testing, "python")
    (project.root / "tests").mkdir()
    (project.root / "tests" / "test_greet.py").write_text(tests)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=project.root,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout, result.stdout
    assert "warning" not in result.stdout.lower(), result.stdout
