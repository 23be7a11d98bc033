SELECT *
FROM all_jobs
WHERE status IN ('completed', 'failed', 'cancelled') AND finished_at < %(started)s
