"""Schedules endpoint (admin role): the cron schedules, their last and next tick."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from fastapi import APIRouter
from pydantic import Field

from jobrelay.api.deps import AdminDep, ServicesDep
from jobrelay.api.schemas import ApiModel
from jobrelay.jobs.ticker import ScheduleView

router = APIRouter(tags=["jobs"])


class ScheduleOut(ApiModel):
    name: str
    cron: str = Field(description="Cron expression (croniter; a sixth field is seconds)")
    timezone: str = Field(description="IANA time zone the cron expression is read in")
    job_type: str
    payload: dict[str, Any]
    catch_up: str = Field(description="one: one job for ticks missed while no worker ran; skip")
    next_tick_at: dt.datetime | None = Field(description="None until a worker has started it")
    last_tick_at: dt.datetime | None
    last_job_id: uuid.UUID | None
    declared: bool = Field(description="Declared by this deployment's job types or settings")
    stored: bool = Field(description="Stored in job_schedules by a worker")

    @classmethod
    def of(cls, view: ScheduleView) -> ScheduleOut:
        return cls.model_validate(view, from_attributes=True)


class SchedulePage(ApiModel):
    items: list[ScheduleOut]


@router.get(
    "/v1/schedules",
    response_model=SchedulePage,
    summary="Schedules by name: cron, time zone, job type, catch-up, next and last tick",
)
async def list_schedules(_: AdminDep, services: ServicesDep) -> SchedulePage:
    return SchedulePage(items=[ScheduleOut.of(v) for v in await services.jobs.schedules()])
