"""The registry is closed and complete, the declaration API checks what users declare, and
the state machine table is the documented one."""

from __future__ import annotations

from typing import Literal

import pytest

from jobrelay.domain.errors import InvalidInput
from jobrelay.domain.jobs import (
    Complete,
    ConflictPolicy,
    JobRole,
    JobStatus,
    Transition,
    next_status,
)
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.registry import JobContext, JobPayload, JobType, Registry, RegistryError
from tests.jobs_support import build_registry

PRODUCT_TYPES = {
    "media.process",
    "source.sync",
    "index.sync_delta",
    "code2wf.dispatch",
    "ccip.batch",
    "ccip.dispatch",
    "ccip.item",
}
DIAG_TYPES = {"diag.noop", "diag.sleep", "diag.fail"}


def test_builtin_registry_is_complete() -> None:
    assert build_registry(diag_enabled=True).names == PRODUCT_TYPES | DIAG_TYPES
    assert build_registry(diag_enabled=False).names == PRODUCT_TYPES
    assert build_registry().classes == {"ai": 2, "default": 8}


class Orphan(JobPayload):
    type: Literal["diag.noop"] = "diag.noop"
    items: tuple[str, ...] = ()


async def _ok(ctx: JobContext[Orphan]) -> Complete:
    return Complete()


def _only(entry: JobType[Orphan]) -> Registry:
    return Registry([entry])


def test_a_type_without_handler_fails() -> None:
    with pytest.raises(RuntimeError, match=r"diag\.noop. has no handler"):
        _only(JobType(name="diag.noop", payload_model=Orphan, handler=None))


def test_two_types_with_one_name_fail() -> None:
    group = JobTypes()
    group.add(JobType(name="diag.noop", payload_model=Orphan, handler=_ok))
    other = JobTypes()
    other.add(JobType(name="diag.noop", payload_model=Orphan, handler=_ok))
    group.include(other)
    with pytest.raises(RegistryError, match=r"'diag\.noop' is registered twice"):
        group.registry()


def test_an_empty_registry_fails() -> None:
    with pytest.raises(RegistryError, match="empty"):
        JobTypes().registry()


def test_schema_must_carry_its_discriminator() -> None:
    with pytest.raises(RuntimeError, match="Literal"):
        Registry([JobType(name="diag.sleep", payload_model=Orphan, handler=_ok)])
    with pytest.raises(RuntimeError, match="no payload schema"):
        _only(JobType(name="diag.noop", payload_model=dict, handler=_ok))  # type: ignore[arg-type]


class Greeting(JobPayload):
    name: str


def test_the_decorator_takes_the_payload_model_from_the_annotation() -> None:
    group = JobTypes(classes={"mail": 3})

    @group.job_type("example.greet", concurrency_class="mail", dedupe_key=lambda p: p.name)
    async def greet(ctx: JobContext[Greeting]) -> Complete:
        return Complete(result={"hello": ctx.payload.name})

    registry = group.registry()
    entry = registry.get("example.greet")
    assert entry is not None and entry.handler is greet
    parsed = registry.parse("example.greet", {"name": "ada"})
    assert isinstance(parsed, Greeting)
    assert entry.dedupe_key(parsed) == "ada"
    assert entry.class_for(parsed) == "mail"
    assert registry.classes == {"mail": 3}
    assert registry.unserved_classes({"default": 1}) == {"example.greet": "mail"}


def test_a_handler_without_a_payload_annotation_is_refused() -> None:
    group = JobTypes()

    async def untyped(ctx):  # type: ignore[no-untyped-def]
        return Complete()

    with pytest.raises(RegistryError, match="JobContext"):
        group.job_type("example.untyped")(untyped)


def test_bad_declarations_are_named() -> None:
    group = JobTypes(classes={"mail": 3})
    group.concurrency_class("mail", slots=4)
    group.job_type("example.bad", payload=Greeting, concurrency_class="Bad Class")(_ok)
    group.job_type("example.orphan_parent", payload=Greeting, role=JobRole.PARENT)(_ok)
    with pytest.raises(RegistryError) as exc:
        group.registry()
    message = str(exc.value)
    assert "'mail' is declared with 3 and 4 slots" in message
    with pytest.raises(RegistryError) as exc:
        other = JobTypes()
        other.job_type("example.bad", payload=Greeting, concurrency_class="Bad Class")(_ok)
        other.job_type("example.orphan_parent", payload=Greeting, role=JobRole.PARENT)(_ok)
        other.registry()
    message = str(exc.value)
    assert "invalid concurrency class 'Bad Class'" in message
    assert "'example.orphan_parent' creates no children" in message


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
