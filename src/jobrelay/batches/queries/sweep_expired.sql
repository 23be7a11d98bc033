-- Items whose last allowed claim expired without a recorded send fail like a third failed
-- attempt (the relay that held the claim died or lost its database connection). Their
-- children fail in the next statement (`children/queries/fail_batch_children.sql`, same
-- transaction).
WITH expired AS MATERIALIZED (
    SELECT id
    FROM batch_item
    WHERE dispatched_at IS NULL
      AND cancelled_at IS NULL
      AND error_message IS NULL
      AND deleted_at IS NULL
      AND dispatch_attempts >= %(max_attempts)s
      AND lease_until <= clock_timestamp()
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE batch_item AS bi
SET error_message = %(error)s,
    lease_until = NULL,
    updated_by = %(actor)s
FROM expired
WHERE bi.id = expired.id
RETURNING bi.job_id, bi.error_message
