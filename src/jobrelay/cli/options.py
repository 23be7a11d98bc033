"""Options several commands share."""

from __future__ import annotations

import typer

from jobrelay.settings import Settings

APP_OPTION = typer.Option(
    None,
    "--app",
    metavar="MODULE:ATTRIBUTE",
    help="Job types of your own: a JobTypes object (or a function returning one), "
    "e.g. myapp.jobs:job_types. Repeatable; adds to JOBRELAY_APP.",
)


def with_apps(settings: Settings, apps: list[str] | None) -> Settings:
    """`settings` with the `--app` references added to `JOBRELAY_APP`'s."""
    if not apps:
        return settings
    return settings.updated(jobs={"app": [*settings.jobs.app, *apps]})
