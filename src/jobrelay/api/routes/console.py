"""The operator console's JSON endpoints (admin role), one per console screen call:
`/v1/console/overview` and `/v1/console/health`. Both read `services.console`; see
docs/reference/console.md for what each field means and what it costs."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter
from pydantic import Field

from jobrelay.api.deps import AdminDep, ServicesDep
from jobrelay.api.schemas import ApiModel
from jobrelay.console import Health, Overview

router = APIRouter(tags=["console"])


class TypeStatusCountOut(ApiModel):
    type: str
    status: str
    count: int = Field(
        description="pending and in_progress: jobs now; completed, failed, cancelled: jobs "
        "finished in the last 60 minutes"
    )
    last_5m: int | None = Field(
        alias="last5m", description="Of a finished status: those finished in the last 5 minutes"
    )


class ClassLoadOut(ApiModel):
    concurrency_class: str
    running: int
    global_cap: int | None = Field(description="JOBRELAY_JOBS_GLOBAL_CAPS as the API knows it")
    holding_slots: int = Field(description="Running jobs holding a slot of the global cap")
    lease_expired: int = Field(description="Running jobs whose lease expired (not yet rescued)")
    available: int = Field(description="Pending jobs whose availableAt has come (no parents)")
    oldest_available_at: dt.datetime | None
    oldest_available_age_s: float | None = Field(alias="oldestAvailableAgeSeconds")
    workers_live: int = Field(description="Workers serving the class with a live heartbeat")
    workers_stale: int = Field(description="Workers serving the class whose heartbeat is stale")
    live_slots: int = Field(description="The live workers' slots for the class")
    last_heartbeat_at: dt.datetime | None


class FinishedOut(ApiModel):
    completed_5m: int = Field(alias="completed5m")
    failed_5m: int = Field(alias="failed5m")
    completed_60m: int = Field(alias="completed60m")
    failed_60m: int = Field(alias="failed60m")


class ControlOut(ApiModel):
    claims_paused: bool
    enqueue_paused: bool
    reason: str | None
    updated_by: str
    updated_at: dt.datetime


class BatchCountsOut(ApiModel):
    total: int
    queued: int
    running: int
    completed: int
    failed: int
    cancelled: int


class BatchProgressOut(ApiModel):
    id: str
    organization_id: int
    project_id: int
    type: str
    created_at: dt.datetime
    counts: BatchCountsOut


class OverviewOut(ApiModel):
    checked_at: dt.datetime = Field(description="Database time of the reading")
    jobs: list[TypeStatusCountOut]
    classes: list[ClassLoadOut]
    oldest_available_age_s: float | None = Field(
        alias="oldestAvailableAgeSeconds",
        description="Age of the oldest available pending job, any class (null: none)",
    )
    finished: FinishedOut
    control: ControlOut
    batches: list[BatchProgressOut] = Field(
        description="Batches in progress, oldest first (at most 50)"
    )
    more_batches: bool = Field(description="More batches are in progress than listed")

    @classmethod
    def of(cls, overview: Overview) -> OverviewOut:
        return cls.model_validate(overview)


class TableHealthOut(ApiModel):
    table: str
    live_tuples: int
    dead_tuples: int
    last_vacuum: dt.datetime | None
    last_autovacuum: dt.datetime | None
    last_analyze: dt.datetime | None
    last_autoanalyze: dt.datetime | None
    total_bytes: int = Field(description="pg_total_relation_size: table, indexes and TOAST")


class OldestTransactionOut(ApiModel):
    pid: int
    application_name: str
    user_name: str | None
    state: str | None
    xact_start: dt.datetime | None
    xact_age_s: float | None = Field(alias="xactAgeSeconds")
    xmin_age: int | None = Field(description="age(backend_xmin), in transactions")
    query: str = Field(description="The session's current or last query, first 200 characters")


class LeaseLossesOut(ApiModel):
    failed_last_hour: int = Field(
        description="Jobs failed for good with failureKind lease_expired in the last hour"
    )
    rescued_pending_last_hour: int = Field(
        description="Jobs the lease sweep put back to pending in the last hour, not yet "
        "claimed again"
    )
    expired_not_yet_rescued: int = Field(description="Running jobs whose lease has expired")


class RelayLagOut(ApiModel):
    undispatched: int = Field(description="Items not sent, not cancelled, not failed")
    oldest_item_id: str | None
    oldest_batch_id: str | None
    oldest_created_at: dt.datetime | None
    oldest_dispatch_attempts: int | None
    lag_s: float = Field(alias="lagSeconds", description="Age of the oldest such item (0: none)")


class HealthOut(ApiModel):
    checked_at: dt.datetime = Field(description="Database time of the reading")
    tables: list[TableHealthOut]
    oldest_transaction: OldestTransactionOut | None = Field(
        description="The other session with the oldest backend_xmin (else open transaction)"
    )
    lease_losses: LeaseLossesOut
    relay_lag: RelayLagOut

    @classmethod
    def of(cls, health: Health) -> HealthOut:
        return cls.model_validate(health)


@router.get(
    "/v1/console/overview",
    response_model=OverviewOut,
    summary="Console overview: jobs by type and status, load per concurrency class, the "
    "oldest available job, recent completions and failures, pause flags, batches in progress",
)
async def console_overview(_: AdminDep, services: ServicesDep) -> OverviewOut:
    return OverviewOut.of(await services.console.overview())


@router.get(
    "/v1/console/health",
    response_model=HealthOut,
    summary="Console health: table statistics, the oldest transaction, lease losses, relay lag",
)
async def console_health(_: AdminDep, services: ServicesDep) -> HealthOut:
    return HealthOut.of(await services.console.health())
