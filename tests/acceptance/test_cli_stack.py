"""`jobrelay up`, `migrate` and `doctor` as a user runs them: subprocesses and HTTP."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx
import psycopg
import pytest

from jobrelay.aws.emulator import free_port
from jobrelay.db.embedded import EmbeddedPostgres
from tests.harness import cli_env, jobrelay_command, run_cli, wait_until

REPO = Path(__file__).resolve().parents[2]


def _start_up(data_dir: Path, port: int) -> subprocess.Popen[str]:
    env = cli_env(
        DATABASE_URL=None, JOBRELAY_DATA_DIR=str(data_dir), JOBRELAY_AWS_ENDPOINT_URL=None
    )
    return subprocess.Popen(
        [*jobrelay_command(), "up", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(process: subprocess.Popen[str], sig: signal.Signals) -> str:
    process.send_signal(sig)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    return output


@pytest.mark.own_server
def test_up_twice_serves_health_and_keeps_the_data(tmp_path: Path) -> None:
    port = free_port()
    server = EmbeddedPostgres(tmp_path / "pgdata")

    first = _start_up(tmp_path, port)
    try:
        wait_until(lambda: _ready(port), timeout_s=60, what="first `up` to be ready")
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        # One-shot commands attach to the running stack's PostgreSQL and leave it running.
        created = run_cli(
            "admin", "create-org", "kept", DATABASE_URL=None, JOBRELAY_DATA_DIR=str(tmp_path)
        )
        assert created.returncode == 0, created.stderr
        assert _ready(port), "the stack must keep running after an attached command"
    finally:
        output = _stop(first, signal.SIGINT)
    assert "jobrelay is up" in output
    assert f"console  http://127.0.0.1:{port}/ui" in output
    assert f"metrics  http://127.0.0.1:{port}/metrics" in output, "up's banner lists /metrics"
    assert "metrics  worker:" in output and "metrics  relay:" in output
    venv_bin = Path(sys.executable).parent
    if shutil.which("jobrelay") != str(venv_bin / "jobrelay"):  # the docs' `jobrelay` needs it
        assert f"`. {venv_bin / 'activate'}` puts `jobrelay` on your PATH" in output, output
    assert server.running_pid() is None, "Ctrl-C must stop the embedded PostgreSQL"

    second = _start_up(tmp_path, port)
    try:
        wait_until(lambda: _ready(port), timeout_s=60, what="second `up` to be ready")
        with psycopg.connect(server.dsn()) as conn:
            names = conn.execute("SELECT name FROM organization").fetchall()
    finally:
        _stop(second, signal.SIGTERM)
    assert names == [("kept",)]
    assert server.running_pid() is None


@pytest.mark.long
def test_one_shot_commands_find_a_running_up_on_its_own_port(tmp_path: Path) -> None:
    port = free_port()
    up = _start_up(tmp_path, port)
    # Nothing tells these commands the port `up` was given: they read what `up` recorded.
    beside = {
        "DATABASE_URL": None,
        "JOBRELAY_DATA_DIR": str(tmp_path),
        "JOBRELAY_API_PORT": None,
        "JOBRELAY_AWS_ENDPOINT_URL": None,
        "COLUMNS": "240",  # one table row per line in doctor's output
    }
    try:
        wait_until(lambda: _ready(port), timeout_s=60, what="`up` to be ready")
        record = json.loads((tmp_path / "up.json").read_text())
        assert record["pid"] == up.pid
        assert record["apiUrl"] == f"http://127.0.0.1:{port}"
        emulator = record["awsEndpointUrl"]
        assert emulator.startswith("http://127.0.0.1:") and record["emulatorStarted"] is True

        doctor = run_cli("doctor", **beside)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        (emulator_row,) = [line for line in doctor.stdout.splitlines() if "sqs/s3" in line]
        assert f"{emulator} (emulator started by `jobrelay up`, pid {up.pid})" in emulator_row
        assert emulator_row.rstrip(" │|").endswith("yes"), emulator_row
        assert f"pid {up.pid}, API http://127.0.0.1:{port}" in doctor.stdout

        demo = run_cli("demo", "--pages", "2", "--timeout", "100", **beside)
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "(2 completed, 0 failed, 0 cancelled of 2)" in demo.stdout
        assert "no `jobrelay up` runs" not in demo.stderr, "it attached: nothing to note"

        # A second `up` for the same data directory names the first, whatever its port.
        second = run_cli("up", "--port", str(free_port()), **beside)
        assert second.returncode == 2, second.stdout + second.stderr
        [line] = second.stderr.strip().splitlines()
        assert f"another `jobrelay up` runs for the data directory {tmp_path}" in line, line
        assert f"pid {up.pid}" in line and f"kill {up.pid}" in line, line
    finally:
        output = _stop(up, signal.SIGINT)
    assert "… starting the SQS/S3 emulator" in output, "each phase of `up` prints a line"
    assert not (tmp_path / "up.json").exists(), "`up` removes its record on exit"


@pytest.mark.own_server
def test_a_command_that_starts_an_embedded_server_says_so(tmp_path: Path) -> None:
    # No `up` for this data directory: the command still works, and says whose server it
    # started, instead of writing silently to a database the stack never sees.
    listed = run_cli("jobs", "list", DATABASE_URL=None, JOBRELAY_DATA_DIR=str(tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["items"] == []
    assert f"no `jobrelay up` runs for the data directory {tmp_path}" in listed.stderr


@pytest.mark.own_server
def test_unreachable_database_url_is_one_clear_message() -> None:
    result = run_cli("migrate", DATABASE_URL="postgresql://nobody@127.0.0.1:1/jobs")
    assert result.returncode == 2
    assert "cannot connect to PostgreSQL at 127.0.0.1:1/jobs" in result.stderr
    assert "DATABASE_URL" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.own_server
def test_malformed_database_url_is_one_clear_message() -> None:
    result = run_cli("migrate", DATABASE_URL="not a url at all")
    assert result.returncode == 2
    assert "setting DATABASE_URL" in result.stderr
    assert "neither a postgresql:// URL nor key=value pairs" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.own_server
def test_busy_port_is_one_clear_message(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli(
            "up", "--port", str(port), DATABASE_URL=None, JOBRELAY_DATA_DIR=str(tmp_path)
        )
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "pgdata").exists(), "nothing may start before the port check"


@pytest.mark.own_server
def test_data_directory_of_another_server_is_one_clear_message(tmp_path: Path) -> None:
    other = EmbeddedPostgres(tmp_path / "pgdata")
    other.start()
    try:
        result = run_cli("migrate", DATABASE_URL=None, JOBRELAY_DATA_DIR=str(tmp_path))
        assert other.running_pid() is not None, "the other server must be left alone"
    finally:
        other.stop()
    assert result.returncode == 2
    assert "is in use by another PostgreSQL server" in result.stderr
    assert "JOBRELAY_DATA_DIR" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_doctor_reports_a_migrated_database(db_dsn: str) -> None:
    result = run_cli("doctor", DATABASE_URL=db_dsn, JOBRELAY_AWS_ENDPOINT_URL=None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "table jobs" in result.stdout
    assert "unlogged" not in result.stdout


def test_doctor_fails_on_an_unmigrated_database(empty_db_dsn: str) -> None:
    result = run_cli("doctor", DATABASE_URL=empty_db_dsn, JOBRELAY_AWS_ENDPOINT_URL=None)
    assert result.returncode == 1
    assert "run `jobrelay migrate`" in result.stdout


def test_doctor_flags_an_unlogged_table(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE ops_run SET UNLOGGED")
    result = run_cli("doctor", DATABASE_URL=db_dsn, JOBRELAY_AWS_ENDPOINT_URL=None)
    assert result.returncode == 1
    assert "table ops_run is unlogged" in result.stdout


def test_migrate_brings_an_empty_database_to_head(empty_db_dsn: str) -> None:
    result = run_cli("migrate", DATABASE_URL=empty_db_dsn)
    assert result.returncode == 0, result.stderr
    match = re.search(r"database at revision (\w+) \(head (\w+)\)", result.stdout)
    assert match is not None and match.group(1) == match.group(2), result.stdout


@pytest.mark.own_server
def test_up_starts_its_embedded_postgres_again_when_it_dies(tmp_path: Path) -> None:
    port = free_port()
    server = EmbeddedPostgres(tmp_path / "pgdata")
    up = _start_up(tmp_path, port)
    try:
        wait_until(lambda: _ready(port), timeout_s=60, what="`up` to be ready")
        first_pid = server.running_pid()
        assert first_pid is not None
        # A crash: SIGQUIT is what `pg_ctl stop -m immediate` sends. Not `pg_ctl -w`, which waits
        # for postmaster.pid to go: `up` may write its new one first, and pg_ctl waits forever.
        os.kill(first_pid, signal.SIGQUIT)
        restarted = wait_until(
            lambda: (pid := server.running_pid()) is not None and pid != first_pid and pid,
            timeout_s=60,
            what="`up` to start PostgreSQL again",
        )
        wait_until(lambda: _ready(port), timeout_s=60, what="the API ready again")
        created = run_cli(
            "admin", "create-org", "after", DATABASE_URL=None, JOBRELAY_DATA_DIR=str(tmp_path)
        )
        assert created.returncode == 0, created.stderr
    finally:
        output = _stop(up, signal.SIGINT)
    assert "embedded PostgreSQL is not running; starting it again" in output
    assert f"running again (pid {restarted})" in output
    assert server.running_pid() is None


@pytest.mark.own_server
def test_the_runbooks_restart_commands_work_as_written(tmp_path: Path) -> None:
    """The runbook takes the `pg_ctl` command line from `jobrelay doctor` and stops and
    starts the embedded server with it; a plain start comes back on the stack's socket."""
    server = EmbeddedPostgres(tmp_path / "pgdata")
    doctor = run_cli("doctor", DATABASE_URL=None, JOBRELAY_DATA_DIR=str(tmp_path))
    found = re.search(r"^embedded server control: (.*) stop\|start$", doctor.stdout, re.M)
    assert found, doctor.stdout
    pg_ctl = found.group(1).split()
    server.start()
    try:
        for action in (["stop", "-m", "immediate"], ["start"]):
            subprocess.run([*pg_ctl, *action], check=True, stdout=subprocess.DEVNULL, timeout=120)
        with psycopg.connect(server.dsn(), connect_timeout=5) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        server.stop()


def _as_another_user() -> tuple[list[str], dict[str, str]] | None:
    """A `jobrelay` command line run as user `nobody` (with the system's Python of this
    version and this environment's packages), or None where that cannot be done: not root,
    no such user, or the interpreter of this environment lives where nobody can read it."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return None
    python = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if not python.exists() or shutil.which("runuser") is None:
        return None
    path = os.pathsep.join([sysconfig.get_paths()["purelib"], str(REPO / "src")])
    command = ["runuser", "-u", "nobody", "--", str(python), "-m", "jobrelay.cli.main"]
    return command, cli_env(PYTHONPATH=path, HOME="/nonexistent", DATABASE_URL=None)


@pytest.mark.own_server
def test_a_data_directory_of_another_user_is_one_line(tmp_path: Path) -> None:
    other = _as_another_user()
    if other is None:
        pytest.skip("needs root, a `nobody` user and /usr/bin/python3.N of this version")
    runner, env = other
    # The data directory of root's stack, as `up` leaves it: a cluster closed to others.
    server = EmbeddedPostgres(tmp_path / "pgdata")
    server.start()
    server.stop()
    tmp_path.chmod(0o755)
    for command in (["jobs", "list"], ["up"], ["token", "--sub", "x"]):
        result = subprocess.run(
            [*runner, *command],
            env={**env, "JOBRELAY_DATA_DIR": str(tmp_path), "JOBRELAY_ENV": "development"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 2, (command, result.stdout + result.stderr)
        [line] = result.stderr.strip().splitlines()
        assert f"the data directory {tmp_path} belongs to user root" in line, line
        assert "closed to user nobody" in line and "JOBRELAY_DATA_DIR" in line, line


@pytest.mark.own_server
@pytest.mark.parametrize("command", ["up", "api"])
def test_an_app_that_does_not_load_stops_before_anything_starts(
    tmp_path: Path, command: str
) -> None:
    result = run_cli(
        command,
        "--port",
        str(free_port()),
        "--app",
        "nowhere.jobs:job_types",
        DATABASE_URL=None,
        JOBRELAY_DATA_DIR=str(tmp_path / "data"),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "app 'nowhere.jobs:job_types': no module named 'nowhere'" in line, line
    assert "jobrelay is up" not in result.stdout
    assert not (tmp_path / "data").exists(), "nothing may start before the app loads"
