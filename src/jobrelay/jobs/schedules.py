"""Schedules: cron expressions that enqueue a job at each tick (pure logic, no I/O).

A `Schedule` is declared with the job types (`JobTypes.schedule(...)`) or in the
`JOBRELAY_SCHEDULES` setting. Its ticks are the times its cron expression (croniter; a
sixth field is seconds, `* * * * * *` is every second) matches in its time zone, DST
included (croniter on zone-aware `zoneinfo` datetimes: a wall time that a spring-forward
change skips fires when the clock jumps; one that a fall-back change repeats fires at both
occurrences).

`plan(...)` decides what one ticker pass does with a schedule whose next tick is due:

* A due tick at most `grace_s` old is *on time*: it gets its own job, so a ticker that
  wakes late (a busy machine) loses no tick.
* An older due tick was *missed* (no worker ran when it came due). `catch_up="one"` (the
  default) enqueues one job for all missed ticks, keyed by the latest of them;
  `catch_up="skip"` drops them.
* The next tick is the first one after the database's `now`.

The ticker (`jobrelay.jobs.ticker`) runs that plan in one transaction per schedule row.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

MAX_ON_TIME = 1000  # jobs one pass enqueues for one schedule's on-time ticks, at most


class CatchUp(enum.StrEnum):
    """What a schedule does with ticks missed while no worker ran."""

    ONE = "one"  # one job for all the missed ticks (the default)
    SKIP = "skip"  # none; the schedule continues from now


DEFAULT_CATCH_UP = CatchUp.ONE


@dataclass(frozen=True, slots=True)
class Schedule:
    """Enqueue a `job_type` job with `payload` at every tick of `cron` in `timezone`."""

    name: str
    cron: str
    job_type: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    timezone: str = "UTC"
    catch_up: str = DEFAULT_CATCH_UP.value

    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def problems(self) -> list[str]:
        """What is wrong with this schedule on its own (the job type and payload are
        checked by the registry), one phrase each, naming the schedule and the value."""
        what = f"schedule {self.name!r}"
        found: list[str] = []
        if not self.name or len(self.name) > 100 or self.name != self.name.strip():
            found.append(f"schedule name {self.name!r} must be 1 to 100 characters")
        zone_ok = True
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            found.append(f"{what}: unknown time zone {self.timezone!r}")
            zone_ok = False
        if not isinstance(self.cron, str) or not croniter.is_valid(self.cron):
            found.append(f"{what}: invalid cron expression {self.cron!r}")
        elif zone_ok:
            try:  # e.g. `0 0 30 2 *` is well formed but never comes
                self.next_after(dt.datetime.now(dt.UTC))
            except CroniterError:
                found.append(f"{what}: cron expression {self.cron!r} never matches")
        if self.catch_up not in {c.value for c in CatchUp}:
            found.append(
                f"{what}: unknown catch_up {self.catch_up!r} (one of: "
                f"{', '.join(c.value for c in CatchUp)})"
            )
        if not isinstance(self.payload, Mapping):
            found.append(f"{what}: payload must be an object")
        return found

    def next_after(self, moment: dt.datetime) -> dt.datetime:
        """The first tick strictly after `moment`, in UTC."""
        return _next(self.cron, moment.astimezone(self.zone()))

    def previous_before(self, moment: dt.datetime) -> dt.datetime:
        """The last tick strictly before `moment`, in UTC."""
        tick: dt.datetime = croniter(self.cron, moment.astimezone(self.zone())).get_prev(
            dt.datetime
        )
        return tick.astimezone(dt.UTC)


def _next(cron: str, moment: dt.datetime) -> dt.datetime:
    tick: dt.datetime = croniter(cron, moment).get_next(dt.datetime)
    return tick.astimezone(dt.UTC)


@dataclass(frozen=True, slots=True)
class TickPlan:
    """One pass over a due schedule: the ticks that get a job (oldest first), the missed
    ticks (folded into one job or dropped; counted up to `MAX_COUNTED`), the missed tick
    whose job stands for all of them, and the new last and next tick."""

    enqueue: list[dt.datetime]
    missed: int
    caught_up: dt.datetime | None
    last_tick: dt.datetime | None
    next_tick: dt.datetime


MAX_COUNTED = 10_000


def plan(
    schedule: Schedule, *, next_tick: dt.datetime, now: dt.datetime, grace_s: float
) -> TickPlan:
    """What a pass at database time `now` does with `schedule`, whose next tick is
    `next_tick`. See the module docstring for the policy."""
    on_time_from = now - dt.timedelta(seconds=grace_s)
    enqueue: list[dt.datetime] = []
    missed = 0
    caught_up: dt.datetime | None = None
    last: dt.datetime | None = None
    tick = next_tick
    if next_tick < on_time_from:
        latest_missed = max(schedule.previous_before(on_time_from), next_tick)
        missed = _count(schedule, next_tick, latest_missed)
        if schedule.catch_up == CatchUp.ONE:
            caught_up = latest_missed
            enqueue.append(latest_missed)
        last = latest_missed
        tick = schedule.next_after(latest_missed)
    while tick <= now and len(enqueue) < MAX_ON_TIME:
        enqueue.append(tick)
        last = tick
        tick = schedule.next_after(tick)
    if tick <= now:  # more on-time ticks than one pass enqueues: the rest are dropped
        last = schedule.previous_before(now + dt.timedelta(microseconds=1))
        tick = schedule.next_after(now)
    return TickPlan(
        enqueue=enqueue, missed=missed, caught_up=caught_up, last_tick=last, next_tick=tick
    )


def _count(schedule: Schedule, first: dt.datetime, last: dt.datetime) -> int:
    """Ticks from `first` to `last`, both ticks, inclusive; at most `MAX_COUNTED`."""
    count, tick = 1, first
    while tick < last and count < MAX_COUNTED:
        tick = schedule.next_after(tick)
        count += 1
    return count


def dedupe_key(name: str, tick: dt.datetime) -> str:
    """The dedupe key a schedule's job gets when its type defines none:
    `schedule:<name>:<tick in UTC, ISO 8601>`."""
    return f"schedule:{name}:{tick.astimezone(dt.UTC).isoformat()}"


def from_setting(entries: Any, *, what: str = "JOBRELAY_SCHEDULES") -> list[Schedule]:
    """Schedules from the setting's JSON value: a list of objects with `name`, `cron`,
    `jobType` (or `job_type`), optional `payload`, `timezone`, `catchUp` (or `catch_up`).
    Raises `ValueError` with one line naming the entry and the field."""
    if not isinstance(entries, list):
        raise ValueError(f"{what} must be a JSON list of schedules")
    known = {
        "name": "name",
        "cron": "cron",
        "jobType": "job_type",
        "job_type": "job_type",
        "payload": "payload",
        "timezone": "timezone",
        "catchUp": "catch_up",
        "catch_up": "catch_up",
    }
    schedules: list[Schedule] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"{what}[{i}] must be an object")
        unknown = sorted(set(entry) - set(known))
        if unknown:
            raise ValueError(f"{what}[{i}]: unknown field {unknown[0]!r}")
        fields = {known[key]: value for key, value in entry.items()}
        for required in ("name", "cron", "job_type"):
            if not isinstance(fields.get(required), str):
                raise ValueError(f"{what}[{i}]: {required} is required (a string)")
        for optional in ("timezone", "catch_up"):
            if optional in fields and not isinstance(fields[optional], str):
                raise ValueError(f"{what}[{i}]: {optional} must be a string")
        if "payload" in fields and not isinstance(fields["payload"], dict):
            raise ValueError(f"{what}[{i}]: payload must be an object")
        schedules.append(Schedule(**fields))
    return schedules
