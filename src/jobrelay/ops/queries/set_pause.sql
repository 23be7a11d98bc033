UPDATE jobs_control
SET claims_paused = %(claims)s,
    enqueue_paused = %(enqueue)s,
    reason = %(reason)s,
    updated_by = %(actor)s
WHERE id
RETURNING claims_paused, enqueue_paused, reason, updated_at, updated_by
