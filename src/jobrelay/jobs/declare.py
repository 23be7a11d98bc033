"""Declaring job types in user code: `JobTypes`, the public API of the engine.

A package declares its job types on a `JobTypes` object, with a decorator on each handler
or with `JobType` declaration objects, and names that object to the worker and the API
(`jobrelay worker --app package.module:job_types`, the `JOBRELAY_APP` setting, or the
`jobrelay.job_types` entry-point group of an installed package)::

    from jobrelay import JobContext, JobPayload, JobTypes, Complete

    job_types = JobTypes()

    class Greet(JobPayload):
        name: str

    @job_types.job_type("example.greet", dedupe_key=lambda p: p.name)
    async def greet(ctx: JobContext[Greet]) -> Complete:
        return Complete(result={"greeting": f"hello {ctx.payload.name}"})

The product's own types (media, sources, CCIP, Code2WF dispatch, diagnostics) are declared
the same way in the parts that own them. A deployment's registry is every group it loads,
merged by `JobTypes.include` and checked once (`registry()`): two types with one name, an
incomplete declaration or a class declared twice with different slots stop the process at
startup with one line naming the problem.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from pydantic import BaseModel

from jobrelay.domain.jobs import ConflictPolicy, JobRole, Outcome
from jobrelay.domain.jobs_config import DEFAULT_CLASS, ConfigError, Rate, parse_rate
from jobrelay.domain.retry import RetryPolicy
from jobrelay.jobs.registry import (
    ChildSpec,
    JobContext,
    JobPayload,
    JobType,
    Registry,
    RegistryError,
    Sweep,
    tagged,
)
from jobrelay.jobs.schedules import DEFAULT_CATCH_UP, Schedule

H = TypeVar("H", bound=Callable[..., Awaitable[Outcome]])
SweepFn = Callable[..., Awaitable[int]]
S = TypeVar("S", bound=SweepFn)


class JobTypes:
    """A group of job types, the concurrency classes they use and the sweeps of the part
    that declares them. Declaring checks nothing but the name; `registry()` checks all."""

    def __init__(
        self,
        *,
        classes: Mapping[str, int] | None = None,
        rates: Mapping[str, str | tuple[float, float] | Rate] | None = None,
    ) -> None:
        """`classes`: concurrency classes with their default slots per worker (settings may
        override them); the class `default` needs no declaration. `rates`: rate limits per
        class (see `concurrency_class`)."""
        self._entries: dict[str, JobType[Any]] = {}
        self._duplicates: list[str] = []
        self._classes: dict[str, int] = {}
        self._class_conflicts: list[str] = []
        self._sweeps: list[Sweep] = []
        self._schedules: list[Schedule] = []
        self._rates: dict[str, Rate] = {}
        for name, slots in (classes or {}).items():
            self.concurrency_class(name, slots=slots)
        for name, rate in (rates or {}).items():
            self._declare_rate(name, rate)

    def add(self, *entries: JobType[Any]) -> None:
        """Add job types declared as `JobType` objects."""
        for entry in entries:
            if entry.name in self._entries:
                self._duplicates.append(entry.name)
            self._entries[entry.name] = entry

    def job_type(
        self,
        name: str,
        *,
        payload: type[JobPayload] | None = None,
        policy: ConflictPolicy = ConflictPolicy.IGNORE,
        dedupe_key: Callable[[Any], str | None] | None = None,
        revision: Callable[[Any], int] | None = None,
        merge_field: str | None = None,
        source_key: Callable[[Any], str | None] | None = None,
        concurrency_class: str = DEFAULT_CLASS,
        class_of: Callable[[Any], str | None] | None = None,
        retry: RetryPolicy | None = None,
        priority: int = 0,
        timeout_s: float | None = None,
        role: JobRole = JobRole.JOB,
        on_create: Callable[[Any], Sequence[ChildSpec]] | None = None,
        fairness_key: Callable[[Any], object] | str | None = None,
    ) -> Callable[[H], H]:
        """Declare the decorated async function as the handler of job type `name`.

        The payload model is `payload`, or the `X` of the handler's `ctx: JobContext[X]`
        annotation. The key functions receive the validated payload. The handler is
        returned unchanged, so it can still be called (and tested) directly.

        `fairness_key`: claims rotate across the keys of a class so that one key's backlog
        cannot starve another's (e.g. `lambda p: p.organization_id`, or the name of a
        payload field such as `"organizationId"`). Default: no key, every job of the class
        in one shared group (strict priority and arrival order).
        """

        def declare(handler: H) -> H:
            model = payload or _payload_of(name, handler)
            options: dict[str, Any] = {
                "dedupe_key": dedupe_key,
                "revision": revision,
                "source_key": source_key,
                "class_of": class_of,
                "retry": retry,
                "fairness_key": fairness_key if callable(fairness_key) else None,
                "fairness_field": fairness_key if isinstance(fairness_key, str) else None,
            }
            self.add(
                JobType(
                    name=name,
                    payload_model=tagged(name, model),
                    handler=handler,
                    policy=policy,
                    merge_field=merge_field,
                    concurrency_class=concurrency_class,
                    priority=priority,
                    timeout_s=timeout_s,
                    role=role,
                    on_create=on_create,
                    **{key: value for key, value in options.items() if value is not None},
                )
            )
            return handler

        return declare

    def concurrency_class(
        self, name: str, *, slots: int, rate: str | tuple[float, float] | Rate | None = None
    ) -> None:
        """Declare a concurrency class and its default slots per worker process.

        `rate`: at most that many jobs of the class start (are claimed) in any period,
        across every worker process: `"60/min"`, `"30/10s"`, `"5/s"`, `"1000/h"` or
        `(30, 10)` for 30 per 10 seconds. A job held back by the rate waits pending; it is
        not an attempt.
        """
        known = self._classes.get(name)
        if known is not None and known != slots:
            self._class_conflicts.append(
                f"concurrency class {name!r} is declared with {known} and {slots} slots"
            )
        self._classes[name] = slots
        if rate is not None:
            self._declare_rate(name, rate)

    def _declare_rate(self, name: str, rate: str | tuple[float, float] | Rate) -> None:
        try:
            parsed = parse_rate(rate, what=f"rate of concurrency class {name!r}")
        except ConfigError as exc:
            self._class_conflicts.append(str(exc))
            return
        known = self._rates.get(name)
        if known is not None and known != parsed:
            self._class_conflicts.append(
                f"concurrency class {name!r} is declared with rates {known} and {parsed}"
            )
        self._rates[name] = parsed

    def sweep(self, name: str, *, every_s: float) -> Callable[[S], S]:
        """Run the decorated `async def f(pool) -> int` in every worker every `every_s`."""
        if not every_s > 0:
            raise ValueError(f"sweep {name!r}: every_s must be > 0, got {every_s!r}")

        def declare(run: S) -> S:
            self._sweeps.append(Sweep(name=name, every_s=every_s, run=run))
            return run

        return declare

    def include(self, other: JobTypes) -> None:
        """Add every job type, class and sweep of `other` (a duplicate name is reported
        by `registry()`)."""
        self.add(*other._entries.values())
        self._duplicates.extend(other._duplicates)
        for name, slots in other._classes.items():
            self.concurrency_class(name, slots=slots)
        for name, rate in other._rates.items():
            self._declare_rate(name, rate)
        self._class_conflicts.extend(other._class_conflicts)
        self._sweeps.extend(other._sweeps)
        self._schedules.extend(other._schedules)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._entries)

    def registry(self) -> Registry:
        """The checked registry of these job types; raises `RegistryError` naming every
        problem (duplicates, incomplete declarations, conflicting classes)."""
        problems = [f"job type {name!r} is registered twice" for name in self._duplicates]
        problems.extend(self._class_conflicts)
        if problems:
            raise RegistryError("; ".join(problems))
        return Registry(
            self._entries.values(),
            classes=self._classes,
            sweeps=self._sweeps,
            schedules=self._schedules,
            rates=self._rates,
        )

    def schedule(
        self,
        name: str,
        *,
        cron: str,
        job_type: str,
        payload: Mapping[str, Any] | None = None,
        timezone: str = "UTC",
        catch_up: str = DEFAULT_CATCH_UP.value,
    ) -> None:
        """Enqueue a `job_type` job with `payload` at every tick of `cron` (croniter; a
        sixth field is seconds) in `timezone`, exactly once per tick across all workers.
        `catch_up`: `one` (default: one job for the ticks missed while no worker ran) or
        `skip`. `registry()` checks the cron, zone, policy, job type and payload."""
        self._schedules.append(
            Schedule(
                name=name,
                cron=cron,
                job_type=job_type,
                payload=dict(payload or {}),
                timezone=timezone,
                catch_up=catch_up,
            )
        )


def _payload_of(name: str, handler: Callable[..., Any]) -> type[JobPayload]:
    """The `X` of a handler's first parameter annotated `JobContext[X]`."""
    try:
        hints = get_type_hints(handler)
        first = next(iter(inspect.signature(handler).parameters))
    except (NameError, StopIteration, TypeError) as exc:
        raise RegistryError(
            f"job type {name!r}: cannot read the payload model from the handler "
            f"({exc}); pass payload=..."
        ) from None
    annotation = hints.get(first)
    args = get_args(annotation) if get_origin(annotation) is JobContext else ()
    model = args[0] if args else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise RegistryError(
            f"job type {name!r}: annotate the handler's first parameter as "
            "JobContext[YourPayload] or pass payload=..."
        )
    if not issubclass(model, JobPayload):
        raise RegistryError(f"job type {name!r}: {model.__name__} must subclass JobPayload")
    return model
