"""The one loop shape and the one retry helper (`jobrelay.loops`): validation, the capped
backoff, one log line per change of state, give-up rules of `retry`."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from structlog.testing import capture_logs

from jobrelay.loops import Backoff, Health, Loop, Periodic, RetryStopped, retry
from tests.jobs_support import eventually


async def _true(value: bool) -> bool:
    return value


def test_backoff_doubles_up_to_its_cap_and_jitter_only_shortens() -> None:
    backoff = Backoff(base_s=0.1, cap_s=1.0)
    assert [backoff.delay(n) for n in (1, 2, 3, 4, 5, 500)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    jittered = Backoff(base_s=1.0, cap_s=8.0, jitter=0.5)
    delays = [jittered.delay(3) for _ in range(200)]
    assert all(2.0 <= d <= 4.0 for d in delays) and len(set(delays)) > 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_s": 0, "cap_s": 1}, "base_s must be > 0, got 0"),
        ({"base_s": 1, "cap_s": -2}, "cap_s must be > 0, got -2"),
        ({"base_s": 1, "cap_s": 1, "jitter": 1.5}, "jitter must be in [0, 1], got 1.5"),
    ],
)
def test_backoff_refuses_bad_values_naming_them(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Backoff(**kwargs)


def test_a_loop_refuses_a_bad_interval_naming_it() -> None:
    with pytest.raises(ValueError, match=r"interval_s must be > 0, got 0"):
        Periodic(name="x", interval_s=0, run=_nothing)


async def _nothing() -> int:
    return 0


class _Flaky(Loop):
    """Fails while `down` is set; counts its successful iterations as rows."""

    name = "flaky"

    def __init__(self) -> None:
        super().__init__(interval_s=0.01, backoff=Backoff(base_s=0.001, cap_s=0.005))
        self.down = True

    async def run_once(self) -> int:
        if self.down:
            raise ConnectionError("the database is away")
        return 1


async def test_an_outage_is_one_line_when_it_starts_and_one_when_it_ends() -> None:
    loop = _Flaky()
    with capture_logs() as logs:
        await loop.start()
        try:
            await eventually(lambda: _true(loop.signals.errors >= 5), what="five failures")
            assert loop.health.failing
            loop.down = False
            await eventually(lambda: _true(loop.signals.acted >= 2), what="two good runs")
        finally:
            await loop.stop()
    lines = [(e["event"], e["log_level"]) for e in logs if e.get("loop") == "flaky"]
    assert lines.count(("loop.failing", "warning")) == 1
    assert lines.count(("loop.recovered", "info")) == 1
    assert [e for e in lines if e[1] in ("warning", "info", "error")] == [
        ("loop.failing", "warning"),
        ("loop.recovered", "info"),
    ]
    failing = next(e for e in logs if e["event"] == "loop.failing")
    assert failing["error"] == "ConnectionError: the database is away"
    assert loop.signals.recoveries == 1 and not loop.health.failing


async def test_a_failing_loop_backs_off_but_never_rests_longer_than_its_interval() -> None:
    loop = _Flaky()
    rests = [await loop._iterate() for _ in range(6)]
    assert rests == [0.001, 0.002, 0.004, 0.005, 0.005, 0.005]
    slow = Periodic(name="slow", interval_s=0.003, run=loop.run_once)
    assert [await slow._iterate() for _ in range(3)] == [0.003, 0.003, 0.003]
    loop.down = False
    assert await loop._iterate() == 0.01  # success: back to the interval, backoff reset
    loop.down = True
    assert await loop._iterate() == 0.001


async def test_a_loop_runs_as_one_named_task_and_stops() -> None:
    loop = Periodic(name="sweep-x", interval_s=0.01, run=_nothing)
    await loop.start()
    with pytest.raises(RuntimeError, match="sweep-x already started"):
        await loop.start()
    names = {t.get_name() for t in asyncio.all_tasks()}
    assert "jobrelay-sweep-x" in names and loop.running
    await eventually(lambda: _true(loop.signals.runs >= 2))
    await loop.stop()
    assert not loop.running
    assert "jobrelay-sweep-x" not in {t.get_name() for t in asyncio.all_tasks()}


async def test_a_loop_stops_even_when_an_iteration_swallows_the_cancel() -> None:
    # A library that catches the CancelledError (or Python 3.11's wait_for losing one) must
    # not leave the loop resting and iterating for ever with stop() waiting on it.
    entered = asyncio.Event()

    async def stubborn() -> int:
        entered.set()
        try:
            await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        return 0

    loop = Periodic(name="stubborn", interval_s=3600, run=stubborn)
    await loop.start()
    task = loop._task
    assert task is not None
    await entered.wait()
    stopping = asyncio.ensure_future(loop.stop())
    done, _ = await asyncio.wait({stopping}, timeout=10)  # not the hour of its interval
    if not done:  # clean up without cancelling through stop(), then fail
        task.cancel()
        await asyncio.gather(stopping, return_exceptions=True)
    assert done and task.done(), "stop() waited on a loop that went on"


class _Calls:
    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "done"


_FAST = Backoff(base_s=0.001, cap_s=0.002)


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionError)


async def test_retry_calls_again_until_it_succeeds_logging_each_retry() -> None:
    action = _Calls(3, ConnectionError("refused"))
    with capture_logs() as logs:
        got = await retry(action, what="the thing", retry_on=_transient, backoff=_FAST)
    assert (got, action.calls) == ("done", 4)
    assert [(e["event"], e["attempt"]) for e in logs] == [("retry.waiting", n) for n in (1, 2, 3)]
    assert {e["what"] for e in logs} == {"the thing"}


async def test_retry_gives_up_after_its_attempts_with_the_last_error() -> None:
    action = _Calls(10, ConnectionError("refused"))
    with pytest.raises(ConnectionError, match="refused"):
        await retry(action, what="x", retry_on=_transient, backoff=_FAST, attempts=3)
    assert action.calls == 3


async def test_retry_gives_up_when_the_next_wait_would_pass_its_budget() -> None:
    action = _Calls(10, ConnectionError("refused"))
    slow = Backoff(base_s=0.05, cap_s=10.0)
    with pytest.raises(ConnectionError):
        await retry(action, what="x", retry_on=_transient, backoff=slow, budget_s=0.2)
    assert action.calls == 3  # waits of 0.05 and 0.1 fit in 0.2 s; 0.2 more would not


async def test_retry_never_retries_an_error_it_was_not_told_about() -> None:
    action = _Calls(1, ValueError("bad input"))
    with pytest.raises(ValueError, match="bad input"):
        await retry(action, what="x", retry_on=_transient, backoff=_FAST, attempts=5)
    assert action.calls == 1


async def test_retry_stops_waiting_when_stop_is_set() -> None:
    stop = asyncio.Event()
    action = _Calls(10**6, ConnectionError("refused"))
    hour = Backoff(base_s=3600, cap_s=3600)
    waiting = asyncio.create_task(
        retry(action, what="x", retry_on=_transient, backoff=hour, stop=stop)
    )
    await eventually(lambda: _true(action.calls == 1))
    stop.set()
    with pytest.raises(RetryStopped, match="stopped before x succeeded"):
        await asyncio.wait_for(waiting, timeout=5)


async def test_retry_honours_a_delay_hint_up_to_the_cap_and_logs_at_the_level_asked() -> None:
    action = _Calls(2, ConnectionError("busy"))
    with capture_logs() as logs:
        await retry(
            action,
            what="x",
            retry_on=_transient,
            backoff=Backoff(base_s=0.001, cap_s=0.02),
            delay_hint=lambda exc: 30.0,
            level=logging.DEBUG,
        )
    assert [(e["delay_s"], e["log_level"]) for e in logs] == [(0.02, "debug")] * 2


def test_a_try_that_began_before_a_recovery_does_not_start_a_new_outage() -> None:
    # Several messages share an SQS worker's reporting health: when the API comes back, one
    # message's delivery succeeds while another's, sent into the outage, still times out.
    health = Health("shared", backoff=Backoff(base_s=0.1, cap_s=1.0))
    with capture_logs() as logs:
        before_heal = time.monotonic()
        health.failed(RuntimeError("down"), began=before_heal)
        health.failed(RuntimeError("down"), began=before_heal)
        health.ok()
        health.failed(RuntimeError("down"), began=before_heal)  # the straggler
        assert not health.failing
        health.failed(RuntimeError("down again"), began=time.monotonic())  # a new outage
        assert health.failing
    events = [e["event"] for e in logs if e["log_level"] != "debug"]
    assert events == ["loop.failing", "loop.recovered", "loop.failing"]
