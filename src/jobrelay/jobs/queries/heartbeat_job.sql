-- Extend the lease of a running job, only while this claim still holds it (CAS on
-- id + status + claim_token). No row returned: the lease is lost. The row is taken FOR NO
-- KEY UPDATE SKIP LOCKED: while another transaction locks it the lease is not extended
-- (`busy`) but the claim still holds, so the handler goes on (see heartbeat_jobs).
WITH matched AS (
    SELECT id, revision
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
beaten AS (
    UPDATE jobs
    SET
        lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_s)s),
        heartbeat_at = clock_timestamp()
    FROM locked
    WHERE jobs.id = locked.id
    RETURNING jobs.revision
)
SELECT revision, false AS busy FROM beaten
UNION ALL
SELECT matched.revision, true
FROM matched
WHERE NOT EXISTS (SELECT 1 FROM locked)
