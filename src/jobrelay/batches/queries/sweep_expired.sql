-- Items whose last allowed claim expired without a recorded send fail like a third failed
-- attempt (the relay that held the claim died or lost its database connection).
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
), failed AS (
    UPDATE batch_item AS bi
    SET error_message = %(error)s,
        lease_until = NULL,
        updated_by = %(actor)s
    FROM expired
    WHERE bi.id = expired.id
    RETURNING bi.job_id, bi.error_message
), pi AS (
    UPDATE page_import AS p
    SET status = '2',
        error_message = failed.error_message,
        updated_by = %(actor)s
    FROM failed
    WHERE p.id = failed.job_id
      AND p.status = '0'
), cd AS (
    UPDATE code2des AS c
    SET status = '2',
        error_message = failed.error_message,
        updated_by = %(actor)s
    FROM failed
    WHERE c.id = failed.job_id
      AND c.status = '0'
)
SELECT count(*) AS failed FROM failed
