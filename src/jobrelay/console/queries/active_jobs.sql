-- Pending and running jobs per (type, status), and the database time of the reading.
-- Cost: proportional to the active jobs, not to the history (PostgreSQL 18 skips over the
-- types of jobs_type_status_idx; the partial pending/lease indexes serve older servers).
SELECT j.type, j.status, count(*) AS n
FROM jobs AS j
WHERE j.status IN ('pending', 'in_progress')
GROUP BY j.type, j.status
ORDER BY j.type, j.status
