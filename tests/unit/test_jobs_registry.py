"""The registry is closed and exhaustive; the state machine table is the documented one."""

from __future__ import annotations

from typing import Literal

import pytest

from jobrelay.domain.errors import InvalidInput
from jobrelay.domain.jobs import Complete, ConflictPolicy, JobStatus, Transition, next_status
from jobrelay.jobs.registry import KNOWN_TYPES, JobContext, JobPayload, JobType, Registry
from jobrelay.jobs.types import build_registry
from jobrelay.jobs.types.diag import job_types as diag_types


def test_builtin_registry_is_complete() -> None:
    assert build_registry(diag_enabled=True).names == KNOWN_TYPES
    without_diag = build_registry(diag_enabled=False).names
    assert without_diag == {n for n in KNOWN_TYPES if not n.startswith("diag.")}


class Orphan(JobPayload):
    type: Literal["diag.noop"] = "diag.noop"
    items: tuple[str, ...] = ()


async def _ok(ctx: JobContext[Orphan]) -> Complete:
    return Complete()


def _only(entry: JobType[Orphan]) -> Registry:
    return Registry([entry], required=frozenset({"diag.noop"}))


def test_a_type_without_handler_fails() -> None:
    with pytest.raises(RuntimeError, match=r"diag\.noop. has no handler"):
        _only(JobType(name="diag.noop", payload_model=Orphan, handler=None))


def test_a_known_type_without_entry_fails() -> None:
    with pytest.raises(RuntimeError, match=r"media\.process. has no registry entry"):
        Registry(diag_types())


def test_a_type_outside_the_closed_set_fails() -> None:
    with pytest.raises(RuntimeError, match="not in the closed set"):
        Registry([JobType(name="x.y", payload_model=Orphan, handler=_ok)], required=frozenset())


def test_schema_must_carry_its_discriminator() -> None:
    with pytest.raises(RuntimeError, match="Literal"):
        Registry(
            [JobType(name="diag.sleep", payload_model=Orphan, handler=_ok)],
            required=frozenset(),
        )
    with pytest.raises(RuntimeError, match="no payload schema"):
        _only(JobType(name="diag.noop", payload_model=dict, handler=_ok))  # type: ignore[arg-type]


def test_merge_needs_a_list_field() -> None:
    entry = JobType(
        name="diag.noop",
        payload_model=Orphan,
        handler=_ok,
        policy=ConflictPolicy.MERGE,
        merge_field="nope",
    )
    with pytest.raises(RuntimeError, match="merge_field"):
        _only(entry)


def test_parse_names_the_field() -> None:
    registry = build_registry(diag_enabled=True)
    with pytest.raises(InvalidInput) as unknown:
        registry.parse("nope", {})
    assert [e.path for e in unknown.value.errors] == ["type"]
    with pytest.raises(InvalidInput) as extra:
        registry.parse("source.sync", {"sourceId": "s", "syncKind": "full", "revision": 1, "x": 1})
    assert [e.path for e in extra.value.errors] == ["payload.x"]


@pytest.mark.parametrize(
    ("status", "transition", "expected"),
    [
        (JobStatus.PENDING, Transition.CLAIM, JobStatus.IN_PROGRESS),
        (JobStatus.IN_PROGRESS, Transition.CLAIM, None),
        (JobStatus.IN_PROGRESS, Transition.REQUEUE_REVISION, JobStatus.PENDING),
        (JobStatus.COMPLETED, Transition.CANCEL, None),
        (JobStatus.IN_PROGRESS, Transition.CANCEL, JobStatus.CANCELLED),
        (JobStatus.FAILED, Transition.RETRY_FAILED, JobStatus.PENDING),
        (JobStatus.COMPLETED, Transition.RETRY_FAILED, None),
    ],
)
def test_transitions(status: JobStatus, transition: Transition, expected: JobStatus) -> None:
    assert next_status(status, transition) == expected
