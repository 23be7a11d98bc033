-- A transaction that only claims may commit without waiting for the WAL flush: if the
-- server crashes before the flush, the claim is undone by recovery, the job is pending
-- again, and the worker's later CAS writes fail as a lost lease. No job is lost, and a
-- durable completion never waits behind it (completions keep synchronous commit).
SELECT set_config('synchronous_commit', 'off', true)
