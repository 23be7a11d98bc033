SELECT count(*) AS n
FROM jobs
WHERE finished_at IS NOT NULL AND status IN ('completed', 'failed', 'cancelled')
