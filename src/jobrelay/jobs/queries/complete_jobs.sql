-- Complete claimed jobs in one statement: CAS on id + status + claim_token AND the revision
-- seen at claim time. Rows not returned either lost their lease or changed revision
-- (see requeue_jobs). Used for one job inside the fencing transaction as well. A completed
-- job leaves `jobs` for `finished_jobs` in the same statement (migration 0017).
-- Completing a job of a source or of a capped class can make another job claimable (the
-- source's next job, a free class slot): listening workers are woken then, so every worker
-- competes for it, not only the one that finished (one notification per transaction).
WITH completed AS (
    DELETE FROM jobs
    USING unnest(
        %(ids)s::uuid[], %(claim_tokens)s::uuid[], %(revisions)s::bigint[], %(results)s::text[]
    ) AS done (id, claim_token, revision, result)
    WHERE jobs.id = done.id
        AND jobs.status = 'in_progress'
        AND jobs.claim_token = done.claim_token
        AND jobs.revision = done.revision
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
    CASE
        WHEN (completed.job).source_key IS NOT NULL OR (completed.job).class_slot IS NOT NULL
            THEN pg_notify('jobrelay_jobs', '') IS NULL
    END AS woken
FROM completed
