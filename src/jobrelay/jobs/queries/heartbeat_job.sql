-- Extend the lease of a running job, only while this claim still holds it (CAS on
-- id + status + claim_token). No row returned: the lease is lost.
UPDATE jobs
SET
    lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_s)s),
    heartbeat_at = clock_timestamp()
WHERE id = %(id)s
    AND status = 'in_progress'
    AND claim_token = %(claim_token)s
RETURNING revision
