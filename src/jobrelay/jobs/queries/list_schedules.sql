-- Every stored schedule, by name.
SELECT
    name, cron, timezone, job_type, payload, catch_up, last_tick_at, last_job_id,
    next_tick_at, created_at, updated_at
FROM job_schedules
ORDER BY name
