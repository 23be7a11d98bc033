-- Every non-terminal child of the batch becomes '3' and its item cancelled, in one statement.
WITH pi AS (
    UPDATE page_import
    SET status = '3',
        updated_by = %(actor)s
    WHERE batch_id = %(batch_id)s
      AND status = '0'
    RETURNING id
), cd AS (
    UPDATE code2des
    SET status = '3',
        updated_by = %(actor)s
    WHERE batch_id = %(batch_id)s
      AND status = '0'
    RETURNING id
)
UPDATE batch_item AS bi
SET cancelled_at = clock_timestamp(),
    updated_by = %(actor)s
WHERE bi.batch_id = %(batch_id)s
  AND bi.cancelled_at IS NULL
  AND bi.job_id IN (SELECT id FROM pi UNION ALL SELECT id FROM cd)
