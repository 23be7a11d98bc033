-- Create, ahead of time, the partitions of finished_jobs that jobs finishing in the next
-- %(days_ahead)s days will be purged on (one per retention in job_retention and day), the
-- missing ones only. A partition that cannot be created now comes back NULL and is tried at
-- the next pass.
SELECT day, jobrelay_finished_partition_v1(day) AS partition
FROM (
    SELECT DISTINCT
        ((clock_timestamp() + make_interval(secs => retention_s)) AT TIME ZONE 'UTC')::date
            + ahead AS day
    FROM job_retention
    CROSS JOIN generate_series(0, %(days_ahead)s) AS ahead
    WHERE retention_s IS NOT NULL
) AS purge_days
WHERE to_regclass('finished_jobs_p' || to_char(day, 'YYYYMMDD')) IS NULL
ORDER BY day
