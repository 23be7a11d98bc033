-- The worker gives a claimed job back without running it to the end (graceful shutdown):
-- pending now, the attempt undone, in its place in the queue (its available_at, at most now),
-- listening workers woken so another one takes it at once (payload 'behind': the job may lie
-- behind their claim floors, jobs/floors.py). CAS on id + status + claim_token.
WITH released AS (
    UPDATE jobs
    SET
        status = 'pending',
        claim_token = NULL,
        lease_expires_at = NULL,
        attempt_count = greatest(attempt_count - 1, 0),
        available_at = least(available_at, clock_timestamp())
    WHERE id = %(id)s
        AND status = 'in_progress'
        AND claim_token = %(claim_token)s
    RETURNING id
)
SELECT released.id, pg_notify('jobrelay_jobs', 'behind') IS NULL AS woken
FROM released
