-- Claim due items for one relay: lease them and count the attempt, in one statement.
-- Rows locked by another claimer are skipped; a row another relay claimed and committed
-- meanwhile is re-checked against the WHERE clause (its lease is then in the future).
WITH due AS MATERIALIZED (
    SELECT id
    FROM batch_item
    WHERE dispatched_at IS NULL
      AND cancelled_at IS NULL
      AND error_message IS NULL
      AND deleted_at IS NULL
      AND dispatch_attempts < %(max_attempts)s
      AND (lease_until IS NULL OR lease_until <= clock_timestamp())
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE batch_item AS bi
SET lease_until = clock_timestamp() + make_interval(secs => %(lease_s)s),
    dispatch_attempts = bi.dispatch_attempts + 1,
    updated_by = %(actor)s
FROM due
WHERE bi.id = due.id
RETURNING bi.id, bi.job_id, bi.dispatch_attempts, bi.message::text AS body
