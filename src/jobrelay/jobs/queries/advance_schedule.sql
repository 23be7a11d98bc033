-- A ticked schedule's new last and next tick (and the job of its last tick), in the
-- transaction that enqueued that job.
UPDATE job_schedules SET
    last_tick_at = coalesce(%(last_tick_at)s, last_tick_at),
    last_job_id = coalesce(%(last_job_id)s, last_job_id),
    next_tick_at = %(next_tick_at)s,
    updated_at = clock_timestamp()
WHERE name = %(name)s
