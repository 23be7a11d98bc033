-- Complete claimed jobs in one statement: CAS on id + status + claim_token AND the revision
-- seen at claim time. Used for one job inside the fencing transaction as well. A completed
-- job leaves `jobs` for `finished_jobs` in the same statement (migration 0017).
-- Rows are taken FOR UPDATE SKIP LOCKED, never waited for: the DELETE needs a lock that
-- even another transaction's FOR KEY SHARE blocks, and one such row must not hold the
-- batch. A job whose claim still matches but whose row (or waiting parent,
-- %(locked_parents)s: the parents this transaction locked) is locked by someone else comes
-- back as `deferred`, for the next flush. Rows not returned either lost their lease or
-- changed revision (see requeue_jobs).
-- Completing a job of a source or of a capped class can make another job claimable (the
-- source's next job, a free class slot): listening workers are woken then, so every worker
-- competes for it, not only the one that finished (one notification per transaction).
WITH done AS (
    SELECT *
    FROM unnest(
        %(ids)s::uuid[], %(claim_tokens)s::uuid[], %(revisions)s::bigint[], %(results)s::text[]
    ) AS done (id, claim_token, revision, result)
),
matched AS (
    SELECT jobs.id, jobs.parent_id
    FROM jobs
    JOIN done ON jobs.id = done.id
    WHERE jobs.status = 'in_progress'
        AND jobs.claim_token = done.claim_token
        AND jobs.revision = done.revision
),
locked AS MATERIALIZED (
    SELECT jobs.id
    FROM jobs
    JOIN done ON jobs.id = done.id
    WHERE jobs.status = 'in_progress'
        AND jobs.claim_token = done.claim_token
        AND jobs.revision = done.revision
        AND (jobs.parent_id IS NULL OR jobs.parent_id = ANY(%(locked_parents)s::uuid[]))
    FOR UPDATE OF jobs SKIP LOCKED
),
completed AS (
    DELETE FROM jobs
    USING locked, done
    WHERE jobs.id = locked.id AND done.id = locked.id
    RETURNING jobs AS job, done.result
),
archived AS (
    INSERT INTO finished_jobs
    SELECT finished.*
    FROM completed
    CROSS JOIN LATERAL jobrelay_finished_job_v1(
        completed.job,
        jsonb_build_object(
            'status', 'completed', 'failure_kind', NULL, 'result', completed.result::jsonb
        )
    ) AS finished
)
SELECT
    (completed.job).id,
    false AS deferred,
    CASE
        WHEN (completed.job).source_key IS NOT NULL OR (completed.job).class_slot IS NOT NULL
            THEN pg_notify('jobrelay_jobs', '') IS NULL
    END AS woken
FROM completed
UNION ALL
SELECT matched.id, true, NULL
FROM matched
-- A one-time filter: when every row was locked for us (the usual case) the matched rows
-- are never read.
WHERE (SELECT count(*) FROM locked) < cardinality(%(ids)s::uuid[])
    AND matched.id NOT IN (SELECT locked.id FROM locked)
