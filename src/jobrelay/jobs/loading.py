"""Finding a deployment's job types: `--app package.module:attribute` and entry points.

An app reference names a module and an attribute holding a `JobTypes` (or a function of no
arguments returning one), like Procrastinate's `--app dotted.path`. Installed packages may
also announce theirs in the `jobrelay.job_types` entry-point group. Every failure raises
`AppLoadError` with one line naming the reference and what is wrong; the CLI prints it and
exits 2 before anything starts.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points

from jobrelay.jobs.declare import JobTypes

ENTRY_POINT_GROUP = "jobrelay.job_types"


class AppLoadError(RuntimeError):
    """An app reference could not be loaded; the message names it."""


def load_app(reference: str) -> JobTypes:
    """The `JobTypes` named by `package.module:attribute`."""
    module_name, sep, attribute = reference.strip().partition(":")
    if not sep or not module_name or not attribute:
        raise AppLoadError(
            f"invalid app {reference!r}: expected package.module:attribute, "
            "e.g. myapp.jobs:job_types"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise AppLoadError(f"app {reference!r}: no module named {exc.name!r}") from None
    target: object = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AppLoadError(
                f"app {reference!r}: module {module_name!r} has no attribute {attribute!r}"
            ) from None
    return _job_types(target, what=f"app {reference!r}")


def load_entry_points(found: Iterable[EntryPoint] | None = None) -> list[JobTypes]:
    """The `JobTypes` of every installed package in the `jobrelay.job_types` group."""
    groups: list[JobTypes] = []
    for entry in found if found is not None else entry_points(group=ENTRY_POINT_GROUP):
        what = f"entry point {entry.name!r} ({entry.value})"
        try:
            target = entry.load()
        except (ImportError, AttributeError) as exc:
            raise AppLoadError(f"{what}: {exc}") from None
        groups.append(_job_types(target, what=what))
    return groups


def _job_types(target: object, *, what: str) -> JobTypes:
    if not isinstance(target, JobTypes) and callable(target):
        target = target()
    if not isinstance(target, JobTypes):
        raise AppLoadError(
            f"{what} is a {type(target).__name__}, not a jobrelay.JobTypes "
            "(or a function returning one)"
        )
    return target
