"""Schedules without I/O: validation of declarations and settings, and the tick plan
(on-time ticks, missed ticks under each catch-up policy, time zones and DST)."""

from __future__ import annotations

import datetime as dt

import pytest

from jobrelay import JobContext, JobPayload, JobTypes
from jobrelay.domain.jobs import Complete
from jobrelay.jobs.registry import RegistryError
from jobrelay.jobs.schedules import Schedule, dedupe_key, from_setting, plan

UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).astimezone(UTC)


class Ping(JobPayload):
    target: str = "all"


def group() -> JobTypes:
    types = JobTypes()

    @types.job_type("test.ping")
    async def ping(ctx: JobContext[Ping]) -> Complete:
        return Complete()

    return types


def every_second(catch_up: str = "one") -> Schedule:
    return Schedule(name="s", cron="* * * * * *", job_type="test.ping", catch_up=catch_up)


def test_a_tick_due_within_the_grace_gets_its_own_job_even_when_several_are_due() -> None:
    now = at("2026-12-01T10:00:03.400+00:00")
    p = plan(every_second(), next_tick=at("2026-12-01T10:00:01+00:00"), now=now, grace_s=5)
    assert p.enqueue == [at(f"2026-12-01T10:00:0{s}+00:00") for s in (1, 2, 3)]
    assert p.missed == 0 and p.caught_up is None
    assert p.last_tick == at("2026-12-01T10:00:03+00:00")
    assert p.next_tick == at("2026-12-01T10:00:04+00:00")


def test_catch_up_one_folds_the_missed_ticks_into_one_job_then_continues() -> None:
    now = at("2026-12-01T10:00:20.5+00:00")
    p = plan(every_second("one"), next_tick=at("2026-12-01T10:00:01+00:00"), now=now, grace_s=3)
    # 10:00:01 .. 10:00:17 are older than 3 s: missed, one job for them (the latest);
    # 10:00:18 .. 10:00:20 are on time.
    assert p.missed == 17
    assert p.caught_up == at("2026-12-01T10:00:17+00:00")
    assert p.enqueue == [at(f"2026-12-01T10:00:{s}+00:00") for s in (17, 18, 19, 20)]
    assert p.next_tick == at("2026-12-01T10:00:21+00:00")


def test_catch_up_skip_drops_the_missed_ticks() -> None:
    now = at("2026-12-01T10:00:20.5+00:00")
    p = plan(every_second("skip"), next_tick=at("2026-12-01T10:00:01+00:00"), now=now, grace_s=3)
    assert p.missed == 17 and p.caught_up is None
    assert p.enqueue == [at(f"2026-12-01T10:00:{s}+00:00") for s in (18, 19, 20)]
    assert p.last_tick == at("2026-12-01T10:00:20+00:00")


def test_a_daily_schedule_missed_by_days_runs_once_with_one_and_never_with_skip() -> None:
    nightly = Schedule(name="n", cron="0 3 * * *", job_type="test.ping", timezone="Europe/Paris")
    now = at("2026-12-05T12:00:00+00:00")
    p = plan(nightly, next_tick=at("2026-12-02T02:00:00+00:00"), now=now, grace_s=10)
    assert p.missed == 4 and p.enqueue == [at("2026-12-05T02:00:00+00:00")]
    assert p.next_tick == at("2026-12-06T02:00:00+00:00")  # 03:00 in Paris (UTC+1)
    skip = Schedule(name="n", cron="0 3 * * *", job_type="test.ping", catch_up="skip")
    p = plan(skip, next_tick=at("2026-12-02T03:00:00+00:00"), now=now, grace_s=10)
    assert p.enqueue == [] and p.missed == 4
    assert p.last_tick == at("2026-12-05T03:00:00+00:00")
    assert p.next_tick == at("2026-12-06T03:00:00+00:00")


def test_ticks_follow_the_schedule_time_zone_across_daylight_saving_time() -> None:
    nightly = Schedule(name="n", cron="0 3 * * *", job_type="test.ping", timezone="Europe/Paris")
    # Paris moves from UTC+1 to UTC+2 on 2026-03-29: 03:00 local is 02:00 then 01:00 UTC.
    assert nightly.next_after(at("2026-03-28T12:00:00+00:00")) == at("2026-03-29T01:00:00+00:00")
    assert nightly.next_after(at("2026-03-27T12:00:00+00:00")) == at("2026-03-28T02:00:00+00:00")


def test_a_tick_not_yet_due_is_not_enqueued() -> None:
    p = plan(
        every_second(),
        next_tick=at("2026-12-01T10:00:05+00:00"),
        now=at("2026-12-01T10:00:04.9+00:00"),
        grace_s=5,
    )
    assert p.enqueue == [] and p.last_tick is None
    assert p.next_tick == at("2026-12-01T10:00:05+00:00")


def test_dedupe_key_names_the_schedule_and_the_tick_in_utc() -> None:
    tick = dt.datetime.fromisoformat("2026-12-01T04:00:00+01:00")
    assert dedupe_key("nightly", tick) == "schedule:nightly:2026-12-01T03:00:00+00:00"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "61 * * * *"}, "schedule 'bad': invalid cron expression '61 * * * *'"),
        ({"timezone": "Mars/Olympus"}, "schedule 'bad': unknown time zone 'Mars/Olympus'"),
        ({"cron": "0 0 30 2 *"}, "schedule 'bad': cron expression '0 0 30 2 *' never matches"),
        ({"catch_up": "all"}, "schedule 'bad': unknown catch_up 'all'"),
        ({"job_type": "no.such"}, "schedule 'bad': unknown job type 'no.such'"),
        ({"payload": {"nope": 1}}, "schedule 'bad': invalid payload (payload.nope:"),
    ],
)
def test_the_registry_names_a_bad_schedule(kwargs: dict[str, object], message: str) -> None:
    types = group()
    fields: dict[str, object] = {"cron": "0 3 * * *", "job_type": "test.ping", **kwargs}
    types.schedule("bad", **fields)  # type: ignore[arg-type]
    with pytest.raises(RegistryError, match="^" + message.replace("(", r"\(").replace("*", r"\*")):
        types.registry()


def test_two_schedules_with_one_name_are_refused() -> None:
    types = group()
    types.schedule("twice", cron="0 3 * * *", job_type="test.ping")
    types.schedule("twice", cron="0 4 * * *", job_type="test.ping")
    with pytest.raises(RegistryError, match="schedule 'twice' is declared twice"):
        types.registry()


def test_a_valid_schedule_is_in_the_registry() -> None:
    types = group()
    types.schedule("nightly", cron="0 3 * * *", job_type="test.ping", payload={"target": "x"})
    (schedule,) = types.registry().schedules
    assert schedule.catch_up == "one" and schedule.timezone == "UTC"
    assert schedule.payload == {"target": "x"}


def test_setting_entries_are_read_and_a_bad_field_is_named() -> None:
    (s,) = from_setting(
        [{"name": "a", "cron": "* * * * *", "jobType": "test.ping", "catchUp": "skip"}]
    )
    assert (s.name, s.job_type, s.catch_up) == ("a", "test.ping", "skip")
    with pytest.raises(ValueError, match=r"JOBRELAY_SCHEDULES\[0\]: cron is required"):
        from_setting([{"name": "a", "jobType": "x"}])
    with pytest.raises(ValueError, match=r"JOBRELAY_SCHEDULES\[0\]: unknown field 'every'"):
        from_setting([{"name": "a", "cron": "* * * * *", "jobType": "x", "every": 1}])


def test_daylight_saving_gaps_fire_at_the_jump_and_repeats_fire_twice() -> None:
    daily = Schedule(name="n", cron="30 2 * * *", job_type="test.ping", timezone="Europe/Paris")
    # 2026-03-29 02:30 does not exist in Paris: it fires when the clock jumps to 03:00.
    assert daily.next_after(at("2026-03-28T12:00:00+00:00")) == at("2026-03-29T01:00:00+00:00")
    # 2026-10-25 02:30 happens twice (UTC+2, then UTC+1): croniter fires at both.
    first = daily.next_after(at("2026-10-24T12:00:00+00:00"))
    assert first == at("2026-10-25T00:30:00+00:00")
    assert daily.next_after(first) == at("2026-10-25T01:30:00+00:00")
