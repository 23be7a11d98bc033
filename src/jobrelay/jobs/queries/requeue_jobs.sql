-- A claimed job whose revision changed while it ran (merge or supersede) goes back to
-- pending instead of completing, so the new request runs; fresh attempts, since it is a
-- new request. CAS on id + status + claim_token; rows not returned lost their lease.
-- Listening workers are woken (one notification per transaction).
WITH requeued AS (
    UPDATE jobs
    SET
        status = 'pending',
        claim_token = NULL,
        lease_expires_at = NULL,
        attempt_count = 0,
        available_at = clock_timestamp()
    FROM unnest(%(ids)s::uuid[], %(claim_tokens)s::uuid[]) AS done (id, claim_token)
    WHERE jobs.id = done.id
        AND jobs.status = 'in_progress'
        AND jobs.claim_token = done.claim_token
    RETURNING jobs.id
)
SELECT requeued.id, pg_notify('jobrelay_jobs', '') IS NULL AS woken
FROM requeued
