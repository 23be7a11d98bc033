-- Complete claimed jobs in one statement: CAS on id + status + claim_token AND the revision
-- seen at claim time. Rows not returned either lost their lease or changed revision
-- (see requeue_jobs). Used for one job inside the fencing transaction as well.
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
RETURNING jobs.id
