-- Fail the unserved jobs `unserved_jobs` found (their parents locked first by the caller),
-- permanently: still pending and not locked by a claim racing it; a worker that gained the
-- handler meanwhile may have claimed one, which is then left alone.
WITH doomed AS MATERIALIZED (
    SELECT id
    FROM jobs
    WHERE id = ANY(%(ids)s::uuid[]) AND status = 'pending'
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE jobs
SET
    status = 'failed',
    finished_at = clock_timestamp(),
    failure_kind = 'permanent',
    last_error = 'unknown job type ' || quote_literal(jobs.type) || ': ' || %(reason)s
FROM doomed
WHERE jobs.id = doomed.id
RETURNING jobs.id, jobs.parent_id
