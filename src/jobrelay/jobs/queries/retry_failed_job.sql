-- An operator retries a failed or cancelled job: back to pending with fresh attempts.
-- Fails on jobs_active_dedupe_key when another active job holds the same key now.
UPDATE jobs
SET
    status = 'pending',
    attempt_count = 0,
    available_at = clock_timestamp(),
    finished_at = NULL
WHERE id = %(id)s
    AND status IN ('failed', 'cancelled')
RETURNING *
