-- The last attempt failed: the item gets its terminal error and its processing child fails
-- with it. Cancelled items are left alone (they are already terminal).
WITH failed AS (
    UPDATE batch_item AS bi
    SET error_message = s.error,
        lease_until = NULL,
        updated_by = %(actor)s
    FROM unnest(%(ids)s::text[], %(attempts)s::int[], %(errors)s::text[]) AS s (id, attempt, error)
    WHERE bi.id = s.id
      AND bi.dispatch_attempts = s.attempt
      AND bi.dispatched_at IS NULL
      AND bi.error_message IS NULL
      AND bi.cancelled_at IS NULL
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
