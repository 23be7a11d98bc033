"""The size-or-time buffer of batched writes (`jobrelay.jobs.buffer`): when a flush is due,
what one flush takes, and what a failed flush gives back."""

from __future__ import annotations

import asyncio

import pytest

from jobrelay.jobs.buffer import Buffer


async def _ok(batch: list[int]) -> int:
    return sum(batch)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_size": 0}, "max_size must be > 0, got 0"),
        ({"max_size": 5, "max_wait_s": -1.0}, "max_wait_s must be >= 0, got -1.0"),
    ],
)
def test_bad_values_are_refused_naming_them(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Buffer(**kwargs)  # type: ignore[arg-type]


async def test_without_a_wait_a_flush_is_due_as_soon_as_one_item_waits() -> None:
    buffer: Buffer[int] = Buffer(max_size=10)
    due = asyncio.create_task(buffer.wait())
    await asyncio.sleep(0)
    assert not due.done(), "nothing waits yet"
    buffer.add(1)
    await asyncio.wait_for(due, 1.0)


async def test_a_flush_is_due_when_max_size_items_wait_before_the_time() -> None:
    buffer: Buffer[int] = Buffer(max_size=3, max_wait_s=3600.0)
    due = asyncio.create_task(buffer.wait())
    buffer.add(1)
    buffer.add(2)
    done, _ = await asyncio.wait({due}, timeout=0.05)
    assert not done, "two of three items wait, the hour has not passed"
    buffer.add(3)
    await asyncio.wait_for(due, 1.0)


async def test_a_flush_is_due_max_wait_s_after_the_oldest_item_arrived() -> None:
    loop = asyncio.get_running_loop()
    buffer: Buffer[int] = Buffer(max_size=100, max_wait_s=0.05)
    buffer.add(1)
    added = loop.time()
    await asyncio.wait_for(buffer.wait(), 1.0)
    assert loop.time() - added >= 0.05


async def test_closing_makes_every_flush_due_now() -> None:
    buffer: Buffer[int] = Buffer(max_size=100, max_wait_s=3600.0)
    due = asyncio.create_task(buffer.wait())
    buffer.add(1)
    buffer.close()
    await asyncio.wait_for(due, 1.0)
    assert buffer.closed and buffer.waiting == 1


async def test_a_flush_takes_the_oldest_max_size_items_and_counts_them_in_flight() -> None:
    buffer: Buffer[int] = Buffer(max_size=3)
    for n in range(5):
        buffer.add(n)
    seen: list[int] = []

    async def write(batch: list[int]) -> int:
        seen.append(buffer.pending)
        buffer.add(99)  # arrives during the write: rides in a later flush
        return len(batch)

    batch, written = await buffer.flush(write)
    assert (batch, written) == ([0, 1, 2], 3)
    assert seen == [5], "in flight and waiting both count as pending"
    assert buffer.pending == buffer.waiting == 3
    assert (await buffer.flush(_ok))[0] == [3, 4, 99]
    assert buffer.pending == 0


async def test_a_failed_flush_puts_its_items_back_in_front_in_order() -> None:
    buffer: Buffer[int] = Buffer(max_size=2)
    for n in range(3):
        buffer.add(n)

    async def fail(batch: list[int]) -> int:
        buffer.add(7)
        raise OSError("database unreachable")

    with pytest.raises(OSError, match="unreachable"):
        await buffer.flush(fail)
    assert buffer.pending == 4
    assert (await buffer.flush(_ok))[0] == [0, 1]
    assert buffer.drain() == [2, 7]
    assert buffer.pending == 0


async def test_replace_lets_a_snapshot_be_all_that_waits() -> None:
    buffer: Buffer[str] = Buffer(max_size=10)
    buffer.add("stale")
    buffer.replace(["a", "b"])
    await asyncio.wait_for(buffer.wait(), 1.0)
    assert buffer.drain() == ["a", "b"]
    buffer.replace([])
    assert buffer.waiting == 0
