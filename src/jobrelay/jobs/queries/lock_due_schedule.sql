-- One due schedule of those this worker declares, locked until the transaction that
-- enqueues its tick's job and advances it commits; a schedule another worker is ticking
-- is skipped, never waited for. `now` is the transaction's database time.
SELECT
    name, cron, timezone, job_type, payload, catch_up, last_tick_at, next_tick_at,
    now() AS now
FROM job_schedules
WHERE name = ANY(%(names)s) AND next_tick_at <= now()
ORDER BY next_tick_at
LIMIT 1
FOR UPDATE SKIP LOCKED
