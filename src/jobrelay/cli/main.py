"""Entry point of the `jobrelay` command: the Typer app and the error boundary.

Known failures (database unreachable, port busy, data directory in use, bad input) end with
one line naming the problem and exit code 2; nothing prints a traceback for them.
"""

from __future__ import annotations

import sys

import typer
from pydantic import ValidationError
from pydantic_core import ErrorDetails
from rich.console import Console

from jobrelay.bootstrap import StartupError
from jobrelay.cli.commands import (
    admin,
    database,
    demo,
    jobs,
    ops,
    relay,
    sqs_worker,
    stack,
    workflows,
)
from jobrelay.domain.errors import JobrelayError
from jobrelay.settings import find_setting, setting_groups

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
workflows.register(app)
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
            _stderr.print(f"[bold red]error:[/] {_setting_error(err)}", highlight=False)
        sys.exit(2)


def _setting_error(err: ErrorDetails) -> str:
    """One line for one invalid setting; the value is shown unless it may hold a secret."""
    loc = err["loc"]
    found = find_setting(loc)
    if found is None:
        if not loc or (len(loc) == 1 and loc[0] in setting_groups()):
            # A check across settings (of one group): its input may hold secrets.
            return f"settings: {err['msg']}"
        return f"setting {'.'.join(str(p) for p in loc)}: {err['msg']}"
    setting, rest = found
    name = setting.variables[0] + "".join(f"[{p}]" for p in rest)
    if setting.secret:
        return f"setting {name}: {err['msg']}"
    return f"setting {name}: {err['msg']} (got {err.get('input')!r})"


if __name__ == "__main__":
    main()
