"""Entry point of the `jobrelay` command: the Typer app and the error boundary.

Known failures (database unreachable, port busy, data directory in use, bad input) end with
one line naming the problem and exit code 2; nothing prints a traceback for them.
"""

from __future__ import annotations

import sys

import typer
from pydantic import ValidationError
from rich.console import Console

from jobrelay.bootstrap import StartupError
from jobrelay.cli.commands import admin, database, demo, jobs, ops, relay, sqs_worker, stack
from jobrelay.domain.errors import JobrelayError

app = typer.Typer(
    name="jobrelay",
    help="Durable job and batch orchestration on PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
database.register(app)
sqs_worker.register(app)
jobs.register(app)
stack.register(app)
admin.register(app)
ops.register(app)
demo.register(app)
relay.register(app)

_stderr = Console(stderr=True, soft_wrap=True)


def main() -> None:
    """Run the CLI; translate jobrelay's own errors into a one-line message and exit 2."""
    try:
        app()
    except (StartupError, JobrelayError) as exc:
        _stderr.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2)
    except ValidationError as exc:  # settings from the environment
        for err in exc.errors():
            name = ".".join(str(p) for p in err["loc"]) or "settings"
            _stderr.print(
                f"[bold red]error:[/] setting {name}: {err['msg']} (got {err.get('input')!r})",
                highlight=False,
            )
        sys.exit(2)


if __name__ == "__main__":
    main()
