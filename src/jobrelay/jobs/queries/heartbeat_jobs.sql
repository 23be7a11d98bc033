-- One heartbeat statement per worker and interval for all its running jobs: extend each
-- lease only while its claim still holds the job (CAS on id + status + claim_token). A job
-- whose claim token is not returned lost its lease: the worker cancels its handler.
UPDATE jobs
SET
    lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_s)s),
    heartbeat_at = clock_timestamp()
FROM unnest(%(ids)s::uuid[], %(claim_tokens)s::uuid[]) AS held (id, claim_token)
WHERE jobs.id = held.id
    AND jobs.status = 'in_progress'
    AND jobs.claim_token = held.claim_token
RETURNING jobs.claim_token
