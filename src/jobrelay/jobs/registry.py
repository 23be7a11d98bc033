"""The closed, exhaustive registry of job types (DESIGN.md section 3, invariant 9).

One `JobType` per type names everything the engine needs: the payload model (one member of a
Pydantic discriminated union on `type`), the dedupe rule (a key built from named payload
fields, never a hash of the whole payload), the conflict policy, the concurrency class, the
serialization key, the retry policy and the handler. `Registry(...)` refuses to exist when
an entry is incomplete or the set of types differs from `KNOWN_TYPES`; the worker and the
API build it at startup, and a test builds it too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

from jobrelay.domain.errors import FieldError, InvalidInput
from jobrelay.domain.jobs import ConcurrencyClass, ConflictPolicy, JobRole, Outcome
from jobrelay.domain.retry import RetryPolicy
from jobrelay.jobs.models import ClaimedJob

# The closed set of job types. Adding a type means adding it here AND registering a complete
# `JobType` for it; `Registry` fails at startup (and in tests) when the two disagree.
KNOWN_TYPES: frozenset[str] = frozenset(
    {
        "media.process",
        "source.sync",
        "index.sync_delta",
        "code2wf.dispatch",
        "diag.noop",
        "diag.sleep",
        "diag.fail",
        "ccip.batch",
        "ccip.dispatch",
        "ccip.item",
    }
)
# Parents wait (pending, never claimed) until their children are terminal; dispatch children
# create the other children and are not counted as items. Reconciliation (jobs/claims.py)
# uses these sets; the registry checks that the entries' roles agree.
PARENT_TYPES: frozenset[str] = frozenset({"ccip.batch"})
DISPATCH_TYPES: frozenset[str] = frozenset({"ccip.dispatch"})
DIAG_PREFIX = "diag."


class RegistryError(RuntimeError):
    """The registry is incomplete or inconsistent; the message names the type and the gap."""


class JobPayload(BaseModel):
    """Base of every payload model: camelCase JSON, unknown fields rejected, immutable.

    Subclasses declare `type: Literal["<name>"]`: the discriminator of the union. It is not
    stored (the row has a `type` column); the stored payload is the rest, by alias.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


P = TypeVar("P", bound=JobPayload)


@dataclass(frozen=True, slots=True)
class JobContext(Generic[P]):
    """What a handler receives: the claim (id, attempt, revision, token) and its payload."""

    job: ClaimedJob
    payload: P


Handler = Callable[[JobContext[Any]], Awaitable[Outcome]]


def _no_key(_: Any) -> str | None:
    return None


def _first_revision(_: Any) -> int:
    return 1


def _no_class(_: Any) -> ConcurrencyClass | None:
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
    `class_of`: a payload-specific concurrency class (None: `concurrency_class`).
    `role`: ordinary job, waiting parent or dispatch child (invariant 12).
    `on_create`: for a parent, the children created with it in the same transaction.
    """

    name: str
    payload_model: type[P]
    handler: Handler | None
    policy: ConflictPolicy = ConflictPolicy.IGNORE
    dedupe_key: Callable[[P], str | None] = _no_key
    revision: Callable[[P], int] = _first_revision
    merge_field: str | None = None
    source_key: Callable[[P], str | None] = _no_key
    concurrency_class: ConcurrencyClass = ConcurrencyClass.DEFAULT
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    priority: int = 0
    class_of: Callable[[P], ConcurrencyClass | None] = _no_class
    role: JobRole = JobRole.JOB
    on_create: Callable[[P], Sequence[ChildSpec]] | None = None

    def class_for(self, payload: P) -> ConcurrencyClass:
        return self.class_of(payload) or self.concurrency_class


def _literal_tag(model: type[BaseModel]) -> str | None:
    info = model.model_fields.get("type")
    if info is None or get_origin(info.annotation) is not Literal:
        return None
    values = get_args(info.annotation)
    return str(values[0]) if len(values) == 1 else None


def _check_entry(entry: JobType[Any]) -> list[str]:
    problems: list[str] = []
    name = entry.name
    if entry.handler is None:
        problems.append(f"job type {name!r} has no handler")
    if not (isinstance(entry.payload_model, type) and issubclass(entry.payload_model, JobPayload)):
        problems.append(f"job type {name!r} has no payload schema (a JobPayload subclass)")
        return problems
    tag = _literal_tag(entry.payload_model)
    if tag != name:
        problems.append(
            f"job type {name!r}: its payload model must declare type: Literal[{name!r}] "
            f"(found {tag!r})"
        )
    expected_role = (
        JobRole.PARENT
        if name in PARENT_TYPES
        else JobRole.DISPATCH
        if name in DISPATCH_TYPES
        else JobRole.JOB
    )
    if entry.role is not expected_role:
        problems.append(f"job type {name!r} has role {entry.role!r}, expected {expected_role!r}")
    if entry.role is JobRole.PARENT and entry.on_create is None:
        problems.append(f"parent job type {name!r} creates no children (on_create)")
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
    """The registered job types. Construction validates completeness and closedness."""

    def __init__(
        self,
        entries: Iterable[JobType[Any]],
        *,
        known: frozenset[str] = KNOWN_TYPES,
        required: frozenset[str] | None = None,
    ):
        self._types: dict[str, JobType[Any]] = {}
        problems: list[str] = []
        for entry in entries:
            if entry.name in self._types:
                problems.append(f"job type {entry.name!r} is registered twice")
            if entry.name not in known:
                problems.append(f"job type {entry.name!r} is not in the closed set KNOWN_TYPES")
            problems.extend(_check_entry(entry))
            self._types[entry.name] = entry
        for name in sorted((known if required is None else required) - set(self._types)):
            problems.append(f"job type {name!r} has no registry entry (no schema, no handler)")
        if problems:
            raise RegistryError("; ".join(problems))
        if not self._types:
            raise RegistryError("the job type registry is empty")
        models = tuple(entry.payload_model for entry in self._types.values())
        union: Any = models[0] if len(models) == 1 else Union[models]  # noqa: UP007
        self._adapter: TypeAdapter[JobPayload] = TypeAdapter(
            Annotated[union, Field(discriminator="type")]
        )

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._types)

    def get(self, name: str) -> JobType[Any] | None:
        return self._types.get(name)

    def __iter__(self) -> Any:
        return iter(self._types.values())

    def parse(self, type_name: str, payload: Mapping[str, Any]) -> JobPayload:
        """Validate `payload` as a `type_name` job through the discriminated union.

        Raises `InvalidInput` naming the field (`type` or `payload.<field>`).
        """
        if type_name not in self._types:
            raise InvalidInput(
                f"unknown job type {type_name!r}",
                [FieldError("type", f"unknown job type; known: {', '.join(sorted(self._types))}")],
            )
        if not isinstance(payload, Mapping):
            raise InvalidInput("invalid payload", [FieldError("payload", "must be an object")])
        data = {**payload, "type": type_name}
        try:
            return self._adapter.validate_python(data)
        except ValidationError as exc:
            errors = [
                FieldError(_payload_path(err["loc"], type_name), err["msg"]) for err in exc.errors()
            ]
            raise InvalidInput(f"invalid payload for job type {type_name!r}", errors) from exc


def _payload_path(loc: tuple[int | str, ...], type_name: str) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] == type_name:
        parts = parts[1:]
    return ".".join(["payload", *parts])


def payload_dict(payload: JobPayload) -> dict[str, Any]:
    """The stored form of a payload: JSON-ready, camelCase, without the `type`
    discriminator."""
    return payload.model_dump(mode="json", by_alias=True, exclude={"type"})
