"""The deployment's job types (the product's, `--app`, entry points) and the
worker's configuration built from them."""

from __future__ import annotations

import json
from collections.abc import Sequence

from psycopg_pool import AsyncConnectionPool

from jobrelay import content, diagnostics, idempotency
from jobrelay.aws.sender import MessageSender
from jobrelay.bootstrap.database import listen_conninfo
from jobrelay.bootstrap.errors import StartupError
from jobrelay.db.pool import Connection
from jobrelay.domain.errors import FieldError, InvalidInput
from jobrelay.domain.jobs_config import (
    DEFAULT_CLASS,
    ConfigError,
    parse_class_counts,
)
from jobrelay.generations import code2wf_dispatch
from jobrelay.jobs.declare import JobTypes
from jobrelay.jobs.enqueue import Enqueuer
from jobrelay.jobs.failpoints import NO_FAILPOINTS, Failpoints
from jobrelay.jobs.loading import AppLoadError, load_app, load_entry_points
from jobrelay.jobs.registry import Registry, RegistryError
from jobrelay.jobs.schedules import Schedule, from_setting
from jobrelay.jobs.service import JobsService
from jobrelay.jobs.worker import WorkerConfig
from jobrelay.settings import Settings


def product_job_types(
    *,
    diag_enabled: bool,
    failpoints: Failpoints = NO_FAILPOINTS,
    send: MessageSender | None = None,
) -> JobTypes:
    """The product's job types: content, Code2WF dispatch, and diagnostics when enabled."""
    group = JobTypes()
    group.include(content.job_types(failpoints=failpoints))
    group.include(code2wf_dispatch.job_types(send))
    group.include(idempotency.job_types())
    if diag_enabled:
        group.include(diagnostics.job_types)
    return group


def deployment_job_types(
    settings: Settings,
    *,
    failpoints: Failpoints | None = None,
    send: MessageSender | None = None,
    apps: Sequence[JobTypes] = (),
) -> JobTypes:
    """Every job type this deployment runs: the product's, the apps of `JOBRELAY_APP` /
    `--app`, and the packages of the `jobrelay.job_types` entry-point group, all declared
    through the same `JobTypes`; `apps` adds groups already loaded (the pytest plugin's)."""
    group = product_job_types(
        diag_enabled=settings.jobs.diag_enabled,
        failpoints=failpoints or Failpoints.parse(settings.jobs.failpoints),
        send=send,
    )
    for app in apps:
        group.include(app)
    try:
        for reference in settings.jobs.app:
            group.include(load_app(reference))
        for installed in load_entry_points():
            group.include(installed)
    except AppLoadError as exc:
        raise StartupError(str(exc)) from None
    for schedule in configured_schedules(settings):
        group.schedule(
            schedule.name,
            cron=schedule.cron,
            job_type=schedule.job_type,
            payload=schedule.payload,
            timezone=schedule.timezone,
            catch_up=schedule.catch_up,
        )
    return group


def configured_schedules(settings: Settings) -> list[Schedule]:
    """The schedules of `JOBRELAY_SCHEDULES` (checked with the job types by the registry);
    raises `StartupError` naming a malformed entry."""
    if not settings.jobs.schedules.strip():
        return []
    try:
        return from_setting(json.loads(settings.jobs.schedules))
    except ValueError as exc:
        raise StartupError(str(exc)) from None


def jobs_registry(
    settings: Settings,
    failpoints: Failpoints | None = None,
    send: MessageSender | None = None,
    apps: Sequence[JobTypes] = (),
) -> Registry:
    """The closed registry of this deployment's job types; raises `StartupError` with one
    line naming every problem (an app that does not load, two types with one name, an
    incomplete declaration)."""
    try:
        return deployment_job_types(
            settings, failpoints=failpoints, send=send, apps=apps
        ).registry()
    except RegistryError as exc:
        raise StartupError(f"job types: {exc}") from None


def jobs_service(
    settings: Settings,
    pool: AsyncConnectionPool[Connection],
    send: MessageSender | None = None,
    apps: Sequence[JobTypes] = (),
) -> JobsService:
    """The jobs engine over `pool`; with a sender its Code2WF dispatch can send."""
    failpoints = Failpoints.parse(settings.jobs.failpoints)
    registry = jobs_registry(settings, failpoints, send, apps)
    return JobsService(
        pool=pool,
        registry=registry,
        enqueuer=Enqueuer(
            registry,
            payload_limit_bytes=settings.jobs.payload_limit_bytes,
            failpoints=failpoints,
        ),
        failpoints=failpoints,
        global_caps=settings.jobs.class_caps(),
        lock_timeout_s=settings.api.lock_timeout_s,
    )


def parse_slots(text: str, *, what: str = "--slots", empty_ok: bool = False) -> dict[str, int]:
    """`ai=2,default=8` as slots per class; raises `InvalidInput` naming the bad value."""
    try:
        slots = parse_class_counts(text, what=what, minimum=0)
        if not (empty_ok and not slots) and not any(slots.values()):
            raise ConfigError(f"invalid {what} {text!r}: at least one class needs a slot")
    except ConfigError as exc:
        raise InvalidInput(str(exc), [FieldError(what, str(exc))]) from None
    return slots


def worker_config(
    settings: Settings,
    registry: Registry,
    *,
    concurrency: int | None = None,
    slots: dict[str, int] | None = None,
    metrics_port: int | None = None,
    shutdown_grace_s: float | None = None,
) -> WorkerConfig:
    """The worker's configuration from the registry, settings and CLI overrides.

    Slots per class: `--slots` alone when given (a class left out is not claimed); else the
    classes the job types declare, overridden by `JOBRELAY_WORKER_SLOTS`. `--concurrency N`
    alone lets every known class share N slots. Raises `StartupError` when a job type's
    class has slots nowhere (neither declared nor configured): its jobs could never run.
    """
    configured = parse_slots(settings.worker.slots, what="JOBRELAY_WORKER_SLOTS", empty_ok=True)
    known = {DEFAULT_CLASS: 10, **registry.classes, **configured}
    unserved = registry.unserved_classes({**known, **(slots or {})})
    if unserved:
        listed = ", ".join(f"{name} (class {cls!r})" for name, cls in sorted(unserved.items()))
        raise StartupError(
            f"job types whose concurrency class has no slots anywhere: {listed}; declare the "
            "class with its slots (JobTypes(classes=...)) or set JOBRELAY_WORKER_SLOTS"
        )
    concurrency = concurrency or settings.worker.concurrency
    if slots is None and concurrency is None:
        slots = known
    caps = settings.jobs.class_caps()
    rates = {**registry.rates, **settings.jobs.class_rates()}
    listen = listen_conninfo(settings, "worker") if settings.worker.listen else None
    return WorkerConfig(
        # What the two groups decide alone (typed dicts: mypy checks them against WorkerConfig).
        **settings.worker.worker_config(),
        **settings.jobs.worker_config(),
        concurrency=concurrency,
        slots=slots,
        known_classes=tuple(sorted(known)),
        global_caps=caps,
        rates=rates,
        shutdown_grace_s=(
            settings.worker.shutdown_grace_s if shutdown_grace_s is None else shutdown_grace_s
        ),
        listen=settings.worker.listen and listen != "",
        listen_conninfo=listen or None,
        claim_session_settings=not settings.db.through_transaction_pooler,
        metrics_port=settings.worker.metrics_port if metrics_port is None else metrics_port,
    )


def worker_pool_size(settings: Settings, config: WorkerConfig) -> int:
    """Connections of a `jobrelay worker`'s pool: JOBRELAY_WORKER_DB_POOL_MAX, else enough
    for every slot finishing at once plus the loops (heartbeats, flush, rescue, reconcile,
    prune, sweeps), at least JOBRELAY_DB_POOL_MAX and at most 50. The claim connection and
    the LISTEN connection come on top."""
    if settings.worker.db_pool_max is not None:
        return settings.worker.db_pool_max
    return max(settings.db.pool_max, min(config.total_slots + 6, 50))
