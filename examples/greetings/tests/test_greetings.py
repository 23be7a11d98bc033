"""The example's own tests, written with jobrelay's pytest plugin: each test gets a fresh
migrated database and a real worker (`jobrelay_runner`)."""

from jobrelay.testing import JobRunner


async def test_greet(jobrelay_runner: JobRunner) -> None:
    job = await jobrelay_runner.run_job("greetings.greet", {"name": "Ada", "language": "fr"})
    assert job.status == "completed"
    assert job.result == {"greeting": "Bonjour, Ada!", "attempt": 1}


async def test_a_retried_greeting_completes_on_its_second_attempt(
    jobrelay_runner: JobRunner,
) -> None:
    await jobrelay_runner.enqueue("greetings.greet", {"name": "retry-Bob"})
    [job] = await jobrelay_runner.drain()
    assert job.status == "completed"
    assert job.attempt_count == 2


async def test_digests_merge_while_pending(jobrelay_runner: JobRunner) -> None:
    first = await jobrelay_runner.enqueue("greetings.digest", {"recipients": ["a@x"]})
    second = await jobrelay_runner.enqueue("greetings.digest", {"recipients": ["b@x"]})
    assert second.id == first.id  # merged into the pending digest
    [job] = await jobrelay_runner.drain()
    assert job.result == {"sent": ["a@x", "b@x"]}


async def test_each_test_has_a_database_of_its_own(jobrelay_runner: JobRunner) -> None:
    assert await jobrelay_runner.drain() == []
