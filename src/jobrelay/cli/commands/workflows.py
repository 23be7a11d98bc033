"""`jobrelay workflows ...`: list, show, cancel and retry workflows.

Output is JSON (camelCase, as the API returns it); a workflow is created from code (the
`Workflow` builder) or `POST /v1/workflows`.
"""

from __future__ import annotations

import getpass
import uuid

import typer

from jobrelay.api.routes.workflows import WorkflowOut, WorkflowPageOut, WorkflowSummaryOut
from jobrelay.cli.commands.jobs import print_json, with_services
from jobrelay.domain.errors import FieldError, InvalidInput
from jobrelay.jobs.workflows.store import STEPS_PAGE_DEFAULT, WORKFLOW_STATUSES

workflows_app = typer.Typer(
    help="List, show, cancel and retry workflows (DAGs of jobs).", no_args_is_help=True
)
# Who a cancel or retry from the command line is recorded as.
_ACTOR = f"cli:{getpass.getuser()}"


def register(app: typer.Typer) -> None:
    app.add_typer(workflows_app, name="workflows")


def _workflow_id(value: str, field: str = "id") -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInput(
            f"invalid workflow id {value!r}", [FieldError(field, "not a UUID")]
        ) from None


@workflows_app.command("list")
def list_command(
    status: str | None = typer.Option(
        None, help=f"Only this status: {', '.join(WORKFLOW_STATUSES)}."
    ),
    name: str | None = typer.Option(None, help="Only workflows of this name."),
    limit: int = typer.Option(50, min=1, max=500, help="Page size (1-500)."),
    before: str | None = typer.Option(None, help="Cursor: the nextCursor of the last page."),
) -> None:
    """List workflows, newest first, with the filters of GET /v1/workflows."""
    cursor = _workflow_id(before, "--before") if before else None
    page = with_services(
        lambda s: s.workflows.list(status=status, name=name, limit=limit, before=cursor)
    )
    print_json(
        WorkflowPageOut(
            items=[WorkflowSummaryOut.of(w) for w in page.workflows],
            next_cursor=page.next_before,
        )
    )


@workflows_app.command("show")
def show_command(
    workflow_id: str = typer.Argument(..., metavar="ID"),
    step_limit: int = typer.Option(STEPS_PAGE_DEFAULT, min=0, help="Steps to show, by name."),
    steps_after: str | None = typer.Option(None, help="The nextStepCursor of the last page."),
) -> None:
    """Show a workflow: its status, its steps counted by state and a page of its steps."""
    wanted = _workflow_id(workflow_id)
    view = with_services(
        lambda s: s.workflows.get(wanted, step_limit=step_limit, after_step=steps_after)
    )
    print_json(WorkflowOut.of_view(view))


@workflows_app.command("cancel")
def cancel_command(workflow_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Cancel a running workflow: its held, pending and running steps."""
    wanted = _workflow_id(workflow_id)
    print_json(
        WorkflowOut.of_view(with_services(lambda s: s.workflows.cancel(wanted, actor=_ACTOR)))
    )


@workflows_app.command("retry")
def retry_command(workflow_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Re-run a failed or cancelled workflow's failed, cancelled and skipped steps and
    everything downstream of them; completed steps keep their results."""
    wanted = _workflow_id(workflow_id)
    print_json(
        WorkflowOut.of_view(with_services(lambda s: s.workflows.retry(wanted, actor=_ACTOR)))
    )
