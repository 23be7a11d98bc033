-- Seconds until the earliest next tick of the schedules this worker declares (database
-- time; NULL when there are none).
SELECT extract(epoch FROM min(next_tick_at) - clock_timestamp())::float8 AS wait_s
FROM job_schedules
WHERE name = ANY(%(names)s)
