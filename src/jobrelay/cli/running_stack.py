"""Where a running `jobrelay up` serves, recorded beside its pid file.

`up` writes `data_dir/up.json` (its pid, API URL and SQS/S3 endpoint) once it knows them and
removes it on exit. One-shot commands (`demo`, `doctor`, `admin`, `ops`, `jobs …`) load their
settings with `load_cli_settings()`: while that `up` is alive they talk to its API and its
emulator, whatever port it chose, the way `bootstrap.database()` attaches to its PostgreSQL via
`up.pid`. A setting given explicitly (environment, `.env` or a command option) still wins: it is
what the user asked for.

The long-running parts started alone beside an `up` (`worker`, `relay`, `sqs-worker`) attach
too. They already share its PostgreSQL through `up.pid`, so their queue must be its emulator:
a relay claiming up's outbox but sending elsewhere (with no endpoint set, to real AWS) would
take messages away from up's workers, and an SQS worker must read that queue and post its
outcomes to up's API. Without a live `up` in the data directory nothing changes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from jobrelay.settings import Environment, Settings, load_settings

RECORD_NAME = "up.json"


@dataclass(frozen=True)
class RunningStack:
    """What a live `jobrelay up` recorded about itself."""

    pid: int
    api_url: str
    aws_endpoint_url: str | None
    emulator_started: bool


def record_path(settings: Settings) -> Path:
    """`data_dir/up.json`, beside the `up.pid` that `bootstrap.database()` writes."""
    return settings.data_dir.resolve() / RECORD_NAME


@contextmanager
def recorded(
    settings: Settings, *, api_url: str, aws_endpoint_url: str | None, emulator_started: bool
) -> Iterator[Path]:
    """Record this process as the running stack of `settings.data_dir` until the block ends."""
    path = record_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "pid": os.getpid(),
        "apiUrl": api_url,
        "awsEndpointUrl": aws_endpoint_url,
        "emulatorStarted": emulator_started,
    }
    # Written whole then renamed, so a command reading it never sees half a file.
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    partial.replace(path)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def running_stack(settings: Settings) -> RunningStack | None:
    """The `up` recorded for `settings.data_dir`, if its process is still alive."""
    try:
        record = json.loads(record_path(settings).read_text())
        stack = RunningStack(
            pid=int(record["pid"]),
            api_url=str(record["apiUrl"]),
            aws_endpoint_url=record.get("awsEndpointUrl"),
            emulator_started=bool(record.get("emulatorStarted")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    # A record left by an `up` that was killed (SIGKILL skips the cleanup) names a dead pid.
    try:
        os.kill(stack.pid, 0)
    except OSError:
        return None
    return stack


def attach_to_running_stack(settings: Settings) -> Settings:
    """`settings` pointed at the running `up` of its data directory, where not set explicitly."""
    stack = running_stack(settings)
    if stack is None:
        return settings
    api: dict[str, object] = {}
    explicit = settings.api.model_fields_set
    url = urlsplit(stack.api_url)
    if "host" not in explicit and url.hostname:
        api["host"] = url.hostname
    if "port" not in explicit and url.port:
        api["port"] = url.port
    aws: dict[str, object] = {}
    if "endpoint_url" not in settings.aws.model_fields_set and stack.aws_endpoint_url:
        aws["endpoint_url"] = stack.aws_endpoint_url
    sqs_worker: dict[str, object] = {}
    if "webhook_url" not in settings.sqs_worker.model_fields_set:
        sqs_worker["webhook_url"] = f"{stack.api_url}/v1/webhooks/worker"
    return settings.updated(api=api, aws=aws, sqs_worker=sqs_worker)


def load_cli_settings(*, default_env: Environment | None = None, **overrides: object) -> Settings:
    """Settings for a command run beside the stack: `load_settings()` attached to a running
    `up` (see the module docstring).

    `default_env` applies when `JOBRELAY_ENV` is unset and no `up` runs in the data
    directory: a process attached to a running `up` is part of that development stack.
    """
    settings = load_settings(default_env=None, **overrides)
    if default_env is not None and running_stack(settings) is None:
        settings = load_settings(default_env=default_env, **overrides)
    return attach_to_running_stack(settings)
