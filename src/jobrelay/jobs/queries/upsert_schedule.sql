-- A worker's declaration of a schedule, at its start. A new schedule starts at its first
-- tick after now; a changed cron or time zone restarts from that tick too; otherwise the
-- durable last and next tick are kept (missed ticks then follow the catch-up policy). An
-- unchanged declaration writes nothing.
INSERT INTO job_schedules AS s (name, cron, timezone, job_type, payload, catch_up, next_tick_at)
VALUES (
    %(name)s, %(cron)s, %(timezone)s, %(job_type)s, %(payload)s, %(catch_up)s,
    %(first_tick_at)s
)
ON CONFLICT (name) DO UPDATE SET
    cron = excluded.cron,
    timezone = excluded.timezone,
    job_type = excluded.job_type,
    payload = excluded.payload,
    catch_up = excluded.catch_up,
    next_tick_at = CASE
        WHEN (s.cron, s.timezone) IS DISTINCT FROM (excluded.cron, excluded.timezone)
        THEN excluded.next_tick_at
        ELSE s.next_tick_at
    END,
    updated_at = clock_timestamp()
WHERE (s.cron, s.timezone, s.job_type, s.payload, s.catch_up)
    IS DISTINCT FROM
    (excluded.cron, excluded.timezone, excluded.job_type, excluded.payload, excluded.catch_up)
