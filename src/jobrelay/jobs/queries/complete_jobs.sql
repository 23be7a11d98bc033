-- Complete claimed jobs in one statement: CAS on id + status + claim_token AND the revision
-- seen at claim time. Rows not returned either lost their lease or changed revision
-- (see requeue_jobs). Used for one job inside the fencing transaction as well.
-- Completing a job of a source or of a capped class can make another job claimable (the
-- source's next job, a free class slot): listening workers are woken then, so every worker
-- competes for it, not only the one that finished (one notification per transaction).
WITH completed AS (
    UPDATE jobs
    SET
        status = 'completed',
        claim_token = NULL,
        lease_expires_at = NULL,
        failure_kind = NULL,
        result = done.result::jsonb,
        finished_at = clock_timestamp()
    FROM unnest(
        %(ids)s::uuid[], %(claim_tokens)s::uuid[], %(revisions)s::bigint[], %(results)s::text[]
    ) AS done (id, claim_token, revision, result)
    WHERE jobs.id = done.id
        AND jobs.status = 'in_progress'
        AND jobs.claim_token = done.claim_token
        AND jobs.revision = done.revision
    RETURNING jobs.id, jobs.source_key IS NOT NULL OR jobs.class_slot IS NOT NULL AS frees
)
SELECT
    completed.id,
    CASE WHEN completed.frees THEN pg_notify('jobrelay_jobs', '') IS NULL END AS woken
FROM completed
