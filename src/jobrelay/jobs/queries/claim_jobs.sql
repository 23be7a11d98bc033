-- Claim up to %(limit)s available jobs for one worker, in one statement (DESIGN.md 3.4).
-- The MATERIALIZED CTE locks exactly the rows it returns: a LIMIT inside
-- `IN (subquery ... SKIP LOCKED)` may be re-evaluated and claim more rows than asked.
-- FOR NO KEY UPDATE (not FOR UPDATE) so a row share-locked by an uncommitted child insert
-- (foreign key parent_id) is still claimable. Each claimed row gets a fresh claim token,
-- attempt_count + 1 and a lease measured in database time (clock_timestamp(), not now()).
-- Per source at most one job is picked, and none while one of that source runs; the unique
-- index jobs_running_source_key guarantees it under concurrent claimers.
WITH candidates AS MATERIALIZED (
    SELECT id, source_key, priority, available_at
    FROM jobs
    WHERE status = 'pending'
        AND available_at <= clock_timestamp()
        AND concurrency_class = ANY(%(classes)s::text[])
        AND NOT (SELECT claims_paused FROM jobs_control)
    ORDER BY priority, available_at, id
    LIMIT %(limit)s
    FOR NO KEY UPDATE SKIP LOCKED
),
picked AS (
    SELECT ranked.id
    FROM (
        SELECT
            id,
            source_key,
            row_number() OVER (
                PARTITION BY source_key ORDER BY priority, available_at, id
            ) AS nth
        FROM candidates
    ) AS ranked
    WHERE ranked.source_key IS NULL
        OR (
            ranked.nth = 1
            AND NOT EXISTS (
                SELECT 1
                FROM jobs AS running
                WHERE running.source_key = ranked.source_key
                    AND running.status = 'in_progress'
            )
        )
)
UPDATE jobs
SET
    status = 'in_progress',
    claim_token = gen_random_uuid(),
    claimed_by = %(worker_id)s,
    claimed_at = clock_timestamp(),
    attempt_count = jobs.attempt_count + 1,
    lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_s)s),
    heartbeat_at = clock_timestamp()
FROM picked
WHERE jobs.id = picked.id
RETURNING
    jobs.id, jobs.type, jobs.payload, jobs.revision, jobs.claim_token, jobs.attempt_count,
    jobs.max_attempts, jobs.source_key, jobs.concurrency_class, jobs.parent_id
