-- The engine's claim shape (MATERIALIZED CTE, SKIP LOCKED) on one known row; rolled back.
WITH candidate AS MATERIALIZED (
    SELECT id FROM jobs
    WHERE id = %(id)s AND status = 'pending' AND available_at <= clock_timestamp()
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE jobs AS j
SET status = 'in_progress',
    claim_token = gen_random_uuid(),
    claimed_by = 'ops-verify',
    attempt_count = j.attempt_count + 1,
    lease_expires_at = clock_timestamp() + interval '30 seconds'
FROM candidate
WHERE j.id = candidate.id
RETURNING j.id
