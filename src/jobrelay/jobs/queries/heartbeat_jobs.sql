-- One heartbeat statement per worker and interval for all its running jobs: extend each
-- lease only while its claim still holds the job (CAS on id + status + claim_token).
-- Rows are taken FOR NO KEY UPDATE SKIP LOCKED: a row another transaction locks (FOR
-- SHARE, FOR NO KEY UPDATE, FOR UPDATE) is not waited for and comes back `busy` (still
-- held, lease not extended this time); FOR KEY SHARE does not conflict, so such a job's
-- lease goes on. A job whose claim token is not returned lost its lease: the worker
-- cancels its handler.
WITH held AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(claim_tokens)s::uuid[]) AS held (id, claim_token)
),
matched AS (
    SELECT jobs.id, jobs.claim_token
    FROM jobs
    JOIN held ON jobs.id = held.id
    WHERE jobs.status = 'in_progress' AND jobs.claim_token = held.claim_token
),
locked AS MATERIALIZED (
    SELECT jobs.id
    FROM jobs
    JOIN held ON jobs.id = held.id
    WHERE jobs.status = 'in_progress' AND jobs.claim_token = held.claim_token
    FOR NO KEY UPDATE OF jobs SKIP LOCKED
),
beaten AS (
    UPDATE jobs
    SET
        lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_s)s),
        heartbeat_at = clock_timestamp()
    FROM locked
    WHERE jobs.id = locked.id
    RETURNING jobs.claim_token
)
SELECT claim_token, false AS busy FROM beaten
UNION ALL
SELECT matched.claim_token, true
FROM matched
-- A one-time filter: when every row was locked for us (the usual case) the matched rows
-- are never read.
WHERE (SELECT count(*) FROM locked) < cardinality(%(ids)s::uuid[])
    AND matched.id NOT IN (SELECT locked.id FROM locked)
