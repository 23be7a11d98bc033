-- The worker gives a claimed job back without running it to the end (graceful shutdown):
-- pending now, the attempt undone, in its place in the queue (its available_at, at most now),
-- listening workers woken so another one takes it at once (payload 'behind': the job may lie
-- behind their claim floors, jobs/floors.py). CAS on id + status + claim_token. The row is
-- taken FOR NO KEY UPDATE SKIP LOCKED: while another transaction locks it nothing is
-- written (`deferred`) and the lease expires instead.
WITH matched AS (
    SELECT id
    FROM jobs
    WHERE id = %(id)s
        AND status = 'in_progress'
        AND claim_token = %(claim_token)s
),
locked AS MATERIALIZED (
    SELECT id
    FROM jobs
    WHERE id = %(id)s
        AND status = 'in_progress'
        AND claim_token = %(claim_token)s
    FOR NO KEY UPDATE SKIP LOCKED
),
released AS (
    UPDATE jobs
    SET
        status = 'pending',
        claim_token = NULL,
        lease_expires_at = NULL,
        attempt_count = greatest(attempt_count - 1, 0),
        available_at = least(jobs.available_at, clock_timestamp())
    FROM locked
    WHERE jobs.id = locked.id
    RETURNING jobs.id
)
SELECT released.id, false AS deferred, pg_notify('jobrelay_jobs', 'behind') IS NULL AS woken
FROM released
UNION ALL
SELECT id, true, NULL FROM matched WHERE NOT EXISTS (SELECT 1 FROM locked)
