-- Terminal failures (permanent, or attempts used up), one or many in one statement. CAS on
-- id + status + claim_token. The jobs leave `jobs` for `finished_jobs` and each ended
-- attempt goes into job_attempts in the same statement (the job row keeps only the last
-- error). Rows are taken FOR UPDATE SKIP LOCKED, as complete_jobs takes them: a job whose
-- claim still matches but whose row, or waiting parent (%(locked_parents)s: the parents
-- this transaction locked), another transaction locks comes back `deferred`; rows not
-- returned lost their lease.
WITH done AS (
    SELECT *
    FROM unnest(
        %(ids)s::uuid[], %(claim_tokens)s::uuid[], %(failure_kinds)s::text[], %(errors)s::text[]
    ) AS done (id, claim_token, failure_kind, error)
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
    WHERE jobs.status = 'in_progress'
        AND jobs.claim_token = done.claim_token
        AND (jobs.parent_id IS NULL OR jobs.parent_id = ANY(%(locked_parents)s::uuid[]))
    FOR UPDATE OF jobs SKIP LOCKED
),
failed AS (
    DELETE FROM jobs
    USING locked, done
    WHERE jobs.id = locked.id AND done.id = locked.id
    RETURNING jobs AS job, done.failure_kind, done.error
),
archived AS (
    INSERT INTO finished_jobs
    SELECT finished.*
    FROM failed
    CROSS JOIN LATERAL jobrelay_finished_job_v1(
        failed.job,
        jsonb_build_object(
            'status', 'failed', 'failure_kind', failed.failure_kind,
            'last_error', failed.error
        )
    ) AS finished
),
attempt AS (
    INSERT INTO job_attempts (
        job_id, claim_token, attempt, worker_id, started_at, outcome, error
    )
    SELECT
        (job).id, (job).claim_token, (job).attempt_count, (job).claimed_by, (job).claimed_at,
        failure_kind, error
    FROM failed
)
SELECT (failed.job).id, false AS deferred FROM failed
UNION ALL
SELECT matched.id, true
FROM matched
-- A one-time filter: when every row was locked for us (the usual case) the matched rows
-- are never read.
WHERE (SELECT count(*) FROM locked) < cardinality(%(ids)s::uuid[])
    AND matched.id NOT IN (SELECT locked.id FROM locked)
