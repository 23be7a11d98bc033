"""The example package (`examples/greetings`) declares job types of its own on the public
API and runs end to end with nothing changed inside the engine: enqueued through the API
and the CLI, run by `jobrelay worker --app`, shown in the OpenAPI document. A bad `--app`
stops every command at startup with one line and exit code 2."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.harness import api_harness, run_cli, wait_until
from tests.jobs_support import query, start_worker, stop_worker

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_SRC = REPO / "examples" / "greetings" / "src"
APP = "greetings.jobs:job_types"


def _env(db_dsn: str, **extra: str | None) -> dict[str, str]:
    # The example package and this repository (for tests.apps) importable by the CLI.
    parts = (str(EXAMPLE_SRC), str(REPO), os.environ.get("PYTHONPATH"))
    path = os.pathsep.join(p for p in parts if p)
    return {"DATABASE_URL": db_dsn, "PYTHONPATH": path, **extra}


async def test_the_example_job_types_run_end_to_end(
    db_dsn: str, issuer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))
    async with api_harness(db_dsn, issuer_dir, jobs={"app": [APP]}) as api:
        admin = api.headers("ops", admin=True)
        over_http = await api.client.post(
            "/v1/jobs",
            json={"type": "greetings.greet", "payload": {"name": "Ada", "language": "fr"}},
            headers=admin,
        )
        assert over_http.status_code == 201, over_http.text
        bad = await api.client.post(
            "/v1/jobs",
            json={"type": "greetings.greet", "payload": {"name": "Ada", "language": "de"}},
            headers=admin,
        )
        assert bad.status_code == 422
        assert [e["path"] for e in bad.json()["errors"]] == ["payload.language"]
        schema = (await api.client.get("/openapi.json")).json()
        request = schema["components"]["schemas"]["JobRequest.greetings.greet"]
        assert request["properties"]["payload"]["properties"]["language"]["enum"] == [
            "en",
            "fr",
            "ja",
        ]
        body = schema["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]
        assert "greetings.digest" in body["schema"]["discriminator"]["mapping"]

    env = _env(db_dsn)
    enqueued = [
        run_cli(
            "jobs", "enqueue", "greetings.greet", "-p", '{"name": "retry-Bo"}', "--app", APP, **env
        ),
        run_cli(
            "jobs",
            "enqueue",
            "greetings.digest",
            "-p",
            '{"recipients": ["a"]}',
            "--app",
            APP,
            **env,
        ),
        run_cli(
            "jobs",
            "enqueue",
            "greetings.digest",
            "-p",
            '{"recipients": ["b"]}',
            "--app",
            APP,
            **env,
        ),
    ]
    assert [p.returncode for p in enqueued] == [0, 0, 0], [p.stderr for p in enqueued]
    assert '"merged"' in enqueued[2].stdout  # the second digest merged into the first
    refused = run_cli(
        "jobs", "enqueue", "greetings.greet", "-p", '{"name": ""}', "--app", APP, **env
    )
    assert refused.returncode == 2
    assert "payload.name" in refused.stderr  # the CLI names the field like the API

    worker = start_worker(db_dsn, "--app", APP, PYTHONPATH=env["PYTHONPATH"])
    try:
        rows = wait_until(
            lambda: _all_done(db_dsn), timeout_s=60, what="every greetings job completed"
        )
    finally:
        output = stop_worker(worker)
    assert worker.returncode == 0, output
    by_type = {(r["type"], r["payload"].get("name")): r for r in rows}
    assert by_type[("greetings.greet", "Ada")]["result"]["greeting"] == "Bonjour, Ada!"
    retried = by_type[("greetings.greet", "retry-Bo")]
    assert retried["attempt_count"] == 2 and retried["result"]["attempt"] == 2
    [digest] = [r for r in rows if r["type"] == "greetings.digest"]
    assert digest["result"] == {"sent": ["a", "b"]} and digest["concurrency_class"] == "mail"


def _all_done(db_dsn: str) -> list[dict[str, Any]] | None:
    rows = query(db_dsn, "SELECT * FROM all_jobs WHERE type LIKE %s", "greetings.%")
    return rows if len(rows) == 3 and all(r["status"] == "completed" for r in rows) else None


@pytest.mark.parametrize(
    ("app", "named"),
    [
        ("nowhere.jobs:job_types", "no module named 'nowhere'"),
        ("greetings.jobs:missing", "has no attribute 'missing'"),
        ("greetings.jobs", "expected package.module:attribute"),
        ("tests.apps.broken:not_job_types", "is a int, not a jobrelay.JobTypes"),
        ("tests.apps.broken:clash", "'diag.noop' is registered twice"),
        ("tests.apps.broken:unserved", "broken.gpu (class 'gpu')"),
        ("tests.apps.broken:zero_rate", "rate of concurrency class 'mail' '0/min'"),
        ("tests.apps.broken:malformed_rate", "'sixty a minute': expected N/UNIT"),
    ],
)
def test_a_bad_app_stops_the_worker_at_startup(db_dsn: str, app: str, named: str) -> None:
    result = run_cli("worker", "--app", app, **_env(db_dsn))
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert named in line


def test_an_app_given_twice_is_refused(db_dsn: str) -> None:
    result = run_cli("worker", "--app", APP, "--app", APP, **_env(db_dsn))
    assert result.returncode == 2
    assert "'greetings.greet' is registered twice" in result.stderr


def test_the_example_package_names_only_public_imports() -> None:
    source = (EXAMPLE_SRC / "greetings" / "jobs.py").read_text()
    imports = [
        line
        for line in source.splitlines()
        if line.startswith(("from jobrelay", "import jobrelay"))
    ]
    assert imports == ["from jobrelay import ("], imports
