-- A claimed job whose revision changed while it ran (merge or supersede) goes back to
-- pending instead of completing, so the new request runs; fresh attempts, since it is a
-- new request. CAS on id + status + claim_token. Rows are taken FOR NO KEY UPDATE SKIP
-- LOCKED: one whose claim still matches but that another transaction locks comes back as
-- `deferred` (for the next flush); rows not returned lost their lease.
-- Listening workers are woken (one notification per transaction).
WITH done AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(claim_tokens)s::uuid[]) AS done (id, claim_token)
),
matched AS (
    SELECT jobs.id
    FROM jobs
    JOIN done ON jobs.id = done.id
    WHERE jobs.status = 'in_progress' AND jobs.claim_token = done.claim_token
),
locked AS MATERIALIZED (
    SELECT jobs.id
    FROM jobs
    JOIN done ON jobs.id = done.id
    WHERE jobs.status = 'in_progress' AND jobs.claim_token = done.claim_token
    FOR NO KEY UPDATE OF jobs SKIP LOCKED
),
requeued AS (
    UPDATE jobs
    SET
        status = 'pending',
        claim_token = NULL,
        lease_expires_at = NULL,
        attempt_count = 0,
        available_at = clock_timestamp()
    FROM locked
    WHERE jobs.id = locked.id
    RETURNING jobs.id
)
SELECT requeued.id, false AS deferred, pg_notify('jobrelay_jobs', '') IS NULL AS woken
FROM requeued
UNION ALL
SELECT matched.id, true, NULL
FROM matched
-- A one-time filter: when every row was locked for us (the usual case) the matched rows
-- are never read.
WHERE (SELECT count(*) FROM locked) < cardinality(%(ids)s::uuid[])
    AND matched.id NOT IN (SELECT locked.id FROM locked)
