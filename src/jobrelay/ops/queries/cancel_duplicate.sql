UPDATE jobs
SET status = 'cancelled',
    failure_kind = 'cancelled',
    last_error = %(reason)s,
    claim_token = NULL,
    lease_expires_at = NULL,
    class_slot = NULL,
    finished_at = clock_timestamp()
WHERE id = %(id)s
  AND status IN ('pending', 'in_progress')
