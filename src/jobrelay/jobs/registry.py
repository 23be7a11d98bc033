"""The closed, exhaustive registry of job types (docs/explanation/design.md, "The jobs engine").

One `JobType` per type names everything the engine needs: the payload model (one member of a
Pydantic discriminated union on `type`), the dedupe rule (a key built from named payload
fields, never a hash of the whole payload), the conflict policy, the concurrency class, the
serialization key, the retry policy, the timeout and the handler. Job types are declared in
the package that owns them (`jobrelay.jobs.declare.JobTypes`, the public API) and a
deployment's registry is built from all of them at startup: `Registry(...)` refuses to exist
when an entry is incomplete or two entries share a name, so a process never starts with a
type it could store but not run. A stored job whose type is not in the registry fails
permanently when claimed.

Concurrency classes are data: a `Registry` knows the classes its types declared, with their
default slots per worker; settings may override them (`JOBRELAY_WORKER_SLOTS`), and the rate
limits declared with them (`Rate`, enforced by the claim across every worker).

Fairness: a type may name a fairness key (`fairness_key`, a function of the payload, or
`fairness_field`, the name of a payload field), stored on the job at enqueue; claims rotate
across the keys of a class (see `queries/claim_jobs.sql`). Without one the key is NULL and
all such jobs of a class form one group.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Literal, TypeVar, Union, cast, get_args, get_origin

from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model
from pydantic.alias_generators import to_camel

from jobrelay.db.pool import Connection
from jobrelay.domain.errors import FieldError, InvalidInput
from jobrelay.domain.jobs import ConflictPolicy, JobRole, Outcome, OutputWriter
from jobrelay.domain.jobs_config import DEFAULT_CLASS, ConfigError, Rate, check_class_name
from jobrelay.domain.retry import RetryPolicy
from jobrelay.jobs.models import ClaimedJob, Enqueued, EnqueueRequest
from jobrelay.jobs.schedules import Schedule
from jobrelay.jobs.workflows import release
from jobrelay.jobs.workflows.graph import Step
from jobrelay.jobs.workflows.release import DependencyResult


class RegistryError(RuntimeError):
    """The registry is incomplete or inconsistent; the message names the type and the gap."""


class JobPayload(BaseModel):
    """Base of every payload model: camelCase JSON, unknown fields rejected, immutable.

    The discriminator `type: Literal["<name>"]` may be declared; when it is not, the
    registry adds it. It is not stored (the row has a `type` column); the stored payload
    is the rest, by alias.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


P = TypeVar("P", bound=JobPayload)

# Writes jobs in the caller's connection (and transaction): children a handler creates in
# its completing transaction.
ChildWriter = Callable[[Connection, Sequence[EnqueueRequest]], Awaitable[Sequence[Enqueued]]]
# Adds steps to the running step's workflow in its completing transaction (a fan-out):
# (conn, the adding step, the new steps, the held dependents that wait for them all).
StepAdder = Callable[
    [Connection, ClaimedJob, Sequence[Step], Sequence[str]], Awaitable[Mapping[str, Any]]
]


@dataclass(frozen=True, slots=True)
class JobContext(Generic[P]):
    """What a handler receives: the claim (id, attempt, revision, token), its payload, the
    worker's pool and a way to enqueue jobs inside a transaction of the handler's own
    (typically its `Complete(outputs=...)` writer, so they exist only if the job completes).
    """

    job: ClaimedJob
    payload: P
    pool: AsyncConnectionPool[Connection] | None = None
    children: ChildWriter | None = None
    steps: StepAdder | None = None

    async def enqueue(
        self, conn: Connection, requests: Sequence[EnqueueRequest]
    ) -> Sequence[Enqueued]:
        """Enqueue `requests` in `conn`'s transaction (all or nothing, validated)."""
        if self.children is None:
            raise RuntimeError("this job context cannot enqueue (no enqueuer was given)")
        return await self.children(conn, requests)

    async def dependency_results(self) -> dict[str, DependencyResult]:
        """For a workflow step: each dependency by step name, with its end (`completed`,
        or for a step whose policy is `run`, `failed`, `cancelled` or `skipped`), its
        result and its error. Empty for a job that is no step."""
        if self.job.workflow_id is None:
            return {}
        if self.pool is None:
            raise RuntimeError("this job context has no pool to read dependencies with")
        async with self.pool.connection() as conn:
            return await release.dependency_results(conn, self.job.id)

    def fan_out(
        self,
        steps: Sequence[Step],
        *,
        then: Sequence[str] = (),
        outputs: OutputWriter | None = None,
    ) -> OutputWriter:
        """For a workflow step: the writer to complete with (`Complete(outputs=...)`) that
        adds `steps` to its workflow in the completing transaction, each run after this
        step, and makes the held steps named in `then` (steps that wait on this one) wait
        for all of them. An empty `steps` adds nothing and `then` runs as it would.
        `outputs` runs first, in the same transaction. A bad step, a cycle or a workflow
        over its size limit fails this step permanently and adds nothing."""
        adder = self.steps
        if adder is None:
            raise RuntimeError("this job context cannot add workflow steps (no enqueuer)")
        job, added, waiting = self.job, tuple(steps), tuple(then)

        async def write(conn: Connection) -> None:
            if outputs is not None:
                await outputs(conn)
            await adder(conn, job, added, waiting)

        return write


Handler = Callable[[JobContext[Any]], Awaitable[Outcome]]


def _no_key(_: Any) -> str | None:
    return None


def _first_revision(_: Any) -> int:
    return 1


def _no_class(_: Any) -> str | None:
    return None


# A child job created with its parent, in the same transaction: (type, payload).
ChildSpec = tuple[str, Mapping[str, Any]]


@dataclass(frozen=True)
class JobType(Generic[P]):
    """Everything the engine knows about one job type.

    `dedupe_key`: the logical identity of a request (None: never deduplicated).
    `revision`: the request revision stored on the row (supersede compares it; merge bumps it).
    `merge_field`: for policy merge, the JSON name of the list that is unioned.
    `source_key`: the serialization key (at most one running job per key).
    `concurrency_class`: the class whose slots run it; `class_of` may choose one per payload.
    `timeout_s`: a handler still running after this long is stopped; a retryable failure.
    `role`: ordinary job, waiting parent or dispatch child (invariant 12).
    `on_create`: for a parent, the children created with it in the same transaction.
    `fairness_key` / `fairness_field`: the key claims rotate over within the class (a
    function of the payload, or the name of a payload field); None: the shared NULL group.
    """

    name: str
    payload_model: type[P]
    handler: Handler | None
    policy: ConflictPolicy = ConflictPolicy.IGNORE
    dedupe_key: Callable[[P], str | None] = _no_key
    revision: Callable[[P], int] = _first_revision
    merge_field: str | None = None
    source_key: Callable[[P], str | None] = _no_key
    concurrency_class: str = DEFAULT_CLASS
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    priority: int = 0
    class_of: Callable[[P], str | None] = _no_class
    role: JobRole = JobRole.JOB
    on_create: Callable[[P], Sequence[ChildSpec]] | None = None
    timeout_s: float | None = None
    fairness_key: Callable[[P], object] = _no_key
    fairness_field: str | None = None

    def class_for(self, payload: P) -> str:
        return self.class_of(payload) or self.concurrency_class

    @property
    def keyed(self) -> bool:
        """Whether the type derives a dedupe key from the payload (else only a request's
        explicit key can give one)."""
        return self.dedupe_key is not _no_key

    def fairness_for(self, payload: P) -> str | None:
        """The fairness key stored on the job (as text; None: the shared group)."""
        if self.fairness_field is not None:
            value = getattr(payload, _attribute(self.payload_model, self.fairness_field), None)
        else:
            value = self.fairness_key(payload)
        return None if value is None else str(value)


def _attribute(model: type[BaseModel], name: str) -> str:
    """The attribute of `model` called `name` or with the alias `name` (else `name`)."""
    if name in model.model_fields:
        return name
    for key, info in model.model_fields.items():
        if info.alias == name:
            return key
    return name


@dataclass(frozen=True, slots=True)
class Sweep:
    """A periodic repair a part runs in every worker (e.g. ending work whose job ended
    without doing it). `run` gets the worker's pool and returns how many rows it acted on."""

    name: str
    every_s: float
    run: Callable[[AsyncConnectionPool[Connection]], Awaitable[int]]


def literal_tag(model: type[BaseModel]) -> str | None:
    """The value of a model's `type: Literal[...]` discriminator, if it declares one."""
    info = model.model_fields.get("type")
    if info is None or get_origin(info.annotation) is not Literal:
        return None
    values = get_args(info.annotation)
    return str(values[0]) if len(values) == 1 else None


def tagged(name: str, model: type[P]) -> type[P]:
    """`model` with the discriminator `type: Literal[name]`: the model itself when it
    declares it, else a subclass of the same name that adds it (instances are still
    instances of `model`)."""
    if literal_tag(model) is not None or "type" in model.model_fields:
        return model
    tag: Any = Literal[name]  # a literal built at run time: the type checker cannot see it
    subclass: type[P] = create_model(
        model.__name__, __base__=model, __module__=model.__module__, type=(tag, name)
    )
    return subclass


def _check_entry(entry: JobType[Any]) -> list[str]:
    problems: list[str] = []
    name = entry.name
    if not name or len(name) > 100 or name != name.strip() or " " in name:
        problems.append(f"job type name {name!r} must be 1 to 100 characters without spaces")
    if entry.handler is None:
        problems.append(f"job type {name!r} has no handler")
    if not (isinstance(entry.payload_model, type) and issubclass(entry.payload_model, JobPayload)):
        problems.append(f"job type {name!r} has no payload schema (a JobPayload subclass)")
        return problems
    tag = literal_tag(entry.payload_model)
    if tag != name:
        problems.append(
            f"job type {name!r}: its payload model must declare type: Literal[{name!r}] "
            f"(found {tag!r})"
        )
    try:
        check_class_name(entry.concurrency_class)
    except ConfigError as exc:
        problems.append(f"job type {name!r}: {exc}")
    if entry.timeout_s is not None and not entry.timeout_s > 0:
        problems.append(f"job type {name!r}: timeout_s must be > 0, got {entry.timeout_s!r}")
    if entry.role is JobRole.PARENT and entry.on_create is None:
        problems.append(f"parent job type {name!r} creates no children (on_create)")
    if entry.role is not JobRole.PARENT and entry.on_create is not None:
        problems.append(f"job type {name!r} has on_create but is not a parent (role)")
    if entry.fairness_field is not None:
        field_name = _attribute(entry.payload_model, entry.fairness_field)
        if field_name not in entry.payload_model.model_fields:
            problems.append(
                f"job type {name!r}: fairness_key {entry.fairness_field!r} is not a field "
                "of its payload"
            )
    if entry.policy is ConflictPolicy.MERGE:
        aliases = {
            (info.alias or key): info for key, info in entry.payload_model.model_fields.items()
        }
        info = aliases.get(entry.merge_field or "")
        if info is None or get_origin(info.annotation) not in (list, tuple, frozenset, set):
            problems.append(
                f"job type {name!r} merges but merge_field {entry.merge_field!r} "
                "is not a list field of its payload"
            )
    return problems


class Registry:
    """The registered job types, their concurrency classes and sweeps. Construction
    validates every entry, refuses duplicates and refuses an empty registry."""

    def __init__(
        self,
        entries: Iterable[JobType[Any]],
        *,
        classes: Mapping[str, int] | None = None,
        sweeps: Iterable[Sweep] = (),
        schedules: Iterable[Schedule] = (),
        rates: Mapping[str, Rate] | None = None,
    ):
        self._types: dict[str, JobType[Any]] = {}
        problems: list[str] = []
        for entry in entries:
            if entry.name in self._types:
                problems.append(f"job type {entry.name!r} is registered twice")
            problems.extend(_check_entry(entry))
            self._types[entry.name] = entry
        self._classes = dict(classes or {})
        for name, slots in self._classes.items():
            try:
                check_class_name(name)
            except ConfigError as exc:
                problems.append(str(exc))
            if slots < 0:
                problems.append(f"concurrency class {name!r}: slots must be >= 0, got {slots}")
        self._rates = dict(rates or {})
        for name in self._rates:
            try:
                check_class_name(name)
            except ConfigError as exc:
                problems.append(str(exc))
        self._sweeps = tuple(sweeps)
        if problems:
            raise RegistryError("; ".join(problems))
        if not self._types:
            raise RegistryError("the job type registry is empty")
        models = tuple(entry.payload_model for entry in self._types.values())
        union: Any = models[0] if len(models) == 1 else Union[models]  # noqa: UP007
        self._adapter: TypeAdapter[JobPayload] = TypeAdapter(
            Annotated[union, Field(discriminator="type")]
        )
        # The adapter's own validate_python is a Python wrapper around this, paid per job.
        self._validator = self._adapter.validator
        self._schedules = self._checked_schedules(schedules)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._types)

    @property
    def classes(self) -> dict[str, int]:
        """Declared concurrency classes and their default slots per worker."""
        return dict(self._classes)

    @property
    def rates(self) -> dict[str, Rate]:
        """Declared rate limits per concurrency class (starts per period, all workers)."""
        return dict(self._rates)

    @property
    def sweeps(self) -> tuple[Sweep, ...]:
        return self._sweeps

    def get(self, name: str) -> JobType[Any] | None:
        return self._types.get(name)

    def __iter__(self) -> Iterator[JobType[Any]]:
        return iter(self._types.values())

    def unserved_classes(self, slots: Mapping[str, int]) -> dict[str, str]:
        """Types whose (static) class is not in `slots` at all: type -> class."""
        return {t.name: t.concurrency_class for t in self if t.concurrency_class not in slots}

    def parse(self, type_name: str, payload: Mapping[str, Any]) -> JobPayload:
        """Validate `payload` as a `type_name` job through the discriminated union.

        Raises `InvalidInput` naming the field (`type` or `payload.<field>`).
        """
        if type_name not in self._types:
            raise InvalidInput(
                f"unknown job type {type_name!r}",
                [
                    FieldError(
                        "type",
                        f"unknown job type; known: {', '.join(sorted(self._types))} (a "
                        "process knows the types of its --app / JOBRELAY_APP, e.g. "
                        "`jobrelay up --app package.module:job_types`)",
                    )
                ],
            )
        if not isinstance(payload, Mapping):
            raise InvalidInput("invalid payload", [FieldError("payload", "must be an object")])
        data = {**payload, "type": type_name}
        try:
            return cast(JobPayload, self._validator.validate_python(data))
        except ValidationError as exc:
            errors = [
                FieldError(_payload_path(err["loc"], type_name), err["msg"]) for err in exc.errors()
            ]
            raise InvalidInput(f"invalid payload for job type {type_name!r}", errors) from exc

    @property
    def schedules(self) -> tuple[Schedule, ...]:
        """The declared schedules (`JobTypes.schedule`, `JOBRELAY_SCHEDULES`), checked."""
        return self._schedules

    def _checked_schedules(self, schedules: Iterable[Schedule]) -> tuple[Schedule, ...]:
        """The schedules, or `RegistryError` naming every bad one: a name used twice, an
        invalid cron or zone, an unknown catch-up policy or job type, a bad payload."""
        problems: list[str] = []
        seen: set[str] = set()
        checked = tuple(schedules)
        for schedule in checked:
            if schedule.name in seen:
                problems.append(f"schedule {schedule.name!r} is declared twice")
            seen.add(schedule.name)
            problems.extend(schedule.problems())
            if schedule.job_type not in self._types:
                problems.append(
                    f"schedule {schedule.name!r}: unknown job type {schedule.job_type!r}"
                )
                continue
            try:
                self.parse(schedule.job_type, schedule.payload)
            except InvalidInput as exc:
                details = "; ".join(f"{e.path}: {e.message}" for e in exc.errors)
                problems.append(f"schedule {schedule.name!r}: invalid payload ({details})")
        if problems:
            raise RegistryError("; ".join(problems))
        return checked


def _payload_path(loc: tuple[int | str, ...], type_name: str) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] == type_name:
        parts = parts[1:]
    return ".".join(["payload", *parts])


_DISCRIMINATOR = {"type"}


def payload_dict(payload: JobPayload) -> dict[str, Any]:
    """The stored form of a payload: JSON-ready, camelCase, without the `type`
    discriminator."""
    return payload.model_dump(mode="json", by_alias=True, exclude=_DISCRIMINATOR)


def payload_json(payload: JobPayload) -> bytes:
    """`payload_dict` as compact JSON (UTF-8 characters unescaped), encoded by pydantic's
    serializer directly: `model_dump_json`'s Python wrapper costs as much as the encoding,
    once per job of a bulk enqueue."""
    return payload.__pydantic_serializer__.to_json(payload, by_alias=True, exclude=_DISCRIMINATOR)
