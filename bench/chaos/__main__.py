"""Run one chaos scenario with real processes; exit 1 when an invariant failed.

    .venv/bin/python -m bench.chaos worker-kill --size 20000
    .venv/bin/python -m bench.chaos worker-stop --size 20000
    .venv/bin/python -m bench.chaos backend-storm --size 20000
    .venv/bin/python -m bench.chaos db-restart --size 5000
    .venv/bin/python -m bench.chaos batch-kill --size 5000
    .venv/bin/python -m bench.chaos partition --size 5000      # root: drops packets with tc

Prints one JSON object (the figures and the violations found) and appends it, with the
date, load average and git commit, to `--out` when given.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.chaos.jobs_scenarios import JobsOptions, backend_storm, worker_kill, worker_stop

SCENARIOS = (
    "worker-kill",
    "worker-stop",
    "backend-storm",
    "db-restart",
    "batch-kill",
    "partition",
)


def run(scenario: str, size: int, workdir: Path, **options: Any) -> dict[str, Any]:
    """Run `scenario` at `size` in `workdir`; the result's "problems" lists violations."""
    if scenario in ("worker-kill", "worker-stop", "backend-storm"):
        env = options.pop("env", {})
        opts = JobsOptions(
            size=size, env=env, **{k: v for k, v in options.items() if v is not None}
        )
        chosen: Callable[..., dict[str, Any]] = {
            "worker-kill": worker_kill,
            "worker-stop": worker_stop,
            "backend-storm": backend_storm,
        }[scenario]
        return chosen(workdir, opts)
    if scenario == "db-restart":
        from bench.chaos.db_restart import db_restart

        return db_restart(workdir, size=size)
    if scenario == "batch-kill":
        from bench.chaos.batch_kill import batch_kill

        return batch_kill(workdir, size=size)
    if scenario == "partition":
        from bench.chaos.partition import partition

        return partition(workdir, size=size)
    raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}")


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _exit_on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup
    raise SystemExit(128 + signum)  # so every started process and server is stopped


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("--size", type=int, required=True, help="jobs, or batch items")
    parser.add_argument("--workers", type=int, help="jobs worker processes (default 3)")
    parser.add_argument("--concurrency", type=int, help="slots per worker (default 8)")
    parser.add_argument("--handler-ms", type=int, help="handler duration (default 5)")
    parser.add_argument("--lease-s", type=float, help="job lease (default 3)")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment setting for every process (e.g. JOBRELAY_...=...)",
    )
    parser.add_argument("--workdir", type=Path, help="keep logs and data here")
    parser.add_argument("--out", type=Path, help="append the result (JSON lines) here")
    args = parser.parse_args(argv)
    env = dict(s.split("=", 1) for s in args.setting)
    options: dict[str, Any] = {}
    if args.scenario in ("worker-kill", "worker-stop", "backend-storm"):
        options = {
            "workers": args.workers,
            "concurrency": args.concurrency,
            "handler_ms": args.handler_ms,
            "lease_s": args.lease_s,
            "env": env,
        }
    started = datetime.datetime.now(datetime.UTC)
    with tempfile.TemporaryDirectory(prefix="jobrelay-chaos-") as tmp:
        workdir = args.workdir or Path(tmp)
        result = run(args.scenario, args.size, workdir, **options)
    result = {
        **result,
        "settings": env,
        "date": started.isoformat(timespec="seconds"),
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "commit": _commit(),
    }
    line = json.dumps(result, default=str)
    print(line)
    if args.out:
        with args.out.open("a") as out:
            out.write(line + "\n")
    if result["problems"]:
        for problem in result["problems"]:
            print(f"INVARIANT VIOLATED: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
